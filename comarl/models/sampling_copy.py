"""The generation worker's own copy of the agents' weights (``train.rollout.max_staleness`` with Hugging Face
``generate``): it samples the next batch from the copy while the trainer updates the originals.

Only what training changes is copied: every parameter that requires a gradient (a full agent: its whole
model; a LoRA agent: its adapter). Frozen parameters and buffers (a LoRA base, rotary tables) are the same
tensors in both, read by both threads and written by neither. Agents that share one model object
(``share_weights_with``) or one LoRA base share one copy, as they share the original. The copy costs
:func:`copy_bytes` of memory on the agents' devices (no gradients, no optimiser state).
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
from typing import Sequence

import torch


def _whole(model: torch.nn.Module) -> torch.nn.Module:
    """The module that holds ``model``'s tensors: a LoRA view's shared base (``models/lora.py``), else itself."""
    base = getattr(getattr(model, "shared", None), "peft_model", None)
    return base if base is not None else model


def _frozen(models: Sequence[torch.nn.Module]) -> dict[int, torch.Tensor]:
    """id -> tensor of every parameter without a gradient and every buffer of ``models`` (what the copy shares)."""
    out: dict[int, torch.Tensor] = {}
    for m in models:
        whole = _whole(m)
        out.update({id(t): t for t in whole.parameters() if not t.requires_grad})
        out.update({id(t): t for t in whole.buffers()})
    return out


def sampling_copies(agents: Sequence) -> list:
    """Agents like ``agents`` (same config, tokenizer, name and index) whose models are copies: trainable
    parameters copied, frozen ones shared. One deep copy of all the models together keeps what they share
    (one model object, one LoRA base, tied embeddings) shared in the copy."""
    models = [a.model for a in agents]
    memo: dict = dict(_frozen(models))
    copies = copy.deepcopy(models, memo)
    for c in copies:
        c.eval()  # the sampling policy: no dropout (generate and the behaviour log-probs run in eval mode)
    return [dataclasses.replace(a, model=c) for a, c in zip(agents, copies)]


@torch.no_grad()
def copy_trained(sources: Sequence, targets: Sequence) -> None:
    """Write the trained parameters of each agent in ``sources`` into its copy in ``targets`` (same order; one
    write per distinct model). Raises when the two do not line up (a copy of another team)."""
    seen: set[int] = set()
    for src, dst in zip(sources, targets):
        if id(src.model) in seen:
            continue
        seen.add(id(src.model))
        pairs = list(zip(src.model.named_parameters(), dst.model.named_parameters()))
        for (name, p), (other, q) in pairs:
            if name != other or p.shape != q.shape:
                raise ValueError(f"{src.name}: the sampling copy's parameter {other} does not match {name}")
            if p.requires_grad and p is not q:
                q.copy_(p)


def copy_bytes(originals: Sequence, copies: Sequence) -> int:
    """Bytes the copies hold beyond the originals (each tensor of a copy that is not an original's, once)."""
    own = {id(t) for a in originals for t in itertools.chain(_whole(a.model).parameters(), _whole(a.model).buffers())}
    extra = {id(t): t for c in copies for t in itertools.chain(_whole(c.model).parameters(), _whole(c.model).buffers())
             if id(t) not in own}
    return sum(t.numel() * t.element_size() for t in extra.values())


__all__ = ["copy_bytes", "copy_trained", "sampling_copies"]
