"""Data parallelism helpers. Single process unless launched by ``torchrun``.

The loop calls ``shard(items)`` to pick this rank's items of a global batch
(whole items, so a group -- one item's K samples or its tree -- is never split
across ranks) and ``all_reduce_grads(model)`` once per agent before its
optimizer step. Loss weights are normalised by global counts
(``all_reduce_sum``), so *summing* gradients over ranks gives exactly the
single-process gradient of the global batch::

    L = sum_r sum_{s in rank r} w_s * l_s,   w_s = 1 / S_total (or 1 / T_total)
    grad L = sum_r grad L_r                    (all_reduce SUM, no division by W)

A rank that gets no item (last batch of an epoch) still joins every
collective: its gradient is zero and its metrics carry weight 0.
Backend: ``nccl`` when CUDA is available, else ``gloo`` (``train.hardware.dist_backend``
overrides). Under nccl every collective runs on this rank's GPU (LOCAL_RANK).
"""
from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def local_rank() -> int:
    """This process's index on its node (torchrun's LOCAL_RANK; 0 when not launched by torchrun)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def launch_rank() -> int:
    """The rank torchrun gave this process (``RANK``; 0 without torchrun), before the process group starts."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def init_from_env(backend: str | None = None) -> bool:
    """Initialise the process group when torchrun's variables are set; returns True if distributed.

    ``backend`` None picks ``nccl`` when CUDA is available (and pins this
    process to GPU ``LOCAL_RANK``), else ``gloo``.
    """
    if is_distributed():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("train.hardware.dist_backend=nccl needs CUDA; use gloo on CPU")
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend=backend)
    atexit.register(cleanup)
    previous = sys.excepthook

    def failed_then(*args) -> None:  # an uncaught error: this rank leaves without waiting for its peers
        mark_failed()
        previous(*args)

    sys.excepthook = failed_then
    return True


_FAILED = False
EXIT_BARRIER_S = 60.0
"""How long a rank that ends normally waits at exit for its peers (then it leaves anyway)."""


def mark_failed() -> None:
    """This process ends on an error: at exit it destroys the process group without waiting for the other ranks,
    which may wait in a collective it will never join (torchrun then stops them)."""
    global _FAILED
    _FAILED = True


def cleanup() -> None:
    """Destroy the process group (registered at exit by :func:`init_from_env`): after a barrier, so that no rank
    tears down gloo while a peer still talks to it, unless this rank failed (:func:`mark_failed`); the barrier
    waits at most :data:`EXIT_BARRIER_S` (a peer that failed without a word never comes)."""
    if is_distributed():
        try:
            if not _FAILED:
                from datetime import timedelta

                with contextlib.suppress(Exception):
                    work = dist.barrier(async_op=True)
                    if work is not None:
                        work.wait(timeout=timedelta(seconds=EXIT_BARRIER_S))
        finally:
            dist.destroy_process_group()


def _comm_device() -> torch.device:
    """Where collective tensors live: this rank's GPU under nccl, else the CPU."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shard(items: list, r: int | None = None, w: int | None = None) -> list:
    """This rank's share of a global batch: items r, r+w, r+2w, ... (may be empty)."""
    r = rank() if r is None else r
    w = world_size() if w is None else w
    return items[r::w]


def all_reduce_sum(value: float | int) -> float:
    """Sum of ``value`` over ranks (float64 on the wire; the value itself when single-process)."""
    if not is_distributed():
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t)
    return t.item()


def all_reduce_max(value: float | int) -> float:
    """Largest ``value`` over ranks (the value itself when single-process)."""
    if not is_distributed():
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def gather_objects(obj) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (picklable objects; ``[obj]`` when single-process)."""
    if not is_distributed():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_grads(model: torch.nn.Module, bucket_mb: float = 64.0) -> None:
    """Sum gradients of the trainable parameters over ranks (losses are already globally normalised).

    A parameter without a gradient (unused, or a rank with no items) takes part
    with zeros. FSDP-sharded parameters (DTensors) are skipped: their gradients
    were reduce-scattered in the backward already. Gradients are flattened into buckets of about ``bucket_mb`` MB
    per dtype and device, one all-reduce per bucket instead of one per tensor.
    """
    if not is_distributed():
        return
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.requires_grad and not isinstance(p, DTensor)]
    every: list[torch.Tensor] = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        every.append(p.grad)
    comm = _comm_device()
    limit = int(bucket_mb * 2 ** 20)
    groups: dict[tuple, list[torch.Tensor]] = {}
    for grad in every:
        groups.setdefault((grad.dtype, grad.device), []).append(grad)
    for grads in groups.values():
        bucket, size = [], 0
        for g in grads + [None]:
            if g is not None:
                bucket.append(g)
                size += g.numel() * g.element_size()
            if bucket and (g is None or size >= limit):
                flat = torch.cat([b.reshape(-1) for b in bucket]).to(comm)
                dist.all_reduce(flat)
                offset = 0
                for b in bucket:
                    b.copy_(flat[offset:offset + b.numel()].view_as(b))
                    offset += b.numel()
                bucket, size = [], 0


def broadcast_parameters(model: torch.nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s trainable parameters to every rank (identical start weights).

    Frozen parameters (a LoRA base) are loaded from the same files on every
    rank and are not sent.
    """
    if not is_distributed():
        return
    comm = _comm_device()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                t = p.data.to(comm)
                dist.broadcast(t, src)
                if t is not p.data:
                    p.data.copy_(t)


def reduce_metrics(metrics: dict[str, float], weight: float = 1.0,
                   sum_keys: tuple[str, ...] = (), key_weights: dict[str, float] | None = None) -> dict[str, float]:
    """Combine per-rank metrics into one dict (the same on every rank).

    Each key is the ``weight``-weighted mean over the ranks that report it with
    a finite value (``weight`` = this rank's item count, 0 for a rank without
    items), or ``key_weights[key]``-weighted where given (a mean over
    observations whose number is not proportional to the items: the nodes of a
    later turn); keys in ``sum_keys`` are summed instead (throughput). Ranks may
    report different keys.
    """
    if not is_distributed():
        return dict(metrics)
    gathered: list = [None] * world_size()
    kw = {k: float(v) for k, v in (key_weights or {}).items()}
    dist.all_gather_object(gathered, ({k: float(v) for k, v in metrics.items()}, float(weight), kw))
    return combine_metrics(gathered, sum_keys)


def combine_metrics(per_rank: list[tuple], sum_keys: tuple[str, ...] = ()) -> dict[str, float]:
    """The arithmetic of :func:`reduce_metrics` on ``[(metrics, weight[, key_weights]) per rank]``.

    mean_k = sum_r w_r m_r[k] / sum_r w_r over ranks with a finite m_r[k] and
    w_r > 0, where w_r is ``key_weights[k]`` when the rank gives one, else its
    ``weight`` (falling back to the plain mean over ranks with a finite value
    when all such weights are 0); NaN when no rank has a finite value.
    """
    per_rank = [(m, w, kw[0] if kw else {}) for m, w, *kw in per_rank]
    keys = sorted({k for m, _, _ in per_rank for k in m})
    out = {}
    for k in keys:
        vals = [(m[k], kw.get(k, w)) for m, w, kw in per_rank if k in m and math.isfinite(m[k])]
        if not vals:
            out[k] = float("nan")
        elif k in sum_keys:
            out[k] = sum(v for v, _ in vals)
        else:
            total = sum(w for _, w in vals if w > 0)
            out[k] = (sum(v * w for v, w in vals if w > 0) / total if total > 0
                      else sum(v for v, _ in vals) / len(vals))
    return out


def resume_position(batch_in_epoch: int, saved_global_batch: int, global_batch_now: int) -> int:
    """Batch index within the epoch to resume at when the global batch (ranks x per-rank batch) changed.

    The epoch's item order does not depend on the world size, so the saved run
    had consumed ``seen = batch_in_epoch * saved_global_batch`` items of it; the new run
    resumes at batch ``floor(seen / global_batch_now)``, re-using at most
    ``global_batch_now - 1`` items rather than skipping any.
    """
    seen = batch_in_epoch * saved_global_batch
    return seen // global_batch_now


def sampling_seed(seed: int, rank_: int, step: int = 0) -> int:
    """Seed of rank ``rank_``'s sampling RNG (after model init): distinct per rank and per resume step."""
    return (seed * 1_000_003 + (rank_ + 1) * 7_919 + step * 104_729) % (2 ** 63)


def steps_left(epoch: int, batch_in_epoch: int, steps_per_epoch: int, epochs: int) -> int:
    """Training steps left in an ``epochs``-epoch run at (epoch, batch_in_epoch): (E - e) * S - b, at least 0."""
    return max(0, (epochs - epoch) * steps_per_epoch - batch_in_epoch)


class Collectives:
    """The collectives a component calls, as an object it holds (``critic.comm``), so a test can stand in a
    fake for the other ranks' share without patching this module."""

    all_reduce_sum = staticmethod(all_reduce_sum)
    all_reduce_max = staticmethod(all_reduce_max)
    all_reduce_grads = staticmethod(all_reduce_grads)
