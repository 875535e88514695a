"""Sandbox throughput: HumanEval canonical solutions evaluated per second.

Each program is the problem's prompt + canonical solution, with one test
snippet: the problem's test code followed by ``check(<entry_point>)``. The
cache is disabled so every job spawns its own child. Exits with status 1
unless every canonical solution passes.

``--compare DIR`` also times another checkout of comarl (e.g. ``git worktree
add /tmp/comarl-old <commit>``), alternating old and new ``--rounds`` times in
one run so both see the same machine load, and prints new/old.

    python benchmarks/sandbox_throughput.py [--data HumanEval.jsonl.gz] [--workers 1 2] [--limit N]
                                            [--compare DIR --rounds 3]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
from comarl.sandbox import Sandbox, SandboxLimits, TestJob  # noqa: E402

# the shared data folder sits next to the checkout (as tests/conftest.py's shared_data fixture finds it)
DEFAULT_DATA = str(REPO.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz")


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


_ONE_PASS = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from comarl.sandbox import Sandbox, SandboxLimits, TestJob
rows = [json.loads(l) for l in open(sys.argv[2])]
jobs = [TestJob(r["prompt"] + r["canonical_solution"], (r["test"] + "\\ncheck(" + r["entry_point"] + ")\\n",))
        for r in rows]
with Sandbox(SandboxLimits(), workers=int(sys.argv[3]), cache_size=0) as box:
    box.run_tests(jobs[:2])
    t = time.perf_counter()
    reports = box.run_tests(jobs)
    print(json.dumps([time.perf_counter() - t, sum(r.passed == [True] for r in reports)]))
"""


def compare(rows: list[dict], old: str, workers: int, rounds: int) -> int:
    """Alternate this checkout and ``old`` (each pass in a fresh interpreter); print programs/s and new/old."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    rates: dict[str, list[float]] = {"old": [], "new": []}
    try:
        for _ in range(rounds):
            for name, tree in (("old", old), ("new", str(REPO))):
                out = subprocess.run([sys.executable, "-c", _ONE_PASS, tree, f.name, str(workers)],
                                     capture_output=True, text=True, check=True, cwd=tree)
                secs, passed = json.loads(out.stdout.strip().splitlines()[-1])
                rates[name].append(len(rows) / secs)
                print(f"{name}: {len(rows) / secs:.1f} programs/s ({passed}/{len(rows)} passed)")
    finally:
        os.unlink(f.name)
    old_rate, new_rate = (sorted(rates[k])[len(rates[k]) // 2] for k in ("old", "new"))
    print(f"\nworkers={workers}: median old {old_rate:.1f}/s, new {new_rate:.1f}/s, "
          f"new/old = {new_rate / old_rate:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="HumanEval.jsonl(.gz)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--limit", type=int, default=None, help="use only the first N problems")
    ap.add_argument("--compare", default=None, help="another comarl checkout to time against, alternately")
    ap.add_argument("--rounds", type=int, default=3, help="with --compare: passes of each")
    args = ap.parse_args(argv)
    if args.compare:
        rows = load_humaneval(args.data)[:args.limit]
        return max(compare(rows, args.compare, w, args.rounds) for w in args.workers)
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
