"""Per-job memory, process and CPU limits with cgroups, over all the processes of a job.

rlimits count one process (``RLIMIT_AS``) or one uid (``RLIMIT_NPROC``); a job
that forks four children of 700 MiB each stays under a 1 GiB ``RLIMIT_AS``.
A cgroup bounds the sum. Each sandbox worker slot owns one cgroup, created
under the trainer's own cgroup:

- cgroup v1 (``/sys/fs/cgroup/memory`` and ``/sys/fs/cgroup/pids`` mounted):
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
  accounted, so the job cannot page out instead) and ``pids.max``; and, where
  ``/sys/fs/cgroup/cpu`` is mounted, ``cpu.cfs_quota_us`` over a 100 ms period;
- cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``): ``memory.max``,
  ``memory.swap.max = 0`` and ``pids.max``, if the ``memory`` and ``pids``
  controllers can be enabled for our subtree, and ``cpu.max`` where the
  ``cpu`` controller can be enabled too.

The CPU quota (``SandboxLimits.cpus``) caps the CPU time of the whole job per
period, however many processes or sessions (each its own autogroup) it forks,
so a job cannot starve the other slots' jobs or the trainer; ``cpu_bounded``
says whether it applies.

When neither works (not root, no controllers, a container that refuses),
:meth:`JobCgroup.create` returns None and the sandbox keeps the rlimits alone
(``RLIMIT_AS`` per process, ``RLIMIT_NPROC`` per uid); ``Sandbox.cgroup_mode``
says which applies.
"""
from __future__ import annotations

import os
import signal
import time

ROOT = "/sys/fs/cgroup"


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of ``controller`` ('' is v2's unified line)."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller in ctrls.split(",") or (controller == "" and ctrls == ""):
                    return path
    except OSError:
        pass
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def cgroup_version() -> int | None:
    """1 or 2 for the layout that has memory and pids controllers, else None."""
    if os.path.exists(f"{ROOT}/cgroup.controllers"):
        return 2
    if os.path.isdir(f"{ROOT}/memory") and os.path.isdir(f"{ROOT}/pids"):
        return 1
    return None


PERIOD_US = 100_000  # the CPU quota's period


def _quota_us(cpus: float) -> int:
    return max(1000, int(round(cpus * PERIOD_US)))


class JobCgroup:
    """The cgroup(s) of one worker slot: ``add`` a job's first process, ``kill_all`` at the end.

    ``dirs[0]`` lists the job's processes; ``cpu_bounded``: a CPU quota applies (``SandboxLimits.cpus``)."""

    def __init__(self, version: int, dirs: list[str], cpu_bounded: bool = False):
        self.version, self.dirs, self.cpu_bounded = version, dirs, cpu_bounded

    @classmethod
    def create(cls, name: str, memory_mb: int, max_processes: int, cpus: float | None = None) -> "JobCgroup | None":
        """A fresh cgroup named ``name`` with the limits, or None where cgroups are not usable.

        ``cpus``: the job's CPU quota in CPUs (1.0: one core's time per period), applied where the cpu
        controller is usable (``cpu_bounded``); None: no quota."""
        version = cgroup_version()
        try:
            if version == 1:
                return cls._create_v1(name, memory_mb, max_processes, cpus)
            if version == 2:
                return cls._create_v2(name, memory_mb, max_processes, cpus)
        except OSError:
            return None
        return None

    @classmethod
    def _create_v1(cls, name: str, memory_mb: int, max_processes: int, cpus: float | None) -> "JobCgroup":
        dirs: list[str] = []
        cpu_bounded = False
        try:
            for ctrl in ("memory", "pids"):
                own = _own_path(ctrl)
                if own is None:
                    raise OSError(f"no {ctrl} cgroup for this process")
                d = os.path.join(ROOT, ctrl, own.lstrip("/"), name)
                os.makedirs(d, exist_ok=True)
                dirs.append(d)
            mem, pids = dirs
            limit = str(memory_mb * 1024 * 1024)
            _write(f"{mem}/memory.limit_in_bytes", limit)
            if os.path.exists(f"{mem}/memory.memsw.limit_in_bytes"):
                _write(f"{mem}/memory.memsw.limit_in_bytes", limit)
            _write(f"{pids}/pids.max", str(max_processes))
            own_cpu = _own_path("cpu")
            if cpus is not None and own_cpu is not None and os.path.isdir(f"{ROOT}/cpu"):
                d = os.path.join(ROOT, "cpu", own_cpu.lstrip("/"), name)
                os.makedirs(d, exist_ok=True)
                dirs.append(d)
                _write(f"{d}/cpu.cfs_period_us", str(PERIOD_US))
                _write(f"{d}/cpu.cfs_quota_us", str(_quota_us(cpus)))
                cpu_bounded = True
        except OSError:
            cls(1, dirs).remove()
            raise
        return cls(1, dirs, cpu_bounded)

    @classmethod
    def _create_v2(cls, name: str, memory_mb: int, max_processes: int, cpus: float | None) -> "JobCgroup":
        own = _own_path("")
        if own is None:
            raise OSError("no unified cgroup for this process")
        parent = os.path.join(ROOT, own.lstrip("/"))
        with open(f"{parent}/cgroup.subtree_control") as f:
            enabled = f.read().split()
        if not {"memory", "pids"} <= set(enabled):
            _write(f"{parent}/cgroup.subtree_control", "+memory +pids")  # refused if we share that cgroup
        if cpus is not None and "cpu" not in enabled:
            try:
                _write(f"{parent}/cgroup.subtree_control", "+cpu")
            except OSError:
                pass  # no quota then (cpu_bounded stays False)
        d = os.path.join(parent, name)
        os.makedirs(d, exist_ok=True)
        cpu_bounded = False
        try:
            _write(f"{d}/memory.max", str(memory_mb * 1024 * 1024))
            if os.path.exists(f"{d}/memory.swap.max"):
                _write(f"{d}/memory.swap.max", "0")
            _write(f"{d}/pids.max", str(max_processes))
            if cpus is not None and os.path.exists(f"{d}/cpu.max"):
                _write(f"{d}/cpu.max", f"{_quota_us(cpus)} {PERIOD_US}")
                cpu_bounded = True
        except OSError:
            cls(2, [d]).remove()
            raise
        return cls(2, [d], cpu_bounded)

    def add(self, pid: int) -> None:
        """Move ``pid`` (before it forks) into the cgroup; its children inherit it."""
        for d in self.dirs:
            _write(f"{d}/cgroup.procs", str(pid))

    def missing(self) -> str | None:
        """The first of the slot's cgroup directories that no longer exists (removed from outside), or None."""
        for d in self.dirs:
            if not os.path.isdir(d):
                return f"{d} is gone"
        return None

    def pids(self) -> list[int]:
        try:
            with open(f"{self.dirs[0]}/cgroup.procs") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def kill_all(self, wait_s: float = 2.0) -> None:
        """SIGKILL every process in the cgroup until it is empty (a fork bomb forks meanwhile)."""
        if self.version == 2 and os.path.exists(f"{self.dirs[0]}/cgroup.kill"):
            try:
                _write(f"{self.dirs[0]}/cgroup.kill", "1")
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.002)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy while the last processes are reaped
                    time.sleep(0.01)
