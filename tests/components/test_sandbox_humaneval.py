"""Every HumanEval canonical solution passes through the sandbox (about 3 s on 2 cores)."""
from __future__ import annotations

import sys
from pathlib import Path

from comarl.sandbox import Sandbox, SandboxLimits, TestJob

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_all_canonical_solutions_pass_and_broken_ones_fail(shared_data):
    from sandbox_throughput import humaneval_job, load_humaneval

    rows = load_humaneval(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    assert len(rows) == 164
    jobs = [humaneval_job(r) for r in rows]
    # A wrong solution for each of the first 4 problems: the body returns None.
    broken = [TestJob(r["prompt"] + "    return None\n", j.tests) for r, j in zip(rows[:4], jobs)]
    with Sandbox(SandboxLimits(), workers=2, cache_size=0) as box:
        reports = box.run_tests(jobs + broken)
    failed = [r["task_id"] for r, rep in zip(rows, reports) if rep.passed != [True]]
    assert failed == []
    assert [rep.passed for rep in reports[164:]] == [[False]] * 4
