"""Memory savers for the training forward/backward: autocast, fp16 loss scaling, gradient checkpointing.

``train.hardware.mixed_precision``:
  * ``no``: the forward runs in the weights' dtype (``agents.<i>.dtype``).
  * ``bf16``: the training forward runs under ``torch.autocast(dtype=bfloat16)``
    with float32 master weights: matmul activations (and the memory kept for
    backward) are half size. Works on CUDA (Ampere or newer) and on CPU.
  * ``fp16``: the same with float16, CUDA only, plus dynamic loss scaling
    (:class:`LossScaler`) so small gradients do not underflow (under FSDP2
    sharding: unscaled once per step, ``LossScaler(sharded=True)``).
Log-probs are always computed in float32 from the logits (``logprobs.py``).

``train.hardware.gradient_checkpointing``: keep only each decoder layer's input during
the forward and recompute the layer in backward; activation memory falls from
O(layers x seq x hidden x ~10-30) to O(layers x seq x hidden) for ~30% more
compute. The loss and gradients are unchanged.
"""
from __future__ import annotations

import contextlib

import torch

from ..core.config_io import ConfigError
from ..core.runtime import MIXED_PRECISION
from . import distributed as dist


def autocast(mode: str, device) -> contextlib.AbstractContextManager:
    """Context for the training forward of a model on ``device``: ``torch.autocast`` or a no-op for ``no``."""
    dtype = MIXED_PRECISION[mode]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def enable_gradient_checkpointing(model, where: str) -> None:
    """Turn on Hugging Face gradient checkpointing (non-reentrant, so frozen inputs/LoRA need no extra hook)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ConfigError(f"train.hardware.gradient_checkpointing: {where}'s model ({type(model).__name__}) supports "
                          f"no activation/gradient checkpointing; turn the key off")


class LossScaler:
    """Dynamic loss scaling for fp16 autocast.

    ``scale_loss(loss)`` returns ``loss * S`` for the backward pass, so the
    float16 activation gradients do not underflow; a hook on every trainable
    parameter divides its gradient by S before it is accumulated, so ``.grad``
    holds the true gradient and clipping, all-reduce and the optimiser see
    ordinary values. An overflow gives inf/NaN gradients, which the loop
    already skips; the next ``scale_loss`` then halves S. After
    ``growth_interval`` clean backward passes S doubles.

    ``sharded=True`` (FSDP2): FSDP reduce-scatters the gradients into the sharded
    parameters outside autograd, so no hook sees them. S then stays fixed over a
    step's backward passes; the loop calls :meth:`unscale_sharded` once before
    clipping, which divides the sharded gradients by S and adjusts S from an
    overflow flag all-reduced over the ranks (every rank keeps the same S).
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_interval: int = 1000, min_scale: float = 1.0,
                 sharded: bool = False):
        self.scale = float(init_scale)
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.sharded = sharded
        self.good = 0
        self.overflows = 0
        self._inf: dict[torch.device, torch.Tensor] = {}
        self._backward_seen = False
        self._handles: list = []

    def install(self, model) -> "LossScaler":
        if self.sharded:  # FSDP swaps the parameters; the gradients are unscaled in unscale_sharded
            return self
        for p in model.parameters():
            if p.requires_grad:
                self._handles.append(p.register_hook(self._unscale))
        return self

    def unscale_sharded(self, params, judge: bool = True) -> None:
        """Sharded mode, once per step on every rank (collective): gradients / S, then S adjusted from an
        overflow on any rank. A rank that ran only idle passes divides too: FSDP's reduce-scatter put the
        other ranks' scaled gradients into its shards. ``judge=False`` (the step is skipped for a non-finite
        loss, not an overflow): S is left as it is, as the hook mode, which runs no backward for such a loss."""
        found = False
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    local = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    found = found or not bool(torch.isfinite(local).all())
                    p.grad.div_(self.scale)
        found = dist.all_reduce_max(int(found)) > 0
        if judge:
            self._adjust(found)
        else:
            self._backward_seen = False

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _unscale(self, grad: torch.Tensor) -> torch.Tensor:
        self._backward_seen = True
        flag = self._inf.get(grad.device)
        if flag is None:
            flag = self._inf[grad.device] = torch.zeros((), dtype=torch.bool, device=grad.device)
        flag.logical_or_(~torch.isfinite(grad).all())
        return grad / self.scale

    def update(self) -> None:
        """Adjust S from the backward passes since the last call (hook mode)."""
        if not self._backward_seen or self.sharded:
            return
        found = any(bool(t.item()) for t in self._inf.values())
        for t in self._inf.values():
            t.zero_()
        self._adjust(found)

    def _adjust(self, found: bool) -> None:
        self._backward_seen = False
        if found:
            self.overflows += 1
            self.scale = max(self.min_scale, self.scale / 2)
            self.good = 0
        else:
            self.good += 1
            if self.good >= self.growth_interval:
                self.scale *= 2
                self.good = 0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * S`` (hook mode: after adjusting S from the previous backward; sharded: S of this step)."""
        if self.sharded:
            self._backward_seen = True
        else:
            self.update()
        return loss * self.scale


def backward(loss: torch.Tensor, scaler: LossScaler | None = None) -> None:
    """``loss.backward()``, through the fp16 loss scaler when there is one."""
    (scaler.scale_loss(loss) if scaler is not None else loss).backward()


def setup_memory_savers(agents, train_cfg) -> dict[int, LossScaler]:
    """Apply ``gradient_checkpointing`` and fp16 loss scaling to each agent's model.

    Returns the fp16 loss scalers keyed by ``id(model)`` (agents sharing one
    model object share its scaler); empty unless ``mixed_precision=fp16``.
    """
    scalers: dict[int, LossScaler] = {}
    seen: set[int] = set()
    for agent in agents:
        if id(agent.model) in seen:  # shared weights: hooks once
            continue
        seen.add(id(agent.model))
        if train_cfg.hardware.gradient_checkpointing:
            enable_gradient_checkpointing(agent.model, agent.name)
        if train_cfg.hardware.mixed_precision == "fp16":
            sharded = train_cfg.hardware.sharding == "fsdp" and dist.is_distributed()
            scalers[id(agent.model)] = LossScaler(sharded=sharded).install(agent.model)
    return scalers
