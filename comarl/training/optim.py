"""Per-agent optimisers and learning-rate schedules.

``agents.<i>.optimizer``:
  * ``adamw`` (default), ``sgd``: torch.
  * ``adamw_8bit``: AdamW with 8-bit block-quantised moments (bitsandbytes):
    optimiser state 2 x 4 -> 2 x 1 bytes per trainable parameter (a 7B full
    fine-tune: 56 GB -> 14 GB).
  * ``paged_adamw``, ``paged_adamw_8bit``: the same states in CUDA unified
    memory that pages to CPU RAM under memory pressure instead of failing.
The bitsandbytes ones need ``pip install bitsandbytes`` and a CUDA GPU.
"""
from __future__ import annotations

import math

import torch

from ..core.config_io import ConfigError
from ..core.runtime import check_optimizer

_BNB = {"adamw_8bit": "AdamW8bit", "paged_adamw": "PagedAdamW", "paged_adamw_8bit": "PagedAdamW8bit"}


def build_optimizer(model: torch.nn.Module, cfg, where: str = "agents.?") -> torch.optim.Optimizer:
    """AdamW (default), SGD or a bitsandbytes 8-bit/paged AdamW over the trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{where}: agent has no trainable parameters")
    check_optimizer(cfg.optimizer, where)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer in _BNB:
        import bitsandbytes as bnb

        if any(p.device.type != "cuda" for p in params):
            raise ConfigError(f"{where}.optimizer={cfg.optimizer} needs the model on a CUDA device "
                              f"(bitsandbytes optimisers are GPU only)")
        cls = getattr(bnb.optim, _BNB[cfg.optimizer])
        return cls(params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)
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


def rebuild_scheduler(opt: torch.optim.Optimizer, old, kind: str, warmup: int, total: int):
    """A scheduler with a new horizon ``total`` that continues ``old``'s position (resume on another world size).

    The optimiser's current lr is set to ``base_lr * lr_factor(position)`` of the new schedule.
    """
    state = old.state_dict()
    new = build_scheduler(opt, kind, warmup, total)
    new.load_state_dict(state)
    for group, base in zip(opt.param_groups, new.base_lrs):
        group["lr"] = base * lr_factor(new.last_epoch, kind, warmup, total)
    new._last_lr = [g["lr"] for g in opt.param_groups]
    return new
