"""Dropout off for a block of code, without leaving train mode.

The update forward must stay in train mode (Hugging Face gradient
checkpointing only runs when ``model.training``), so instead of
``model.eval()`` this puts just the dropout layers in eval mode and sets the
attention-probability dropout of attention modules (``attention_dropout``,
a float read in their forward) to 0, and restores both on exit.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch

from .modules import root_module


@contextmanager
def dropout_disabled(model, enabled: bool = True):
    """Inside the block every dropout of ``model`` is off (a no-op when ``enabled`` is False)."""
    if not enabled:
        yield
        return
    layers: list[torch.nn.Module] = []
    rates: list[tuple[Any, float]] = []  # (module, its attention_dropout)
    for m in root_module(model).modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training:
            layers.append(m)
            m.eval()
        p = getattr(m, "attention_dropout", None)
        if isinstance(p, float) and p > 0:
            rates.append((m, p))
            m.attention_dropout = 0.0  # type: ignore[assignment]  # a float attribute of an HF attention module
    try:
        yield
    finally:
        for m in layers:
            m.train()
        for m, p in rates:
            m.attention_dropout = p
