"""An algorithm is a record of the components that differ; the loop is shared.

``advantage(samples, config) -> [G, K]`` turns one agent's credited returns
into advantages. ``min_generations`` is the smallest K for which the estimator
is defined (a group baseline needs K >= 2). ``greedy_baseline`` asks the
rollout for one extra greedy joint response per node (MAReMax). ``critic``
names the critic the loop builds for actor-critic methods: ``independent``
(IAC, one per agent) or ``central`` (MAAC); None for critic-free methods.
``update`` names the loop's update: ``policy_gradient`` (advantages and the
clipped loss), ``dpo`` (preference pairs of joint actions, MADPO) or
``dpo_rounds`` (iterative MADPO: rounds of pairs written to disk, then DPO)
or ``dpo_offline`` (DPO on a pairs file); ``rm_rounds`` marks an outer record
(``marlhf_iter``) whose steps run another, on-policy algorithm (:func:`loop_algorithms`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from ..advantages import scale_by_group_std
from ..config_io import ConfigError


@dataclass(frozen=True)
class Algorithm:
    name: str
    advantage: Callable[..., torch.Tensor]
    min_generations: int = 1
    greedy_baseline: bool = False
    summary: str = ""
    critic: str | None = None
    update: str = "policy_gradient"


_REGISTRY: dict[str, Algorithm] = {}
_BUILTIN_MODULES = {
    "magrpo": "comarl.algorithms.magrpo",
    "grpo": "comarl.algorithms.magrpo",
    "mareinforce": "comarl.algorithms.reinforce",
    "reinforce": "comarl.algorithms.reinforce",
    "marloo": "comarl.algorithms.rloo",
    "rloo": "comarl.algorithms.rloo",
    "maremax": "comarl.algorithms.remax",
    "remax": "comarl.algorithms.remax",
    "maremax_groupmax": "comarl.algorithms.remax",
    "iac": "comarl.algorithms.iac",
    "maac": "comarl.algorithms.maac",
    "madpo": "comarl.algorithms.madpo",
    "madpo_iter": "comarl.algorithms.madpo",
    "madpo_offline": "comarl.algorithms.madpo",
    "marlhf_iter": "comarl.algorithms.marlhf",
}


def register_algorithm(alg: Algorithm, aliases: tuple[str, ...] = ()) -> Algorithm:
    """Register ``alg`` under its name and under ``aliases`` (e.g. the single-agent name: grpo for magrpo)."""
    for name in (alg.name, *aliases):
        _REGISTRY[name] = alg
    return alg


def optionally_scaled(estimator: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``advantage(samples, config)`` from ``estimator(samples) -> [G, K]``: divided by the group std of the
    returns when ``config.scale_advantages`` (``advantages.scale_by_group_std``), one switch for every estimator."""
    def advantage(samples, config):
        adv = estimator(samples)
        return scale_by_group_std(adv, samples.returns) if config.scale_advantages else adv

    advantage.__doc__ = estimator.__doc__
    return advantage


def get_algorithm(name: str) -> Algorithm:
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    if name not in _REGISTRY:
        raise ConfigError(f"train.algorithm: unknown algorithm {name!r}; known: "
                          f"{', '.join(sorted(set(_REGISTRY) | set(_BUILTIN_MODULES)))}")
    return _REGISTRY[name]


def loop_algorithms(name: str, rl_algorithm: str = "magrpo") -> tuple[Algorithm, Algorithm | None]:
    """(the algorithm every training step runs, the outer rounds record or None).

    ``marlhf_iter`` (update ``rm_rounds``) runs rounds around the on-policy algorithm
    ``rl_algorithm`` (``train.preference.rl_algorithm``); every other name is its own step.
    """
    alg = get_algorithm(name)
    if alg.update != "rm_rounds":
        return alg, None
    inner = get_algorithm(rl_algorithm)
    if inner.update != "policy_gradient":
        raise ConfigError(f"train.preference.rl_algorithm: {name} runs an on-policy algorithm on the reward "
                          f"model's score (magrpo, marloo, maremax, iac, maac...), got {rl_algorithm!r}")
    return inner, alg
