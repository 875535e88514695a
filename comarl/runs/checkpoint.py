"""Checkpoints: per agent model (or adapter) + tokenizer + optimiser + scheduler, plus step and RNG states.

A checkpoint is written to ``checkpoint-<step>.tmp``; its last file is ``manifest.json`` (every file's size,
and with ``checksums`` its CRC-32), and only then is the folder renamed to ``checkpoint-<step>``. So a kill
during a save leaves the previous checkpoint intact (a leftover ``.tmp`` folder is ignored and cleaned), and a
save that runs out of disk space removes its partial folder and says how much space a checkpoint needs
(:class:`CheckpointError`). ``trainer_state.json`` records the run id (``run_dir.py``); pruning only
removes checkpoints of that run.

Loading verifies the manifest first (:func:`verify_checkpoint`: sizes always, checksums where written), so a
truncated file or a missing shard is named before any weight is read; ``train.run.resume=latest`` takes the
newest checkpoint that verifies and warns about each newer one that does not (:func:`resume_checkpoint`).
Measured for a SmolLM2-135M (540 MB of fp32 weights, 1.08 GB of AdamW state, written in 2.3-2.9 s): CRC-32
takes 1.1-1.45 s over both (0.32-0.49 s per 540 MB, one core), 40-50% on top of the save, while sizes take
~1 ms; so checksums are written only when asked (``train.run.checkpoint_checksums``).
Checkpoints without a manifest (written before manifests) load unverified.

Under ``train.hardware.sharding=fsdp`` every rank writes its shards with
``torch.distributed.checkpoint`` (:func:`save_sharded_checkpoint`):
``agent<i>/dcp/`` holds the model (or LoRA adapter) and optimiser state by
parameter name, ``agent<i>/scheduler.pt`` and the tokenizer sit beside it.
DCP reshards on load, so such a checkpoint resumes on any number of ranks,
sharded or not (a single process loads it into whole models). A checkpoint
written without sharding also resumes sharded (:func:`load_whole_into_sharded`).
"""
from __future__ import annotations

import errno
import json
import os
import random
import shutil
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..core.config_io import ConfigError, UserError
from .run_dir import checkpoint_step, latest_checkpoint, list_checkpoints, no_checkpoint_message

MANIFEST = "manifest.json"
"""Written last into a checkpoint: ``{"format": 1, "bytes": total, "files": {relative path: {"size": n,
"crc32": "8 hex digits" (with checksums)}}}``."""


class CheckpointError(UserError):
    """A checkpoint cannot be written (disk full) or read (missing, truncated or changed file); names the file."""

    kind = "checkpoint error"


# ----------------------------------------------------------------- manifest

def file_crc32(path: Path, chunk: int = 8 << 20) -> str:
    """CRC-32 of a file's bytes as 8 hex digits (zlib: ~1.4 GB/s on one core from the page cache)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def write_manifest(folder: Path, checksums: bool = False) -> dict:
    """Write ``folder/manifest.json`` listing every other file below ``folder`` (size; CRC-32 with ``checksums``)."""
    files = {}
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != MANIFEST):
        entry: dict[str, Any] = {"size": f.stat().st_size}
        if checksums:
            entry["crc32"] = file_crc32(f)
        files[f.relative_to(folder).as_posix()] = entry
    manifest = {"format": 1, "bytes": sum(e["size"] for e in files.values()), "files": files}
    (Path(folder) / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_manifest(path: Path) -> dict | None:
    """The manifest of checkpoint ``path`` (None: written before manifests); :class:`CheckpointError` if unreadable."""
    f = Path(path) / MANIFEST
    if not f.exists():
        return None
    try:
        manifest = json.loads(f.read_text())
        if not isinstance(manifest.get("files"), dict):
            raise ValueError("no file list")
        return manifest
    except (OSError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{f}: cannot be read ({e}); the checkpoint cannot be verified") from None


def verify_checkpoint(path: str | Path, checksums: bool = True) -> None:
    """Check every file of checkpoint ``path`` against its manifest: present and of the written size, and (where
    the manifest has them and ``checksums``) the same CRC-32. :class:`CheckpointError` names the first bad file.
    A checkpoint without a manifest (older) passes unverified."""
    path = Path(path)
    manifest = read_manifest(path)
    if manifest is None:
        return
    for rel, entry in manifest["files"].items():
        f = path / rel
        try:
            size = f.stat().st_size
        except OSError:
            raise CheckpointError(f"{f}: missing (the checkpoint's manifest lists it, {entry['size']} bytes)") from None
        if size != entry["size"]:
            raise CheckpointError(f"{f}: {size} bytes, but {entry['size']} were written (truncated or overwritten)")
    for rel, entry in manifest["files"].items() if checksums else ():
        if "crc32" in entry and file_crc32(path / rel) != entry["crc32"]:
            raise CheckpointError(f"{path / rel}: its bytes changed since it was written (CRC-32 "
                                  f"{file_crc32(path / rel)}, the manifest says {entry['crc32']})")


def _read(f: Path, load: Callable):
    """``load()`` (which reads file or folder ``f``); any failure becomes a :class:`CheckpointError` naming ``f``."""
    try:
        return load()
    except (CheckpointError, FileNotFoundError):
        raise
    except Exception as e:  # noqa: BLE001 (torch, safetensors and DCP raise many kinds for a damaged file)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{f}: cannot be read ({type(e).__name__}: {first[:200]})") from e


# ----------------------------------------------------------------- saving: out of space

def _tree_bytes(folder: Path) -> int:
    """Bytes of the files below ``folder`` (0 if it is gone; files removed meanwhile are skipped)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _out_of_space(error: BaseException, folder: Path) -> bool:
    """Did a write into ``folder`` fail for lack of space? The error says so (ENOSPC, EDQUOT, or their text), or
    (torch.save reports a full disk as ``unexpected pos``) a 1 MiB probe file cannot be written there now."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(t in str(e) for t in ("No space left on device", "os error 28", "Disk quota exceeded")):
            return True
        e = e.__cause__ or e.__context__
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".comarl-space-probe-") as f:
            f.write(bytes(1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as probe:
        return probe.errno in (errno.ENOSPC, errno.EDQUOT)
    return False


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _tensor_bytes(obj, seen: set | None = None) -> int:
    """Bytes of the tensors in ``obj`` (nested dicts/lists/tuples; a storage shared by tensors counted once)."""
    seen = set() if seen is None else seen
    if torch.is_tensor(obj):
        key = (obj.device.type, obj.untyped_storage().data_ptr()) if obj.device.type != "meta" else id(obj)
        if key in seen:
            return 0
        seen.add(key)
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen) for v in obj)
    return 0


def _state_bytes(agents, optimizers, extra: dict | None) -> int:
    """What :func:`save_checkpoint` writes, from the tensors: a model's weights (only its trainable ones for a
    LoRA adapter, which is all peft saves), the optimiser state and the extra objects."""
    total = 0
    for agent, opt in zip(agents, optimizers):
        model = agent.model
        if hasattr(model, "peft_config") or hasattr(model, "adapter"):
            total += _tensor_bytes([p for p in model.parameters() if p.requires_grad])
        else:
            total += _tensor_bytes(model.state_dict())
        total += _tensor_bytes(opt.state_dict().get("state", {}))
    return total + _tensor_bytes(extra or {})


def _save_failed(error: Exception, out: Path, tmp: Path, step: int, run_id: str | None, estimate: Callable[[], int],
                 clean: bool = True) -> Exception:
    """After a failed save: remove the partial ``tmp`` (``clean``) and return the error to raise: a
    :class:`CheckpointError` saying how much space a checkpoint needs when the disk was full, else ``error``."""
    full = _out_of_space(error, out)
    written = _tree_bytes(tmp)
    if clean:
        shutil.rmtree(tmp, ignore_errors=True)
    if not full:
        return error
    prev = latest_checkpoint(out, run_id)
    if prev is not None:
        manifest = _quiet(read_manifest, prev)
        needed, how = (manifest["bytes"] if manifest else _tree_bytes(prev)), f"as {prev.name} took"
    else:
        needed, how = estimate(), "its tensors alone"
    if written > needed:
        needed, how = written, "at least what was written before the disk filled"
    free = shutil.disk_usage(out).free
    kept = (f"the previous checkpoint {prev} is intact (continue from it with train.run.resume=latest once there is "
            f"room)") if prev is not None else "no earlier checkpoint of this run exists"
    return CheckpointError(
        f"checkpoint-{step} was not written: no space left in {out}. A checkpoint needs about {_size(needed)} "
        f"({how}); {_size(free)} is free now that the partial one is removed, and the save needs room for one "
        f"more checkpoint than train.run.save_total_limit. {kept[0].upper()}{kept[1:]}.")


def _quiet(fn, *args):
    try:
        return fn(*args)
    except CheckpointError:
        return None


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
                    keep: int = 2, extra: dict | None = None, checksums: bool = False) -> Path:
    """Write ``checkpoint-<step>``, then keep the newest ``keep`` checkpoints of ``state["run_id"]``.

    ``extra``: file name -> object saved with ``torch.save`` inside the checkpoint (e.g. critic.pt);
    ``checksums``: the manifest also holds each file's CRC-32 (verified on load). A save that runs out of
    space removes its partial folder and raises :class:`CheckpointError` (the previous checkpoint is intact).
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"checkpoint-{step}"
    tmp = out / f"checkpoint-{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        for i, agent in enumerate(agents):
            save_agent_weights(agent, tmp / f"agent{i}")
            torch.save({"optimizer": optimizers[i].state_dict(), "scheduler": schedulers[i].state_dict()},
                       tmp / f"agent{i}" / "optimizer.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        for name, obj in (extra or {}).items():
            torch.save(obj, tmp / name)
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state}, indent=2))
        write_manifest(tmp, checksums)  # last: a folder with a manifest is complete
    except Exception as e:
        raise _save_failed(e, out, tmp, step, state.get("run_id"),
                           lambda: _state_bytes(agents, optimizers, extra)) from e
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(out, keep, state.get("run_id"), final)
    return final


def save_sharded_checkpoint(output_dir: str | Path, step: int, agents, optimizers, schedulers, state: dict,
                            keep: int = 2, modules: dict | None = None, extra: dict | None = None,
                            checksums: bool = False) -> Path:
    """:func:`save_checkpoint` for sharded agents; every rank calls it (collective), rank 0 writes the manifest
    (after every rank's shards), renames and prunes.

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
    try:
        for i, agent in enumerate(agents):
            folder = tmp / f"agent{i}"
            dcp.save(sharded_state(agent.model, optimizers[i]), checkpoint_id=str(folder / "dcp"))
            if main:
                agent.tokenizer.save_pretrained(str(folder))
                torch.save({"scheduler": schedulers[i].state_dict()}, folder / "scheduler.pt")
        for name, (module, optimizer) in (modules or {}).items():
            dcp.save(sharded_state(module, optimizer), checkpoint_id=str(tmp / name / "dcp"))
        if main:  # dcp.save returns once every rank's shards are written
            for name, obj in (extra or {}).items():
                torch.save(obj, tmp / name)
            torch.save(rng_state(), tmp / "rng.pt")
            (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state, "sharded": True}, indent=2))
            write_manifest(tmp, checksums)
    except Exception as e:  # DCP fails on every rank when one rank's write fails; rank 0 removes the folder
        raise _save_failed(e, out, tmp, step, state.get("run_id"), lambda: 0, clean=main) from e
    if main:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _prune(out, keep, state.get("run_id"), final)
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
    scheduler.load_state_dict(_torch_load(folder / "scheduler.pt")["scheduler"])


def load_sharded_module(folder: str | Path, model, optimizer=None) -> None:
    """Load ``folder/dcp`` into ``model`` (and ``optimizer``): sharded or whole, on any number of ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)

    folder = Path(folder)
    if not (folder / "dcp").is_dir():
        raise FileNotFoundError(f"train.run.resume: {folder / 'dcp'} missing (was the checkpoint written by another "
                                f"algorithm, or without sharding?)")
    state = sharded_state(model, optimizer)
    _read(folder / "dcp", lambda: dcp.load(state, checkpoint_id=str(folder / "dcp")))
    module, _ = _state_module(model)
    set_model_state_dict(module, state["model"], options=StateDictOptions(strict=False))
    if optimizer is not None:
        set_optimizer_state_dict(module, optimizer, state["optim"])


def _prune(out: Path, keep: int, run_id: str | None, written: Path | None = None) -> None:
    """Remove all but the newest ``keep`` checkpoints of run ``run_id`` (other runs' are never touched).

    ``written``, the checkpoint just saved, is always kept: after a resume that fell back past a broken newer
    checkpoint, that one (still the newest by step until this run overwrites it) must not push it out."""
    if keep <= 0:
        return
    others = sorted((p for p in list_checkpoints(out, run_id) if p != written), key=checkpoint_step)
    room = keep - (written is not None)
    for p in others[:max(len(others) - room, 0)]:
        shutil.rmtree(p, ignore_errors=True)


def resume_checkpoint(where: str, output_dir: str | Path | None, run_id: str | None,
                      checksums: bool = True) -> Path:
    """The checkpoint ``train.run.resume`` names, verified (:func:`verify_checkpoint`).

    ``latest``: the newest checkpoint of run ``run_id`` in ``output_dir`` that verifies; each newer one that
    does not is skipped with a warning naming its bad file. Errors: no checkpoint at all (the run stopped
    before its first one; ``train.run.overwrite=true`` starts again), none that verifies, or a named checkpoint
    that does not verify (:class:`CheckpointError` naming the file).
    """
    if where != "latest":
        path = Path(where)
        if not (path / "trainer_state.json").exists():
            raise FileNotFoundError(f"train.run.resume: {path} is not a complete checkpoint (no trainer_state.json)")
        verify_checkpoint(path, checksums)
        return path
    out = Path(output_dir or ".")
    ckpts = sorted(list_checkpoints(out, run_id), key=checkpoint_step, reverse=True)
    if not ckpts:
        raise ConfigError(no_checkpoint_message(out))
    broken = []
    for path in ckpts:
        try:
            verify_checkpoint(path, checksums)
        except CheckpointError as e:
            broken.append(str(e))
            warnings.warn(f"train.run.resume=latest: skipping {path.name}, it does not verify: {e}", stacklevel=2)
            continue
        return path
    raise CheckpointError(f"train.run.resume=latest: no checkpoint in {out} verifies ({'; '.join(broken)}). Resume an "
                          f"earlier copy with train.run.resume=<folder>, or start again with train.run.overwrite=true")


def load_checkpoint(path: str | Path, agents, optimizers, schedulers, checksums: bool = True) -> dict:
    """Verify (:func:`verify_checkpoint`), then load weights, optimiser/scheduler and RNG states in place;
    returns trainer_state. A file that cannot be read raises :class:`CheckpointError` naming it."""
    path = Path(path)
    if not (path / "trainer_state.json").exists():
        raise FileNotFoundError(f"train.run.resume: {path} is not a complete checkpoint (no trainer_state.json)")
    verify_checkpoint(path, checksums)
    from ..compute.sharding import is_sharded

    for i, agent in enumerate(agents):
        folder = path / f"agent{i}"
        if not folder.exists():
            raise FileNotFoundError(f"train.run.resume: {folder} missing (checkpoint has fewer agents?)")
        if (folder / "dcp").is_dir():  # written sharded: DCP reshards to this run
            load_sharded_agent(folder, agent.model, optimizers[i], schedulers[i])
            continue
        opt = _torch_load(folder / "optimizer.pt")
        if is_sharded(agent.model):  # written whole (no sharding) and resumed sharded: shard as we load
            load_whole_into_sharded(agent, folder, optimizers[i], opt["optimizer"])
        else:
            load_agent_weights(agent, folder)
            optimizers[i].load_state_dict(opt["optimizer"])
        schedulers[i].load_state_dict(opt["scheduler"])
    set_rng_state(_torch_load(path / "rng.pt"))
    return _read(path / "trainer_state.json", lambda: json.loads((path / "trainer_state.json").read_text()))


def _torch_load(f: Path):
    return _read(f, lambda: torch.load(f, weights_only=False))


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

        saved = _read(_adapter_file(folder), lambda: load_peft_weights(str(folder), device="cpu"))
        names = {k: k.replace(f".{adapter}.", ".") for k in live}
    else:
        saved = safetensors_state(folder)
        names = {k: k for k in live}
    missing = [k for k, n in names.items() if n not in saved and not _tied(module, k)]
    if missing:
        raise RuntimeError(f"train.run.resume: {folder} does not match {agent.name}'s model: missing {missing[:3]}")
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
        raise FileNotFoundError(f"train.run.resume: {f} missing (was the checkpoint written by another algorithm?)")
    return _torch_load(f)


def load_agent_weights(agent, folder: Path) -> None:
    """Put saved weights (full model, or a peft adapter) back into the live model."""
    model = agent.model
    from ..models.lora import AdapterModel

    if isinstance(model, AdapterModel):  # a LoRA agent on a shared base: its adapter only
        from peft.utils import load_peft_weights

        # read once here so that a damaged file is named as such, not reported as an adapter mismatch
        _read(_adapter_file(folder), lambda: load_peft_weights(str(folder), device="cpu"))
        model.load_adapter_weights(folder)
        return
    if hasattr(model, "load_adapter") and (folder / "adapter_config.json").exists() and hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        set_peft_model_state_dict(model, _read(_adapter_file(folder), lambda: load_peft_weights(str(folder))))
        return
    state = safetensors_state(folder)
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [m for m in missing if not _tied(model, m)]
    if real_missing or unexpected:
        raise RuntimeError(f"checkpoint {folder} does not match the model: missing {real_missing[:3]}, "
                           f"unexpected {unexpected[:3]}")


def _adapter_file(folder: Path) -> Path:
    """The weights file of a peft adapter folder (the folder if peft wrote another name)."""
    f = Path(folder) / "adapter_model.safetensors"
    return f if f.exists() else Path(folder)


def safetensors_state(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files of a saved model folder (shards merged)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {folder}")
    state = {}
    for f in files:
        state.update(_read(f, lambda f=f: load_file(str(f))))
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

    from ..models.agents import build_agents

    verify_checkpoint(folder)  # a checkpoint's manifest, where it has one (final/ folders have none)
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
