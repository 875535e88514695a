"""benchmarks/overlap_step_time.py and overlap_gpu.sh measure on idle machines and GPUs only: keep them runnable here
(one tiny run of each mode's child; the GPU script refuses a machine without CUDA and runs nothing)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode, staleness", [("0", 0.0), ("1", 1.0)])
def test_each_mode_of_the_step_time_benchmark_runs(mode, staleness):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "overlap_step_time.py"), "--child", mode,
                          "--model", "tiny", "--steps", "1", "--warmup", "1", "--threads", "1"], cwd=ROOT,
                         capture_output=True,
                         text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    res = json.loads(line[len("RESULT "):])
    assert res["s"] > 0 and res["staleness"] == staleness and res["threads"] == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the script would measure")
def test_the_gpu_script_runs_nothing_without_a_gpu():
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "overlap_gpu.sh")], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 2 and "no CUDA GPU visible" in out.stderr
