"""`comarl eval` on the TravelPlanner smoke config prints the benchmark's metrics as a table."""
import json
from pathlib import Path

from comarl.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_eval_travelplanner_smoke_prints_table(tmp_path, monkeypatch, capsys, shared_data):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "travel.json"
    rc = main(["eval", "configs/travel/travelplanner_smoke.yaml", "--num-generations", "2", "--out", str(out),
               f"data.eval.source={shared_data / 'travelplanner'}", "data.eval.limit=1",
               f"train.run.output_dir={tmp_path}"])
    assert rc == 0
    printed = capsys.readouterr().out
    for row in ("delivery rate", "commonsense micro", "hard macro", "final pass rate", "logistics", "experience"):
        assert row in printed
    summary = json.loads(out.read_text())["summary"]
    assert summary["samples"] == 2 and summary["final_pass_rate"] == 0.0   # random tiny models write no plan
    assert summary["roles"]["logistics"]["parse_fail"] == 1.0
