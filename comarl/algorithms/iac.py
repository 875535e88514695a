"""IAC: independent actor-critic. Each agent has its own critic and learns from its own reward.

The critic of agent i is a value head on agent i's own model (with a LoRA
agent, beside its adapter; the value loss reaches the adapter, the base stays
frozen) or a separate critic model (``train.critic.model``: own tokenizer,
lr, device). It reads agent i's prompt (V(h)) or prompt and response
(Q(h, a)) and regresses agent i's GAE targets; with ``AgentRewards`` each
agent's critic sees its own reward. Advantages are GAE(gamma, lambda) over
each branch's turns against V(h), or for a Q critic against the mean of Q_i
over agent i's other K - 1 samples at the node (K >= 2;
``advantages.sample_advantages``). The actor loss is the shared clipped policy loss.

Departures from CoMLRL 1.4.3's IAC: GAE instead of one-step TD only
(``gae_lambda=0`` gives CoMLRL's raw V advantages; CoMLRL whitens them per
turn and buffer, comarl per agent over the step's batch); a Q critic's
advantages subtract the other samples' mean Q, not Q(h, a) (CoMLRL's, which
carries no signal once Q fits); K >= 1 samples per node (V; K >= 2 for Q) and the whole
rollout tree (aligned or cross joint actions) instead of K = 1 in multi-turn;
a branch cut by ``num_turns`` bootstraps from V(next prompts) (V critics;
CoMLRL ends it); the loss normalisations, ratio clipping, KL and
micro-batching are the loop's, as for every other algorithm
(docs/actor_critic.md).
"""
from __future__ import annotations

from .actor_critic import check_actor_critic, critic_advantage
from .base import Algorithm, register_algorithm

IAC = register_algorithm(Algorithm("iac", critic_advantage, min_generations=1, critic="independent",
                                   check=check_actor_critic,
                                   summary="GAE with a critic per agent (value head or separate model)"))
