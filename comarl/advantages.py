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


def scale_by_group_std(advantages: torch.Tensor, returns: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Divide each group's advantages by ``std_k R + eps`` (unbiased std of its K returns).

    A group whose returns all agree (std <= eps), or a group of K = 1, is left
    unscaled: its std carries no scale information and dividing by ``eps``
    would blow a non-zero advantage (REINFORCE, a greedy baseline) up to ~1e6.
    Shapes: advantages, returns [G, K] -> [G, K].
    """
    if returns.shape[1] < 2:
        return advantages
    std = returns.std(dim=1, keepdim=True, unbiased=True)
    return advantages / torch.where(std > eps, std + eps, torch.ones_like(std))


def leave_one_out(returns: torch.Tensor) -> torch.Tensor:
    """RLOO: ``A_k = R_k - mean_{j != k} R_j = K/(K-1) * (R_k - mean_j R_j)``.

    Needs K >= 2. Shape: [G, K] -> [G, K].
    """
    k = returns.shape[1]
    if k < 2:
        raise ValueError(f"leave-one-out baseline needs K >= 2 samples per group, got K={k}")
    others = (returns.sum(dim=1, keepdim=True) - returns) / (k - 1)
    return returns - others


def external_baseline(returns: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
    """ReMax: ``A_k = R_k - b`` with one baseline per group (the greedy joint response's return).

    Shapes: returns [G, K], baseline [G] -> [G, K].
    """
    if baseline.shape != returns.shape[:1]:
        raise ValueError(f"baseline must have shape [G]={tuple(returns.shape[:1])}, got {tuple(baseline.shape)}")
    return returns - baseline.to(returns.dtype).unsqueeze(1)


def group_max(returns: torch.Tensor) -> torch.Tensor:
    """Group-max baseline: ``A_k = R_k - max_j R_j`` (<= 0; the best sample of a group gets 0).

    A cheap stand-in for ReMax's greedy baseline (greedy decoding tends to the
    mode, often the group's best) that needs no extra generation.
    Shape: [G, K] -> [G, K].
    """
    return returns - returns.max(dim=1, keepdim=True).values
