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

import os

from comarl.sandbox.cgroups import JobCgroup
from comarl.sandbox.runner import run_job
from comarl.sandbox.types import SandboxLimits, TestJob, TestReport
from comarl.sandbox.uids import claim_uids, kill_uid, release, running_as_root


def job_key(job: TestJob) -> str:
    """Cache key: sha256 of (setup, program, tests, entry points, packages)."""
    return hashlib.sha256(json.dumps([job.setup, job.program, list(job.tests), list(job.entry_points),
                                      list(job.packages)]).encode()).hexdigest()


class Sandbox:
    """Runs untrusted programs against test snippets, never in this process.

    Each job gets a fresh ``python -I`` child (see ``docs/sandbox.md``). ``workers``
    threads each drive one child at a time; when running as root and
    ``limits.drop_privileges``, each worker owns an unprivileged uid.
    Identical jobs (same setup, program and tests) are answered from an LRU
    cache of ``cache_size`` reports (0 disables it). Each worker also owns a
    cgroup bounding memory and processes over the whole job where the OS
    allows it (``cgroup_mode``; see ``cgroups.py``).
    """

    def __init__(self, limits: SandboxLimits = SandboxLimits(), workers: int = 2, cache_size: int = 4096):
        if workers < 1:
            raise ValueError(f"Sandbox workers must be >= 1, got {workers}")
        if cache_size < 0:
            raise ValueError(f"Sandbox cache_size must be >= 0, got {cache_size}")
        self.limits, self.workers, self.cache_size = limits, workers, cache_size
        self._claimed = claim_uids(workers) if limits.drop_privileges and running_as_root() else []
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for uid, _ in self._claimed:
            kill_uid(uid)  # leftovers of an earlier trainer that crashed
        self._cgroups: list[JobCgroup] = []
        for i in range(workers):
            uid = self._claimed[i][0] if self._claimed else None
            cg = None
            if running_as_root():
                name = f"comarl-sandbox-{uid}" if uid is not None else f"comarl-sandbox-{os.getpid()}-{i}"
                cg = JobCgroup.create(name, limits.memory_mb, limits.max_processes)
                if cg is not None:
                    self._cgroups.append(cg)
            self._slots.put((uid, cg))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="comarl-sandbox")
        self._cache: OrderedDict[str, TestReport] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def cgroup_mode(self) -> str:
        """'v1' or 'v2' when every worker has a job cgroup, else 'rlimits' (per process / per uid only)."""
        if len(self._cgroups) == self.workers:
            return f"v{self._cgroups[0].version}"
        return "rlimits"

    @property
    def uids(self) -> list[int]:
        """The unprivileged uids the workers run jobs as (empty when not dropping root)."""
        return [uid for uid, _ in self._claimed]

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
        futures = {key: self._pool.submit(self._run_one, job) for key, job in todo.items()}
        for key, fut in futures.items():
            found[key] = fut.result()
            self._remember(key, found[key])
        return [copy.deepcopy(found[key]) for key in keys]

    def _run_one(self, job: TestJob) -> TestReport:
        slot = self._slots.get()
        try:
            return run_job(job, self.limits, *slot)
        finally:
            self._slots.put(slot)

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
        for cg in self._cgroups:
            cg.remove()
        self._cgroups = []
        release(self._claimed)
        self._claimed = []

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
