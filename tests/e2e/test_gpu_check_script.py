"""benchmarks/gpu_check.{sh,py} run on GPUs only in sessions that are lent one: keep them runnable here.

The Python check runs its CPU smoke mode (a tiny model, one-rank gloo group instead of NCCL), so a
change to the trainer's API breaks this test rather than the next GPU session's few minutes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benchmarks" / "gpu_check.py"


def _run(*args: str, tmp_path: Path) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, str(CHECK), "--model", "tiny", "--device", "cpu", *args],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])


def test_sharded_resume_check_runs_in_a_one_rank_group(tmp_path):
    r = _run("--label", "s", "--sharding", "fsdp", "--one-rank-group", "--resume-check", "--steps", "2",
             "--out", str(tmp_path / "run"), tmp_path=tmp_path)
    assert r["sharded"] and r["resumed_at"] == 1 and r["final_step"] == 2 and r["steps_logged"] == 2
    assert r["final_folders_loaded"] == 2 and r["counters"]["optimizer_steps"] == 4
    assert (tmp_path / "run" / "checkpoint-1" / "agent0" / "dcp").is_dir()


def test_floor_and_central_critic_run(tmp_path):
    assert _run("--label", "f", "--floor", "--steps", "1", tmp_path=tmp_path)["s_per_step"] > 0
    r = _run("--label", "m", "--algorithm", "maac", "--critic-model", "tiny", "--steps", "1", tmp_path=tmp_path)
    assert r["algorithm"] == "maac" and r["counters"]["optimizer_steps"] == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_shell_check_refuses_without_cuda():
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], capture_output=True, text=True,
                         env={**os.environ, "PYTHON": sys.executable}, timeout=120)
    assert out.returncode == 2 and "no CUDA GPU visible" in out.stderr
