"""The sandbox as the coding environments use it: lazily started, one call per batch."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from comarl.sandbox import Sandbox, TestJob, TestReport


def make_job(program: str, tests: Sequence[str], setup: str = "", entry_point: str = "") -> "TestJob":
    """A sandbox job; ``entry_point`` (the tested function or class) stays visible to the tests
    even if its name shadows a builtin."""
    from comarl.sandbox import TestJob
    return TestJob(program=program, tests=tuple(tests), setup=setup,
                   entry_points=(entry_point,) if entry_point else ())


class SandboxRunner:
    """Owns one :class:`Sandbox`, started on first use.

    Args:
        limits: ``SandboxLimits`` keyword arguments (``env.args.sandbox``).
        workers: parallel sandbox processes.
    """

    def __init__(self, limits: Mapping[str, Any] | None = None, workers: int = 2):
        self.limits = dict(limits or {})
        self.workers = workers
        self._sandbox: "Sandbox | None" = None

    def run(self, jobs: "Sequence[TestJob | None]") -> "list[TestReport | None]":
        """Run every non-None job in ONE ``run_tests`` call; None stays None (same order)."""
        todo = [j for j in jobs if j is not None]
        if not todo:
            return [None] * len(jobs)
        if self._sandbox is None:
            from comarl.sandbox import Sandbox, SandboxLimits
            try:
                limits = SandboxLimits(**self.limits)
            except TypeError as e:
                raise ValueError(f"env.args.sandbox: {e}") from e
            self._sandbox = Sandbox(limits=limits, workers=self.workers)
        reports = iter(self._sandbox.run_tests(todo))
        return [next(reports) if j is not None else None for j in jobs]

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
