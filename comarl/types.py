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

    @property
    def num_samples(self) -> int:
        return len(self.completion_ids)


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
