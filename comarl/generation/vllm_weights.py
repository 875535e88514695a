"""Weights and adapters in the form a vLLM engine reads them (``vllm_engine.py``).

No vLLM import here: these are tensors, names and files.

* :func:`full_weights`: a full model's ``(checkpoint name, tensor)`` pairs from its *parameters*
  (not ``state_dict``, which FSDP2 hooks turn into shards even inside ``Sharding.gathered``), with
  the output layer of a tied-embedding model spelt out as ``lm_head.weight``: vLLM's CPU backend
  keeps a packed copy of the output layer, and a reload without that name leaves it stale.
* :func:`base_weights`: the same for the frozen base under a peft ``PeftModel`` (LoRA names
  dropped, ``base_model.model.`` and ``.base_layer`` taken out of the names).
* :func:`write_model_folder` / :func:`write_weights`: a folder vLLM can start from (``config.json``
  + ``model.safetensors``) or reload from; :func:`write_adapter`: an adapter folder
  (``adapter_config.json`` + ``adapter_model.safetensors``); :func:`gathered_adapter`: a sharded
  adapter's weights, whole, without its base.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import torch

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The adapter ranks a vLLM engine can be sized for (``max_lora_rank``)."""


def _check_whole(tensor: torch.Tensor, name: str) -> None:
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        raise RuntimeError(f"vLLM weight push: parameter {name} is sharded (train.hardware.sharding=fsdp); push inside "
                           f"Sharding.gathered(), where every rank holds the whole model")


def _tied(model) -> bool:
    config = getattr(model, "config", None)
    return bool(getattr(config, "tie_word_embeddings", False))


def full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of every parameter of a HF causal LM, detached, plus ``lm_head.weight`` when tied.

    Raises:
        RuntimeError: a parameter is a DTensor (a sharded model outside its gathered block).
        TypeError: ``model`` is a LoRA view (its adapter goes through ``push_adapter``).
    """
    if hasattr(model, "shared") and hasattr(model, "adapter"):
        raise TypeError("vLLM weight push: this model is a LoRA adapter view; push its adapter "
                        "(VLLMEngine.push_adapter), the base stays frozen")
    names = set()
    for name, p in model.named_parameters():
        _check_whole(p, name)
        names.add(name)
        yield name, p.detach()
    if _tied(model) and "lm_head.weight" not in names:
        yield "lm_head.weight", model.get_output_embeddings().weight.detach()  # type: ignore[operator]  # HF method


def base_weights(peft_model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of the frozen base under a peft ``PeftModel``, in the base model's own names."""
    base = peft_model.get_base_model()  # type: ignore[operator]  # peft method, hidden by nn.Module's __getattr__
    names = set()
    for name, p in base.named_parameters():
        if "lora_" in name:
            continue
        _check_whole(p, name)
        clean = name.replace(".base_layer.", ".")
        names.add(clean)
        yield clean, p.detach()
    if _tied(base) and "lm_head.weight" not in names:
        out = base.get_output_embeddings()
        yield "lm_head.weight", getattr(out, "base_layer", out).weight.detach()


def write_weights(weights: Iterator[tuple[str, torch.Tensor]], folder: str | Path) -> Path:
    """Write ``weights`` as ``folder/model.safetensors`` (tied tensors copied: safetensors refuses shared storage)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    seen: set[int] = set()
    state = {}
    for name, t in weights:
        t = t.to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        state[name] = t.clone() if ptr in seen else t
        seen.add(ptr)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def write_model_folder(model: torch.nn.Module, folder: str | Path) -> Path:
    """A folder a vLLM engine starts from: ``config.json`` and the model's weights (the LoRA base for a
    ``PeftModel``); no tokenizer (the engine takes token ids and returns token ids)."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    is_peft = hasattr(model, "get_base_model") and hasattr(model, "peft_config")
    base = model.get_base_model() if is_peft else model  # type: ignore[operator]  # peft method (checked above)
    config = base.config.to_dict()  # type: ignore[operator, union-attr]  # a transformers model's config
    config.pop("quantization_config", None)  # a de-quantised GGUF model is plain float weights now
    (folder / "config.json").write_text(json.dumps(config, indent=2, default=str))
    write_weights(base_weights(model) if is_peft else full_weights(model), folder)
    return folder


def write_adapter(adapter_model, folder: str | Path, state_dict: dict | None = None) -> Path:
    """Write one LoRA adapter (a :class:`comarl.models.lora.AdapterModel`, or anything whose ``save_pretrained(folder)``
    writes ``adapter_config.json`` + ``adapter_model.safetensors``) into a fresh ``folder``; ``state_dict``: the
    adapter's weights gathered from FSDP2 shards (:func:`gathered_adapter`)."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    if state_dict is None:
        adapter_model.save_pretrained(folder)
    else:
        adapter_model.save_pretrained(folder, state_dict=state_dict)
    if not (folder / "adapter_config.json").exists():
        raise ValueError(f"write_adapter: {type(adapter_model).__name__}.save_pretrained wrote no adapter_config.json "
                         f"into {folder}; pass a LoRA adapter view (comarl.models.lora.AdapterModel)")
    return folder


def gathered_adapter(adapter_model) -> dict[str, torch.Tensor]:
    """A sharded LoRA agent's adapter, whole: its own parameters gathered one tensor at a time (a collective:
    every rank calls it for the same adapters in the same order). The frozen base is not gathered: an adapter
    push costs the adapter's size in memory and on the wire, never the base's."""
    from torch.distributed.tensor import DTensor

    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
            for k, v in adapter_model.state_dict().items()}


def lora_rank_slot(r: int) -> int:
    """The smallest engine ``max_lora_rank`` that holds rank ``r``, e.g. 4 -> 8, 16 -> 16."""
    for slot in LORA_RANKS:
        if slot >= r:
            return slot
    raise ValueError(f"LoRA rank {r} is above the largest rank a vLLM engine serves ({LORA_RANKS[-1]})")
