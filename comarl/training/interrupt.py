"""Ctrl-C during training: stop with the step reached and the last checkpoint, optionally saving one first.

Without ``train.run.save_on_interrupt`` Ctrl-C stops at once. With it, the first
Ctrl-C lets the current step finish (a checkpoint taken mid-step would hold
some agents updated and others not), then a checkpoint is written; a second
Ctrl-C stops at once.
"""
from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C after ``step`` of ``total`` steps; ``checkpoint`` is the newest one (or None)."""

    def __init__(self, step: int, total: int, checkpoint: Path | None):
        self.step, self.total, self.checkpoint = step, total, checkpoint
        super().__init__(self.summary())

    def summary(self) -> str:
        last = f"last checkpoint {self.checkpoint}" if self.checkpoint else \
            "no checkpoint yet (train.run.save_steps or train.run.save_on_interrupt=true write one)"
        return f"interrupted after step {self.step} of {self.total}; {last}"


class DeferredInterrupt:
    """Between start() and stop(), the first SIGINT only sets :attr:`requested`; the second raises KeyboardInterrupt.

    A no-op (``requested`` stays False, Ctrl-C raises at once) when ``enabled`` is
    False or outside the main thread, where signal handlers cannot be set."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested = False
        self._previous: Any = None  # the handler signal.signal gives back (a callable, an int or None)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ncomarl: Ctrl-C: finishing this step to save a checkpoint (Ctrl-C again to stop now)",
              file=sys.stderr, flush=True)

    def start(self) -> "DeferredInterrupt":
        if self.enabled:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def stop(self) -> None:
        if self.enabled and self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def requested_on_all_ranks(self) -> bool:
        """Whether any rank got Ctrl-C (all ranks agree, so they stop at the same step)."""
        if not self.enabled:
            return False
        from ..compute import distributed as dist

        return dist.all_reduce_sum(int(self.requested)) > 0 if dist.is_distributed() else self.requested
