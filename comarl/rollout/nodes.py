"""The tree's nodes and what is gathered while it grows: ``Node`` (where some agents act together), the per-agent
sample store (``Accumulator``), when a branch ends, what an agent of a stage reads, and the generation helpers
every stage shares (schemas, the lockstep scope of sharded models)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..core.schema import schema_of
from ..core.stages import Stage, StageGraph
from ..envs.base import EnvState, Transition
from .settings import RolloutSettings


@dataclass
class Node:
    """Where some agents act together: a turn's first stage, or a later stage on one branch of it."""

    item: int
    state: EnvState
    turn: int
    stage: int = 0  # the stage that opened the node
    actors: list = field(default_factory=list)  # agents acting here (branch agents, then aligned ones)
    context: dict = field(default_factory=dict)  # agent -> text: earlier stages' outputs on this branch
    context_prompts: dict = field(default_factory=dict)  # agent -> the prompt it wrote them from
    prompts: dict = field(default_factory=dict)  # agent -> [its prompt] (branch) or [J] (aligned, per joint)
    texts: dict = field(default_factory=dict)  # agent -> its samples' texts here
    # joints, rewards and returns are filled in as the tree grows (sampling, env step, back-up), before any read
    joints: torch.Tensor = None  # type: ignore[assignment]  # [J, N], -1 where an agent does not act
    rewards: torch.Tensor = None  # type: ignore[assignment]  # [J, N]
    children: list = field(default_factory=list)  # [J] of Node | None
    stage_children: bool = False  # the children are later stages of this turn (no reward, no discount)
    returns: torch.Tensor = None  # type: ignore[assignment]  # [J, N]
    greedy_return: torch.Tensor | None = None  # [N], return of the greedy continuation from this node
    truncated: list = field(default_factory=list)  # [J] bool: ended only by num_turns (see truncated_at_limit)
    next_prompts: dict = field(default_factory=dict)  # j -> [N] next prompts of a truncated branch
    leaf_metrics: list = field(default_factory=list)  # [J] the environment's metrics of each joint action it scored

    def joint_texts(self, j: int) -> dict:
        """Every acting agent's text in joint action j."""
        return {i: self.texts[i][int(self.joints[j, i])] for i in self.actors}

    def joint_prompt(self, i: int, j: int) -> str:
        p = self.prompts[i]
        return p[j] if len(p) > 1 else p[0]

    def branch(self, j: int) -> tuple[dict, dict]:
        """(texts, prompts) of every agent on the branch through joint action j, this turn."""
        texts = {**self.context, **self.joint_texts(j)}
        prompts = {**self.context_prompts, **{i: self.joint_prompt(i, j) for i in self.actors}}
        return texts, prompts


@dataclass
class Accumulator:
    """Per-agent sample lists (group-major) and what the logger wants, filled stage by stage."""

    n: int
    samples: list = field(default_factory=list)
    nodes: list = field(default_factory=list)  # per agent: the nodes of its groups, in order
    metric_sums: dict = field(default_factory=lambda: defaultdict(float))
    metric_counts: dict = field(default_factory=lambda: defaultdict(int))
    examples: list = field(default_factory=list)
    records: list = field(default_factory=list)
    num_completions: int = 0

    def __post_init__(self):
        self.samples = [dict(prompt_ids=[], completion_ids=[], truncated=[], texts=[], forced=[], structured=False,
                             engine_logprobs=[], from_engine=True) for _ in range(self.n)]
        self.nodes = [[] for _ in range(self.n)]

    def add_metric(self, key: str, value: float, count: int = 1) -> None:
        self.metric_sums[key] += value * count
        self.metric_counts[key] += count


def store_samples(store: dict, p_ids: list, comp, per_prompt: int) -> None:
    store["prompt_ids"] += [p for p in p_ids for _ in range(per_prompt)]
    store["completion_ids"] += comp.ids
    store["truncated"] += comp.truncated
    store["texts"] += comp.texts
    store["forced"] += comp.forced if comp.forced is not None else [[False] * len(c) for c in comp.ids]
    store["structured"] |= comp.forced is not None
    engine = getattr(comp, "logprobs", None)  # a vLLM engine's (EngineCompletions); HF gives none
    store["from_engine"] &= engine is not None
    store["engine_logprobs"] += engine if engine is not None else []


def next_state(tr: Transition) -> EnvState:
    """The state a branch goes on from; asked only of a branch that goes on (or is truncated), never of one
    whose env returned no next state."""
    if tr.next_state is None:
        raise RuntimeError("a branch without a next state was continued")  # unreachable: ends/truncated check
    return tr.next_state


def truncated_at_limit(tr, reward: torch.Tensor, turn: int, s: RolloutSettings) -> bool:
    """The branch ends at ``num_turns`` although the env would go on (no done, not ``early_stop_reward``)."""
    if tr.done or tr.next_state is None or turn + 1 < s.num_turns:
        return False
    return s.early_stop_reward is None or float(reward.mean()) < s.early_stop_reward


def branch_ends(tr, reward: torch.Tensor, turn: int, s: RolloutSettings) -> bool:
    """A branch ends when the env says so, at the last turn, or at ``early_stop_reward``."""
    if tr.done or tr.next_state is None or turn + 1 >= s.num_turns:
        return True
    return s.early_stop_reward is not None and float(reward.mean()) >= s.early_stop_reward


def stage_actors(stage: Stage, context: dict) -> tuple[int, ...]:
    """The stage's agents that act on a branch with these earlier outputs (a route chooses; else all)."""
    return stage.route.chosen(stage.agents, context) if stage.route is not None else stage.agents


def stage_inputs(graph: StageGraph, agent: int, context: dict) -> dict:
    """What ``agent`` reads on a branch: the outputs of the earlier agents it reads that wrote there."""
    return {a: context[a] for a in graph.reads_of(agent) if a in context} if not graph.is_single else {}


def prompt_schemas(agent, prompts: Sequence[str]) -> list | None:
    """The schema each prompt declares, for an agent that follows schemas (None: no prompt has one, or the
    agent's ``structured`` is false)."""
    if not getattr(getattr(agent, "config", None), "structured", True):
        return None
    schemas = [schema_of(p) for p in prompts]
    return schemas if any(sc is not None for sc in schemas) else None


def lockstep_scope(s: RolloutSettings):
    return s.lockstep.scope if s.lockstep is not None else None


def join_generation(agents: Sequence, k: int, s: RolloutSettings, greedy: bool = False) -> None:
    """Nothing to generate on this rank: enter the same per-agent scopes as the ranks that do
    (``s.lockstep``), so their gathers complete. A no-op without sharding."""
    if s.lockstep is not None:
        s.team_generator(agents, [[] for _ in agents], k, greedy=greedy, batch_adapters=s.batch_adapters,
                         scope=s.lockstep.scope)

