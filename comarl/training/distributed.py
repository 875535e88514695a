"""Data parallelism helpers. Single process unless launched by ``torchrun``.

The loop calls exactly two things from here: ``shard(items)`` to pick this
rank's items of a global batch (whole items, so a group is never split), and
``all_reduce_grads(model)`` once per agent before its optimizer step. Loss
weights are normalised by global counts (``all_reduce_sum``), so summing
gradients across ranks gives the single-process gradient of the global batch.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def init_from_env(backend: str | None = None) -> bool:
    """Initialise the process group when torchrun's variables are set; returns True if distributed."""
    if is_distributed():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend=backend)
    return True


def shard(items: list, r: int | None = None, w: int | None = None) -> list:
    """This rank's share of a global batch: items r, r+w, r+2w, ..."""
    r = rank() if r is None else r
    w = world_size() if w is None else w
    return items[r::w]


def all_reduce_sum(value: float | int) -> float:
    if not is_distributed():
        return value
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def all_reduce_grads(model: torch.nn.Module) -> None:
    """Sum gradients over ranks (losses are already globally normalised)."""
    if not is_distributed():
        return
    for p in model.parameters():
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Average a metrics dict over ranks (same keys on every rank assumed)."""
    if not is_distributed():
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(t)
    t /= world_size()
    return dict(zip(keys, t.tolist()))
