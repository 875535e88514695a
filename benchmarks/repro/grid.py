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


FOLD_CONDITIONS = ("single", "parallel", "pipeline", "grpo", "magrpo", "maac")
"""Grid v2 (``--folds``, issue 45): the prompt-only rows on every post, GRPO and MAGRPO on every fold and seed, MAAC
on every fold of the first seed (last, if time allows)."""
FOLD_ONE_SEED = ("maac",)


@dataclass(frozen=True)
class RunSpec:
    """One run. ``split``: "" the v1 split; ``all`` (v2 prompt-only: scored on every post); ``fold<k>`` (v2 trained:
    trained on the other folds' posts, scored on fold k's)."""

    task: str
    condition: str
    seed: int
    split: str = ""

    @property
    def key(self) -> str:
        return f"{self.task}/{self.condition}/seed{self.seed}" + (f"/{self.split}" if self.split else "")


@dataclass
class GridPlan:
    """Which tasks, conditions and seeds; ``order`` puts every condition's first seed before any second seed, so a
    partial grid already has one full table."""

    tasks: tuple[str, ...] = ("tldr", "coophumaneval")
    seeds: tuple[int, ...] = (0, 1, 2)
    conditions: tuple[str, ...] = tuple(CONDITIONS)
    many_seeds: tuple[str, ...] = MANY_SEEDS
    coding_conditions: tuple[str, ...] = CODING_CONDITIONS
    folds: int = 0
    """0: the v1 grid. k > 0: grid v2 on TL;DR alone (:meth:`fold_runs`)."""
    extra: dict = field(default_factory=dict)

    def runs(self) -> list[RunSpec]:
        if self.folds:
            return self.fold_runs()
        out: list[RunSpec] = []
        for task in self.tasks:
            conds = [c for c in self.conditions if task == "tldr" or c in self.coding_conditions]
            for n, seed in enumerate(self.seeds):
                for c in conds:
                    if n == 0 or (task == "tldr" and c in self.many_seeds):
                        out.append(RunSpec(task, c, seed))
        return out


    def fold_runs(self) -> list[RunSpec]:
        """Grid v2: every prompt-only condition on all posts for every seed first (cheap, and every trained run's
        comparison needs them), then GRPO and MAGRPO seed by seed, fold by fold (so a partial grid holds whole
        seeds), then MAAC on the first seed's folds. Conditions outside :data:`FOLD_CONDITIONS` are refused."""
        if "tldr" not in self.tasks or len(self.tasks) != 1:
            raise SystemExit(f"--folds: grid v2 is TL;DR only (got tasks {', '.join(self.tasks)}); pass --tasks tldr")
        bad = [c for c in self.conditions if c not in FOLD_CONDITIONS]
        if bad and self.conditions != tuple(CONDITIONS):
            raise SystemExit(f"--folds: condition(s) {bad} are not in grid v2; known: {', '.join(FOLD_CONDITIONS)}")
        conds = [c for c in FOLD_CONDITIONS if c in self.conditions]
        base = [c for c in conds if not CONDITIONS[c].trained]
        trained = [c for c in conds if CONDITIONS[c].trained and c not in FOLD_ONE_SEED]
        out = [RunSpec("tldr", c, s, "all") for s in self.seeds for c in base]
        out += [RunSpec("tldr", c, s, f"fold{f}") for s in self.seeds for f in range(self.folds) for c in trained]
        out += [RunSpec("tldr", c, self.seeds[0], f"fold{f}") for c in conds if c in FOLD_ONE_SEED
                for f in range(self.folds)]
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
