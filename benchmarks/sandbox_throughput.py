"""Sandbox throughput: HumanEval canonical solutions evaluated per second.

Each program is the problem's prompt + canonical solution, with one test
snippet: the problem's test code followed by ``check(<entry_point>)``. The
cache is disabled so every job spawns its own child. Exits with status 1
unless every canonical solution passes.

    python benchmarks/sandbox_throughput.py [--data HumanEval.jsonl.gz] [--workers 1 2] [--limit N]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from comarl.sandbox import Sandbox, SandboxLimits, TestJob

DEFAULT_DATA = "/work/shared/data/humaneval/HumanEval.jsonl.gz"


def load_humaneval(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def humaneval_job(row: dict) -> TestJob:
    return TestJob(program=row["prompt"] + row["canonical_solution"],
                   tests=(row["test"] + f"\ncheck({row['entry_point']})\n",))


def measure(jobs: list[TestJob], workers: int) -> tuple[float, list]:
    """(seconds, reports) for one pass over ``jobs`` with a fresh, cache-less sandbox."""
    with Sandbox(SandboxLimits(), workers=workers, cache_size=0) as box:
        box.run_tests(jobs[:workers])  # warm-up: imports, page cache
        start = time.perf_counter()
        reports = box.run_tests(jobs)
        return time.perf_counter() - start, reports


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="HumanEval.jsonl(.gz)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--limit", type=int, default=None, help="use only the first N problems")
    args = ap.parse_args(argv)
    rows = load_humaneval(args.data)[:args.limit]
    jobs = [humaneval_job(r) for r in rows]
    print(f"{len(jobs)} HumanEval canonical solutions; {os.cpu_count()} CPUs; Python {platform.python_version()}; "
          f"running as {'root (privileges dropped)' if os.geteuid() == 0 else 'user'}\n")
    print("| workers | programs | seconds | programs/s | ms/program (per worker) | passed |")
    print("|---:|---:|---:|---:|---:|---:|")
    ok = True
    for w in args.workers:
        secs, reports = measure(jobs, w)
        passed = sum(r.passed == [True] for r in reports)
        print(f"| {w} | {len(jobs)} | {secs:.2f} | {len(jobs) / secs:.1f} | {1000 * secs * w / len(jobs):.0f} "
              f"| {passed}/{len(jobs)} |")
        for row, r in zip(rows, reports):
            if r.passed != [True]:
                ok = False
                print(f"  FAILED {row['task_id']}: {r.syntax_error or r.program_error or r.errors}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
