"""The Sandbox: a pool of workers that run TestJobs in isolated children, with a cache."""
from __future__ import annotations

import copy
import hashlib
import json
import queue
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from comarl.sandbox.runner import SandboxError, SlotFailure, run_job
from comarl.sandbox.slots import Slot, build_slots, describe_job, rebuild_slot, run_with_rerun, warn
from comarl.sandbox.types import SandboxLimits, TestJob, TestReport
from comarl.sandbox.uids import claim_intact


def job_key(job: TestJob) -> str:
    """Cache key: sha256 of (setup, program, tests, entry points, packages, helper, pinned methods)."""
    helper = None if job.helper is None else [job.helper.program, job.helper.name, job.helper.ablate]
    pinned = [[p.class_name, p.attribute, p.first_line, p.last_line] for p in job.pinned]
    return hashlib.sha256(json.dumps([job.setup, job.program, list(job.tests), list(job.entry_points),
                                      list(job.packages), helper, pinned]).encode()).hexdigest()


class Sandbox:
    """Runs untrusted programs against test snippets, never in this process.

    Each job gets a fresh ``python -I`` child (see ``docs/sandbox.md``). ``workers``
    threads each drive one child at a time; when running as root and
    ``limits.drop_privileges``, each worker owns an unprivileged uid.
    Identical jobs (same setup, program and tests) are answered from an LRU
    cache of ``cache_size`` reports (0 disables it). Each worker also owns a
    cgroup bounding memory and processes over the whole job where the OS
    allows it (``cgroup_mode``; see ``cgroups.py``).

    A worker slot that fails from outside the job (its cgroup removed, its uid
    claim lost, its isolation never set up) is rebuilt and the job run once
    more, with a warning (``restarts`` lists them); a second failure raises
    :class:`SandboxError` naming the job. A job whose processes merely died is
    the program's crash and is never re-run (docs/sandbox.md, "When the pool
    dies").
    """

    def __init__(self, limits: SandboxLimits = SandboxLimits(), workers: int = 2, cache_size: int = 4096):
        if workers < 1:
            raise ValueError(f"Sandbox workers must be >= 1, got {workers}")
        if cache_size < 0:
            raise ValueError(f"Sandbox cache_size must be >= 0, got {cache_size}")
        self.limits, self.workers, self.cache_size = limits, workers, cache_size
        self.slots: list[Slot] = build_slots(limits, workers)
        with_cgroup = [s.cgroup.version for s in self.slots if s.cgroup is not None]
        self._cgroup_mode = f"v{with_cgroup[0]}" if len(with_cgroup) == workers else "rlimits"
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        for slot in self.slots:
            self._idle.put(slot)
        self.restarts: list[str] = []  # one line per rebuilt slot (and the job it re-ran)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="comarl-sandbox")
        self._cache: OrderedDict[str, TestReport] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def cgroup_mode(self) -> str:
        """'v1' or 'v2' when every worker has a job cgroup, else 'rlimits' (per process / per uid only)."""
        return self._cgroup_mode

    @property
    def cpu_bounded(self) -> bool:
        """Every worker's job cgroup has a CPU quota (``SandboxLimits.cpus``); False: jobs run without one."""
        return all(s.cgroup is not None and s.cgroup.cpu_bounded for s in self.slots)

    @property
    def uids(self) -> list[int]:
        """The unprivileged uids the workers run jobs as (empty when not dropping root)."""
        return [s.uid for s in self.slots if s.uid is not None]

    def run_tests(self, jobs: Sequence[TestJob]) -> list[TestReport]:
        """One report per job, in the order of ``jobs``; jobs run in parallel."""
        if self._closed:
            raise RuntimeError("Sandbox.run_tests called after close()")
        jobs = list(jobs)
        for i, job in enumerate(jobs):
            if not isinstance(job, TestJob):
                raise TypeError(f"Sandbox.run_tests: jobs[{i}] is {type(job).__name__}, expected TestJob")
        keys = [job_key(j) for j in jobs]
        found: dict[str, TestReport] = {}
        with self._lock:
            for key in keys:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    found[key] = self._cache[key]
        todo = {key: job for key, job in zip(keys, jobs) if key not in found}
        futures = {key: self._pool.submit(self._run_one, job, key) for key, job in todo.items()}
        for key, fut in futures.items():
            found[key] = fut.result()
            self._remember(key, found[key])
        return [copy.deepcopy(found[key]) for key in keys]

    def _run_one(self, job: TestJob, key: str) -> TestReport:
        slot, name = self._idle.get(), describe_job(job, key)
        try:
            if (why := slot.broken()) is not None:  # broken since its last job: rebuilt before this one starts
                try:
                    rebuild_slot(slot, self.limits)
                except SandboxError as e:
                    raise SandboxError(f"sandbox: worker slot {slot.index} was broken ({why}) and could not be "
                                       f"rebuilt to run {name}: {e}") from e
                self._note(f"sandbox: worker slot {slot.index} was broken ({why}); rebuilt it before {name}")
            return run_with_rerun(job, slot, self._attempt, lambda sl: rebuild_slot(sl, self.limits), name,
                                  self._note)
        finally:
            self._idle.put(slot)

    def _attempt(self, job: TestJob, slot: Slot) -> TestReport:
        report = run_job(job, self.limits, slot.uid, slot.cgroup)  # SlotFailure: setup, spawn, cgroup gone
        if (claim := slot.claim()) is not None and not claim_intact(*claim):  # another trainer may have killed it
            raise SlotFailure(f"the claim on uid {slot.uid} was lost during the job (its lock file was removed)")
        return report

    def _note(self, line: str) -> None:
        with self._lock:
            self.restarts.append(line)
        warn(line)

    def _remember(self, key: str, report: TestReport) -> None:
        if self.cache_size == 0:
            return
        with self._lock:
            self._cache[key] = report
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def close(self) -> None:
        """Wait for running jobs, then free the workers and their uids."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        for slot in self.slots:
            slot.free()
        self.slots = []

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
