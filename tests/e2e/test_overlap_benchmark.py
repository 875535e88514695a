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


def _demo_json(before, after, gain):
    return {"heldout_before": {"mean": before}, "heldout_after": {"mean": sum(after) / len(after), "per_item": after},
            "heldout_gain": gain, "heldout_gain_stderr": 0.05, "step_s": [1.0, 3.0], "load_start": [0.5],
            "load_end": [1.5]}


def test_the_learning_comparison_pairs_posts_within_a_seed(tmp_path):
    """benchmarks/overlap_learning.py's report, on made-up runs worked out by hand: seed 0's differences by post
    (k=1 - k=0) are +0.1 and -0.1 (mean 0), seed 1's +0.3 and +0.1 (mean 0.2); over seeds the mean is 0.1 with
    s.e. 0.1414 / sqrt(2) = 0.1; over the 4 cells the s.d. is sqrt(0.08 / 3) = 0.1633, s.e. 0.0816."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("overlap_learning", ROOT / "benchmarks" / "overlap_learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs = {(0, 0): [0.5, 0.7], (0, 1): [0.6, 0.6], (1, 0): [0.2, 0.4], (1, 1): [0.5, 0.5]}
    for (seed, k), after in runs.items():
        (tmp_path / f"overlap_{seed}_{k}.json").write_text(json.dumps(_demo_json(0.3, after, sum(after) / 2 - 0.3)))
    text = mod.report(tmp_path)
    assert "seed 0: after(k=1) - after(k=0) = +0.000 ± 0.100" in text
    assert "seed 1: after(k=1) - after(k=0) = +0.200 ± 0.100" in text
    assert ("k=0 +0.150, k=1 +0.250; difference k=1 - k=0 +0.100, s.e. over seeds 0.100, "
            "over seed x post cells 0.082") in text
    assert "within 2 s.e. of on-policy: True" in text
    assert "| 1 | 1 | 0.300 | 0.500 | +0.200 ± 0.050 | 2.0 | 0.5 -> 1.5 |" in text
