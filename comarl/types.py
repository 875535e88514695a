"""What flows from the rollout to the loss.

Notation: N agents, B items in a rollout batch, K samples per agent per node,
G groups (= tree nodes; one item at turn 1), S = G x K samples of one agent,
T completion tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AgentSamples:
    """Everything one agent generated in one rollout, group-major (sample s = g*K + k).

    Attributes:
        prompt_ids: [S] unpadded prompt ids (the agent's own tokenizer).
        completion_ids: [S] completion ids through the first EOS, no padding.
        truncated: [S] bool, no EOS before max_new_tokens.
        texts: [S] decoded completions.
        returns: [G, K] return credited to each sample (see rollout.credit_returns).
        turns: [G] 0-based turn of each group.
        baseline: [G] optional external baseline per group (greedy return for MAReMax), else None.
        advantages: [G, K] filled by the algorithm's advantage function.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    truncated: torch.Tensor
    texts: list[str]
    returns: torch.Tensor
    turns: torch.Tensor
    baseline: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    critic_advantages: torch.Tensor | None = None
    """[G, K] GAE advantages from a critic (actor-critic algorithms), else None."""
    forced: list[list[bool]] | None = None
    """[S] per completion token, True where a schema forced it (structured generation): out of the loss; else None."""

    @property
    def num_samples(self) -> int:
        return len(self.completion_ids)


def joined_samples(samples: list[AgentSamples]) -> tuple[list, list, list | None]:
    """One agent's samples of several rollout chunks, concatenated: (prompt ids, completion ids, forced
    flags, or None when no chunk had a schema; a chunk without one counts as all sampled)."""
    prompts = [p for s in samples for p in s.prompt_ids]
    comps = [c for s in samples for c in s.completion_ids]
    forced = None if all(s.forced is None for s in samples) else \
        [f for s in samples for f in (s.forced or [[False] * len(c) for c in s.completion_ids])]
    return prompts, comps, forced


@dataclass
class Rollout:
    """One rollout batch: per-agent samples plus what the logger wants."""

    agents: list[AgentSamples]
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    """First-turn joint actions of the first items: prompts, responses, reward (for sample logs)."""
    num_completions: int = 0
    records: list = field(default_factory=list)
    """EvalRecords of the first turn (only when the rollout was asked to keep them)."""
    tree: "RolloutTree | None" = None
    """The tree's structure (what GAE and critics need)."""
    metric_counts: dict[str, float] = field(default_factory=dict)
    """How many observations each per-node metric of ``metrics`` averages (``reward/turn1``: nodes of turn 1),
    to combine rollouts and ranks by observations rather than by items."""


@dataclass
class RolloutTree:
    """Structure of one rollout tree, node-major in the same group order as :class:`AgentSamples`.

    J joint actions per node (K aligned, K^N cross), the same for every node.

    Attributes:
        joints: [J, N] sample index of agent i in joint action j.
        rewards: [G, J, N] immediate reward of each joint action for each agent (team reward: N equal copies).
        child: [G, J] group index of the node that joint action j leads to, -1 where the branch ended.
        truncated: [G, J] bool, the branch ended only because of ``num_turns`` (the env would go on): bootstrap.
        prompts: [G][N] each agent's prompt text at the node.
        next_prompts: (g, j) -> [N] next prompts of a truncated branch (what a critic bootstraps from).
    """

    joints: torch.Tensor
    rewards: torch.Tensor
    child: torch.Tensor
    truncated: torch.Tensor
    prompts: list[list[str]]
    next_prompts: dict[tuple[int, int], list[str]] = field(default_factory=dict)
