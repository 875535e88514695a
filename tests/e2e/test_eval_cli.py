"""`comarl eval` on the coding and writing environments: task summaries (pass@k, levels, ROUGE) in the JSON."""
import json
from pathlib import Path


from comarl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_eval_humaneval_smoke_reports_pass_at_k(tmp_path, monkeypatch, capsys):  # shipped fixture data
    monkeypatch.chdir(ROOT)
    out = tmp_path / "he.json"
    rc = main(["eval", "configs/coding/humaneval_smoke.yaml", "--num-generations", "2", "--out", str(out),
               "data.eval.limit=2", f"train.run.output_dir={tmp_path}"])
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


def _json_out(capsys) -> str:
    return capsys.readouterr().out


def test_demo_ends_with_final_the_plot_tensorboard_and_the_command_that_reproduces_its_score(tmp_path, capsys):
    """The demo's next steps: final/ written, and the `comarl eval` command its summary prints gives its held-out
    score again, to the last digit, writing eval.json into the demo's own run folder."""
    import shlex

    from comarl.demo import run_demo

    run_demo(steps=2, output_dir=str(tmp_path))
    out = capsys.readouterr().out
    run = (tmp_path / "latest").resolve()
    summary = json.loads((run / "demo_summary.json").read_text())
    assert (run / "final" / "agent1" / "config.json").exists() and summary["final"] == str(run / "final")
    assert f"tensorboard --logdir {tmp_path / 'latest' / 'tensorboard'}" in out
    assert "reward.png" in out and "final/" in out and "checkpoint-2/" in out
    command = shlex.split(summary["eval_command"])
    assert summary["eval_command"] in out and command[:2] == ["comarl", "eval"]
    assert command[2:] == [str(run / "config.yaml"), "--checkpoint", str(run / "final")]
    assert main(command[1:]) == 0
    printed = capsys.readouterr().out
    assert "on data.eval (the environment default, split heldout: 24 items)" in printed
    scored = json.loads((run / "eval.json").read_text())["scored"]
    assert scored["score"]["per_item"] == summary["heldout_after"]["per_item"]  # the same samples, bit for bit
    assert f"score: {summary['heldout_after']['mean']:.3f} ± " in printed


def test_eval_without_an_eval_set_is_refused_not_scored_on_the_training_items(tmp_path, capsys):
    cfg = tmp_path / "no_eval.yaml"
    cfg.write_text((ROOT / "configs/demo/writing.yaml").read_text().replace(
        "  eval: {split: heldout}    # 24 posts never trained on\n", ""))
    assert main(["eval", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "data.eval:" in err and "never the training items" in err and "data.eval.split=heldout" in err


def test_eval_refuses_an_eval_set_that_overlaps_training_unless_allowed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    over = ["data.eval.split=test[2:6]", "agents.*.max_new_tokens=4"]  # rows 2, 3 are training rows (train[:4])
    assert main(["eval", str(ROOT / "configs/writing/tldr_smoke.yaml"), *over]) == 2
    assert "data.eval overlaps data.train: 2 of its 4 items" in capsys.readouterr().err
    assert main(["eval", str(ROOT / "configs/writing/tldr_smoke.yaml"), *over, "data.allow_overlap=true"]) == 0
    out = capsys.readouterr().out
    assert "4 items), 2 of them also training items (data.allow_overlap: true)" in out
    assert "not saved" in out and not list(tmp_path.rglob("eval.json"))  # untrained agents: no run to write into


def test_eval_writes_into_the_run_of_its_checkpoint_or_where_output_says(tmp_path, capsys):
    cfg = str(ROOT / "configs/demo/writing.yaml")
    fast = ["agents.*.max_new_tokens=4", "train.rollout.num_generations=2", "train.run.batch_size=2",
            "data.eval.limit=2"]
    run = tmp_path / "run"
    assert main(["train", cfg, f"train.run.output_dir={run}", "train.run.max_steps=1", "train.run.progress_bar=false",
                 "train.run.report_to=[jsonl]", *fast]) == 0
    elsewhere = tmp_path / "other_run"  # the config's output_dir is another run: nothing is written there
    assert main(["eval", cfg, "--checkpoint", str(run / "final"), f"train.run.output_dir={elsewhere}", *fast]) == 0
    assert (run / "eval.json").exists() and not elsewhere.exists()
    scored = json.loads((run / "eval.json").read_text())["scored"]
    assert scored["checkpoint"] == str(run / "final") and scored["data"]["split"] == "heldout"
    assert scored["data"]["items"] == 2 and scored["samples_per_item"] == 4 and scored["seed"] == 0
    assert main(["eval", cfg, "--checkpoint", str(run / "checkpoint-1"), "--output", str(tmp_path / "e.json"),
                 "--greedy", *fast]) == 0
    greedy = json.loads((tmp_path / "e.json").read_text())["scored"]
    assert greedy["greedy"] and greedy["samples_per_item"] == 1
    capsys.readouterr()
    assert main(["eval", cfg, "--greedy", "--num-generations", "4", *fast]) == 2
    assert "--greedy decodes one completion per item" in capsys.readouterr().err
