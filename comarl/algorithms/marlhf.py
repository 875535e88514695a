"""MARLHF-iter: rounds of (pairs from the environment's reward, a joint reward model, on-policy RL on its score).

Round r: (1) the current policy samples ``round_batches`` batches, against a
comparator when ``train.preference.iterative.comparator`` names one, and the
environment's returns pick the winners (pairs written to
``<output_dir>/round-<r>/pairs.jsonl``); (2) the joint reward model
(``train.preference.iterative.reward_model``) is fitted fresh, or trained further
(``reward_model_refit: continue``), on the round's pairs plus the replayed
earlier rounds' (``replay``, decayed weights in the Bradley-Terry loss);
(3) ``steps_per_round`` steps of the on-policy algorithm
``train.preference.iterative.rl_algorithm`` (MAGRPO, MARLOO, MAReMax, IAC, MAAC) run in
the one training loop with the model's score as the team reward; the
environment's own reward is logged as ``env/env_reward``.

Departures from CoMLRL 1.4.3's MARLHFIter: the candidates are the rollout tree's
joint actions (K per agent, aligned or cross, any number of turns; pairs at the
root nodes when a comparator is used), not a separate candidate pool; the reward
model's weights go into every checkpoint, so a run killed inside a round's RL
steps resumes at that step with the same reward model; ``max_steps`` caps the
RL steps over all rounds.

The record differs from MAGRPO's in its source (``preference.rounds.RewardModelRounds``, which also swaps
the environment for the reward model's) and in running another record's steps (``steps_with``).
"""
from __future__ import annotations

from ..core.config_io import ConfigError
from .base import Algorithm, Parts, get_algorithm, policy_gradient, register_algorithm


def rl_algorithm(config) -> Algorithm:
    """The on-policy algorithm each step runs: ``train.preference.iterative.rl_algorithm``."""
    inner = get_algorithm(config.preference.iterative.rl_algorithm)
    if inner.steps_with is not None or inner.update is not policy_gradient or inner.advantage is None:
        raise ConfigError(f"train.preference.iterative.rl_algorithm: {config.algorithm} runs an on-policy algorithm "
                          f"on the reward model's score (magrpo, marloo, maremax, iac, maac...), got "
                          f"{config.preference.iterative.rl_algorithm!r}")
    return inner


def check_marlhf(config, agents) -> None:
    """Rounds write pairs and checkpoints to ``train.run.output_dir``; a reward model must be named."""
    rl_algorithm(config)
    if not config.run.output_dir:
        raise ConfigError(f"train.run.output_dir: {config.algorithm} writes each round's pairs and checkpoints there; "
                          f"set it")
    if config.preference.iterative.reward_model is None:
        raise ConfigError("train.preference.iterative.reward_model: marlhf_iter fits a joint reward model each round; "
                          "set its model (hub id, local path or tiny), e.g. "
                          "train.preference.iterative.reward_model.model=tiny")


def reward_model_rounds(parts: Parts):
    from ..preference.rounds import RewardModelRounds, RoundSampler

    return RewardModelRounds(RoundSampler(parts.config, parts.prompt_batches(), parts.lockstep, parts.generator))


def inner_update(parts: Parts):
    """The steps' update: ``rl_algorithm``'s (``parts.algorithm`` is already that record)."""
    return parts.algorithm.update(parts)


MARLHF_ITER = register_algorithm(Algorithm("marlhf_iter", min_generations=2, update=inner_update,
                                           source=reward_model_rounds, steps_with=rl_algorithm, check=check_marlhf,
                                           summary="rounds of pairs, a joint reward model refitted, RL on its score"))
