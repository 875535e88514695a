"""Checkpoints: per agent model (or adapter) + tokenizer + optimiser + scheduler, plus step and RNG states.

A checkpoint is written to ``checkpoint-<step>.tmp`` and renamed to
``checkpoint-<step>`` only when complete, so a kill during a save leaves the
previous checkpoint intact (a leftover ``.tmp`` folder is ignored and cleaned).
``trainer_state.json`` records the run id (``run_dir.py``); pruning only
removes checkpoints of that run.

Under ``train.sharding=fsdp`` every rank writes its shards with
``torch.distributed.checkpoint`` (:func:`save_sharded_checkpoint`):
``agent<i>/dcp/`` holds the model (or LoRA adapter) and optimiser state by
parameter name, ``agent<i>/scheduler.pt`` and the tokenizer sit beside it.
DCP reshards on load, so such a checkpoint resumes on any number of ranks,
sharded or not (a single process loads it into whole models). A checkpoint
written without sharding also resumes sharded (:func:`load_whole_into_sharded`).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

_NAME = re.compile(r"^checkpoint-(\d+)$")


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_agent_weights(agent, folder: Path, state_dict: dict | None = None) -> None:
    """save_pretrained of the model (a peft model writes its adapter only) and tokenizer.

    ``state_dict``: the weights to write instead of the live ones (a sharded model's, gathered).
    """
    from transformers.utils import logging as hf_logging

    folder.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()
    if state_dict is None:
        agent.model.save_pretrained(str(folder))
    else:
        agent.model.save_pretrained(str(folder), state_dict=state_dict)
    agent.tokenizer.save_pretrained(str(folder))


def save_checkpoint(output_dir: str | Path, step: int, agents, optimizers, schedulers, state: dict,
                    keep: int = 2, extra: dict | None = None) -> Path:
    """Write ``checkpoint-<step>``, then keep the newest ``keep`` checkpoints of ``state["run_id"]``.

    ``extra``: file name -> object saved with ``torch.save`` inside the checkpoint (e.g. critic.pt).
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"checkpoint-{step}"
    tmp = out / f"checkpoint-{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for i, agent in enumerate(agents):
        save_agent_weights(agent, tmp / f"agent{i}")
        torch.save({"optimizer": optimizers[i].state_dict(), "scheduler": schedulers[i].state_dict()},
                   tmp / f"agent{i}" / "optimizer.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    for name, obj in (extra or {}).items():
        torch.save(obj, tmp / name)
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state}, indent=2))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(out, keep, state.get("run_id"))
    return final


def save_sharded_checkpoint(output_dir: str | Path, step: int, agents, optimizers, schedulers, state: dict,
                            keep: int = 2, modules: dict | None = None, extra: dict | None = None) -> Path:
    """:func:`save_checkpoint` for sharded agents; every rank calls it (collective), rank 0 renames and prunes.

    ``modules``: ``{name: (module, optimizer or None)}`` more sharded (or whole) modules, each written with
    DCP to ``<name>/dcp`` (a critic, a reward model; :func:`load_sharded_module` reads it back);
    ``extra``: ``{file name: object}`` written by rank 0 with ``torch.save`` (:func:`load_extra`).
    """
    import torch.distributed as tdist
    import torch.distributed.checkpoint as dcp

    main = tdist.get_rank() == 0
    out = Path(output_dir)
    final, tmp = out / f"checkpoint-{step}", out / f"checkpoint-{step}.tmp"
    if main:
        out.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        for name in [f"agent{i}" for i in range(len(agents))] + list(modules or {}):
            (tmp / name).mkdir(parents=True)
    tdist.barrier()
    for i, agent in enumerate(agents):
        folder = tmp / f"agent{i}"
        dcp.save(sharded_state(agent.model, optimizers[i]), checkpoint_id=str(folder / "dcp"))
        if main:
            agent.tokenizer.save_pretrained(str(folder))
            torch.save({"scheduler": schedulers[i].state_dict()}, folder / "scheduler.pt")
    for name, (module, optimizer) in (modules or {}).items():
        dcp.save(sharded_state(module, optimizer), checkpoint_id=str(tmp / name / "dcp"))
    if main:
        for name, obj in (extra or {}).items():
            torch.save(obj, tmp / name)
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state, "sharded": True}, indent=2))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _prune(out, keep, state.get("run_id"))
    tdist.barrier()  # no rank goes on (or reads the checkpoint) before it is complete
    return final


def _state_module(model):
    """(module whose state DCP sees, key filter): a LoRA agent's shared PeftModel and its adapter's keys."""
    shared = getattr(model, "shared", None)
    if shared is not None and hasattr(model, "adapter"):
        marker = f".{model.adapter}."
        return shared.peft_model, lambda k: marker in k
    return model, lambda k: True


def sharded_state(model, optimizer) -> dict:
    """``{"model": ..., "optim": ...}`` keyed by parameter name (DTensor shards when sharded), for DCP
    (no ``"optim"`` when ``optimizer`` is None: a frozen module)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    module, keep = _state_module(model)
    weights = {k: v for k, v in get_model_state_dict(module).items() if keep(k)}
    if optimizer is None:
        return {"model": weights}
    return {"model": weights, "optim": get_optimizer_state_dict(module, optimizer)}


def load_sharded_agent(folder: Path, model, optimizer, scheduler) -> None:
    """Load ``folder/dcp`` (any number of ranks wrote it) into ``model``/``optimizer``, resharding as needed."""
    load_sharded_module(folder, model, optimizer)
    scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=False)["scheduler"])


def load_sharded_module(folder: str | Path, model, optimizer=None) -> None:
    """Load ``folder/dcp`` into ``model`` (and ``optimizer``): sharded or whole, on any number of ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)

    folder = Path(folder)
    if not (folder / "dcp").is_dir():
        raise FileNotFoundError(f"train.resume: {folder / 'dcp'} missing (was the checkpoint written by another "
                                f"algorithm, or without sharding?)")
    state = sharded_state(model, optimizer)
    dcp.load(state, checkpoint_id=str(folder / "dcp"))
    module, _ = _state_module(model)
    set_model_state_dict(module, state["model"], options=StateDictOptions(strict=False))
    if optimizer is not None:
        set_optimizer_state_dict(module, optimizer, state["optim"])


def _prune(out: Path, keep: int, run_id: str | None) -> None:
    """Remove all but the newest ``keep`` checkpoints of run ``run_id`` (other runs' are never touched)."""
    ckpts = sorted(list_checkpoints(out, run_id), key=lambda p: int(_NAME.match(p.name).group(1)))
    for p in ckpts[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)


def checkpoint_run_id(path: Path) -> str | None:
    """The run id recorded in a checkpoint (None: written before run ids, or unreadable)."""
    try:
        return json.loads((path / "trainer_state.json").read_text()).get("run_id")
    except (OSError, ValueError):
        return None


def list_checkpoints(output_dir: str | Path, run_id: str | None = None) -> list[Path]:
    """Complete checkpoints in ``output_dir`` (only run ``run_id``'s when given)."""
    out = Path(output_dir)
    if not out.exists():
        return []
    return [p for p in out.iterdir() if p.is_dir() and _NAME.match(p.name)
            and (p / "trainer_state.json").exists() and (run_id is None or checkpoint_run_id(p) == run_id)]


def checkpoint_step(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))


def latest_checkpoint(output_dir: str | Path, run_id: str | None = None) -> Path | None:
    """Newest complete checkpoint in ``output_dir`` (of run ``run_id`` when given)."""
    ckpts = list_checkpoints(output_dir, run_id)
    return max(ckpts, key=lambda p: int(_NAME.match(p.name).group(1))) if ckpts else None


def load_checkpoint(path: str | Path, agents, optimizers, schedulers) -> dict:
    """Load weights, optimiser/scheduler and RNG states in place; returns trainer_state."""
    path = Path(path)
    if not (path / "trainer_state.json").exists():
        raise FileNotFoundError(f"train.resume: {path} is not a complete checkpoint (no trainer_state.json)")
    from .sharding import is_sharded

    for i, agent in enumerate(agents):
        folder = path / f"agent{i}"
        if not folder.exists():
            raise FileNotFoundError(f"train.resume: {folder} missing (checkpoint has fewer agents?)")
        if (folder / "dcp").is_dir():  # written sharded: DCP reshards to this run
            load_sharded_agent(folder, agent.model, optimizers[i], schedulers[i])
            continue
        opt = torch.load(folder / "optimizer.pt", weights_only=False)
        if is_sharded(agent.model):  # written whole (no sharding) and resumed sharded: shard as we load
            load_whole_into_sharded(agent, folder, optimizers[i], opt["optimizer"])
        else:
            load_agent_weights(agent, folder)
            optimizers[i].load_state_dict(opt["optimizer"])
        schedulers[i].load_state_dict(opt["scheduler"])
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return json.loads((path / "trainer_state.json").read_text())


def load_whole_into_sharded(agent, folder: Path, optimizer, optimizer_state: dict) -> None:
    """A checkpoint written without sharding into a sharded agent: every rank reads the whole weights and
    AdamW state and keeps its own shards (``set_model_state_dict(full_state_dict=True)``; each optimiser state
    tensor is split like its parameter)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.tensor import DTensor, distribute_tensor

    module, keep = _state_module(agent.model)
    live = [k for k in module.state_dict() if keep(k)]
    adapter = getattr(agent.model, "adapter", None)
    if adapter is not None:  # a LoRA view: peft's saved keys are the live ones without the adapter's name
        from peft.utils import load_peft_weights

        saved = load_peft_weights(str(folder), device="cpu")
        names = {k: k.replace(f".{adapter}.", ".") for k in live}
    else:
        saved = safetensors_state(folder)
        names = {k: k for k in live}
    missing = [k for k, n in names.items() if n not in saved and not _tied(module, k)]
    if missing:
        raise RuntimeError(f"train.resume: {folder} does not match {agent.name}'s model: missing {missing[:3]}")
    full = {k: saved[n] for k, n in names.items() if n in saved}
    set_model_state_dict(module, full, options=StateDictOptions(full_state_dict=True, strict=False))
    params = [q for g in optimizer.param_groups for q in g["params"]]
    for idx, st in optimizer_state["state"].items():
        p = params[int(idx)]
        for key, v in st.items():
            if isinstance(p, DTensor) and torch.is_tensor(v) and tuple(v.shape) == tuple(p.shape):
                st[key] = distribute_tensor(v.to(p.device), p.device_mesh, p.placements)
    optimizer.load_state_dict(optimizer_state)


def load_extra(path: str | Path, name: str):
    """An object saved through ``save_checkpoint(extra=...)``."""
    f = Path(path) / name
    if not f.exists():
        raise FileNotFoundError(f"train.resume: {f} missing (was the checkpoint written by another algorithm?)")
    return torch.load(f, weights_only=False)


def load_agent_weights(agent, folder: Path) -> None:
    """Put saved weights (full model, or a peft adapter) back into the live model."""
    model = agent.model
    from ..lora import AdapterModel

    if isinstance(model, AdapterModel):  # a LoRA agent on a shared base: its adapter only
        model.load_adapter_weights(folder)
        return
    if hasattr(model, "load_adapter") and (folder / "adapter_config.json").exists() and hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        set_peft_model_state_dict(model, load_peft_weights(str(folder)))
        return
    state = safetensors_state(folder)
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [m for m in missing if not _tied(model, m)]
    if real_missing or unexpected:
        raise RuntimeError(f"checkpoint {folder} does not match the model: missing {real_missing[:3]}, "
                           f"unexpected {unexpected[:3]}")


def safetensors_state(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files of a saved model folder (shards merged)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {folder}")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def _tied(model, name: str) -> bool:
    return name.endswith("lm_head.weight") and getattr(model.config, "tie_word_embeddings", False)


def agents_from_folder(configs, folder: Path, key: str = "--checkpoint", meta: bool = False):
    """Agents of ``configs`` with the weights of ``folder/agent<i>`` (a checkpoint or ``final/`` folder).

    A full model folder is loaded directly (its own tokenizer); a LoRA adapter folder is put back on the
    config's base model (adapters only hold the difference). ``key`` names the setting in errors.
    ``meta``: the architectures only, no weights read (a sharded run's rank > 0: ``Sharding.add`` sends
    rank 0's)."""
    import dataclasses

    from ..agents import build_agents

    folders = [Path(folder) / f"agent{i}" for i in range(len(configs))]
    for f in folders:
        if not f.exists():
            raise FileNotFoundError(f"{key}: {f} does not exist")
    adapters = [(f / "adapter_config.json").exists() for f in folders]
    agents = build_agents([c if lora else dataclasses.replace(c, model=str(f), tokenizer=None, model_kwargs={},
                                                              gguf_file=None)
                           for c, f, lora in zip(configs, folders, adapters)], meta=meta)
    for agent, f, lora in zip(agents, folders, adapters):
        if lora and not meta:
            load_agent_weights(agent, f)
    return agents
