"""The collectives of a data-parallel fit of MARLHF's joint reward model, over all ranks, sharded or not.

``preference/reward_model.py`` sits below the training loop and does not know
about ranks: ``JointRewardModel.data_parallel(ParallelFit(sharding))`` hands it
this component, whose methods it calls at fixed points of ``fit`` and
``accuracy``. Every rank holds the same pairs and takes pairs r, r+W, ... of
each batch (:meth:`ParallelFit.share`); losses are normalised by the whole
batch, so summing gradients over ranks gives the single-process gradient:
FSDP's reduce-scatter does it when the model is sharded (``sharding``, the
run's :class:`~comarl.compute.sharding.Sharding`), else an all-reduce after
the backward. A sharded model's forward is a collective, so a rank without a
pair in a batch runs :func:`~comarl.compute.sharding.idle_backward`, and
scoring (accuracy, rollouts) runs on the gathered model.
"""
from __future__ import annotations

import contextlib

import torch

from ..compute import distributed as dist
from ..compute.sharding import Sharding, idle_backward


class ParallelFit:
    """Data parallelism over all ranks for a reward model; ``sharding`` shards it on the run's mesh."""

    def __init__(self, sharding: Sharding | None = None):
        self.sharding = sharding

    def prepare(self, model: torch.nn.Module, where: str = "the reward model") -> None:
        """Rank 0's trainable weights on every rank (sharding: the model sharded with rank 0's weights,
        ``Sharding.add``); every rank calls it, before any optimiser over the model is built (FSDP swaps the
        parameters)."""
        if self.sharding is not None:
            self.sharding.add(model, where)
        else:
            dist.broadcast_parameters(model)

    def share(self, items: list) -> list:
        """This rank's share of a batch: items r, r+W, ..."""
        return dist.shard(items)

    def total(self, value: float) -> float:
        """Sum of ``value`` over ranks."""
        return dist.all_reduce_sum(value)

    def same_everywhere(self, value: int) -> bool:
        """Whether every rank passed the same integer (below 2**53); every rank gets the same answer."""
        return dist.all_reduce_max(value) == -dist.all_reduce_max(-value)  # largest == smallest

    def after_backward(self, model: torch.nn.Module) -> None:
        """Sum the gradients over ranks (a sharded model's were reduce-scattered in the backward already)."""
        if self.sharding is None:
            dist.all_reduce_grads(model)

    def idle(self, model: torch.nn.Module) -> None:
        """A rank with no pair in a batch: a zero-loss forward/backward joins FSDP's collectives."""
        if self.sharding is not None:
            idle_backward(model, model.config.pad_token_id or 0)  # type: ignore[union-attr, arg-type]  # HF config

    def whole(self, model: torch.nn.Module):
        """Context in which the model is whole on every rank (a collective when sharded)."""
        return self.sharding.gathered([model]) if self.sharding is not None else contextlib.nullcontext()
