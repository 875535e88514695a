"""`comarl eval` on the coding and writing environments: task summaries (pass@k, levels, ROUGE) in the JSON."""
import json
from pathlib import Path


from comarl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_eval_humaneval_smoke_reports_pass_at_k(tmp_path, monkeypatch, capsys, shared_data):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "he.json"
    rc = main(["eval", "configs/coding/humaneval_smoke.yaml", "--num-generations", "2", "--out", str(out),
               "data.eval.limit=2", f"train.output_dir={tmp_path}"])
    assert rc == 0
    res = json.loads(out.read_text())
    summary = res["summary"]
    assert "pass@1" in json.dumps(summary)
    assert len(res["records"]) == 2 and len(res["records"][0]["responses"]) == 2
    assert "pass@1" in capsys.readouterr().out  # the table is printed


def test_eval_tldr_smoke_reports_levels_and_rouge(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "tldr.json"
    rc = main(["eval", "configs/writing/tldr_smoke.yaml", "--num-generations", "2", "--out", str(out),
               "data.eval.limit=3"])
    assert rc == 0
    text = json.dumps(json.loads(out.read_text())["summary"]).lower()
    assert "rouge" in text and "level" in text


def test_demo_tldr_task_runs(tmp_path):
    from comarl.demo import run_demo

    hist = run_demo(task="tldr", steps=2, output_dir=str(tmp_path))
    assert len(hist) == 2 and "env/level" in hist[0]
