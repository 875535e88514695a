"""MAGRPO (multi-agent group-relative policy optimisation); with one agent, GRPO.

Each agent's advantage for sample k of a node is its credited return minus the
mean over that agent's K samples at the node (optionally divided by their std,
``train.loss.scale_advantages``). Departures from the MAGRPO paper (Liu et al.,
2025): the std division is *off* by default, following Dr. GRPO's finding that
it up-weights groups whose returns barely differ (nearly solved or hopeless
items); turn it on to get the paper's normalised form. Cross-mode credit uses
the mean return of the joint actions that contain a sample (see
``comarl.rollout.tree``). The loss normalisation is a config choice
(``train.loss.loss_normalization``), default per-sequence mean as in GRPO.
"""
from __future__ import annotations

from ..objective.advantages import group_relative
from .base import Algorithm, Estimator, optionally_scaled, register_algorithm, register_estimator


def magrpo_estimate(view):
    """[G, K] credited returns -> ``R - mean_k R`` per group."""
    return group_relative(view.returns)


GROUP_RELATIVE = register_estimator(Estimator("group_relative", optionally_scaled(magrpo_estimate), min_generations=2,
                                              summary="group-relative baseline per agent and node"))
MAGRPO = register_algorithm(Algorithm.with_estimator("magrpo", GROUP_RELATIVE), aliases=("grpo",))
