"""From results rows to the page's paired verdicts (issue 45): score tables per (seed, post), comparisons in the
paper's direction with Holm's correction, and per-condition summaries. The statistics are :mod:`stats`'s.

A condition's table holds, for each seed it has whole (every post scored), the mean score of each post over its
sampled completions. Grid v2's trained conditions assemble a seed's table from its three fold runs; a seed with a
fold still missing is left out (and named). Prompt-only rows hold every post in one run.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from . import stats
from .grid import CONDITIONS
from .rescore import SCORINGS, row_cells
from .tasks import TLDR_FOLDS

ORDERING = [("magrpo", "parallel"), ("magrpo", "pipeline"), ("magrpo", "single"), ("magrpo", "grpo"),
            ("grpo", "single")]
"""The paper's claims, as pairs (better, worse): a trained team beats untrained teams and single-agent training."""

ONE_SEED_PAIRS = [("maac", "parallel")]
"""Shown beside the ordering with their paired difference; MAAC runs one seed, so they never enter the tests."""

MINIMUM = {"reward": 0.1, "marker": 0.1, "rouge": 0.03, "pass_rate": 0.05}
"""The smallest difference a verdict may call *holds*, fixed before grid v2's rows came in (issue 45): 0.1 of the
0-3 reward (a thirtieth of its range), 0.03 ROUGE-L F1 (about the same share of its range), 0.05 pass rate (the
coding design's target)."""

ALPHA = 0.05
"""The level of the one-sided tests, after Holm's correction over each task's tests."""


def is_v2(row: dict) -> bool:
    return bool(row.get("split"))


def fold_of_post(rows: list[dict]) -> dict[str, int]:
    """Post -> fold: from the fold runs' held-out ids where there are any, else the grid's rule (post i of the
    all-posts rows in fold i % 3)."""
    out: dict[str, int] = {}
    for r in rows:
        if str(r.get("split", "")).startswith("fold"):
            for pid in r["heldout_ids"]:
                out[pid] = int(r["split"][4:])
    for r in rows:
        if r.get("split") == "all":
            for i, pid in enumerate(r["heldout_ids"]):
                out.setdefault(pid, i % TLDR_FOLDS)
    return out


@dataclass
class CondTable:
    """One condition's ``{scoring: {(seed, post): score}}`` over its whole seeds, and the seeds left out."""

    cells: dict[str, dict[tuple[int, str], float]]
    seeds: list[int]
    partial: dict[int, int]
    """seed -> fold runs done, for seeds not yet whole."""
    rows: list[dict]


def condition_tables(rows: list[dict], all_posts: set[str]) -> dict[str, CondTable]:
    """Every condition's table (v2 rows with kept samples); a seed counts once it covers ``all_posts``."""
    by: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get("records"):
            by[r["condition"]][r["seed"]].append(r)
    out = {}
    for cond, seeds in by.items():
        cells: dict[str, dict[tuple[int, str], float]] = {s: {} for s in SCORINGS}
        whole, partial, used = [], {}, []
        for seed, rs in sorted(seeds.items()):
            covered = {pid for r in rs for pid in r["heldout_ids"]}
            if covered != all_posts:
                partial[seed] = len(rs)
                continue
            whole.append(seed)
            used += rs
            for r in rs:
                for name, per in row_cells(r).items():
                    for pid, v in per.items():
                        cells[name][(seed, pid)] = v
        out[cond] = CondTable(cells, whole, partial, used or [r for rs in seeds.values() for r in rs])
    return out


@dataclass
class Verdict:
    better: str
    worse: str
    scoring: str
    comparison: stats.Comparison | None
    p_holm: float | None
    word: str


def verdicts(tables: dict[str, CondTable], fold_of: dict[str, int], ordering=ORDERING) -> list[Verdict]:
    """Every (pair of :data:`ORDERING`, scoring) whose two conditions share at least two whole seeds, tested one-sided
    in the paper's direction; Holm's correction runs over all of them together (the task's family of tests).
    A pair with one shared seed gets its difference and a standard error over posts only, and no verdict."""
    out: list[Verdict] = []
    for a, b in ordering:
        if a not in tables or b not in tables:
            continue
        for scoring in SCORINGS:
            ta, tb = tables[a].cells[scoring], tables[b].cells[scoring]
            if not set(ta) & set(tb):
                continue
            c = stats.compare(ta, tb, fold_of)
            out.append(Verdict(a, b, scoring, c, None, ""))
    tested = [v for v in out if v.comparison and v.comparison.seed_term]
    for v, p in zip(tested, stats.holm([v.comparison.p for v in tested if v.comparison])):
        v.p_holm = p
        v.word = stats.verdict(v.comparison, p, MINIMUM[v.scoring], ALPHA)  # type: ignore[arg-type]
    for v in out:
        if v.p_holm is None:
            v.word = "no verdict (one seed: seed and run variance not estimated)"
    return out


def summary(table: CondTable, scoring: str, fold_of: dict[str, int]) -> stats.Crossed | None:
    cells = table.cells[scoring]
    return stats.crossed_mean(cells, fold_of) if cells else None


def label(cond: str) -> str:
    return CONDITIONS[cond].label
