"""MARLHF-iter: rounds of (pairs from the environment's reward, a joint reward model, on-policy RL on its score).

Round r: (1) the current policy samples ``round_batches`` batches, against a
comparator when ``train.preference.comparator`` names one, and the
environment's returns pick the winners (pairs written to
``<output_dir>/round-<r>/pairs.jsonl``); (2) the joint reward model
(``train.preference.reward_model``) is fitted fresh, or trained further
(``reward_model_refit: continue``), on the round's pairs plus the replayed
earlier rounds' (``replay``, decayed weights in the Bradley-Terry loss);
(3) ``steps_per_round`` steps of the on-policy algorithm
``train.preference.rl_algorithm`` (MAGRPO, MARLOO, MAReMax, IAC, MAAC) run in
the one training loop with the model's score as the team reward; the
environment's own reward is logged as ``env/env_reward``.

Departures from CoMLRL 1.4.3's MARLHFIter: the candidates are the rollout tree's
joint actions (K per agent, aligned or cross, any number of turns; pairs at the
root nodes when a comparator is used), not a separate candidate pool; the reward
model's weights go into every checkpoint, so a run killed inside a round's RL
steps resumes at that step with the same reward model; ``max_steps`` caps the
RL steps over all rounds.
"""
from __future__ import annotations

from .base import Algorithm, register_algorithm


def no_advantage(samples, config):
    """The outer record has no estimator: each step runs ``train.preference.rl_algorithm``'s."""
    raise ValueError("marlhf_iter has no advantage estimator: its steps use train.preference.rl_algorithm's")


MARLHF_ITER = register_algorithm(Algorithm("marlhf_iter", no_advantage, min_generations=2, update="rm_rounds",
                                           summary="rounds of pairs, a joint reward model refitted, RL on its score"))
