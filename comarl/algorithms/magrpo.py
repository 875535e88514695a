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
from .base import Algorithm, optionally_scaled, register_algorithm


def magrpo_estimate(view):
    """[G, K] credited returns -> ``R - mean_k R`` per group."""
    return group_relative(view.returns)


MAGRPO = register_algorithm(Algorithm("magrpo", optionally_scaled(magrpo_estimate), min_generations=2,
                                      summary="group-relative baseline per agent and node"), aliases=("grpo",))
