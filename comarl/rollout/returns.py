"""The tree's arithmetic: joint actions, credited and discounted returns, the size of a tree, reward vectors and
the reference's sibling early stop. Pure functions on tensors (shapes in each docstring)."""
from __future__ import annotations

import itertools

import torch

from ..core.stages import StageGraph, leaves_and_completions
from ..envs.base import AgentRewards


def joint_actions(mode: str, k: int, n: int) -> torch.Tensor:
    """Joint actions as sample indices: [J, N] with J = K (aligned) or K^N (cross)."""
    if mode == "aligned":
        return torch.arange(k).unsqueeze(1).repeat(1, n)
    if mode == "cross":
        return torch.tensor(list(itertools.product(range(k), repeat=n)), dtype=torch.long).reshape(-1, n)
    raise ValueError(f"joint_mode must be 'aligned' or 'cross', got {mode!r}")


def credit_returns(joint_returns: torch.Tensor, joints: torch.Tensor, k: int) -> torch.Tensor:
    """Credit each agent's samples with the mean return of the joint actions containing them.

    Args:
        joint_returns: [J, N] return of each joint action for each agent.
        joints: [J, N] sample index of agent i in joint action j.
        k: samples per agent.
    Returns:
        [N, K]: ``out[i, k] = mean_{j: joints[j, i] == k} joint_returns[j, i]``.
    """
    n = joints.shape[1]
    out = torch.zeros(n, k, dtype=joint_returns.dtype)
    count = torch.zeros(n, k, dtype=joint_returns.dtype)
    for i in range(n):
        out[i].index_add_(0, joints[:, i], joint_returns[:, i])
        count[i].index_add_(0, joints[:, i], torch.ones_like(joint_returns[:, i]))
    return out / count.clamp(min=1)


def discounted_returns(rewards: torch.Tensor, child_values: torch.Tensor, gamma: float) -> torch.Tensor:
    """G = r + gamma * V(child) elementwise; ``child_values`` is 0 where the branch ended. Shapes [J, N]."""
    return rewards + gamma * child_values


def samples_per_item(mode: str, k: int, n: int, turns: int) -> int:
    """Completions generated for one item when no branch ends early: N*K*sum_t b^t, b = K or K^N."""
    branching = k if mode == "aligned" else k ** n
    return n * k * sum(branching ** t for t in range(turns))


def check_tree_size(mode: str, k: int, n: int, turns: int, limit: int, graph: StageGraph | None = None) -> None:
    """Refuse, before any generation, a tree larger than ``limit`` completions per item (and a team graph that
    does not hold together or has more leaves per turn than its ``max_leaves``)."""
    if graph is not None and not graph.is_single:
        graph.validate(n, mode)
        graph.check_leaves(mode, k)
        total = leaves_and_completions(graph, mode, k, turns)[1]
    else:
        total = samples_per_item(mode, k, n, turns)
    if total > limit:
        raise ValueError(
            f"train.rollout.max_samples_per_item: joint_mode={mode}, num_generations={k}, {n} agents, num_turns={turns}"
            f"{f', {len(graph.stages)} stages' if graph is not None and not graph.is_single else ''} "
            f"generates {total} completions per item (> limit {limit}); lower num_generations/num_turns, use "
            f"aligned mode, or raise train.rollout.max_samples_per_item")


def reward_vector(reward, n: int, where: str) -> torch.Tensor:
    """Team float -> [N] copies; AgentRewards -> its values (length checked)."""
    if isinstance(reward, AgentRewards):
        if len(reward.values) != n:
            raise ValueError(f"{where}: AgentRewards has {len(reward.values)} values for {n} agents")
        return torch.tensor(reward.values, dtype=torch.float64)
    try:
        return torch.full((n,), float(reward), dtype=torch.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: reward must be a float or AgentRewards, got {type(reward).__name__}") from None


def siblings_end(rewards: torch.Tensor, threshold: float | None) -> bool:
    """The reference's early termination: all of a node's branches end when the mean
    reward of its joint actions (``rewards``: [J, N]) is strictly above ``threshold``.

    ``siblings_end(torch.tensor([[1.], [0.]]), 0.4) is True``; with threshold 0.5 it is False.
    """
    return threshold is not None and float(rewards.mean()) > threshold

