"""Worker slots: the uid and the cgroup a sandbox worker runs its jobs under, and how a broken one is rebuilt.

A slot breaks from outside the job: its cgroup directory removed (a cgroup cleaner, a service manager stopping
the scope the trainer runs in, an operator), or its uid claim lost (the lock file under the temp dir removed by a
temp cleaner, after which another trainer may claim the uid and kill every process of it). :func:`run_with_rerun`
is the rule for a job whose slot failed: rebuild the slot and run the job once more; a second failure raises
:class:`SandboxError` naming the job. Only :class:`SlotFailure` (evidence the program cannot forge) triggers it;
a harness or worker that merely died is the program's crash and scores 0 (docs/sandbox.md, "When the pool dies").
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Callable

from comarl.sandbox.cgroups import JobCgroup
from comarl.sandbox.runner import SandboxError, SlotFailure
from comarl.sandbox.types import SandboxLimits, TestJob, TestReport
from comarl.sandbox.uids import claim_intact, claim_uids, kill_uid, release, running_as_root


@dataclass
class Slot:
    """One worker's uid (with the lock fd of its claim) and cgroup; None where not used (not root, no cgroup)."""

    index: int
    uid: int | None = None
    lock_fd: int | None = None
    cgroup: JobCgroup | None = None

    def claim(self) -> tuple[int, int] | None:
        """(uid, lock_fd) of the slot's uid claim, or None where it has no uid (the two are set together)."""
        if self.uid is None:
            return None
        if self.lock_fd is None:
            raise RuntimeError(f"sandbox slot {self.index}: uid {self.uid} without the lock fd of its claim")
        return self.uid, self.lock_fd

    def broken(self) -> str | None:
        """Why this slot cannot run a job as it is (its cgroup directory gone, its uid claim lost), or None."""
        if self.cgroup is not None and (gone := self.cgroup.missing()):
            return f"its cgroup {gone}"
        if (claim := self.claim()) is not None and not claim_intact(*claim):
            return f"its claim on uid {self.uid} was lost (the lock file was removed)"
        return None

    def free(self) -> None:
        """Kill what still runs in the slot, remove its cgroup and release its uid."""
        if self.cgroup is not None:
            self.cgroup.remove()
        if (claim := self.claim()) is not None:
            release([claim])


def cgroup_name(uid: int | None, index: int) -> str:
    return f"comarl-sandbox-{uid}" if uid is not None else f"comarl-sandbox-{os.getpid()}-{index}"


def build_slots(limits: SandboxLimits, workers: int) -> list[Slot]:
    """``workers`` slots: a uid each when root and ``drop_privileges``, a cgroup each where the OS allows."""
    claimed = claim_uids(workers) if limits.drop_privileges and running_as_root() else []
    slots = []
    for i in range(workers):
        uid, fd = claimed[i] if claimed else (None, None)
        if uid is not None:
            kill_uid(uid)  # leftovers of an earlier trainer that crashed
        cg = (JobCgroup.create(cgroup_name(uid, i), limits.memory_mb, limits.max_processes, limits.cpus)
              if running_as_root() else None)
        slots.append(Slot(i, uid, fd, cg))
    return slots


def rebuild_slot(slot: Slot, limits: SandboxLimits) -> None:
    """Make ``slot`` work again, in place: its leftovers killed, its cgroup created afresh, its uid claimed again
    (a new one when the claim was lost). Raises SandboxError when the cgroup cannot be created again (the job
    would run without its memory and process limits)."""
    if (claim := slot.claim()) is not None:
        kill_uid(claim[0])
        if not claim_intact(*claim):
            release([claim])
            slot.uid = slot.lock_fd = None
            [(slot.uid, slot.lock_fd)] = claim_uids(1)
            kill_uid(slot.uid)
    if slot.cgroup is not None:
        slot.cgroup.remove()  # what is left of it (a v1 pair may have lost only one directory)
        slot.cgroup = JobCgroup.create(cgroup_name(slot.uid, slot.index), limits.memory_mb, limits.max_processes,
                                       limits.cpus)
        if slot.cgroup is None:
            raise SandboxError(f"worker slot {slot.index}'s cgroup could not be created again; refusing to run "
                               f"jobs without their memory and process limits")


def describe_job(job: TestJob, key: str) -> str:
    """``job 3f2a9c1b0d4e (program 'def f(x):', 2 tests)``."""
    first = next((line for line in job.program.splitlines() if line.strip()), "")
    first = first if len(first) <= 60 else first[:60] + "..."
    return f"job {key[:12]} (program {first!r}, {len(job.tests)} tests)"


def run_with_rerun(job: TestJob, slot: Slot, attempt: Callable[[TestJob, Slot], TestReport],
                   rebuild: Callable[[Slot], None], name: str, log: Callable[[str], None]) -> TestReport:
    """``attempt(job, slot)``; on :class:`SlotFailure`, ``rebuild`` the slot (in place), ``log`` one line and
    attempt once more. A second SlotFailure, or a slot that cannot be rebuilt, raises SandboxError naming the job
    (``name``) and both reasons; any other error (a bug, KeyboardInterrupt) passes through unchanged."""
    try:
        return attempt(job, slot)
    except SlotFailure as e:
        first = e
    try:
        rebuild(slot)
    except SandboxError as e:
        raise SandboxError(f"sandbox: {name} failed for a reason outside the program ({first}), and its worker "
                           f"slot could not be rebuilt: {e}") from e
    log(f"sandbox: worker slot {slot.index} failed running {name}: {first}; rebuilt the slot, running the job "
        f"once more")
    try:
        return attempt(job, slot)
    except SlotFailure as second:
        raise SandboxError(f"sandbox: {name} failed twice for reasons outside the program: {first}; then, on a "
                           f"rebuilt slot: {second}") from second


def warn(line: str) -> None:
    warnings.warn(line, RuntimeWarning, stacklevel=2)


__all__ = ["Slot", "build_slots", "describe_job", "rebuild_slot", "run_with_rerun"]
