"""Reproduce the MAGRPO paper's comparisons at small scale: a resumable grid of task x condition x seed.

Each run trains a team (or not: the prompt-only baselines), scores it on held-out items it never trained on, and
appends one row to a JSONL results file as it finishes: task, condition, seed, the held-out score with its standard
error (over items) before and after training, training samples, wall time, samples per second, peak memory (RSS)
and the load average at its start and end. Runs already in the file are skipped, so the grid can be stopped and
resumed at any time; a killed run loses only itself. After every run (and with ``render``) the file is rendered
into ``docs/results.md``: tables of the mean and standard error over seeds, and plots of the held-out score against
training samples (``docs/results_plots/*.png``).

    python benchmarks/reproduce.py run                        # the whole grid, SmolLM2-135M-Instruct, CPU
    python benchmarks/reproduce.py run --results /work/repro-results/results.jsonl --logs /work/repro-results/logs
    python benchmarks/reproduce.py render --results benchmarks/results/results.jsonl
    python benchmarks/reproduce.py run --model tiny --steps 2 --results /tmp/r.jsonl --doc /tmp/results.md  # smoke
    python benchmarks/reproduce.py run --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --steps 100  # a GPU
    # sampling with vLLM (docs/vllm.md): the vLLM venv's python; runs already in the file (hf) stay done
    .venv-vllm/bin/python benchmarks/reproduce.py run --generator vllm --results benchmarks/results/results.jsonl

``--generator vllm`` samples the training rollouts (``train.hardware.generator: vllm``, engines synced after each
step) and every held-out score with vLLM engines in the run's process; each row records its ``generator``. LoRA
agents on a CPU keep hf (vLLM's CPU LoRA is slower for short prompts; the row's ``generator_note`` says so). A run's
key (task/condition/seed) does not name the generator: a run done with either counts as done.

Every run is its own process (its peak RSS is its own; a crash stops only that run); ``--in-process`` runs them in
this process instead (the test: faster, but RSS is then the process's peak so far). See docs/results.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(ROOT) not in sys.path:  # this checkout's comarl, whichever python runs it (a venv may install another copy)
    sys.path.insert(1, str(ROOT))

from repro.generators import GENERATORS  # noqa: E402
from repro.grid import CONDITIONS, GridPlan, RunSpec, parse_list  # noqa: E402
from repro.results import append_row, done_keys, read_rows  # noqa: E402
from repro.run import CODING_TASKS, RunOptions  # noqa: E402
from repro.tasks import TLDR_FOLDS  # noqa: E402

DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "results.jsonl"
DEFAULT_DOC = ROOT / "docs" / "results.md"
DEFAULT_PLOTS = ROOT / "docs" / "results_plots"  # inside docs/: the documentation site publishes them


def _options(a) -> RunOptions:
    keys = {f.name for f in fields(RunOptions)}
    return RunOptions(**{k: v for k, v in vars(a).items() if k in keys and v is not None})


def _add_run_options(p: argparse.ArgumentParser) -> None:
    d = RunOptions()
    p.add_argument("--model", default=d.model, help="smollm2 | tiny | hub id | local folder (default smollm2)")
    p.add_argument("--steps", type=int, default=d.steps, help=f"optimiser steps per trained run ({d.steps})")
    p.add_argument("--eval-every", dest="eval_every", type=int, default=d.eval_every,
                   help=f"held-out evaluation inside training every N steps, 0 = before/after only ({d.eval_every})")
    p.add_argument("--heldout-samples", dest="heldout_samples", type=int, default=d.heldout_samples,
                   help=f"samples per held-out item and agent ({d.heldout_samples})")
    p.add_argument("--device", default=d.device)
    p.add_argument("--data-dir", dest="data_dir", default=d.data_dir,
                   help="the coding benchmark files (../shared/data)")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=None)
    p.add_argument("--coding-train-limit", dest="coding_train_limit", type=int, default=None)
    p.add_argument("--coding-heldout", dest="coding_heldout", type=int, default=d.coding_heldout)
    p.add_argument("--sandbox-workers", dest="sandbox_workers", type=int, default=d.sandbox_workers,
                   help=f"coding: programs the sandbox runs at once ({d.sandbox_workers})")
    p.add_argument("--heldout-limit", dest="heldout_limit", type=int, default=None,
                   help="score only the first N held-out items of each task (quick checks)")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=None, help="items per step (default per task)")
    p.add_argument("--num-generations", dest="num_generations", type=int, default=None, help="K (default per task)")
    p.add_argument("--lr", type=float, default=None, help="full fine-tuning learning rate (default per model)")
    p.add_argument("--threads", type=int, default=d.threads,
                   help=f"torch CPU threads per run, 0 = torch's default ({d.threads}: see RunOptions.threads)")
    p.add_argument("--generator", default=d.generator, choices=GENERATORS,
                   help="who samples rollouts and held-out scores: hf (default) | vllm (run with the vLLM venv's "
                        "python; LoRA agents on a CPU keep hf)")
    p.add_argument("--vllm-kv-gib", dest="vllm_kv_cache_gib", type=float, default=d.vllm_kv_cache_gib,
                   help=f"--generator vllm: KV cache per engine in GiB ({d.vllm_kv_cache_gib})")
    p.add_argument("--tiny-hidden-size", dest="tiny_hidden_size", type=int, default=None,
                   help="--model tiny: hidden size of the random model (128 for --generator vllm)")
    p.add_argument("--model-path", dest="model_path", default=None, help=argparse.SUPPRESS)


def run_grid(a) -> int:
    if a.folds not in (0, TLDR_FOLDS):
        raise SystemExit(f"--folds: 0 (the v1 grid) or {TLDR_FOLDS} (grid v2), got {a.folds}")
    default_tasks = ("tldr",) if a.folds else GridPlan.tasks
    plan = GridPlan(tasks=parse_list(a.tasks, default_tasks, ("tldr", *CODING_TASKS), "task"),
                    seeds=tuple(int(s) for s in parse_list(a.seeds, GridPlan.seeds)),
                    conditions=parse_list(a.conditions, GridPlan.conditions, tuple(CONDITIONS), "condition"),
                    folds=a.folds)
    opts = _options(a)
    if opts.model_path is None:
        from repro.models import prepare_model

        opts.model_path = prepare_model(opts.model, Path(a.results).parent / "models")
    runs = plan.runs()
    todo = [r for r in runs if r.key not in done_keys(a.results)]
    print(f"grid: {len(runs)} runs, {len(runs) - len(todo)} already in {a.results}, {len(todo)} to go", flush=True)
    failed = []
    for n, spec in enumerate(todo, start=1):
        if spec.key in done_keys(a.results):  # another invocation finished it meanwhile
            continue
        print(f"[{time.strftime('%H:%M:%S')}] run {n}/{len(todo)}: {spec.key}", flush=True)
        ok = _run_in_process(spec, opts, a.results) if a.in_process else _run_child(spec, opts, a)
        if not ok:
            failed.append(spec.key)
        _render_safely(a)
    if not todo:
        _render_safely(a)
    print(f"done; failed: {failed or 'none'}", flush=True)
    return 1 if failed else 0


def _render_safely(a) -> None:
    """Render the page; a failure is reported and the grid goes on (its rows are what matter)."""
    from repro.render import render

    try:
        render(read_rows(a.results), a.doc, a.plots, results_path="" if a.folds else a.results,
               v2_path=a.results if a.folds else "")
    except Exception as e:  # noqa: BLE001 - the next run must not wait for the page
        print(f"  render failed ({type(e).__name__}: {e}); the rows are kept, render again later", flush=True)


def _twin(spec: RunSpec, results: str) -> dict | None:
    from repro.run import untrained_twin

    key = untrained_twin(spec)
    return next((r for r in read_rows(results) if r["key"] == key), None) if key else None


def _run_in_process(spec: RunSpec, opts: RunOptions, results: str) -> bool:
    from repro.run import execute

    row = execute(spec, opts, _twin(spec, results))
    row["rss_scope"] = "process"  # the grid's process, all runs so far
    append_row(results, row)
    _print_row(row)
    return True


def _run_child(spec: RunSpec, opts: RunOptions, a) -> bool:
    cmd = [sys.executable, str(Path(__file__).resolve()), "one", "--results", str(a.results),
           "--task", spec.task, "--condition", spec.condition, "--seed", str(spec.seed), "--split", spec.split,
           "--options", json.dumps(asdict(opts))]
    log = None
    if a.logs:
        Path(a.logs).mkdir(parents=True, exist_ok=True)
        log = open(Path(a.logs) / (spec.key.replace("/", "_") + ".log"), "a")
    try:
        env = dict(os.environ, **({"OMP_NUM_THREADS": str(opts.threads)} if opts.threads else {}))
        rc = subprocess.run(cmd, stdout=log or None, stderr=subprocess.STDOUT if log else None, env=env).returncode
    finally:
        if log:
            log.close()
    if rc != 0:
        print(f"  {spec.key} failed (exit {rc}){'; see ' + log.name if log else ''}", flush=True)
        return False
    rows = [r for r in read_rows(a.results) if r["key"] == spec.key]
    if rows:
        _print_row(rows[0])
    return bool(rows)


def run_one(a) -> int:
    from repro.run import execute

    opts = RunOptions(**json.loads(a.options))
    spec = RunSpec(a.task, a.condition, a.seed, a.split)
    row = execute(spec, opts, _twin(spec, a.results))
    row["rss_scope"] = "run"
    append_row(a.results, row)
    return 0


def run_preflight(a) -> int:
    """Exit 0 and print ``PREFLIGHT {...}`` when every precondition holds; else exit 3 naming the first that
    does not (``repro.preflight``)."""
    from repro.models import prepare_model
    from repro.preflight import PreflightError, preflight

    try:
        try:  # smollm2: converted once into the folder the grid's runs load it from (beside the results file)
            path = a.model_path or prepare_model(a.model, Path(a.results).parent / "models")
        except Exception as e:  # noqa: BLE001 - the package or its weights missing on this machine
            raise PreflightError(f"model: {a.model!r} could not be prepared: {type(e).__name__}: {e}") from e
        found = preflight(a.model, a.device, a.data_dir, path, a.sandbox_workers)
    except PreflightError as e:
        print(f"preflight failed: {e}", file=sys.stderr, flush=True)
        return 3
    print("PREFLIGHT " + json.dumps(found), flush=True)
    return 0


def _print_row(row: dict) -> None:
    h = row["heldout"]
    head = row["headline"]
    s = h.get(head, h["reward"])
    print(f"  {row['key']}: held-out {head} {s['mean']:.3f} ± {s['stderr']:.3f}, {row['wall_s']:.0f} s, "
          f"peak RSS {row['peak_rss_mb']:.0f} MB, load {row['load_start'][0]} -> {row['load_end'][0]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run (or resume) the grid, rendering after every run")
    r.add_argument("--results", default=str(DEFAULT_RESULTS), help="JSONL results file (appended, resumed)")
    r.add_argument("--doc", default=str(DEFAULT_DOC), help="markdown page to render")
    r.add_argument("--plots", default=str(DEFAULT_PLOTS), help="folder for the plots")
    r.add_argument("--logs", default=None, help="folder for one log file per run (default: this terminal)")
    r.add_argument("--tasks", default=None, help="comma list: tldr,coophumaneval (default both), humaneval, "
                   "humaneval164 (every HumanEval problem held out: the GPU coding grid)")
    r.add_argument("--conditions", default=None, help=f"comma list of {', '.join(CONDITIONS)}")
    r.add_argument("--seeds", default=None, help="comma list (default 0,1,2)")
    r.add_argument("--folds", type=int, default=0,
                   help="grid v2 (TL;DR only): every post held out once per seed over this many folds; the "
                        "prompt-only rows scored on all posts (0: the v1 grid)")
    r.add_argument("--in-process", dest="in_process", action="store_true", help="no child process per run")
    _add_run_options(r)
    o = sub.add_parser("one", help=argparse.SUPPRESS)
    o.add_argument("--results", required=True)
    o.add_argument("--task", required=True)
    o.add_argument("--condition", required=True)
    o.add_argument("--seed", type=int, required=True)
    o.add_argument("--split", default="")
    o.add_argument("--options", required=True)
    f = sub.add_parser("preflight", help="check the GPU coding grid's preconditions (device, data, model, sandbox)")
    f.add_argument("--model", default="smollm2")
    f.add_argument("--model-path", dest="model_path", default=None)
    f.add_argument("--device", default="cuda")
    f.add_argument("--data-dir", dest="data_dir", default=RunOptions().data_dir)
    f.add_argument("--sandbox-workers", dest="sandbox_workers", type=int, default=2)
    f.add_argument("--results", default=str(DEFAULT_RESULTS), help="the grid's results file (its models/ folder "
                   "beside it receives the converted SmolLM2)")
    d = sub.add_parser("render", help="render the results file into the markdown page and plots")
    d.add_argument("--results", default=str(DEFAULT_RESULTS))
    d.add_argument("--doc", default=str(DEFAULT_DOC))
    d.add_argument("--plots", default=str(DEFAULT_PLOTS))
    d.add_argument("--v2", default=None, help="grid v2's results file, rendered with --results (grid v1's)")
    a = p.parse_args(argv)
    if a.cmd == "run":
        return run_grid(a)
    if a.cmd == "one":
        return run_one(a)
    if a.cmd == "preflight":
        return run_preflight(a)
    from repro.render import render

    rows = read_rows(a.results) + (read_rows(a.v2) if a.v2 else [])
    render(rows, a.doc, a.plots, results_path=a.results, v2_path=a.v2 or "")
    print(f"wrote {a.doc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
