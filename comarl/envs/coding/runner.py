"""The sandbox as the coding environments use it: lazily started, one call per batch."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from comarl.sandbox import HelperProgram, Pinned, Sandbox, TestJob, TestReport


def make_job(program: str, tests: Sequence[str], setup: str, entry_point: str,
             packages: Sequence[str] = (), helper: "HelperProgram | None" = None,
             pinned: "Sequence[Pinned]" = ()) -> "TestJob":
    """A sandbox job whose tests see exactly one name of the program: ``entry_point`` (the tested
    function or class), even where it shadows a builtin; everything else the tests use comes from
    ``setup`` (the benchmark's imports and the prompt's helpers, trusted). ``packages``: the
    third-party import names the program may use (ClassEval's ``numpy``...). ``helper``: another
    agent's program run in its own process (``TestJob.helper``); ``pinned``: methods that must stay
    the definitions of the agents' parts (``TestJob.pinned``)."""
    from comarl.sandbox import TestJob
    if not entry_point:
        raise ValueError("make_job: the tested function or class name is required")
    return TestJob(program=program, tests=tuple(tests), setup=setup, entry_points=(entry_point,),
                   packages=tuple(packages), helper=helper, pinned=tuple(pinned))


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
        self._warned = False

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
        done = self._sandbox.run_tests(todo)
        self._check_isolation(done)
        reports = iter(done)
        return [next(reports) if j is not None else None for j in jobs]

    def _check_isolation(self, reports) -> None:
        """Warn once when jobs ran without the private root or the seccomp filter (docs/sandbox.md)."""
        if self._warned or not reports:
            return
        notes = reports[0].isolation
        missing = [n for n in notes if n.startswith(("filesystem: host", "seccomp: off", "network: host"))]
        if missing:
            self._warned = True
            warnings.warn("sandbox: running with weaker isolation than the threat model assumes: "
                          + "; ".join(missing) + " (docs/sandbox.md)", RuntimeWarning, stacklevel=3)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
