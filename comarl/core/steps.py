"""What one training step consumes and produces: the batch a StepSource hands to an Update, and the step's output.

The loop (``comarl/training/loop.py``) strings the two together::

    batch = source.next(step, team)        # a PromptBatch, a PairBatch or a SkipStep
    out = update.step(team, batch, step)   # a StepOutput (a SkipStep: no update)
    out.metrics.update(batch.metrics)      # what the source reports with the step

Notation: N agents, P preference pairs, S samples of one agent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Prefetched:
    """A batch's rollouts, sampled ahead by the generation worker (``train.rollout.max_staleness`` >= 1,
    ``updates/overlap.py``) while the trainer updated on earlier batches.

    Attributes:
        rollouts: one ``Rollout`` per ``gradient_accumulation_steps`` chunk; each agent's samples carry the
            policy version that sampled them (``AgentSamples.policy_version``) and its log-probs
            (``AgentSamples.engine_logprobs``).
        version: the policy version (training steps done) whose weights sampled them.
        rollout_s: seconds the worker took to sample them (beside the trainer's update).
        wait_s: seconds the trainer waited for them.
        env_errors: items the environment failed to score while the worker sampled them (``env.on_error:
            zero``), counted with this batch's step rather than the step the trainer was on meanwhile.
    """

    rollouts: list
    version: int
    rollout_s: float
    wait_s: float = 0.0
    env_errors: int = 0


@dataclass
class PromptBatch:
    """This rank's items of one global batch, and the environment that scores them.

    Attributes:
        items: the rank's share of the batch (may be empty: a rank out of items at the end of an epoch).
        env: the environment whose reward this step trains on (MARLHF rounds: the reward model's).
        metrics: what the source reports with the step (MARLHF rounds: ``rm/*``, ``pref/*``, the round).
        rolled: the batch's rollouts when the generation worker sampled them ahead
            (``train.rollout.max_staleness`` >= 1); None: the update rolls the items out itself.
        epoch: the data epoch its items came from (logged as ``epoch``; a source that draws batches ahead has
            moved its cursor on); None: the source's cursor says.
    """

    items: list[dict]
    env: Any
    metrics: dict[str, float] = field(default_factory=dict)
    rolled: Prefetched | None = None
    epoch: int | None = None


@dataclass
class AgentPairs:
    """One agent's side of P preference pairs, as token ids (``dpo.dpo_step`` learns from it).

    Attributes:
        prompts: [S] prompt ids of the samples the pairs point into.
        completions: [S] completion ids (through EOS).
        chosen: [P] index into the samples of each pair's chosen response.
        rejected: [P] index of each pair's rejected response.
        forced: None, or [S] per-token flags, True where a schema forced the token (out of the log-probs).
    """

    prompts: list[list[int]]
    completions: list[list[int]]
    chosen: list[int]
    rejected: list[int]
    forced: list[list[bool]] | None = None


@dataclass
class PairBatch:
    """P joint preference pairs (one ``AgentPairs`` per agent, pairs in the same order), with a weight each.

    Attributes:
        agents: [N] the pairs as each agent's token ids.
        weights: [P] weight of each pair in the loss (1 online; replay decay in iterative rounds).
        metrics: what the source reports with the step (``pref/pairs``, ``pref/pool``, round number ...).
        examples: a few sampled rows for ``samples.jsonl`` (a round's sampling), else empty.
    """

    agents: list[AgentPairs]
    weights: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)

    @property
    def num_pairs(self) -> int:
        return len(self.agents[0].chosen) if self.agents else 0


@dataclass
class SkipStep:
    """No update this step (``marlhf_iter`` before its first reward model); ``metrics`` are logged."""

    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class StepOutput:
    """What a step reports.

    Attributes:
        metrics: name -> value (this rank's; the loop averages them over ranks).
        weight: the weight of this rank's metrics in that average (items trained on).
        counts: per-node metrics' observation counts, which weigh those instead (``rollout_metrics``).
        examples: a few (prompt, response, reward) rows for ``samples.jsonl``.
        rollouts: the step's rollouts (``comarl.core.types.Rollout``), as rolled out (nothing writes into them); empty
            for an update that rolls nothing out.
        advantages: per agent, per rollout, the advantages the update computed ([G, K], or [S, T] from a
            per-token estimator); empty when the update computes none (DPO).
        values: per rollout, the critic's [G, J, C] values of the joint actions (``Critic.prepare``); empty
            without a critic.
    """

    metrics: dict[str, float]
    weight: float = 1.0
    counts: dict[str, float] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    rollouts: list = field(default_factory=list)
    advantages: list = field(default_factory=list)
    values: list = field(default_factory=list)


__all__ = ["AgentPairs", "PairBatch", "Prefetched", "PromptBatch", "SkipStep", "StepOutput"]
