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


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float, last_value: float = 0.0,
        terminal: bool = True) -> torch.Tensor:
    """Generalised advantage estimation (Schulman et al., 2016) over one branch of T turns.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V_T = 0`` when the branch
    ended in a terminal state and ``V_T = last_value`` (the critic's value of
    the next state) when it was truncated; ``A_t = delta_t + gamma * lam * A_{t+1}``.
    lam = 0 is one-step TD, lam = 1 is the discounted return minus V_t.
    Shapes: rewards, values [T] -> [T].
    """
    out = torch.zeros_like(rewards, dtype=torch.float64)
    nxt_v = 0.0 if terminal else float(last_value)
    running = 0.0
    for t in reversed(range(len(rewards))):
        delta = float(rewards[t]) + gamma * nxt_v - float(values[t])
        running = delta + gamma * lam * running
        out[t] = running
        nxt_v = float(values[t])
    return out


def gae_tree(rewards: torch.Tensor, values: torch.Tensor, child: torch.Tensor, gamma: float, lam: float,
             bootstrap: torch.Tensor | None = None) -> torch.Tensor:
    """GAE over every branch of a rollout tree (``gae`` on each root-to-leaf path, shared prefixes averaged).

    A node's value is the mean of its joint actions' values, and the
    continuation of joint action j is the mean over its child's joint actions,
    as the tree's returns are (``G_j = r_j + gamma * mean_j' G_child,j'``)::

        delta_j = r_j + gamma * V_next,j - v_j,     V_next,j = mean_j' v[child_j, j']  (0 if ended,
                                                               bootstrap_j if truncated)
        A_j     = delta_j + gamma * lam * mean_j' A[child_j, j']   (0 past the end)

    Children come after their parents in group order.
    Shapes: rewards, values, bootstrap [G, J, C] (C columns: agents, or 1 for a
    team critic); child [G, J] (-1 where the branch ended) -> [G, J, C].
    """
    adv = torch.zeros_like(rewards, dtype=torch.float64)
    boot = torch.zeros_like(adv) if bootstrap is None else bootstrap.to(torch.float64)
    for g in reversed(range(rewards.shape[0])):
        for j in range(rewards.shape[1]):
            c = int(child[g, j])
            if c >= 0:
                nxt, cont = values[c].to(torch.float64).mean(0), adv[c].mean(0)
            else:
                nxt, cont = boot[g, j], torch.zeros_like(boot[g, j])
            adv[g, j] = rewards[g, j] + gamma * nxt - values[g, j] + gamma * lam * cont
    return adv


def whiten(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """``(x - mean) / std`` over all entries (population std); returned unchanged with fewer than 2 entries.
    Shape: any -> same."""
    if x.numel() < 2:
        return x
    return (x - x.mean()) / x.std(unbiased=False).clamp(min=eps)
