"""StepSources: where each training step's batch comes from, behind one epoch cursor.

A source hands the loop one batch per step (``comarl/core/steps.py``)::

    next(step, team) -> PromptBatch | PairBatch | SkipStep
    total_steps      how many steps the run takes (from the config and the data)
    cursor           the EpochCursor: one shuffle per epoch, one resume position
    env              the environment rollouts use now (evaluation rolls out with it too)
    epoch_based      whether the run's length follows the epochs (a resume with another global batch
                     then recomputes it)
    checkpoint_parts(team, step) -> (modules for DCP, files for torch.save) a checkpoint must hold for it
    restore(path, team)   after the loop loaded a checkpoint: rebuild what the source needs to go on
    ends_round(step)      whether a checkpoint must follow this step (the end of an iterative round)
    saved(path, step)     after that checkpoint was written

Here: prompt batches (every on-policy algorithm). The preference algorithms' sources live with them: a pairs
file (``madpo_offline``, ``comarl/preference/pairs_file.py``) and the iterative rounds
(``comarl/preference/rounds.py``).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .compute import distributed as dist
from .core.config_io import ConfigError
from .core.steps import PromptBatch

if TYPE_CHECKING:
    from .core.seams import TeamView


class EpochCursor:
    """The position in the data: (epoch, batch in epoch) over ``n`` rows in global batches.

    Each epoch's order is a permutation seeded by (seed, epoch), so a resumed run sees the same order;
    ``next_indices()`` gives the global batch's row indices (every rank the same; ``dist.shard`` splits them).
    """

    def __init__(self, n: int, global_batch: int, seed: int, shuffle: bool):
        self.n, self.global_batch, self.seed, self.shuffle = n, global_batch, seed, shuffle
        self.steps_per_epoch = math.ceil(n / global_batch)
        self.epoch = 0
        self.batch_in_epoch = 0
        self._order: tuple[int, list[int]] | None = None

    def order(self, epoch: int) -> list[int]:
        """Row order of ``epoch`` (computed once per epoch)."""
        if self._order is not None and self._order[0] == epoch:
            return self._order[1]
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        self._order = (epoch, order)
        return order

    def next_indices(self) -> list[int]:
        """The next global batch's row indices (advances the position; a new epoch starts when one ends)."""
        if self.batch_in_epoch >= self.steps_per_epoch:
            self.epoch += 1
            self.batch_in_epoch = 0
        b, size = self.batch_in_epoch, self.global_batch
        self.batch_in_epoch += 1
        return self.order(self.epoch)[b * size:(b + 1) * size]

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def restore(self, saved: dict, saved_global_batch: int) -> None:
        """The position of a checkpoint; written with another global batch (ranks x batch_size): the same
        order, continuing after the rows already seen."""
        self.epoch, self.batch_in_epoch = saved["epoch"], saved["batch_in_epoch"]
        if saved_global_batch != self.global_batch:
            self.batch_in_epoch = min(self.steps_per_epoch, dist.resume_position(
                saved["batch_in_epoch"], saved_global_batch, self.global_batch))

    def steps_left(self, epochs: int) -> int:
        """Steps to the end of ``epochs`` epochs from here."""
        return dist.steps_left(self.epoch, self.batch_in_epoch, self.steps_per_epoch, epochs)


class Plain:
    """What a source without checkpointed state or rounds answers (the loop's hooks)."""

    epoch_based = True

    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        return {}, {}

    def restore(self, path: Path, team: "TeamView") -> None:
        pass

    def ends_round(self, step: int) -> bool:
        return False

    def saved(self, path: Path | None, step: int) -> None:
        pass


class PromptBatches(Plain):
    """Global batches of training items, each rank taking its share; every on-policy algorithm's source."""

    def __init__(self, items: list[dict], env: Any, global_batch: int, seed: int, shuffle: bool,
                 epochs: int, max_steps: int = 0):
        self.items, self.env = items, env
        self.cursor = EpochCursor(len(items), global_batch, seed, shuffle)
        self.total_steps = max_steps or self.cursor.steps_per_epoch * epochs

    def next_items(self) -> list[dict]:
        """This rank's items of the next global batch (advances the position)."""
        return [self.items[i] for i in dist.shard(self.cursor.next_indices())]

    def next(self, step: int, team: "TeamView") -> PromptBatch:
        items = self.next_items()  # (first: drawing may start a new epoch)
        return PromptBatch(items, self.env, epoch=self.cursor.epoch)

    def restore(self, path: Path, team: "TeamView") -> None:
        """Nothing to restore but the cursor (the loop's); refuses a checkpoint holding batches sampled ahead
        (``updates/overlap.py``), whose rows the cursor has passed: this run would skip them."""
        if (Path(path) / "inflight.pt").exists():
            raise ConfigError(f"train.rollout.max_staleness: {path} holds batches sampled ahead by a run with "
                              f"max_staleness >= 1; resume it with the same value")


__all__ = ["EpochCursor", "Plain", "PromptBatches"]
