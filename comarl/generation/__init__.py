"""Generators turn per-agent prompt ids into sampled completions (HF by default; ``team.py`` for a team)."""
from .adapters import adapter_groups, generate_adapters
from .devices import device_groups, overlap_generation
from .hf import Completions, cut_at_eos, generate, generation_kwargs, left_pad

__all__ = ["Completions", "adapter_groups", "cut_at_eos", "device_groups", "generate", "generate_adapters",
           "generation_kwargs", "left_pad", "overlap_generation"]
