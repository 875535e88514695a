"""Per-agent device placement in one process.

``train.hardware.agent_devices`` puts agent i's model on ``agent_devices[i]`` (it
overrides ``agents.<i>.device``), so two 7B agents can sit on two GPUs of one
machine. Under ``torchrun`` a bare ``cuda`` means this rank's GPU
(``cuda:LOCAL_RANK``); an indexed ``cuda:j`` is taken literally.
"""
from __future__ import annotations

import torch

from ..core.config_io import ConfigError
from ..core.runtime import parse_device
from . import distributed as dist


def resolve_device(name: str, key: str) -> str:
    """Validated device string; a bare ``cuda`` becomes ``cuda:LOCAL_RANK`` (``cuda:0`` outside torchrun)."""
    dev = parse_device(name, key)
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "cuda" and dev.index is None:
        return f"cuda:{dist.local_rank() if dist.is_distributed() else torch.cuda.current_device()}"
    return str(dev)


def agent_device_names(agent_configs, agent_devices) -> list[str]:
    """Final device string of each agent: ``agent_devices[i]`` if given, else ``agents.<i>.device``; resolved."""
    out = []
    for i, c in enumerate(agent_configs):
        if agent_devices is not None:
            out.append(resolve_device(agent_devices[i], f"train.hardware.agent_devices[{i}]"))
        else:
            out.append(resolve_device(c.device, f"agents.{i}.device"))
    return out


def check_shared_devices(agent_configs, devices: list[str]) -> None:
    """Agents sharing one model object (``share_weights_with``) must sit on the same device."""
    for i, c in enumerate(agent_configs):
        j = getattr(c, "share_weights_with", None)
        if j is not None and 0 <= j < len(devices) and devices[j] != devices[i]:
            raise ConfigError(f"train.hardware.agent_devices: agent {i} shares agent {j}'s weights "
                              f"(share_weights_with) but they are placed on {devices[i]} and {devices[j]}")


class ReferenceOnDevice:
    """A reference policy whose frozen copy lives on another device; its outputs come back to the agent's device."""

    def __init__(self, reference, output_device):
        self.reference = reference
        self.output_device = output_device

    def __getattr__(self, name):
        return getattr(self.reference, name)

    def logprobs(self, prompts, completions):
        lp, mask = self.reference.logprobs(prompts, completions)
        return lp.to(self.output_device), mask.to(self.output_device)


def place_references(references, device_name: str | None, agents=None) -> list:
    """Move the frozen reference copies to ``train.hardware.reference_device``; returns the references to use.

    Moved ones are wrapped so that their log-probs return on their agent's
    device (``agents[i].device``). LoRA references (the agent's base with the
    adapter off) have no copy and stay where they are.
    """
    references = list(references)
    if device_name is None:
        return references
    dev = resolve_device(device_name, "train.hardware.reference_device")
    out = []
    for i, ref in enumerate(references):
        model = getattr(ref, "model", None) if ref is not None else None
        if model is not None:
            model.to(dev)
            if agents is not None and str(agents[i].device) != dev:
                ref = ReferenceOnDevice(ref, agents[i].device)
        out.append(ref)
    return out
