"""benchmarks/gpu_coding_grid.sh (issue 45) runs on a GPU only in sessions lent one: its dry run here, on the CPU
with the tiny model and one held-out problem, goes through the same commands (preflight, then the five conditions
through the sandbox), so a change that breaks the script breaks this test rather than a GPU session's minutes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_coding_grid.sh"
DATA = ROOT.parent / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "humaneval").is_dir(), reason="needs ../shared/data (HumanEval)")
DRY = ("--heldout-limit 1 --steps 1 --batch-size 1 --num-generations 2 --heldout-samples 1 --max-new-tokens 8 "
       "--coding-train-limit 2 --threads 1 --in-process")


def _script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "WORKERS": "2",
            "DATA_DIR": str(DATA), "TOKENIZERS_PARALLELISM": "false", **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=full, capture_output=True, text=True, timeout=600)


@needs_data
def test_dry_run_checks_preconditions_then_runs_every_condition(tmp_path):
    out = _script(tmp_path, DEVICE="cpu", MODEL="tiny", GRID_EXTRA=DRY)
    assert out.returncode == 0, out.stderr[-3000:]
    first = out.stdout.splitlines()[0]  # the preconditions come first
    assert first.startswith("PREFLIGHT ")
    found = json.loads(first[len("PREFLIGHT "):])
    assert (found["train_problems"], found["heldout_problems"]) == (57, 164)
    assert found["sandbox"] == "canonical solution passes, wrong program fails"
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["key"] for r in rows] == [f"humaneval164/{c}/seed0" for c in
                                        ("single", "parallel", "pipeline", "magrpo", "grpo")]
    for r in rows:
        assert r["heldout_ids"] == ["HumanEval/0"] and r["train_items"] == 2 and r["device"] == "cpu"
        assert r["num_turns"] == 2 and len(r["records"][0]["samples"][0]["turns"]) >= 1
        assert not set(r["heldout_ids"]) & set(r["train_ids"])
    page = (tmp_path / "out" / "results.md").read_text()
    assert "## HumanEval, all 164 problems held out (paper preset, 2 turns): one seed, 1 held-out problem" in page


@needs_data
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_preflight_stops_before_any_run_and_names_what_is_missing(tmp_path):
    out = _script(tmp_path, DEVICE="cuda", MODEL="tiny")
    assert out.returncode == 3 and "device: --device cuda but no CUDA GPU is visible" in out.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()
    out = _script(tmp_path, DEVICE="cpu", MODEL="tiny", DATA_DIR=str(tmp_path / "nothing"))
    assert out.returncode == 3 and "data:" in out.stderr and "DATA_DIR" in out.stderr
