"""The comparison harness's comarl side runs one step of the smallest workload, so it cannot rot.

The peer venvs (CoMLRL, TRL) are not created here; benchmarks/compare.py does that.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))


def test_comarl_runner_one_item_of_workload_a(tmp_path):
    import comarl_runner
    import workloads

    model = workloads.build_tiny_model(tmp_path / "tiny", max_text_bytes=200_000)
    out = tmp_path / "r.json"
    res = comarl_runner.main(["--workload", "a", "--model", str(model), "--batch-size", "1", "--items", "1",
                              "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["completions_generated"] == 8  # 2 agents x K=4
    assert saved["optimizer_steps"] == 2        # one per agent
    assert res["library"] == "comarl" and saved["wall_s"] > 0
