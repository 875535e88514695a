"""Preference pairs of joint responses, from the rewards the environment gave them.

A node of the rollout tree has J joint actions (K aligned, K^N cross); each has
a team return. A pair (w, l) says joint action w is preferred to l. Only pairs
with a strictly positive gap are kept: ties carry no preference and are dropped.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

SELECTIONS = ("reward_gap", "all", "random")


def select_pairs(rewards: list[float], mode: str = "reward_gap", max_pairs: int | None = 1,
                 rng: random.Random | None = None) -> list[tuple[int, int]]:
    """(winner, loser) index pairs over one node's J candidates.

    Args:
        rewards: [J] score of each candidate.
        mode: ``reward_gap``: largest gap first (ties in the gap broken by index order);
            ``all``: every positive-gap pair in (winner, loser) index order, no cap;
            ``random``: positive-gap pairs in a random order (``rng``).
        max_pairs: keep at most this many (None = no cap); must be None with ``all``.
    Returns:
        list of (w, l) with ``rewards[w] > rewards[l]``.
    """
    if mode not in SELECTIONS:
        raise ValueError(f"pair selection must be one of {list(SELECTIONS)}, got {mode!r}")
    if mode == "all" and max_pairs is not None:
        raise ValueError("pair selection 'all' keeps every pair; max_pairs must be None")
    pairs = [(w, l) for w in range(len(rewards)) for l in range(len(rewards)) if rewards[w] > rewards[l]]
    if mode == "reward_gap":
        pairs.sort(key=lambda p: -(rewards[p[0]] - rewards[p[1]]))  # stable: index order within a gap
    elif mode == "random":
        (rng or random.Random(0)).shuffle(pairs)
    return pairs if max_pairs is None else pairs[:max_pairs]


def joint_returns(rewards: torch.Tensor, child: torch.Tensor, gamma: float, discount: torch.Tensor | None = None,
                  width: torch.Tensor | None = None) -> torch.Tensor:
    """Team return of every joint action of a rollout tree: ``R[g, j] = mean_i r[g, j, i] + gamma * V(child)``.

    ``V(c) = mean_j R[c, j]``, 0 where the branch ended (child -1); children come after their parents.
    A team graph's tree (``comarl/core/stages.py``) gives ``discount`` [G, J] (1 into a later stage of the same
    turn, in place of gamma) and ``width`` [G] (node g has that many joint actions; the rest is padding).
    Shapes: rewards [G, J, N], child [G, J] -> [G, J]. With one turn it is the mean reward over agents.
    """
    out = rewards.double().mean(dim=2).clone()
    for g in range(rewards.shape[0] - 1, -1, -1):
        for j in range(rewards.shape[1] if width is None else int(width[g])):
            c = int(child[g, j])
            if c >= 0:
                d = gamma if discount is None else float(discount[g, j])
                out[g, j] += d * (out[c].mean() if width is None else out[c, :int(width[c])].mean())
    return out


@dataclass
class JointPair:
    """One preference pair of joint responses at node ``group``: joint action ``chosen`` beats ``rejected``.

    ``chosen_samples``/``rejected_samples`` [N]: each agent's sample index (within its AgentSamples) in the pair;
    -1 for an agent that does not act at the node (a team graph's stage: its log-ratio is the same on both
    sides of the pair, so it leaves the joint loss out).
    """

    group: int
    chosen: int
    rejected: int
    chosen_samples: list[int]
    rejected_samples: list[int]
    gap: float


NodeRng = Callable[[int], random.Random]
"""Node index g -> the random stream of ``pair_selection: random`` at that node."""


def tree_pairs(rewards: torch.Tensor, child: torch.Tensor, joints: torch.Tensor, k: Any, gamma: float,
               mode: str, max_pairs: int | None, rng: random.Random | NodeRng | None = None,
               tree=None) -> list[JointPair]:
    """Pairs at every node of a rollout tree (rewards [G, J, N], child [G, J], joints [J, N]).

    Agent i's sample of joint action j at node g is ``g*K + joints[j, i]`` (AgentSamples are group-major).
    ``rng``: one stream for every node in turn, or a function giving each node its own.
    ``tree``: a team graph's :class:`RolloutTree` (``joints`` [G, J, N], nodes of different widths, agents
    acting at some nodes only): pairs are joint actions of one node (siblings that share every earlier
    output), agent i's sample is ``tree.sample(g, j, i, k_i)`` and ``k`` is then one size per agent.
    """
    if tree is not None:
        ret = joint_returns(rewards, child, gamma, tree.discounts(gamma), tree.width)
    else:
        ret = joint_returns(rewards, child, gamma)
    out = []
    for g in range(ret.shape[0]):
        node_rng = rng(g) if callable(rng) else rng
        width = int(tree.width[g]) if tree is not None else ret.shape[1]
        for w, l in select_pairs(ret[g, :width].tolist(), mode, max_pairs, node_rng):
            if tree is not None:
                n = tree.joints.shape[2]
                chosen = [tree.sample(g, w, i, k[i]) for i in range(n)]
                rejected = [tree.sample(g, l, i, k[i]) for i in range(n)]
            else:
                chosen, rejected = (g * k + joints[w]).tolist(), (g * k + joints[l]).tolist()
            out.append(JointPair(g, w, l, chosen, rejected, float(ret[g, w] - ret[g, l])))
    return out


def comparator_pairs(policy: list[float], comparator: list[float], mode: str = "reward_gap",
                     max_pairs: int | None = 1, rng: random.Random | None = None) -> list[tuple[int, bool, float]]:
    """Candidate j of the policy against candidate j of the comparator, at one node.

    Args:
        policy, comparator: [J] returns of the two sides' candidates (J = min of the two lengths is used).
        mode: ``reward_gap``: largest |gap| first (ties in the gap by index); ``all``: every untied j in index
            order, no cap; ``random``: untied j in a random order (``rng``).
        max_pairs: keep at most this many (None = no cap); must be None with ``all``.
    Returns:
        (j, policy_wins, |gap|) per kept pair; ties (gap 0) are dropped.
    """
    if mode not in SELECTIONS:
        raise ValueError(f"pair selection must be one of {list(SELECTIONS)}, got {mode!r}")
    if mode == "all" and max_pairs is not None:
        raise ValueError("pair selection 'all' keeps every pair; max_pairs must be None")
    out = [(j, p > c, abs(p - c)) for j, (p, c) in enumerate(zip(policy, comparator)) if p != c]
    if mode == "reward_gap":
        out.sort(key=lambda x: -x[2])  # stable: index order within a gap
    elif mode == "random":
        (rng or random.Random(0)).shuffle(out)
    return out if max_pairs is None else out[:max_pairs]


def replay_weights(current: int, mode: str, k: int = 1, decay: float = 0.5) -> dict[int, float]:
    """Weight of each round's pairs in round ``current``'s pool (rounds 0-based, absent = not replayed).

    ``none``: {current: 1}; ``last_k``: the current round and the k before it, weight 1;
    ``all``: every round so far, weight 1; ``decay``: every round r, weight ``decay ** (current - r)``.
    """
    if mode == "none":
        return {current: 1.0}
    if mode == "last_k":
        return {r: 1.0 for r in range(max(0, current - k), current + 1)}
    if mode == "all":
        return {r: 1.0 for r in range(current + 1)}
    if mode == "decay":
        return {r: decay ** (current - r) for r in range(current + 1)}
    raise ValueError(f"replay must be none, last_k, all or decay, got {mode!r}")
