"""One backward and one optimiser step for every model a run trains: agents, critics, reward models.

:func:`micro_batched_backward` runs a loss over micro-batches, under data parallelism and FSDP2 sharding: with
``lockstep`` (sharded) every rank runs the largest number of micro-batches of any rank, a rank out of inputs
joins FSDP's collectives with ``idle()`` (a forward/backward that adds nothing), and a non-finite loss still
backpropagates (or backpropagates its ``zero`` stand-in) so the other ranks' collectives complete before every
rank drops the step; without sharding it stops at the first non-finite loss.

:func:`optimizer_step` is what follows: every rank agrees on skipping (one non-finite loss or gradient
anywhere skips the step on all), fp16 gradients are unscaled, gradients are summed over ranks where FSDP has
not done it, clipped (or only measured), and the optimiser and scheduler step; a skipped step clears the
gradients and calls ``on_skip`` (the caller's counter and its one line). Both are collectives: every rank
calls them the same number of times.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import torch

from . import distributed as dist
from .precision import backward

if TYPE_CHECKING:
    from .precision import LossScaler


@dataclass
class MicroLoss:
    """One micro-batch's share of the batch loss (already normalised by global counts).

    Attributes:
        loss: the scalar to backpropagate.
        zero: backpropagated instead when ``loss`` is not finite under sharding: a zero-valued loss through the
            same forward (e.g. ``values.sum() * 0``), so no non-finite gradient reaches a module another model's
            step also reads; None: ``loss`` itself is backpropagated (the step is dropped on every rank anyway).
    """

    loss: torch.Tensor
    zero: torch.Tensor | None = None


@dataclass
class BackwardResult:
    """Attributes: total: the sum of the finite micro-batch losses (this rank); finite: no micro-batch of this rank
    gave a non-finite loss."""

    total: float
    finite: bool


def micro_batched_backward(n_micro: int, loss_of: Callable[[int], MicroLoss], *, idle: Callable[[], None],
                           lockstep: Callable[[int], int] | None = None,
                           scaler: "LossScaler | None" = None) -> BackwardResult:
    """Backpropagate ``loss_of(m)`` for m in ``range(n_micro)`` (module docstring).

    ``lockstep``: None without sharding; else ``n -> max over ranks of n`` (``sharding.lockstep_count``);
    ``scaler``: the fp16 loss scaler of the model, or None."""
    total, finite = 0.0, True
    runs = lockstep(n_micro) if lockstep is not None else n_micro
    for m in range(runs):
        if m >= n_micro or not finite:
            if lockstep is None:
                break
            idle()  # out of inputs (or past a non-finite loss): join the collectives
            continue
        part = loss_of(m)
        if not torch.isfinite(part.loss):
            finite = False
            if lockstep is not None:  # this forward's collectives need a backward
                stand_in = part.zero if part.zero is not None else part.loss
                stand_in.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
            continue
        backward(part.loss, scaler)
        total += float(part.loss.detach())
    return BackwardResult(total, finite)


def optimizer_step(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, *, bad: bool = False,
                   scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, max_grad_norm: float = 0.0,
                   scaler: "LossScaler | None" = None,
                   reduce_grads: Callable[[], None] | None = None, on_skip: Callable[[], None] | None = None,
                   all_reduce_sum: Callable[[float], float] = dist.all_reduce_sum) -> float | None:
    """One optimiser step over ``params``; the gradient norm (before clipping), or None when skipped.

    ``bad``: this rank saw a non-finite loss. ``reduce_grads``: sums the gradients over ranks (None: FSDP's
    reduce-scatter did, or one process). ``max_grad_norm`` 0: no clipping (the norm is still measured).
    ``scaler``: an fp16 loss scaler sharded with FSDP2 (it unscales and judges the gradients collectively)."""
    bad = all_reduce_sum(int(bad)) > 0  # every rank skips together
    if scaler is not None and getattr(scaler, "sharded", False):
        scaler.unscale_sharded(params, judge=not bad)
    norm = float("nan")
    if not bad:
        if reduce_grads is not None:
            reduce_grads()
        grads = [p.grad for p in params if p.grad is not None]
        if max_grad_norm > 0:
            norm = _as_float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        elif grads:
            norm = _as_float(torch.nn.utils.get_total_norm(grads))
        else:
            norm = 0.0
        bad = not math.isfinite(norm)
    if bad:
        optimizer.zero_grad(set_to_none=True)
        if on_skip is not None:
            on_skip()
        return None
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def trainable(modules: Iterable[torch.nn.Module]) -> list[torch.nn.Parameter]:
    """The parameters of ``modules`` that take gradients, each once."""
    seen: dict[int, torch.nn.Parameter] = {}
    for m in modules:
        for p in m.parameters():
            if p.requires_grad:
                seen.setdefault(id(p), p)
    return list(seen.values())


def _as_float(t: torch.Tensor) -> float:
    """A scalar tensor (a DTensor total norm included) -> float."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.full_tensor()
    return float(t)


__all__ = ["BackwardResult", "MicroLoss", "micro_batched_backward", "optimizer_step", "trainable"]
