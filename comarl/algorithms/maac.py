"""MAAC: multi-agent actor-critic with one centralised critic and separate actors.

One critic model reads every agent's prompt (V(h)) or prompts and responses
(Q(h, a)), written into one text by ``train.critic.joint_input`` (default:
``critics.joint_input.role_marker_template``), and regresses the team
reward's GAE targets (with ``AgentRewards``: their mean). Every agent's
advantage is the central GAE advantage of the joint actions its sample was
part of. The critic may be larger than the agents and sit on its own device.
The only difference from IAC is the critic passed to the loop.

A Q critic's node value is the mean of the central Q over the node's J joint
actions, and each sample's baseline the mean Q of the joint actions that do
not hold it (K >= 2; ``advantages.sample_advantages``).

Departures from CoMLRL 1.4.3's MAAC: the joint input is a replaceable
function rather than a fixed template; GAE instead of one-step TD only
(``gae_lambda=0`` gives CoMLRL's raw V advantages, whitened here per agent
over the step's batch, there per turn and buffer); a Q critic subtracts the
others' mean Q, not Q(h, a); K >= 1 (V) and cross joint actions are allowed;
truncated branches bootstrap (V critics). See docs/actor_critic.md.
"""
from __future__ import annotations

from .actor_critic import check_actor_critic, critic_advantage
from .base import Algorithm, register_algorithm

MAAC = register_algorithm(Algorithm("maac", critic_advantage, min_generations=1, critic="central",
                                    check=check_actor_critic,
                                    summary="GAE with one central critic over all agents' text"))
