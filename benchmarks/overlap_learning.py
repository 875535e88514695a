"""Does sampling while training learn as well? The SmolLM2 demo with ``max_staleness`` 0 and 1, seeds 0-2 (issue 41).

Runs ``smollm2_demo.py`` for every (seed, k) pair whose JSON is not in ``--dir`` yet, alternating k within each seed
(so both modes see the same machine), then prints one line per run and the comparison: the held-out score after
the same number of samples, paired by post within a seed (the score before training is the same greedy model for
both), its mean over seeds, and two standard errors: over the seeds' mean differences (the seed-to-seed spread)
and over the seed x post cells.

    python benchmarks/overlap_learning.py                         # 6 runs, ~8-10 min each on 2 idle cores
    python benchmarks/overlap_learning.py --report-only --dir runs/bench/overlap_learning
"""
from __future__ import annotations

import argparse
import json
import statistics as st
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from comarl.runs.heldout import HeldOutScore, mean_and_stderr, paired_gain  # noqa: E402


def run_missing(out: Path, seeds: list[int], ks: list[int], threads: int) -> None:
    for seed in seeds:
        for k in ks:
            path = out / f"overlap_{seed}_{k}.json"
            if path.exists():
                continue
            cmd = [sys.executable, str(ROOT / "benchmarks" / "smollm2_demo.py"), "--seed", str(seed),
                   "--max-staleness", str(k), "--threads", str(threads), "--output-dir", str(out / f"runs_{seed}_{k}"),
                   "--out", str(path)]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=False)  # exit 1 = gain below the demo's margin: still a result


def report(out: Path) -> str:
    rows = {}
    for f in sorted(out.glob("overlap_*_*.json")):
        seed, k = f.stem.split("_")[1:]
        rows[(int(seed), int(k))] = json.loads(f.read_text())
    lines = ["| seed | max_staleness | held-out before | after | gain ± s.e. (posts) | median s/step "
             "| load start -> end |", "|---:|---:|---:|---:|---:|---:|---|"]
    for (seed, k), d in sorted(rows.items()):
        lines.append(f"| {seed} | {k} | {d['heldout_before']['mean']:.3f} | {d['heldout_after']['mean']:.3f} | "
                     f"{d['heldout_gain']:+.3f} ± {d['heldout_gain_stderr']:.3f} | {st.median(d['step_s']):.1f} | "
                     f"{d['load_start'][0]:.1f} -> {d['load_end'][0]:.1f} |")
    seeds = sorted(s for s, k in rows if k == 0 and (s, 1) in rows)
    per_seed, cells = [], []
    lines.append("")
    for seed in seeds:
        k0, k1 = (HeldOutScore(tuple(rows[(seed, k)]["heldout_after"]["per_item"]), 1, True) for k in (0, 1))
        m, se = paired_gain(k0, k1)  # k=1 - k=0, post by post
        cells += [a - b for a, b in zip(k1.per_item, k0.per_item)]
        per_seed.append(m)
        lines.append(f"seed {seed}: after(k=1) - after(k=0) = {m:+.3f} ± {se:.3f} (paired by post, "
                     f"{len(k0.per_item)} posts)")
    if len(seeds) >= 2:
        g = {k: [rows[(s, k)]["heldout_gain"] for s in seeds] for k in (0, 1)}
        m, se_seeds = mean_and_stderr(per_seed)
        se_cells = mean_and_stderr(cells)[1]
        lines.append(f"mean gain over seeds {seeds}: k=0 {st.mean(g[0]):+.3f}, k=1 {st.mean(g[1]):+.3f}; "
                     f"difference k=1 - k=0 {m:+.3f}, s.e. over seeds {se_seeds:.3f}, over seed x post cells "
                     f"{se_cells:.3f}; within 2 s.e. of on-policy: {abs(m) <= 2 * max(se_seeds, se_cells)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="runs/bench/overlap_learning", help="where the runs and their JSON files go")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (the worker gets as many)")
    p.add_argument("--report-only", action="store_true", help="only print the comparison of the JSON files there")
    args = p.parse_args(argv)
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_missing(out, args.seeds, [0, 1], args.threads)
    print(report(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
