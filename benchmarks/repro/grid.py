"""The grid: conditions (prompt-only baselines and trained teams), which tasks and seeds each runs, run keys.

Every trained condition takes the same optimiser steps on the same joint samples (``steps`` x ``batch_size`` items
x K samples per item at the first turn), so a row differs from another in the method only. The prompt-only
baselines are the reference code's (``OpenMLRL/LLM_Collab_Writing`` ``evals/``): one agent writing both parts, two
untrained agents in parallel, and a pipeline where the second agent sees the first one's output.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Condition:
    """One row kind of the table.

    ``algorithm`` None: prompt-only (no training). ``lora``: the agents are LoRA adapters on one shared base.
    ``critic``: ``"head"`` (IAC: a value head on each agent) or ``"model"`` (MAAC: one central critic model).
    """

    name: str
    label: str
    num_agents: int
    algorithm: str | None = None
    pipeline: bool = False
    lora: bool = False
    critic: str | None = None

    @property
    def trained(self) -> bool:
        return self.algorithm is not None


CONDITIONS = {c.name: c for c in [
    Condition("single", "single agent, prompt only", 1),
    Condition("parallel", "2 agents in parallel, prompt only", 2),
    Condition("pipeline", "2 agents, pipeline (2nd sees 1st), prompt only", 2, pipeline=True),
    Condition("grpo", "single agent, GRPO", 1, algorithm="grpo"),
    Condition("magrpo", "2 agents, MAGRPO", 2, algorithm="magrpo"),
    Condition("magrpo_lora", "2 LoRA agents on one base, MAGRPO", 2, algorithm="magrpo", lora=True),
    Condition("iac", "2 agents, IAC (value head per agent)", 2, algorithm="iac", critic="head"),
    Condition("maac", "2 agents, MAAC (central critic model)", 2, algorithm="maac", critic="model"),
    Condition("madpo", "2 agents, MADPO (online joint DPO)", 2, algorithm="madpo"),
]}

MANY_SEEDS = ("single", "parallel", "pipeline", "grpo", "magrpo")
"""Conditions run with every seed on TL;DR (the others: the first seed only)."""

CODING_CONDITIONS = ("single", "parallel", "pipeline", "grpo", "magrpo")
"""Conditions of the coding task (one seed): the baselines and the two methods the paper compares."""


@dataclass(frozen=True)
class RunSpec:
    task: str
    condition: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.task}/{self.condition}/seed{self.seed}"


@dataclass
class GridPlan:
    """Which tasks, conditions and seeds; ``order`` puts every condition's first seed before any second seed, so a
    partial grid already has one full table."""

    tasks: tuple[str, ...] = ("tldr", "coophumaneval")
    seeds: tuple[int, ...] = (0, 1, 2)
    conditions: tuple[str, ...] = tuple(CONDITIONS)
    many_seeds: tuple[str, ...] = MANY_SEEDS
    coding_conditions: tuple[str, ...] = CODING_CONDITIONS
    extra: dict = field(default_factory=dict)

    def runs(self) -> list[RunSpec]:
        out: list[RunSpec] = []
        for task in self.tasks:
            conds = [c for c in self.conditions if task == "tldr" or c in self.coding_conditions]
            for n, seed in enumerate(self.seeds):
                for c in conds:
                    if n == 0 or (task == "tldr" and c in self.many_seeds):
                        out.append(RunSpec(task, c, seed))
        return out


def parse_list(text: str | None, default: tuple, known=None, what: str = "value") -> tuple:
    """A comma-separated command-line list; unknown names are refused, naming the known ones."""
    if not text:
        return tuple(default)
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if known is not None:
        bad = [t for t in items if t not in known]
        if bad:
            raise SystemExit(f"unknown {what}(s) {bad}; known: {', '.join(known)}")
    return items
