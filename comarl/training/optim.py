"""Per-agent optimisers and learning-rate schedules."""
from __future__ import annotations

import math

import torch


def build_optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    """AdamW (default) or SGD over the trainable parameters with the agent's settings."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("agent has no trainable parameters")
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)


def lr_factor(step: int, kind: str, warmup: int, total: int) -> float:
    """Multiplier of the peak lr at optimizer step ``step`` (0-based).

    Linear warm-up from 1/(warmup+1) over ``warmup`` steps, then ``constant``
    (1), ``linear`` decay to 0 at ``total``, or ``cosine`` decay to 0 at ``total``.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / (warmup + 1)
    if kind == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_scheduler {kind!r}")


def build_scheduler(opt: torch.optim.Optimizer, kind: str, warmup: int, total: int):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, kind, warmup, total))
