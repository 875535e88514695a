"""IAC: independent actor-critic. Each agent has its own critic and learns from its own reward.

The critic of agent i is a value head on agent i's own model (with a LoRA
agent, beside its adapter; the value loss reaches the adapter, the base stays
frozen) or a separate critic model (``train.critic.model``: own tokenizer,
lr, device). It reads agent i's prompt (V(h)) or prompt and response
(Q(h, a)) and regresses agent i's GAE targets; with ``AgentRewards`` each
agent's critic sees its own reward. Advantages are GAE(gamma, lambda) over
each branch's turns; the actor loss is the shared clipped policy loss.

Departures from CoMLRL 1.4.3's IAC: GAE instead of one-step TD only
(``gae_lambda=0`` is CoMLRL's estimate); K >= 1 samples per node and the
whole rollout tree (aligned or cross joint actions) instead of K = 1 in
multi-turn; a branch cut by ``num_turns`` bootstraps from V(next prompts)
(V critics); the loss normalisations, ratio clipping, KL and micro-batching
are the loop's, as for every other algorithm.
"""
from __future__ import annotations

from .actor_critic import critic_advantage
from .base import Algorithm, register_algorithm

IAC = register_algorithm(Algorithm("iac", critic_advantage, min_generations=1, critic="independent",
                                   summary="GAE with a critic per agent (value head or separate model)"))
