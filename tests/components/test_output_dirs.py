"""One run per output folder: a second fresh run is refused or clears it, pruning keeps to its own run,
a resumed run continues its logs, the demo gets a new folder each time."""
import json

import pytest

import comarl
from comarl.core.config_io import ConfigError
from comarl.demo import demo_setup, new_run_folder
from demo_runs import demo_trainer
from comarl.runs import checkpoint as ckpt
from comarl.runs import run_dir


_trainer = demo_trainer


def _fake_checkpoint(out, step, run_id):
    p = out / f"checkpoint-{step}"
    p.mkdir(parents=True)
    (p / "trainer_state.json").write_text(json.dumps({"step": step, **({"run_id": run_id} if run_id else {})}))
    return p


def test_run_contents_recognises_a_run_and_ignores_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "data").mkdir()
    assert run_dir.run_contents(tmp_path) == [] and run_dir.run_contents(tmp_path / "missing") == []
    (tmp_path / "metrics.jsonl").write_text("")
    _fake_checkpoint(tmp_path, 3, "a")
    (tmp_path / "checkpoint-4.tmp").mkdir()
    assert run_dir.run_contents(tmp_path) == ["checkpoint-3", "checkpoint-4.tmp", "metrics.jsonl"]


def test_second_fresh_run_is_refused_before_models_load(tmp_path):
    """The agents name a model that does not exist: building one first would fail with another error."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    agents, env, items, cfg = demo_setup("tiny", "writing", 2, str(tmp_path), 0)
    cfg.run.progress_bar = False
    with pytest.raises(ConfigError, match=r"already holds a run \(metrics\.jsonl\).*train\.run\.resume=latest.*"
                                          r"train\.run\.overwrite=true.*new train\.run\.output_dir"):
        comarl.Trainer(["/no/such/model"] * len(agents), env, items, cfg)


def test_overwrite_clears_only_run_files(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 7}\n' * 5)
    (tmp_path / "notes.txt").write_text("mine")
    _fake_checkpoint(tmp_path, 9, "old")
    _trainer(tmp_path, steps=2, overwrite=True).train()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert not (tmp_path / "checkpoint-9").exists() and (tmp_path / "checkpoint-2").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    marker = json.loads((tmp_path / "run.json").read_text())
    assert run_dir.checkpoint_run_id(tmp_path / "checkpoint-2") == marker["run_id"]


def test_pruning_removes_only_checkpoints_of_the_current_run(tmp_path):
    """Old run "a" at steps 4 and 6 (higher numbers); new run "b" saves 1, 2, 3 with keep=2:
    b keeps 2 and 3, a's two checkpoints stay untouched, legacy (no id) too."""
    for s in (4, 6):
        _fake_checkpoint(tmp_path, s, "a")
    _fake_checkpoint(tmp_path, 5, None)
    for s in (1, 2, 3):
        _fake_checkpoint(tmp_path, s, "b")
        ckpt._prune(tmp_path, 2, "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "checkpoint-3", "checkpoint-4",
                                                          "checkpoint-5", "checkpoint-6"]
    assert run_dir.latest_checkpoint(tmp_path, "b").name == "checkpoint-3"
    assert run_dir.latest_checkpoint(tmp_path).name == "checkpoint-6"


def test_resume_continues_the_run_id_and_its_logs(tmp_path, capsys):
    t = _trainer(tmp_path, steps=3, save_steps=1, save_total_limit=5)
    t.train()
    run_id = t.run_id
    import shutil

    shutil.rmtree(tmp_path / "checkpoint-3")  # as if killed after logging step 3, before its checkpoint
    with pytest.raises(ConfigError, match="already holds a run"):
        _trainer(tmp_path, steps=4)
    r = _trainer(tmp_path, steps=4, save_steps=1, save_total_limit=2, resume="latest")
    assert "resumed from checkpoint-2 (step 2 of 4)" in capsys.readouterr().out
    assert r.run_id == run_id
    r.train()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # the interrupted run's step-3 row was dropped, then step 3 ran again
    assert sorted(p.name for p in run_dir.list_checkpoints(tmp_path)) == ["checkpoint-3", "checkpoint-4"]
    assert json.loads((tmp_path / "run.json").read_text())["resumed_from"].endswith("checkpoint-2")


def test_demo_gets_a_new_folder_each_time_and_a_latest_link(tmp_path):
    a, b = new_run_folder(tmp_path), new_run_folder(tmp_path)
    assert a != b and a.parent == b.parent == tmp_path and a.is_dir() and b.is_dir()
    assert (tmp_path / "latest").resolve() == b.resolve()


def test_interrupt_mid_step_reports_last_finished_step_and_checkpoint(tmp_path):
    """Ctrl-C inside step 3 (no save_on_interrupt): stops at once; step 2 reached, checkpoint-2 is the last."""
    from comarl.training.interrupt import TrainingInterrupted

    t = _trainer(tmp_path, steps=5, save_steps=2)
    real, calls = t.update.step, []

    def step(team, batch, n):  # the update, interrupted in its third step
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(team, batch, n)

    t.update.step = step
    with pytest.raises(TrainingInterrupted) as e:
        t.train()
    assert (e.value.step, e.value.total, e.value.checkpoint) == (2, 5, tmp_path / "checkpoint-2")
    assert str(e.value) == f"interrupted after step 2 of 5; last checkpoint {tmp_path / 'checkpoint-2'}"
    assert not (tmp_path / "checkpoint-3").exists()


def test_resuming_another_folders_checkpoint_into_a_run_folder_is_refused(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ConfigError, match="already holds a run"):
        run_dir.prepare_output_dir(tmp_path / "b", str(tmp_path / "a" / "checkpoint-3"), overwrite=False)
    run_dir.prepare_output_dir(tmp_path / "b", str(tmp_path / "b" / "checkpoint-3"), overwrite=False)
    _fake_checkpoint(tmp_path / "b", 3, None)  # latest needs one (test_checkpoint_faults: the run died before it)
    run_dir.prepare_output_dir(tmp_path / "b", "latest", overwrite=False)
    assert (tmp_path / "b" / "metrics.jsonl").exists()
