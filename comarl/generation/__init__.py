"""Generators turn per-agent prompt ids into sampled completions (HF by default)."""
from .hf import Completions, cut_at_eos, generate, left_pad

__all__ = ["Completions", "cut_at_eos", "generate", "left_pad"]
