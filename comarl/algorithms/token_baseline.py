"""MAGRPO with a per-token group baseline (``magrpo_token``); with one agent, GRPO with that baseline.

Token t of agent i's sample s at a node is credited with the sample's return minus the mean return of the
node's samples that still write at position t (``advantages.token_group_baseline``)::

    A[s, t] = R_s - mean{ R_j : j in the node's K samples of agent i, len_j > t }

At the first token this is MAGRPO's ``R - mean_k R``. Later tokens are compared only with the samples that
got that far, so a long completion is not credited for outlasting short ones, nor a short one blamed for
stopping: when every sample of a group has the same length it is exactly MAGRPO. Departure from MAGRPO
(Liu et al., 2025): the baseline depends on the position, as the length-aware baselines of per-token RL
methods do; ``train.loss.scale_advantages`` divides by the group std of the returns as for every estimator.

This record is the example of docs/algorithms.md, "Add an algorithm": an estimator that returns ``[S, T]``
instead of ``[G, K]`` is all a per-token method needs; the update broadcasts and weighs the same way.
"""
from __future__ import annotations

from ..objective.advantages import token_group_baseline
from .base import Algorithm, Estimator, optionally_scaled, register_algorithm, register_estimator


def token_baseline_estimate(view):
    """[G, K] credited returns, [S] lengths -> [S, T] per-token advantages against the samples still alive."""
    return token_group_baseline(view.returns, view.lengths)


TOKEN_GROUP = register_estimator(Estimator(
    "token_group", optionally_scaled(token_baseline_estimate), min_generations=2,
    summary="group baseline per token over the samples still writing at that position"))
MAGRPO_TOKEN = register_algorithm(Algorithm.with_estimator("magrpo_token", TOKEN_GROUP), aliases=("grpo_token",))
