"""Which module holds a model's weights (the one that FSDP shards, dropout is switched in, and gathers count)."""
from __future__ import annotations

import torch


def root_module(model) -> torch.nn.Module:
    """The module that holds ``model``'s weights and layers: a LoRA agent's view (``lora.AdapterModel``, which has
    ``shared.peft_model``) -> the shared ``PeftModel``; any other model -> itself."""
    shared = getattr(model, "shared", None)
    return shared.peft_model if shared is not None and hasattr(shared, "peft_model") else model
