"""MADPO: multi-agent direct preference optimisation on joint responses (online).

Every step the current policy's rollout (K samples per agent, aligned or
cross joint actions, single- or multi-turn) gives each tree node J scored
joint actions; ``comarl.preference.tree_pairs`` turns them into (chosen,
rejected) joint pairs (``train.preference.pair_selection``, ties dropped,
``pairs_per_item`` per node), and every agent takes one optimizer step on

    -log sigmoid(beta * sum_i [(log pi_i(y_w) - log ref_i(y_w)) - (log pi_i(y_l) - log ref_i(y_l))])

(``losses.joint_dpo_loss``; ``reference_free`` drops the ref terms). Agent i's
gradient goes through its own log-probs only; the other agents' terms are the
values at the same weights, so all agents follow the gradient of one joint loss.
The reference is the agent's starting policy (``comarl.reference``: a frozen
copy, or the LoRA base with the adapter off).

Departures from CoMLRL 1.4.3's MADPO: CoMLRL's MADPO (and MADPO-iter) is
reference-free, comarl's default is not; ``train.preference.reference_free:
true`` gives CoMLRL's loss. Pairs come from the same breadth-first
rollout tree as every other algorithm (CoMLRL samples a separate candidate pool
per item) and are rebuilt from the current policy every step (online); pairs
are taken at every node of a multi-turn tree with the tree's joint returns as
scores; log-probs are at the agents' sampling temperature (as the reference's);
the step uses the loop's micro-batching, clipping, precision and data parallelism.

``madpo_iter`` (iterative MADPO) runs the same pairs and DPO step in rounds with
pairs on disk, replay of earlier rounds (``replay: decay_sample`` is CoMLRL's
``lambda_decay`` draw, ``comarl.preference.replay``) and a refreshed reference
(``comarl.training.rounds``); ``madpo_offline`` trains on a pairs file
(``train.preference.pairs_in``) without sampling.
"""
from __future__ import annotations

from .base import Algorithm, register_algorithm


def no_advantage(samples, config):
    """MADPO learns from pairs, not advantages (the loop calls ``training.dpo.dpo_update``)."""
    raise ValueError("madpo has no advantage estimator: the loop's dpo update uses preference pairs")


MADPO = register_algorithm(Algorithm("madpo", no_advantage, min_generations=2, update="dpo",
                                     summary="DPO on joint preference pairs of the rollout (online)"))
MADPO_ITER = register_algorithm(Algorithm("madpo_iter", no_advantage, min_generations=2, update="dpo_rounds",
                                          summary="rounds of sampling, pairs written to disk, DPO with replay"))
MADPO_OFFLINE = register_algorithm(Algorithm("madpo_offline", no_advantage, min_generations=1, update="dpo_offline",
                                             summary="DPO on a pairs JSONL file (train.preference.pairs_in)"))
