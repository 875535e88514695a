"""The page's coding section (issue 45): the one-seed CoopHumanEval rows, their paired differences over problems,
and why the comparison cannot resolve anything at 135M on this CPU: the smallest detectable difference now and with
164 problems, the problems no condition solves, and what the larger design would cost here."""
from __future__ import annotations

import math
import statistics

from . import stats
from .analysis import ORDERING, label
from .grid import CONDITIONS

TARGET = 0.05
"""The pass-rate difference a coding design should detect (issue 45)."""
GPU_PROBLEMS = 164
"""HumanEval's problems: the held-out set of the GPU script (benchmarks/gpu_coding_grid.sh)."""
HOLM_WORST = 5
"""Tests in the coding family: Holm's first step divides alpha by this many."""


def smallest_detectable_at(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest detectable paired difference with ``n`` problems whose differences have standard deviation
    ``sd``: :func:`stats.smallest_detectable` with s.e. ``sd / sqrt(n)`` and ``n - 1`` degrees of freedom."""
    return stats.smallest_detectable(sd / math.sqrt(n), n - 1, alpha, power)


def problems_needed(sd: float, target: float = TARGET, alpha: float = 0.05, power: float = 0.8) -> int:
    """The fewest problems whose smallest detectable difference is at most ``target``."""
    n = 2
    while smallest_detectable_at(sd, n, alpha, power) > target:
        n += 1
    return n


def coding_section(task: str, title: str, rows: list[dict]) -> list[str]:
    by = {r["condition"]: r for r in sorted(rows, key=lambda r: r["seed"]) if r["seed"] == min(x["seed"] for x in rows)}
    per = {c: r["heldout"]["pass_rate"]["per_item"] for c, r in by.items()}
    n = len(next(iter(per.values())))
    out = [f"## {title}: one seed, {n} held-out problem{'s' if n > 1 else ''}", "",
           f"One seed, {n} held-out problems, {_steps(by)}. Pass rate = the share of a problem's "
           f"tests passed after the last turn; ± = the s.e. over problems (one seed: seed variance not estimated).", "",
           "| condition | pass rate | reward (single max 2.1, team max 4) | code that compiles | all tests passed | "
           "wall time (s) |", "|---|---|---|---|---|---|"]
    for c in [c for c in CONDITIONS if c in by]:
        h = by[c]["heldout"]
        m = stats.crossed_mean({(0, str(i)): v for i, v in enumerate(per[c])})
        out.append(f"| {label(c)} | {m.mean:.3f} ± {m.se:.3f} | {h['reward']['mean']:.3f} | "
                   f"{h.get('compiled', {}).get('mean', float('nan')):.3f} | "
                   f"{h.get('passed_all', {}).get('mean', float('nan')):.3f} | {by[c]['wall_s']:.0f} |")
    out += ["", "Paired by problem (A - B, s.e. over problems; no verdict with one seed):", ""]
    sds = []
    for a, b in ORDERING:
        if a in per and b in per:
            d = [x - y for x, y in zip(per[a], per[b])]
            sd = statistics.stdev(d)
            sds.append(sd)
            out.append(f"- {label(a)} vs {label(b)}: {statistics.fmean(d):+.3f} ± {sd / math.sqrt(n):.3f}")
    floor = [i for i in range(n) if all(per[c][i] == 0 for c in per)]
    if not sds:
        return out + [""]
    sd = statistics.median(sds)
    now = smallest_detectable_at(sd, n)
    now_holm = smallest_detectable_at(sd, n, 0.05 / HOLM_WORST)
    big = smallest_detectable_at(sd, GPU_PROBLEMS)
    big_holm = smallest_detectable_at(sd, GPU_PROBLEMS, 0.05 / HOLM_WORST)
    need = problems_needed(sd)
    per_problem = {c: r["heldout"]["seconds"] / n for c, r in by.items() if "seconds" in r["heldout"]}
    # scoring grows with the problems, training does not: each condition's held-out scoring scaled to 164 problems
    # (a trained run scores twice: before, unless its twin's score is reused, and after), plus its training
    hours = sum(per_problem[c] * GPU_PROBLEMS * (2 if r["trained"] else 1) + r.get("train_s", 0.0)
                for c, r in by.items() if c in per_problem) / 3600
    biggest = max(abs(statistics.fmean([x - y for x, y in zip(per[a], per[b])])) for a, b in ORDERING
                  if a in per and b in per)
    if now <= TARGET:  # a design with enough problems (the GPU grid): say what it can detect, and what it lacks
        return out + ["", f"**Power.** The per-problem differences have a standard deviation of about {sd:.2f}; with "
                          f"{n} problems a one-sided test at 0.05 detects {now:.3f} with 80% power ({now_holm:.3f} at "
                          f"Holm's first step over {HOLM_WORST} tests). One seed: seed and run variance are not in "
                          "these standard errors, so no verdict is drawn; run more seeds for one.", ""]
    out += ["", "**Not informative at 135M on this CPU: why no verdict can come from it.**", "",
            f"- **Power.** The per-problem differences have a standard deviation of about {sd:.2f} (the median over "
            f"the pairs above). With {n} problems the smallest difference a one-sided test at 0.05 detects with 80% "
            f"power is {now:.3f} ({now_holm:.3f} at Holm's first step over {HOLM_WORST} tests); the largest "
            f"observed difference is {biggest:.3f}. Detecting {TARGET} takes about {need} problems at the same spread "
            f"(HumanEval's {GPU_PROBLEMS}: {big:.3f}, {big_holm:.3f} at Holm's first step), before any seed variance.",
            f"- **Floor.** {len(floor)} of {n} problems score 0 in every condition; the 135M model passes "
            f"{min(sum(v) / n for v in per.values()):.2f}-{max(sum(v) / n for v in per.values()):.2f} of the tests.",
            f"- **Cost.** Scoring took {min(per_problem.values()):.0f}-{max(per_problem.values()):.0f} s per problem "
            f"(4 samples, 2 turns; one seed, the shared 2-core machine), so the same five conditions scored on "
            f"{GPU_PROBLEMS} problems, with their 10 training steps, would take about {hours:.0f} h here for one "
            "seed, against the ~3 h of CPU the issue allows after the TL;DR grid. Not run.",
            "- **On a GPU.** `benchmarks/gpu_coding_grid.sh` runs this comparison on HumanEval's 164 problems "
            "(held out; trained on CoopHumanEval's problems that are not HumanEval's), sized for 10 minutes on one "
            "H100/H200; its first command checks that the model weights load and the sandbox runs a program. It has "
            "not run on a GPU yet (none was lent to this task); its dry run with the tiny model is in the test suite.",
            ""]
    return out


def _steps(by: dict[str, dict]) -> str:
    t = next((r for r in by.values() if r["trained"]), None)
    if t is None:
        return "no trained run yet"
    return f"trained runs {t['steps']} steps of {t['batch_size']} problems x K = {t['num_generations']}"
