"""Run folders: one run per ``output_dir``, recognised by the files a run writes.

A folder *holds a run* when it has any of :data:`RUN_FILES` or a
``checkpoint-<step>`` folder. A fresh run into such a folder is refused
(``train.run.resume=latest`` continues it, ``train.run.overwrite=true`` clears it).
Each run writes ``run.json`` with a random run id; every checkpoint records
that id, and pruning (``save_total_limit``) only removes checkpoints with the
current id, so an old run's checkpoints can never outlive the new run's.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from ..core.config_io import ConfigError

MARKER = "run.json"
RUN_FILES = (MARKER, "metrics.jsonl", "samples.jsonl", "trees.jsonl", "tensorboard", "final", "eval.json", "wandb",
             "reward.png", "demo_summary.json", "rounds.json")
"""What comarl writes into an output_dir (train.run.overwrite removes exactly these and the checkpoints)."""
_CKPT = re.compile(r"^(checkpoint-\d+(\.tmp)?|round-\d+)$")  # checkpoints; madpo_iter's round folders
_NAME = re.compile(r"^checkpoint-(\d+)$")  # a complete checkpoint's folder


def run_contents(folder: str | Path) -> list[str]:
    """Names in ``folder`` that belong to a comarl run (empty: no run there)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name in RUN_FILES or _CKPT.match(p.name))


def check_writable(folder: str | Path) -> None:
    """Create ``folder`` and write a probe file in it; a ConfigError naming train.run.output_dir if that fails."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".comarl-write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"train.run.output_dir: cannot write to {folder} ({e.strerror or e}); choose a folder "
                          f"you can write to, e.g. train.run.output_dir=runs/my_run") from None


def prepare_output_dir(folder: str | Path, resume: str | None, overwrite: bool) -> None:
    """Refuse a fresh run into a folder holding another run; clear it with ``overwrite``; check it is writable.

    Called before any model is loaded. ``resume`` of ``latest`` or of a checkpoint
    in this folder: the folder is expected to hold the run being continued (a
    checkpoint from another folder starts a run here like a fresh one); ``latest``
    in a folder without a checkpoint of its run is refused here, saying whether the
    run stopped before its first checkpoint (then ``train.run.overwrite=true`` starts again).
    """
    folder = Path(folder)
    found = run_contents(folder)
    if resume == "latest":
        if not list_checkpoints(folder, read_run_id(folder)):
            raise ConfigError(no_checkpoint_message(folder))
    continues = resume == "latest" or (resume is not None and Path(resume).resolve().parent == folder.resolve())
    if [n for n in found if n != "eval.json"] and not continues:  # `comarl eval` of base agents is no run
        if not overwrite:
            shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
            raise ConfigError(f"train.run.output_dir: {folder} already holds a run ({shown}). Continue it with "
                              f"train.run.resume=latest, replace it with train.run.overwrite=true, or pick a new "
                              f"train.run.output_dir")
        for name in found:
            p = folder / name
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    check_writable(folder)


def read_run_id(folder: str | Path) -> str | None:
    """The run id in ``folder/run.json`` (None: no marker)."""
    try:
        return json.loads((Path(folder) / MARKER).read_text()).get("run_id")
    except (OSError, ValueError):
        return None


def write_marker(folder: str | Path, run_id: str, resumed_from: str | None = None) -> None:
    """Write ``run.json`` (run id, start time, pid; the checkpoint a resumed run started from)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    info = {"run_id": run_id, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
    if resumed_from:
        info["resumed_from"] = resumed_from
    (folder / MARKER).write_text(json.dumps(info, indent=2) + "\n")


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def truncate_logs(folder: str | Path, step: int) -> None:
    """Drop metric and sample rows after ``step`` (written by the interrupted run after its last checkpoint),
    so a resumed run's logs hold each step once."""
    for name in ("metrics.jsonl", "samples.jsonl", "trees.jsonl"):
        path = Path(folder) / name
        if not path.exists():
            continue
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        keep = [ln for ln in lines if _step_of(ln) <= step]
        if len(keep) != len(lines):
            path.write_text("".join(keep), encoding="utf-8")


def _step_of(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except (ValueError, AttributeError):
        return 0


# ----------------------------------------------------------------- the run's checkpoint folders
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
    m = _NAME.match(path.name)
    if m is None:
        raise ValueError(f"{path}: not a checkpoint folder (checkpoint-<step>)")
    return int(m.group(1))


def latest_checkpoint(output_dir: str | Path, run_id: str | None = None) -> Path | None:
    """Newest complete checkpoint in ``output_dir`` (of run ``run_id`` when given), verified or not."""
    ckpts = list_checkpoints(output_dir, run_id)
    return max(ckpts, key=checkpoint_step) if ckpts else None


def no_checkpoint_message(out: Path) -> str:
    """``train.run.resume=latest`` in a folder without a checkpoint: say why and how to start again."""
    partial = sorted(p.name for p in Path(out).glob("checkpoint-*.tmp"))
    if not run_contents(out):
        return (f"train.run.resume=latest: {out} holds no run to continue (no checkpoint, no run files); drop "
                f"train.run.resume to start one there")
    how = f" ({partial[-1]} is a save that never finished)" if partial else ""
    return (f"train.run.resume=latest: the run in {out} stopped before its first checkpoint{how}, so there is "
            f"nothing to resume; start it again with train.run.overwrite=true in place of train.run.resume=latest "
            f"(this deletes its run files)")
