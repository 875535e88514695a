"""Stop a run that has gone wrong: ``train.run.max_consecutive_skips`` steps in a row without an update.

A step is *skipped* when it tried to update and no agent's optimizer stepped: every agent's update was dropped
for a non-finite loss or gradient (``count/nonfinite_skips``), an empty batch (``count/empty_batch_skips``), or
a non-finite critic loss that left the actor's loss non-finite too (``count/critic_nonfinite_skips``). The
streak is read from the Team's counters before and after each step, so every update (policy gradient, DPO,
critic) is covered without telling the loop which one ran, and under torchrun every rank sees the same counts
(skips are collective) and stops at the same step. A step that stepped any agent ends the streak; a step that
tried nothing (``SkipStep``: ``marlhf_iter`` before its first reward model) leaves it as it was.
"""
from __future__ import annotations

from ..core.config_io import UserError

SKIP_COUNTERS = ("nonfinite_skips", "empty_batch_skips", "critic_nonfinite_skips")


class RunStopped(UserError):
    """The run stopped itself (``max_consecutive_skips``); the message says why, what was saved and what to do."""

    kind = "run stopped"


class SkipStreak:
    """Counts consecutive skipped steps from the Team's counters.

    Args:
        limit: ``train.run.max_consecutive_skips`` (0 = never stop).
        counters: the Team's counters (read, never written).
    """

    def __init__(self, limit: int, counters: dict[str, int]):
        self.limit, self.counters = limit, counters
        self.length = 0  # skipped steps in a row, up to the last step observed
        self.first = 0  # the first step of the streak
        self.counts = dict.fromkeys(SKIP_COUNTERS, 0)  # skips of each kind within the streak
        self._before: dict[str, int] = {}

    def before_step(self) -> None:
        self._before = {k: self.counters.get(k, 0) for k in (*SKIP_COUNTERS, "optimizer_steps")}

    def after_step(self, step: int) -> bool:
        """Account for ``step`` (just done); True when the streak has reached the limit."""
        delta = {k: self.counters.get(k, 0) - v for k, v in self._before.items()}
        if delta["optimizer_steps"] > 0:
            self.length = 0
            self.counts = dict.fromkeys(SKIP_COUNTERS, 0)
        elif any(delta[k] > 0 for k in SKIP_COUNTERS):
            if self.length == 0:
                self.first = step
            self.length += 1
            for k in SKIP_COUNTERS:
                self.counts[k] += delta[k]
        return self.limit > 0 and self.length >= self.limit

    def stop(self, step: int, checkpoint) -> RunStopped:
        """The one-line error a run stops with at ``step``; ``checkpoint``: the folder just saved, or None."""
        c = self.counts
        saved = (f"its state is saved in {checkpoint} (resume with train.run.resume=latest)" if checkpoint is not None
                 else "no checkpoint was written (train.run.output_dir is not set)")
        return RunStopped(
            f"{self.length} steps in a row took no update (steps {self.first}-{step}: {c['nonfinite_skips']} "
            f"non-finite losses or gradients, {c['empty_batch_skips']} empty batches, "
            f"{c['critic_nonfinite_skips']} non-finite critic losses), so the weights are those of step "
            f"{self.first - 1}; {saved}. Look for NaN or inf rewards, lower the learning rate, or check "
            f"max_new_tokens under mask_truncated; train.run.max_consecutive_skips={self.limit} (0 = never stop)")


__all__ = ["RunStopped", "SKIP_COUNTERS", "SkipStreak"]
