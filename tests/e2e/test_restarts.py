"""Automatic restarts (``comarl train ... --max-restarts N``, training/restarts.py) of a single-process run: a crash
injected at a random step ends, after one restart, with the uninterrupted run's tensors bit for bit; a run that
fails the same way twice in a row at the same step is not restarted again; the launcher's refusals. The 2-rank
faults (kill -9 of one rank, a hung step) are in test_restarts_ranks.py; the launcher's rules with a fake child in
tests/unit/test_restart_rules.py. Each run is a child process (~8 s here, most of it imports)."""
import random

import pytest

from comarl.core.config_io import ConfigError
from restart_runs import STEPS, child_env, config, final_state, restarts, same, train

SEED = 42  # the crash step's RNG


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("restarts")
    mp = pytest.MonkeyPatch()
    child_env(mp)
    try:
        out = tmp / "reference"
        assert train(config(tmp, out), "--max-restarts", "1") == 0
    finally:
        mp.undo()
    return tmp, final_state(out)


def test_a_crash_at_a_random_step_is_restarted_and_ends_bit_for_bit(reference, monkeypatch, capsys):
    tmp, ref = reference
    child_env(monkeypatch)
    step = random.Random(SEED).randint(2, STEPS)  # after the first checkpoint: the restart resumes
    out = tmp / "crash"
    assert train(config(tmp, out, "crash", step), "--max-restarts", "2") == 0
    [row] = restarts(out)
    assert row["kind"] == f"faulty_env.InjectedCrash: injected crash on item {2 * (step - 1)}"
    assert row["step"] == step
    assert row["resumed_from"] == (f"checkpoint-{step - 1}" if step > 1 else "the start (no checkpoint yet)")
    assert row["backoff_s"] == 0.2
    diff = same(ref, final_state(out))
    assert not diff, f"{len(diff)} tensors differ from the uninterrupted run, e.g. {diff[:5]}"
    err = capsys.readouterr().err
    assert f"comarl: restart 1 of 2 in 0.2 s: the run died at step {step} (faulty_env.InjectedCrash" in err
    with capsys.disabled():
        print(f"\ncrash injected at step {step} (of {STEPS}): restarted from {row['resumed_from']}, ends bit for bit")


def test_the_same_failure_twice_at_the_same_step_is_not_restarted_again(reference, monkeypatch, capsys):
    """A crash at step 2 on every attempt: one restart (from checkpoint-1), then it stops, with restarts left."""
    tmp, _ = reference
    child_env(monkeypatch)
    out = tmp / "loop"
    assert train(config(tmp, out, "crash", 2, marker=False), "--max-restarts", "5") == 1
    assert [(r["restart"], r["step"], r["resumed_from"]) for r in restarts(out)] == [(1, 2, "checkpoint-1")]
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("comarl: not restarting")]
    assert lines == [f"comarl: not restarting: the run failed the same way twice in a row at step 2 "
                     f"(faulty_env.InjectedCrash: injected crash on item 2); each attempt is in {out}/restarts.jsonl"]


def test_restarts_need_a_run_folder_and_are_not_started_by_a_rank(tmp_path, monkeypatch):
    cfg = config(tmp_path, tmp_path / "x")
    with pytest.raises(ConfigError, match="train.run.max_restarts: restarts resume from the run's checkpoints"):
        train(cfg, "train.run.output_dir=null", "--max-restarts", "1", "--debug")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="this process is already a torchrun rank"):
        train(cfg, "--max-restarts", "1", "--debug")
