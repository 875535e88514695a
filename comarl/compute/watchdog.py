"""Runs that do not hang: the step watchdog, calls with a time limit, and the one way a rank stops a run.

Why a rank stops the run by leaving its process (:func:`stop_run`, ``os._exit``) rather than by raising: under
``torchrun`` the other ranks may already wait in a collective (an all-reduce, a gather) that this rank will never
join. An exception would unwind through ``finally`` blocks that join more collectives (closing engines, the
exit barrier) and wait forever too. A process that exits at once is what torchrun watches for: it stops every
other rank (SIGTERM) and exits non-zero, which the restart launcher (``training/restarts.py``) sees.
Checkpoints stay usable: a ``checkpoint-<step>`` folder is complete by construction (``checkpoint.py``).

* :func:`timed` runs one call (a vLLM push, an engine call) in a helper thread and stops the run with one
  line naming the rank and what it was doing when the call takes longer than its limit.
* :class:`Watchdog` arms a deadline for each phase of the loop (a step, a push, an evaluation, a checkpoint);
  a phase past it writes every thread's stack (``faulthandler``) to ``OUTPUT_DIR/stacks/rank<r>.txt`` and
  stops the run with one line naming the phase and the code it hung in. Every rank runs its own watchdog
  with the same limits, so in a hung step every rank writes its stacks; a rank stopped by torchrun's SIGTERM
  (another rank stopped first) writes them too (``faulthandler.register``).
* The watchdog also writes a heartbeat (the step being run) where the restart launcher asks for one
  (``COMARL_HEARTBEAT``), so a restart knows at which step the run died.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

HUNG_EXIT = 3
"""Exit status of a process stopped by :func:`stop_run` (a hang or a timeout; 2 is a user's mistake)."""
HEARTBEAT_ENV = "COMARL_HEARTBEAT"
"""Environment variable naming the file where rank 0 writes the step it runs (set by the restart launcher)."""
STACKS = "stacks"
"""Folder of the run folder that holds the stack dumps."""


def stop_run(line: str, code: int = HUNG_EXIT) -> NoReturn:
    """Print ``comarl: run stopped: <line>`` to stderr and leave the process at once with ``code``."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    sys.stderr.write(f"comarl: run stopped: {line}\n")
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def rank_name() -> str:
    """``rank R`` under torchrun, else ``the run`` (for one-line messages)."""
    from . import distributed as dist

    return f"rank {dist.rank()}" if dist.world_size() > 1 else "the run"


def timed(fn: Callable[[], Any], seconds: float, what: str, key: str,
          on_timeout: Callable[[str], Any] = stop_run) -> Any:
    """``fn()``, stopping the run (``on_timeout(line)``) when it takes longer than ``seconds`` (0 = no limit).

    ``fn`` runs in a daemon helper thread with the caller's torch thread count (torch's intra-op setting is per
    thread); its result or exception comes back here. ``what`` says what was running ("rank 1: the weight push
    of agent1"), ``key`` the config key of the limit.
    """
    if not seconds:
        return fn()
    import torch

    threads = torch.get_num_threads()
    box: dict[str, Any] = {}

    def run() -> None:
        torch.set_num_threads(threads)
        try:
            box["value"] = fn()
        except BaseException as e:  # handed back to the caller
            box["error"] = e

    helper = threading.Thread(target=run, name=f"comarl-timed: {what}", daemon=True)
    helper.start()
    helper.join(seconds)
    if helper.is_alive():
        return on_timeout(f"{what} took more than {seconds:g} s ({key}); the engine may be hung. The newest "
                          f"checkpoint stays usable: train.run.resume=latest (or --max-restarts) continues from it")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def where_hung(thread_id: int | None = None) -> str:
    """Where a thread (default: the main thread) is now: its innermost comarl frame and its innermost frame,
    e.g. ``comarl/compute/distributed.py:131 (all_reduce_sum), innermost distributed/distributed_c10d.py:3252
    (all_reduce)``."""
    frame = sys._current_frames().get(thread_id or threading.main_thread().ident or 0)
    if frame is None:
        return "an unknown place"
    inner = frame
    ours = None
    here = os.path.abspath(__file__)
    package = os.path.dirname(os.path.dirname(here))
    f: Any = frame
    while f is not None:
        name = os.path.abspath(f.f_code.co_filename)
        if ours is None and name.startswith(package) and name != here:
            ours = f
        f = f.f_back

    roots = sorted({os.path.abspath(p) for p in sys.path if p}, key=len, reverse=True)

    def show(fr) -> str:  # a file as imported: comarl/..., torch/distributed/..., or relative to its sys.path entry
        name = os.path.abspath(fr.f_code.co_filename)
        root = os.path.dirname(package) if name.startswith(package) else \
            next((r for r in roots if name.startswith(r + os.sep)), os.path.dirname(name))
        return f"{os.path.relpath(name, root)}:{fr.f_lineno} ({fr.f_code.co_name})"

    if ours is None or ours is inner:
        return show(inner)
    return f"{show(ours)}, innermost {show(inner)}"


def stacks_file(folder: str | Path, rank: int) -> Path:
    return Path(folder) / STACKS / f"rank{rank}.txt"


def dump_stacks(path: Path, header: str) -> None:
    """Append ``header`` and every thread's stack (``faulthandler``) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"=== {header} ({time.strftime('%Y-%m-%d %H:%M:%S')}, pid {os.getpid()})\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.write("\n")


class Watchdog:
    """Deadlines for the phases of a training loop (module docstring).

    Args:
        limit_s: a phase running longer stops the run (``train.run.step_timeout_s``; 0 = none).
        factor: a ``step`` phase running longer than ``factor`` x the median of the steps so far stops the run,
            from the 4th step on (``train.run.step_timeout_factor``; 0 = off).
        folder: the run folder (stack dumps go to ``folder/stacks/``); None: stacks go to stderr.
        rank, world: this process's rank and the number of ranks.
        stop: what stops the run (:func:`stop_run`; a test passes a fake).
        grace_s: after its own dump, how long a rank waits for the other ranks' dumps before it stops.
    """

    def __init__(self, limit_s: float = 0.0, factor: float = 0.0, folder: str | Path | None = None, rank: int = 0,
                 world: int = 1, stop: Callable[[str], Any] = stop_run, grace_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.limit_s, self.factor, self.rank, self.world = limit_s, factor, rank, world
        self.folder = Path(folder) if folder else None
        self.stop, self.grace_s, self.clock = stop, grace_s, clock
        self.steps: list[float] = []  # durations of the finished steps
        self._open: list[tuple[str, int, float, float, float]] = []  # (what, step, started, limit, wall start)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._sigterm_file: Any = None
        heartbeat = os.environ.get(HEARTBEAT_ENV)
        self.heartbeat = Path(heartbeat) if heartbeat and rank == 0 else None
        if self.enabled and self.folder is not None and threading.current_thread() is threading.main_thread():
            self._dump_on_sigterm()

    @property
    def enabled(self) -> bool:
        return self.limit_s > 0 or self.factor > 0

    def _dump_on_sigterm(self) -> None:
        """A rank that torchrun stops (another rank stopped the run first) writes its stacks too."""
        assert self.folder is not None
        path = stacks_file(self.folder, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._sigterm_file = open(path, "a")
        faulthandler.register(signal.SIGTERM, file=self._sigterm_file, all_threads=True, chain=True)

    def limit(self, what: str) -> float | None:
        """This phase's limit in seconds (None: none)."""
        limits = [self.limit_s] if self.limit_s > 0 else []
        if what == "step" and self.factor > 0 and len(self.steps) >= 3:
            limits.append(self.factor * statistics.median(self.steps))
        return min(limits) if limits else None

    @contextlib.contextmanager
    def phase(self, what: str, step: int) -> Iterator[None]:
        """Run the block as phase ``what`` of ``step`` (1-based): stop the run when it exceeds :meth:`limit`.
        Phases nest (a push inside a step): the earliest deadline of the open phases counts, and the line names
        the innermost phase."""
        if self.heartbeat is not None and what == "step":
            self._beat(step)
        limit = self.limit(what) if self.enabled else None
        if limit is None:
            yield
            return
        started = self.clock()
        entry = (what, step, started, limit, time.time())
        with self._cond:
            self._open.append(entry)
            self._start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                if entry in self._open:  # (not after it fired)
                    self._open.remove(entry)
                self._cond.notify()
            if what == "step":
                self.steps.append(self.clock() - started)

    def _beat(self, step: int) -> None:
        assert self.heartbeat is not None
        tmp = self.heartbeat.with_name(self.heartbeat.name + ".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps({"step": step, "pid": os.getpid(), "time": time.time()}))
            os.replace(tmp, self.heartbeat)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="comarl-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                if not self._open:
                    self._cond.wait()
                    continue
                expired = min(self._open, key=lambda e: e[2] + e[3])
                left = expired[2] + expired[3] - self.clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                inner = self._open[-1]
                self._open.clear()  # fired once (the real stop never returns; a test's fake does)
            self._fire(inner[0], inner[1], expired[3], expired[4])

    def _fire(self, what: str, step: int, limit: float, since: float) -> None:
        where = where_hung()
        who = f"rank {self.rank}: " if self.world > 1 else ""
        key = "train.run.step_timeout_s" if limit == self.limit_s else "train.run.step_timeout_factor"
        head = f"{who}step {step}'s {what} ran past {limit:.4g} s ({key}), in {where}"
        if self.folder is None:
            sys.stderr.write(f"comarl: {head}; every thread's stack:\n")
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            self.stop(f"{head}; the stacks are above")
            return
        dump_stacks(stacks_file(self.folder, self.rank), head)
        self._wait_for_peers(since)
        self.stop(f"{head}; every thread's stack of every rank is in {self.folder / STACKS}")

    def _wait_for_peers(self, since: float) -> None:
        """Give the other ranks' watchdogs ``grace_s`` to write their dumps (they hang in the same step): until
        every rank's file changed after ``since`` (the wall time the phase started)."""
        assert self.folder is not None
        end = self.clock() + self.grace_s
        while self.world > 1 and self.clock() < end:
            files = [stacks_file(self.folder, r) for r in range(self.world)]
            if all(p.exists() and p.stat().st_size > 0 and p.stat().st_mtime >= since for p in files):
                return
            time.sleep(0.1)

    def close(self) -> None:
        """Stop watching (the run ended); an empty stacks file of this rank is removed."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._sigterm_file is not None:
            faulthandler.unregister(signal.SIGTERM)
            self._sigterm_file.close()
            self._sigterm_file = None
            assert self.folder is not None
            path = stacks_file(self.folder, self.rank)
            with contextlib.suppress(OSError):
                if path.stat().st_size == 0:
                    path.unlink()
                    path.parent.rmdir()  # only when empty


__all__ = ["HEARTBEAT_ENV", "HUNG_EXIT", "STACKS", "Watchdog", "dump_stacks", "rank_name", "stacks_file",
           "stop_run", "timed", "where_hung"]
