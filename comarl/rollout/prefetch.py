"""A sampling worker that runs ahead of the trainer by a bounded number of policy versions
(``train.rollout.max_staleness``, ``docs/overlap.md``).

One thread samples the submitted batches in order, each with the weights it holds; the trainer takes them in
the same order and pushes new weights between the worker's batches. Versions count training steps: version
``v`` is the policy after ``v`` steps. With bound ``k``, batch ``b`` (the one step ``b`` trains on) starts only
once the worker holds version ``b - k``, and the push of version ``v`` waits until every batch before
``v + k`` is sampled, so batch ``b`` is sampled with version ``max(0, b - k)`` exactly: the schedule, hence
the trajectory, does not depend on which thread runs first.

::

    trainer  | take b | update on b         | push v=b+1 (waits for batch b+k) | take b+1 | ...
    worker   | sample b+k with version b               | sample b+k+1 with version b+1 | ...

The worker never samples while the trainer pushes or holds it ``paused`` (an evaluation sampling from the
same generator, or drawing from the same random streams). What a batch is and how it is sampled belongs to
the caller (``sample(b, payload, version)``); an error in it is raised by :meth:`Prefetcher.take` of that batch.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator


class Prefetcher:
    """Args:
        sample: ``(b, payload, version) -> result``, run on the worker thread for each submitted batch.
        max_staleness: k >= 1, how many versions a batch may lag the step that trains on it.
        name: the thread's name.
    """

    def __init__(self, sample: Callable[[int, Any, int], Any], max_staleness: int, name: str = "comarl-sampler"):
        if max_staleness < 1:
            raise ValueError(f"Prefetcher: max_staleness must be >= 1, got {max_staleness}")
        self.sample, self.k = sample, max_staleness
        self.cond = threading.Condition()
        self.version = 0  # the weights the worker samples with
        self.queue: deque[tuple[int, Any]] = deque()  # submitted, not started
        self.results: dict[int, tuple[Any, BaseException | None]] = {}  # sampled, not taken
        self.busy: int | None = None  # the batch being sampled
        self.holds = 0  # the trainer's pushes and pauses: no batch starts meanwhile
        self.closed = False
        self.submitted = -1  # the last batch index submitted
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    # ------------------------------------------------------------- the trainer's side
    def submit(self, b: int, payload: Any) -> None:
        """Queue batch ``b`` (indices rise by one per call)."""
        with self.cond:
            if b != self.submitted + 1 and self.submitted >= 0:
                raise ValueError(f"Prefetcher: batch {b} submitted after {self.submitted}")
            self.submitted = b
            self.queue.append((b, payload))
            self.cond.notify_all()

    def restore(self, b: int, result: Any) -> None:
        """Batch ``b`` sampled before (a checkpoint's in-flight batch): :meth:`take` returns it."""
        with self.cond:
            self.results[b] = (result, None)
            self.submitted = max(self.submitted, b)

    def at_least(self, version: int) -> None:
        """The worker's weights are those of ``version`` or newer (the trainer took no step that changed them
        since the last push)."""
        with self.cond:
            self.version = max(self.version, version)
            self.cond.notify_all()

    def take(self, b: int) -> tuple[Any, float]:
        """(batch ``b``'s result, seconds waited for it); raises what sampling it raised."""
        t0 = time.perf_counter()
        with self.cond:
            if b not in self.results and b != self.busy and all(q != b for q, _ in self.queue):
                raise KeyError(f"Prefetcher: batch {b} was never submitted")
            self.cond.wait_for(lambda: b in self.results or self.closed)
            if b not in self.results:
                raise RuntimeError(f"Prefetcher: closed before batch {b} was sampled")
            result, error = self.results.pop(b)
        if error is not None:
            raise error
        return result, time.perf_counter() - t0

    def push(self, version: int, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (write version ``version``'s weights into the worker's) between the worker's batches,
        once every batch before ``version + k`` is sampled with the older weights; returns what ``fn`` returns."""
        with self.cond:
            self.cond.wait_for(lambda: self.closed or (self.busy is None and
                                                       all(b >= version + self.k for b, _ in self.queue)))
            self.holds += 1
        try:
            return fn()
        finally:
            with self.cond:
                self.holds -= 1
                self.version = max(self.version, version)
                self.cond.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A context in which the worker samples nothing (it finishes the batch it is on first)."""
        with self.cond:
            self.cond.wait_for(lambda: self.closed or self.busy is None)
            self.holds += 1
        try:
            yield
        finally:
            with self.cond:
                self.holds -= 1
                self.cond.notify_all()

    def pending(self) -> dict[int, Any]:
        """Every submitted batch not yet taken, sampled (waits for the worker to finish them): batch -> result.
        A batch whose sampling failed is left out."""
        with self.cond:
            self.cond.wait_for(lambda: self.closed or (self.busy is None and not self.queue))
            return {b: r for b, (r, e) in sorted(self.results.items()) if e is None}

    def close(self) -> None:
        """Stop the worker after the batch it is on (its thread is a daemon: a process may also just exit)."""
        with self.cond:
            self.closed = True
            self.queue.clear()
            self.cond.notify_all()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=60)

    # ------------------------------------------------------------- the worker's side
    def _ready(self) -> bool:
        return self.closed or (not self.holds and bool(self.queue) and self.version >= self.queue[0][0] - self.k)

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(self._ready)
                if self.closed:
                    return
                b, payload = self.queue.popleft()
                self.busy, version = b, self.version
            error: BaseException | None = None
            result = None
            try:
                result = self.sample(b, payload, version)
            except BaseException as e:  # raised in the trainer's thread by take(b)
                error = e
            with self.cond:
                self.results[b] = (result, error)
                self.busy = None
                self.cond.notify_all()


__all__ = ["Prefetcher"]
