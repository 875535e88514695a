"""Automatic restarts of a 2-rank run (``comarl train ... --max-restarts N --nproc-per-node 2``: the launcher starts
torchrun, which stops every rank when one dies): kill -9 of one rank, and a hung step that the watchdog
(``train.run.step_timeout_s``) stops after writing every rank's thread stacks into the run folder. Each ends, after
one restart from the newest checkpoint, with the uninterrupted 2-rank run's tensors bit for bit (every rank's
random streams are in the checkpoint). Each launch takes ~20 s here (2 ranks importing on 2 busy cores)."""
import random

import pytest

from restart_runs import STEPS, child_env, config, final_state, restarts, same, train

SEED = 7  # the fault steps' RNG
TWO = ("--nproc-per-node", "2")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("restarts-ranks")
    mp = pytest.MonkeyPatch()
    child_env(mp)
    try:
        out = tmp / "reference"
        assert train(config(tmp, out, nproc=2), *TWO) == 0
    finally:
        mp.undo()
    return tmp, final_state(out)


def test_kill_9_of_one_rank_is_restarted_and_ends_bit_for_bit(reference, monkeypatch, capsys):
    tmp, ref = reference
    child_env(monkeypatch)
    step = random.Random(f"{SEED}-kill").randint(2, STEPS)
    out = tmp / "kill"
    assert train(config(tmp, out, "kill", step, rank=1, nproc=2), *TWO, "--max-restarts", "2") == 0
    [row] = restarts(out)
    assert (row["kind"], row["step"], row["resumed_from"]) == ("killed by SIGKILL", step, f"checkpoint-{step - 1}")
    assert row["cause"] == "rank 1 was killed by SIGKILL"
    diff = same(ref, final_state(out))
    assert not diff, f"{len(diff)} tensors differ from the uninterrupted run, e.g. {diff[:5]}"
    with capsys.disabled():
        print(f"\nrank 1 killed (SIGKILL) in step {step} of {STEPS}: restarted from {row['resumed_from']}, "
              f"ends bit for bit")


def test_a_hung_step_dumps_every_ranks_stacks_stops_and_is_restarted_bit_for_bit(reference, monkeypatch, capsys):
    """Rank 0 sleeps inside the reward of one step; rank 1 waits for it in a collective. Both watchdogs fire after
    step_timeout_s, each writes its stacks, and the run stops; the restart resumes and ends as the reference."""
    tmp, ref = reference
    child_env(monkeypatch)
    step = random.Random(f"{SEED}-hang").randint(2, STEPS)
    out = tmp / "hang"
    assert train(config(tmp, out, "hang", step, rank=0, nproc=2, step_timeout_s=20), *TWO, "--max-restarts", "1") == 0
    [row] = restarts(out)
    assert (row["kind"], row["step"], row["resumed_from"]) == ("hung", step, f"checkpoint-{step - 1}")
    assert row["cause"].startswith("rank ") and f"step {step}'s step ran past 20 s (train.run.step_timeout_s)" \
        in row["cause"]
    stacks = {r: (out / "stacks" / f"rank{r}.txt").read_text() for r in (0, 1)}
    assert "in step_batch" in stacks[0] and "faulty_env.py" in stacks[0]  # where rank 0 hung: the reward
    assert "Thread" in stacks[1] and "=== rank 1: step" in stacks[1]  # rank 1 (waiting) dumped its own
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("comarl: run stopped: rank 0:")]
    assert line.startswith(f"comarl: run stopped: rank 0: step {step}'s step ran past 20 s (train.run.step_timeout_s), "
                           f"in comarl/envs/error_policy.py") and "innermost faulty_env.py" in line, line
    diff = same(ref, final_state(out))
    assert not diff, f"{len(diff)} tensors differ from the uninterrupted run, e.g. {diff[:5]}"
    with capsys.disabled():
        print(f"\nrank 0 hung in step {step} of {STEPS}: both ranks' stacks written, restarted from "
              f"{row['resumed_from']}, ends bit for bit")
