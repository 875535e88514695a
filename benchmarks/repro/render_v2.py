"""The page's grid v2 sections (issue 45): the paired verdicts with the three scorings side by side, the TL;DR
table per condition with its length columns, what training changed in the completions' lengths, and the plot."""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from . import analysis, stats
from .analysis import MINIMUM, CondTable, Verdict, label
from .grid import CONDITIONS
from .rescore import SCORING_LABELS, SCORING_SHORT, SCORINGS, lengths

SE_NAME = "s.e. of the crossed post x seed model"
"""The one standard error of the page: posts, seeds and training runs as random effects (``stats`` docstring)."""

PLANNED = 30
"""Grid v2's runs: 3 prompt-only conditions x 3 seeds, GRPO and MAGRPO x 3 folds x 3 seeds, MAAC x 3 folds."""


def _pm(c: stats.Crossed | None, d: int = 3) -> str:
    if c is None:
        return "-"
    return f"{c.mean:.{d}f} ± {c.se:.{d}f}" + ("" if c.seed_term else " †")


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def v2_sections(rows: list[dict], doc: Path, plots: Path) -> list[str]:
    """Markdown lines of every grid v2 section (``rows``: the v2 rows)."""
    all_posts = {pid for r in rows if r.get("split") == "all" for pid in r["heldout_ids"]}
    all_posts |= {pid for r in rows for pid in r["heldout_ids"]}
    fold_of = analysis.fold_of_post(rows)
    tables = analysis.condition_tables(rows, all_posts)
    verdicts = analysis.verdicts(tables, fold_of, analysis.ORDERING + analysis.ONE_SEED_PAIRS)
    out = verdict_section(rows, tables, verdicts, len(all_posts))
    out += condition_section(tables, fold_of, len(all_posts))
    out += length_words(tables)
    png = plots / "tldr_v2_heldout.png"
    plot_v2(tables, png)
    out += ["", f"![TL;DR grid v2: held-out reward against training samples]({_rel(png, doc)})", ""]
    return out


def verdict_section(rows: list[dict], tables: dict[str, CondTable], verdicts: list[Verdict], posts: int) -> list[str]:
    n_tests = sum(1 for v in verdicts if v.p_holm is not None)
    out = ["## Does the paper's ordering hold? TL;DR, grid v2 (every post held out once per seed)", "",
           f"Runs done: {len(rows)} of {PLANNED}" + ("; the grid is still running, and the verdicts below use the "
                                                     "whole seeds done so far." if len(rows) < PLANNED else "."), ""]
    if not verdicts:
        return out + ["No pair of the paper's ordering has both conditions on a whole seed yet.", ""]
    out += [
        f"Each line compares two conditions on the same {posts} posts and seeds, paired by post and seed (a trained "
        "condition's seed is its three fold runs; each post scored on 4 samples). **Difference** = A - B; **s.e.** = "
        f"the {SE_NAME} (posts, seeds and training runs as random effects; degrees of freedom by Satterthwaite); "
        "**95% interval** from Student's t; **p** = one-sided, in the paper's direction (A > B), Holm-corrected over "
        f"this task's {n_tests} tests. **Holds** only when that p is below {analysis.ALPHA}, the interval excludes 0 "
        f"and the difference is at least the minimum fixed before the rows came in ({MINIMUM['reward']} reward, "
        f"{MINIMUM['rouge']} ROUGE-L); **reversed** when the interval lies below 0 by at least that minimum.", "",
        "The three scorings (how each is computed: Set-up): "
        + "; ".join(f"**{SCORING_SHORT[s]}** = {SCORING_LABELS[s]}" for s in SCORINGS) + ".", "",
        "| A (the paper: A > B) | B | scoring | A | B | A - B | s.e. | df | 95% interval | p (one-sided, Holm) | "
        "verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        c = v.comparison
        assert c is not None
        ma, mb = _common_means(tables, v)
        out.append(f"| {label(v.better)} | {label(v.worse)} | {SCORING_SHORT[v.scoring]} | {ma:.3f} | {mb:.3f} | "
                   f"{c.diff:+.3f} | {c.se:.3f} | {c.df:.1f} | [{c.lo:+.3f}, {c.hi:+.3f}] | {_p(v.p_holm)} | "
                   f"**{v.word}** |")
    seeds = sorted({s for v in verdicts if v.comparison for s in _common_seeds(tables, v)})
    out += ["", f"Seeds in these comparisons: {', '.join(map(str, seeds))}." + _partial_note(tables), ""]
    out += _in_words(verdicts)
    return out


def _common_seeds(tables: dict[str, CondTable], v: Verdict) -> set[int]:
    return set(tables[v.better].seeds) & set(tables[v.worse].seeds)


def _common_means(tables: dict[str, CondTable], v: Verdict) -> tuple[float, float]:
    a, b = tables[v.better].cells[v.scoring], tables[v.worse].cells[v.scoring]
    keys = set(a) & set(b)
    return sum(a[k] for k in keys) / len(keys), sum(b[k] for k in keys) / len(keys)


def _partial_note(tables: dict[str, CondTable]) -> str:
    parts = [f"{label(c)} seed {s} ({n} of 3 folds)" for c, t in tables.items() for s, n in sorted(t.partial.items())]
    return f" Not yet counted (a seed counts when all its folds are in): {'; '.join(parts)}." if parts else ""


def _in_words(verdicts: list[Verdict]) -> list[str]:
    by: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for v in verdicts:
        by[(v.better, v.worse)][v.scoring] = v.word.split(" (")[0]
    out = ["In words, per pair (reward with the fallback split / with `---` required / ROUGE-L):", ""]
    for (a, b), words in by.items():
        out.append(f"- {label(a)} vs {label(b)}: " + " / ".join(words.get(s, "-") for s in SCORINGS) + ".")
    single = [v for v in verdicts if "single" in (v.better, v.worse) and v.scoring == "reward"]
    if single:
        out += ["", "Any verdict against the single writer that changes between the first two scorings is an artefact "
                    "of where its one response is split, not evidence about team training: the reference's fallback "
                    "split cuts an unmarked response at a 1:2.5 length ratio, inside the length band the reward pays "
                    "for, and requiring the `---` line takes that away. ROUGE-L of the summary sentence needs no split "
                    "at all."]
    return out + [""]


STOPPED = {"tldr/grpo/seed1/fold2": "its wall time (1970 s) includes a 22-minute stop of the grid (SIGSTOP, "
                                   "19:24:45-19:46:30, for idle step-time measurements: benchmarks/README.md); its "
                                   "s/step (52) is in line with its siblings', so the stop fell outside its steps"}
"""Grid v2 rows whose wall time includes a stop of the grid, with what the page says about it."""


def condition_section(tables: dict[str, CondTable], fold_of: dict[str, int], posts: int) -> list[str]:
    out = ["## TL;DR grid v2: every condition", "",
           f"Mean over the whole seeds' (seed, post) cells ± the {SE_NAME} († one seed: over posts only, seed and run "
           "variance not estimated). Lengths: new tokens per completion (EOS not counted) and the share of completions "
           "that hit the token cap, per agent (agent 1 / agent 2), over every held-out sample of the row's runs.", "",
           "| condition | whole seeds | runs | " + " | ".join(SCORING_SHORT[s] for s in SCORINGS)
           + " | `---` written | tokens per completion (cap) | at the token cap | s/step | wall per run (s) | "
             "peak RSS (MB) | load start -> end |", "|" + "---|" * 13]
    for cond in [c for c in CONDITIONS if c in tables]:
        t = tables[cond]
        sums = [analysis.summary(t, s, fold_of) for s in SCORINGS]
        ln = lengths(t.rows)
        steps = sorted(r["s_per_step"] for r in t.rows if r.get("s_per_step"))
        walls = [r["wall_s"] for r in t.rows]
        loads = [x for r in t.rows for x in (r["load_start"][0], r["load_end"][0])]
        out.append(
            f"| {label(cond)} | {_seeds_cell(t)} | {len(t.rows)} | "
            + " | ".join(_pm(s) for s in sums)
            + f" | {_share(ln.get('marker_found'))} | "
            + (" / ".join(f"{x:.1f}" for x in ln["mean_tokens"]) + f" ({ln['cap']})" if ln else "-") + " | "
            + (" / ".join(f"{100 * x:.0f}%" for x in ln["capped"]) if ln else "-") + " | "
            + (f"{steps[len(steps) // 2]:.0f}" + (f" ({steps[0]:.0f}-{steps[-1]:.0f})" if len(steps) > 1 else "")
               if steps else "-")
            + f" | {min(walls):.0f}" + (f"-{max(walls):.0f}" if len(walls) > 1 else "")
            + f" | {max(r['peak_rss_mb'] for r in t.rows):.0f} | {min(loads):.1f}-{max(loads):.1f} |")
    keys = {r["key"] for t in tables.values() for r in t.rows}
    stops = "".join(f" {k}: {v}." for k, v in STOPPED.items() if k in keys)
    note = ("s/step: the median over the condition's runs (range); the steps' own time, without the held-out "
            "evaluations. Loads: the 1-minute load average at the runs' starts and ends.")
    return out + ["", note + stops, ""]


def _seeds_cell(t: CondTable) -> str:
    whole = ", ".join(map(str, t.seeds))
    part = "; ".join(f"seed {s}: {n} of 3 folds, not counted" for s, n in sorted(t.partial.items()))
    return "; ".join(x for x in (whole, part) if x) or "-"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def length_words(tables: dict[str, CondTable]) -> list[str]:
    """What training changed in the completions' lengths, trained condition against its untrained twin."""
    out = []
    for trained, twin in (("grpo", "single"), ("magrpo", "parallel"), ("maac", "parallel")):
        if trained not in tables or twin not in tables:
            continue
        a, b = lengths(tables[trained].rows), lengths(tables[twin].rows)
        if not a or not b:
            continue
        per = [f"agent {j + 1} {b['mean_tokens'][j]:.0f} -> {a['mean_tokens'][j]:.0f} tokens, "
               f"{100 * b['capped'][j]:.0f}% -> {100 * a['capped'][j]:.0f}% at the cap"
               for j in range(len(a["mean_tokens"]))]
        out.append(f"- {label(trained)} against the same agents untrained ({label(twin)}), cap {a['cap']} tokens: "
                   + "; ".join(per) + ".")
    if not out:
        return []
    return ["**What training changed in the completions' lengths.** The paper reward pays for a length ratio "
            "between the two parts and for a longer, more varied second part (docs/writing.md), so a policy can "
            "raise it by writing longer without summarising better; compare these lines with the ROUGE-L column:",
            ""] + out + [""]


def plot_v2(tables: dict[str, CondTable], path: Path) -> None:
    """Held-out reward (fallback split) against training samples: each trained condition's mean curve over its
    runs (all folds and seeds, so over every post), each prompt-only condition a horizontal line; the legend sits
    outside the axes, each condition its own colour, marker and line style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.8))
    colors = plt.get_cmap("tab10").colors
    markers, styles = "osD^vP*X", ["-", "--", ":", "-."]
    for n, cond in enumerate([c for c in CONDITIONS if c in tables]):
        t = tables[cond]
        color, marker, style = colors[n % 10], markers[n % len(markers)], styles[n % len(styles)]
        name = f"{label(cond)} ({len(t.rows)} run{'s' if len(t.rows) > 1 else ''})"
        if not CONDITIONS[cond].trained:
            vals = [r["heldout"]["reward"]["mean"] for r in t.rows]
            ax.axhline(sum(vals) / len(vals), color=color, ls=style, lw=1.5, label=name)
            continue
        points: dict[int, list[float]] = defaultdict(list)
        for r in t.rows:
            scored = {p["samples"] for p in r["curve"] if p.get("score")}
            for p in r["curve"]:
                if p.get("score"):
                    points[p["samples"]].append(p["score"]["reward"]["mean"])
                elif "reward/mean" in p.get("metrics", {}) and p["samples"] not in scored:
                    points[p["samples"]].append(p["metrics"]["reward/mean"])  # the trainer's own evaluation
        xs = sorted(points)
        ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], ls=style, marker=marker, color=color, ms=5,
                label=name)
    ax.set_xlabel("training samples (joint samples at the first turn: items x K)")
    ax.set_ylabel("held-out reward (0-3, fallback split)")
    ax.set_title("TL;DR grid v2: held-out reward vs training samples (mean over runs)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _rel(target: Path, doc: Path) -> str:
    return os.path.relpath(target, doc.parent).replace(os.sep, "/")
