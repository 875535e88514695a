"""What the restart tests share (test_restarts*.py): a small 2-agent run of the writing task through the real
``comarl train`` command line, with a fault from ``faulty_env.py``, and a comparison of final checkpoints.

The runs are child processes (the restart launcher starts them, under torchrun for 2 ranks), each with one torch
thread, so that every run of a kind computes the same numbers; the uninterrupted run is the reference.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from comarl.cli import main
from test_faults_kill import _same, _state  # every tensor of a checkpoint, compared bit for bit

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4
AGENT = {"model": "tiny", "max_new_tokens": 4, "temperature": 1.0, "lr": 1.0e-2,
         "model_kwargs": {"hidden_size": 32, "num_layers": 1}}


def child_env(monkeypatch) -> None:
    """The children import this folder's fault environment and use one thread each."""
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), here]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)


def item_at(step: int, rank: int = 0, nproc: int = 1) -> int:
    """The first item rank ``rank`` trains on in ``step`` (items in order, 2 per rank per step: the global batch
    of step s is items 2W(s-1) .. 2W(s-1) + 2W - 1, and rank r holds every W-th of them from the r-th)."""
    return 2 * nproc * (step - 1) + rank


def config(tmp: Path, out: Path, fault: str = "none", step: int = 0, rank: int = 0, nproc: int = 1,
           marker: bool = True, **train) -> str:
    """A config file for a run into ``out`` (``nproc`` ranks) with ``fault`` in ``step`` on ``rank`` (once, with
    ``marker``)."""
    from comarl.envs.demo_writing import DEMO_POSTS

    items = tmp / "items.jsonl"
    if not items.exists():  # 16 items: 4 steps of 2 ranks x 2 items see each once
        items.write_text("".join(json.dumps({"text": p, "i": i}) + "\n" for i, p in enumerate(DEMO_POSTS)))
    args = {"fault": fault, "item": item_at(step, rank, nproc) if step else -1,
            "marker": str(out) + ".fault" if marker else None}
    cfg = {"agents": [AGENT, AGENT], "env": {"name": "faulty_env:build", "args": args},
           "data": {"train": {"source": str(items)}},
           "train": {"algorithm": "magrpo",
                     "rollout": {"num_generations": 2},
                     "run": {"batch_size": 2, "max_steps": STEPS, "save_steps": 1, "save_total_limit": 2,
                             "progress_bar": False, "report_to": ["jsonl"], "log_samples_steps": 0, "seed": 0,
                             "shuffle": False, "output_dir": str(out), "restart_backoff_s": 0.2,
                             **train}}}
    path = tmp / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def train(cfg: str, *flags: str) -> int:
    """``comarl train CFG FLAGS``, in this process (the launcher; the runs are its children)."""
    return main(["train", cfg, *flags])


def final_state(out: Path) -> dict:
    return _state(out / f"checkpoint-{STEPS}")


def same(a: dict, b: dict) -> list[str]:
    """The keys where two final checkpoints differ (empty: the same tensors, bit for bit)."""
    return _same(a, b)


def restarts(out: Path) -> list[dict]:
    path = out / "restarts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
