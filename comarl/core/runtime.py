"""Names and checks of where and how models run: devices, mixed precision, optimisers.

Config validation (``config.py``, ``agents.py``) reads these to refuse bad keys
early; ``training/`` uses them when it places agents, builds optimisers and
enters autocast. They live here, below both, so that nothing under the
training loop imports from ``training/`` (tests/unit/test_layering.py).
"""
from __future__ import annotations

import importlib.util

import torch

from .config_io import ConfigError

MIXED_PRECISION = {"no": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""``train.hardware.mixed_precision`` value -> autocast dtype (None = no autocast)."""

OPTIMIZERS = ("adamw", "sgd", "adamw_8bit", "paged_adamw", "paged_adamw_8bit")
"""``agents.<i>.optimizer`` values (docs in training/optim.py)."""

BITSANDBYTES_OPTIMIZERS = ("adamw_8bit", "paged_adamw", "paged_adamw_8bit")
"""The optimisers that need the optional bitsandbytes package (and a CUDA GPU)."""


def parse_device(name, key: str) -> torch.device:
    """``name`` -> torch.device, checked against this machine; errors name ``key``."""
    if not isinstance(name, str):
        raise ConfigError(f"{key}: device must be a string such as 'cpu', 'cuda' or 'cuda:1', got {name!r}")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"{key}: {name!r} is not a device ('cpu', 'cuda', 'cuda:1', 'mps'): {e}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}: {name!r} asks for a GPU but CUDA is not available on this machine "
                              f"(use 'cpu')")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}: {name!r} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"{key}: {name!r} but MPS is not available on this machine")
    elif dev.type != "cpu":
        raise ConfigError(f"{key}: unsupported device type {dev.type!r} (cpu, cuda, mps)")
    return dev


def check_agent_devices(devices, num_agents: int, key: str = "train.hardware.agent_devices") -> None:
    """Shape and syntax of ``train.hardware.agent_devices`` (availability is checked when agents are placed)."""
    if devices is None:
        return
    if not isinstance(devices, (list, tuple)):
        raise ConfigError(f"{key}: must be a list with one device per agent, got {type(devices).__name__}")
    if len(devices) != num_agents:
        raise ConfigError(f"{key}: has {len(devices)} entries for {num_agents} agents (one device per agent)")
    for i, d in enumerate(devices):
        if not isinstance(d, str):
            raise ConfigError(f"{key}[{i}]: must be a device string such as 'cpu' or 'cuda:1', got {d!r}")
        try:
            torch.device(d)
        except RuntimeError:
            raise ConfigError(f"{key}[{i}]: {d!r} is not a device ('cpu', 'cuda', 'cuda:1')") from None


def check_mixed_precision(mode: str, devices: list[str], key: str = "train.hardware.mixed_precision") -> None:
    """Refuse an unknown mode, fp16 off CUDA, and bf16 on a GPU without bf16; errors name ``key``."""
    if mode not in MIXED_PRECISION:
        raise ConfigError(f"{key}: must be one of {list(MIXED_PRECISION)}, got {mode!r}")
    for i, d in enumerate(devices):
        dev = torch.device(d)
        if mode == "fp16" and dev.type != "cuda":
            raise ConfigError(f"{key}=fp16: agent {i} is on {d}; fp16 autocast with loss scaling needs CUDA "
                              f"(use bf16, which also works on CPU, or no)")
        if mode == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"{key}=bf16: {d} has no bfloat16 support (pre-Ampere GPU); use fp16")
        if mode != "no" and dev.type not in ("cuda", "cpu"):
            raise ConfigError(f"{key}={mode}: autocast is supported on cuda and cpu, agent {i} is on {d}")


def check_optimizer(name: str, where: str) -> None:
    """Refuse an unknown optimiser, or a bitsandbytes one when the package is missing; errors name the key."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"{where}.optimizer must be one of {list(OPTIMIZERS)}, got {name!r}")
    if name in BITSANDBYTES_OPTIMIZERS and importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"{where}.optimizer={name} needs the optional bitsandbytes package "
                          f"(pip install bitsandbytes; CUDA GPU only), or use optimizer=adamw")
