"""What running two agents' code as two programs costs (docs/sandbox.md, "Programs of several agents").

CoopHumanEval's ``x_or_y`` with an honest helper ``aux`` (is n prime) and a main function that calls it, as one
joined program (how preset ``paper`` runs it), as two programs (``TestJob.helper``, ``ablate=False``) and as two
programs with the ablation pass (the ``default`` preset's job); the three kinds alternate, ``--rounds`` times,
cache off, ``--jobs`` jobs each, and the median seconds per job is printed.

    python benchmarks/sandbox_helper_cost.py [--jobs 40] [--rounds 3] [--workers 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from comarl.sandbox import HelperProgram, Sandbox, SandboxLimits, TestJob  # noqa: E402

HELPER = "def aux(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
MAIN = "def x_or_y(n, x, y):\n    return x if aux(n) else y\n"
TESTS = tuple(f"assert x_or_y({n}, 1, 2) == {1 if n in (2, 3, 5, 7, 11, 13) else 2}" for n in (1, 2, 4, 7, 9, 13))


def jobs(kind: str, n: int) -> list[TestJob]:
    # a distinct comment per job keeps every job a cache miss even with a cache
    if kind == "joined":
        return [TestJob(f"# {i}\n" + HELPER + MAIN, TESTS, entry_points=("x_or_y",)) for i in range(n)]
    ablate = kind == "two programs + ablation"
    return [TestJob(f"# {i}\n" + MAIN, TESTS, entry_points=("x_or_y",), helper=HelperProgram(HELPER, "aux", ablate))
            for i in range(n)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    kinds = ["joined", "two programs", "two programs + ablation"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with Sandbox(SandboxLimits(), workers=a.workers, cache_size=0) as box:
        for _ in range(a.rounds):
            for kind in kinds:
                batch = jobs(kind, a.jobs)
                t = time.perf_counter()
                reports = box.run_tests(batch)
                times[kind].append((time.perf_counter() - t) / a.jobs)
                assert all(r.pass_fraction == 1.0 for r in reports), kind
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    base = statistics.median(times["joined"])
    for kind in kinds:
        med = statistics.median(times[kind])
        print(f"{kind:26s} {1000 * med:6.1f} ms/job (x{med / base:.2f})")


if __name__ == "__main__":
    main()
