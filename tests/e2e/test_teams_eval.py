"""`comarl eval` on a team in stages: n joint responses per item as for any team, and a per-stage block."""
import json
from pathlib import Path

from comarl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_eval_prints_per_stage_metrics_of_the_solver_chain(tmp_path, monkeypatch, capsys, shared_data):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "chain.json"
    rc = main(["eval", "configs/teams/mbpp_chain_smoke.yaml", "--num-generations", "2", "--out", str(out),
               "data.eval.limit=2", f"train.run.output_dir={tmp_path}"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "stages:" in printed
    assert "stage 0 [branch]: solver (completion_len" in printed
    assert "stage 1 [aligned]: verifier" in printed and "stage 2 [aligned]: fixer" in printed
    assert "env/draft_passed_all" in printed and "pass@1" in printed
    res = json.loads(out.read_text())
    assert len(res["records"]) == 2 and all(len(r["responses"]) == 2 for r in res["records"])  # n per item
    assert all(len(resp) == 3 for r in res["records"] for resp in r["responses"])


def test_eval_of_a_planner_team_has_n_leaves_per_item(tmp_path, monkeypatch, capsys, shared_data):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "plan.json"
    assert main(["eval", "configs/teams/humaneval_planner_smoke.yaml", "--num-generations", "3", "--out", str(out),
                 "data.eval.limit=1", f"train.run.output_dir={tmp_path}"]) == 0
    res = json.loads(out.read_text())
    assert len(res["records"][0]["responses"]) == 3  # 3 plans, one program each (not 3 x 3)
    assert res["metrics"]["tree/leaves"] == 3 and "stage 1 [branch]: coder" in capsys.readouterr().out
