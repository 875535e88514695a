"""MAReMax (greedy baseline) and MAReMax-groupmax (group-max baseline, no extra generation).

``maremax``: for every node of the rollout tree the rollout also decodes one
*greedy* joint response (every agent with sampling off) and continues it
greedily to the end of the episode; its discounted return ``b`` is the
node's baseline, and agent i's sample k gets ``A_k = R_k - b[i]``. One greedy
generation per agent and node per remaining turn is the extra cost.

``maremax_groupmax``: ``A_k = R_k - max_j R_j`` over the agent's K samples at
the node; the best sample gets 0, every other one a negative advantage. It
costs nothing extra but is a different estimator: the baseline depends on
the sample itself (biased, unlike the greedy one), and only ever pushes down.

``train.loss.scale_advantages`` divides by the group std of the returns (off by
default; groups whose returns all agree stay unscaled).

Departures from ReMax (Li et al., 2024): ReMax is single-agent and
single-turn with one sample per prompt; here each agent has K >= 1 samples
per node sharing one greedy baseline, and in multi-turn episodes the baseline
is the *return* of a greedy continuation (greedy joint actions until the
episode ends, the turn limit or ``early_stop_reward``), so that it is on the
same scale as the credited returns it is subtracted from (the immediate
greedy reward alone would leave the whole discounted future in every
advantage). ReMax's loss is plain REINFORCE; here it is the shared
clipped-ratio loss, identical when ``num_iterations`` = 1.
"""
from __future__ import annotations

from ..objective.advantages import external_baseline, group_max
from .base import Algorithm, Estimator, optionally_scaled, register_algorithm, register_estimator


def remax_estimate(view):
    """[G, K] credited returns and [G] greedy returns -> ``R - b``."""
    if view.baseline is None:
        raise ValueError("maremax needs the rollout's greedy baseline (AgentView.baseline is None); "
                         "was the rollout run with greedy_baseline=True?")
    return external_baseline(view.returns, view.baseline)


def group_max_estimate(view):
    """[G, K] credited returns -> ``R - max_k R``."""
    return group_max(view.returns)


GREEDY = register_estimator(Estimator("greedy", optionally_scaled(remax_estimate), min_generations=1,
                                      greedy_baseline=True,
                                      summary="greedy joint response's return as baseline (one extra "
                                              "greedy generation per agent and node)"))
GROUP_MAX = register_estimator(Estimator("group_max", optionally_scaled(group_max_estimate), min_generations=2,
                                         summary="best of the node's K samples as baseline (no extra generation)"))
MAREMAX = register_algorithm(Algorithm.with_estimator("maremax", GREEDY), aliases=("remax",))
MAREMAX_GROUP_MAX = register_algorithm(Algorithm.with_estimator("maremax_groupmax", GROUP_MAX))
