"""The restart launcher's rules (comarl/training/restarts.py) with a fake child in place of ``comarl train``: which
endings are restarted, the back-off, the log, the arguments of each restart, and the two ways it stops (the same
failure twice in a row at the same step; no restarts left). Real runs: tests/e2e/test_restarts*.py."""
import json

import pytest

from comarl.runs import checkpoint as ckpt
from comarl.compute.watchdog import HEARTBEAT_ENV
from comarl.training.restarts import backoff, classify, command, restart_args, supervise

TORCHRUN_KILLED = """[rank0]: RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:5554.
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
comarl.cli FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 100)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 101)
  traceback : Signal 9 (SIGKILL) received by PID 101
============================================================""".splitlines()


def test_how_a_child_ended_is_read_from_its_status_and_last_lines():
    killed = classify(-9, [], 3)
    assert (killed.kind, killed.cause, killed.step) == ("killed by SIGKILL", "the run was killed by SIGKILL", 3)
    ranked = classify(1, TORCHRUN_KILLED, 2)  # torchrun: 1; its summary names the first failed rank
    assert (ranked.code, ranked.kind, ranked.cause) == (-9, "killed by SIGKILL", "rank 1 was killed by SIGKILL")
    hung = classify(3, ["comarl: run stopped: rank 0: step 4's step ran past 20 s (...), in x.py:1 (f)"], 4)
    assert (hung.kind, hung.cause) == ("hung", "rank 0: step 4's step ran past 20 s (...), in x.py:1 (f)")
    late = classify(3, ["comarl: run stopped: rank 1: the weight push of agent1 ... took more than 5 s (...)"], 2)
    assert late.kind == "timed out"
    crash = classify(1, ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    g()",
                         "ValueError: bad thing", "exiting"], 1)
    assert (crash.kind, crash.cause) == ("ValueError: bad thing", "ValueError: bad thing")
    assert classify(7, ["no traceback here"], 0).kind == "exit status 7"


def test_a_restart_resumes_the_newest_checkpoint_or_starts_over_without_one(tmp_path):
    args = ["cfg.yaml", "train.run.resume=checkpoint-9", "agents.0.lr=1", "train.run.overwrite=true"]
    assert restart_args(args, tmp_path / "checkpoint-2") == ["cfg.yaml", "agents.0.lr=1", "train.run.resume=latest"]
    assert restart_args(args, None) == ["cfg.yaml", "train.run.resume=checkpoint-9", "agents.0.lr=1",
                                        "train.run.overwrite=true"]


def test_the_back_off_doubles_up_to_five_minutes():
    assert [backoff(n, 10) for n in (1, 2, 3, 6)] == [10, 20, 40, 300]


def test_the_command_is_python_or_torchrun():
    assert command(["-m", "comarl.cli"], 1)[1:] == ["-m", "comarl.cli"]
    assert command(["-m", "comarl.cli"], 4)[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                                    "4", "-m", "comarl.cli"]


class Child:
    """Fake ``run``: each call ends as the next scripted (status, stderr lines, step it reached, checkpoint it left)."""

    def __init__(self, out, endings):
        self.out, self.endings, self.commands = out, list(endings), []

    def __call__(self, cmd, env):
        self.commands.append(cmd)
        status, lines, step, saved = self.endings.pop(0)
        if step:
            with open(env[HEARTBEAT_ENV], "w") as f:
                json.dump({"step": step}, f)
        if saved:
            folder = self.out / f"checkpoint-{saved}"
            folder.mkdir(parents=True)
            (folder / "trainer_state.json").write_text(json.dumps({"step": saved, "run_id": None}))
            ckpt.write_manifest(folder)
        return status, lines


def run(tmp_path, endings, max_restarts=3):
    child, waits = Child(tmp_path, endings), []
    status = supervise(["cfg.yaml", "agents.0.lr=1"], tmp_path, max_restarts, 2.0, run=child, sleep=waits.append)
    log = [json.loads(x) for x in (tmp_path / "restarts.jsonl").read_text().splitlines()] \
        if (tmp_path / "restarts.jsonl").exists() else []
    return status, child, waits, log


def test_deaths_are_restarted_with_back_off_from_the_newest_checkpoint_until_it_ends_well(tmp_path, capsys):
    status, child, waits, log = run(tmp_path, [(-9, [], 1, None),  # killed before its first checkpoint
                                               (3, ["comarl: run stopped: step 3's step ran past 9 s"], 3, 2),
                                               (0, [], 4, None)])
    assert status == 0 and waits == [2.0, 4.0]
    assert [(r["restart"], r["kind"], r["step"], r["resumed_from"]) for r in log] == [
        (1, "killed by SIGKILL", 1, "the start (no checkpoint yet)"), (2, "hung", 3, "checkpoint-2")]
    assert child.commands[0][-3:] == ["cfg.yaml", "agents.0.lr=1", "train.run.max_restarts=0"]
    assert child.commands[1][-2:] == ["train.run.max_restarts=0", "train.run.overwrite=true"]
    assert child.commands[2][-2:] == ["train.run.max_restarts=0", "train.run.resume=latest"]
    assert "comarl: restart 2 of 3 in 4 s: the run died at step 3 (step 3's step ran past 9 s); resuming from " \
           "checkpoint-2" in capsys.readouterr().err


def test_the_same_failure_twice_in_a_row_at_the_same_step_stops_with_restarts_left(tmp_path, capsys):
    crash = ["Traceback (most recent call last):", "KeyError: 'x'"]
    status, _, waits, log = run(tmp_path, [(1, crash, 5, 4), (1, crash, 5, None), (0, [], 0, None)])
    assert status == 1 and len(log) == 1 and waits == [2.0]
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"comarl: not restarting: the run failed the same way twice in a row at step 5 (KeyError: 'x'); each attempt "
        f"is in {tmp_path}/restarts.jsonl")


def test_a_different_failure_or_step_is_restarted_until_none_are_left(tmp_path, capsys):
    crash = ["Traceback (most recent call last):", "KeyError: 'x'"]
    status, _, _, log = run(tmp_path, [(1, crash, 5, None), (1, crash, 6, None), (-9, [], 6, None)], max_restarts=2)
    assert status == 137 and len(log) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "comarl: not restarting: 2 restarts used (--max-restarts / train.run.max_restarts); the run died at step 6 "
        "(the run was killed by SIGKILL)")


@pytest.mark.parametrize("status", [2, 130])
def test_a_mistake_in_the_config_or_a_ctrl_c_is_not_restarted(tmp_path, status):
    assert run(tmp_path, [(status, [], 1, None)])[0] == status
    assert not (tmp_path / "restarts.jsonl").exists()


def test_a_ranks_mistake_under_torchrun_is_not_restarted(tmp_path):
    summary = ["Root Cause (first observed failure):", "  rank      : 0 (local_rank: 0)", "  exitcode  : 2 (pid: 9)"]
    assert run(tmp_path, [(1, summary, 1, None)])[0] == 2
