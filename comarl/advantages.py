"""Advantage estimators: pure functions on a group of returns.

A *group* is one node's K samples of one agent (one item at turn 1, one branch
later). Every function maps credited returns ``R [G, K]`` to advantages
``A [G, K]`` and never mixes groups.
"""
from __future__ import annotations

import torch

EPS = 1e-6


def group_relative(returns: torch.Tensor, scale_by_std: bool = False, eps: float = EPS) -> torch.Tensor:
    """MAGRPO / GRPO: ``A = R - mean_k R`` (divided by ``std_k R + eps`` when ``scale_by_std``).

    The std is the unbiased sample std over the K samples of the group.
    Shape: [G, K] -> [G, K].
    """
    centred = returns - returns.mean(dim=1, keepdim=True)
    if scale_by_std:
        centred = centred / (returns.std(dim=1, keepdim=True, unbiased=True) + eps)
    return centred


def no_baseline(returns: torch.Tensor) -> torch.Tensor:
    """REINFORCE: ``A = R``. Shape: [G, K] -> [G, K]."""
    return returns.clone()
