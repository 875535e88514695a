"""Run model-written code safely: one isolated ``python -I`` child per job.

    from comarl.sandbox import Sandbox, SandboxLimits, TestJob

    with Sandbox(SandboxLimits(test_timeout_s=3.0), workers=2) as box:
        [report] = box.run_tests([TestJob(program="def f(x): return x + 1",
                                          tests=("assert f(1) == 2",))])
        report.pass_fraction  # 1.0

See docs/sandbox.md for what is isolated and how.
"""
from comarl.sandbox.runner import SandboxError
from comarl.sandbox.sandbox import Sandbox
from comarl.sandbox.types import HelperProgram, Pinned, SandboxLimits, TestJob, TestReport

__all__ = ["HelperProgram", "Pinned", "Sandbox", "SandboxError", "SandboxLimits", "TestJob", "TestReport"]
