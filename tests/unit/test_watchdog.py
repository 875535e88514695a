"""The step watchdog and calls with a time limit (comarl/compute/watchdog.py), with a fake ``stop`` in place of
leaving the process. The end-to-end runs (a hung step in a 2-rank run, a stalled vLLM push) are in
tests/e2e/test_restarts_ranks.py and tests/distributed/test_vllm_stall.py."""
import json
import re
import threading
import time

import pytest

from comarl.compute.watchdog import HEARTBEAT_ENV, Watchdog, stacks_file, timed, where_hung


class Stopped(Exception):
    pass


class Stops:
    """A fake ``stop``: records each line (the real one leaves the process)."""

    def __init__(self):
        self.lines: list[str] = []
        self.done = threading.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        self.done.set()


def test_the_limit_is_the_smaller_of_the_seconds_and_the_factor_times_the_median_step():
    w = Watchdog(limit_s=10.0, factor=3.0)
    assert w.limit("step") == 10.0  # fewer than 3 steps timed: the factor waits
    w.steps = [1.0, 4.0, 2.0]  # median 2 -> 3 x 2 = 6 < 10
    assert w.limit("step") == 6.0
    assert w.limit("checkpoint") == 10.0  # the factor is about steps only
    assert Watchdog(factor=3.0).limit("push") is None and Watchdog().limit("step") is None
    w.steps = [5.0, 5.0, 5.0]  # 15 > 10
    assert w.limit("step") == 10.0


def sleepy_reward():
    time.sleep(1.5)


def test_a_phase_past_its_limit_writes_the_stacks_and_stops_with_one_line_naming_where(tmp_path):
    stops = Stops()
    w = Watchdog(limit_s=0.3, folder=tmp_path, stop=stops)
    with w.phase("step", 7):
        sleepy_reward()
    assert stops.done.wait(5)
    [line] = stops.lines
    assert re.match(r"step 7's step ran past 0\.3 s \(train\.run\.step_timeout_s\), in \S*test_watchdog\.py:\d+ "
                    r"\(sleepy_reward\); ", line), line  # the innermost frame (here no comarl frame is on the stack)
    assert line.endswith(f"every thread's stack of every rank is in {tmp_path}/stacks")
    dump = stacks_file(tmp_path, 0).read_text()
    assert dump.startswith("=== step 7's step ran past") and "in sleepy_reward" in dump and "comarl-watchdog" not in \
        dump.splitlines()[0]
    w.close()
    assert stacks_file(tmp_path, 0).exists()  # a dump is kept


def test_a_phase_in_time_stops_nothing_and_an_empty_stacks_file_goes_at_close(tmp_path):
    stops = Stops()
    w = Watchdog(limit_s=5.0, folder=tmp_path, stop=stops)
    for step in (1, 2, 3):
        with w.phase("step", step):
            pass
        with w.phase("push", step):
            pass
    assert len(w.steps) == 3 and stops.lines == []
    assert stacks_file(tmp_path, 0).exists()  # opened for SIGTERM dumps while the run goes
    w.close()
    assert not (tmp_path / "stacks").exists()


def test_nested_phases_watch_the_earliest_deadline_and_name_the_innermost():
    stops = Stops()
    w = Watchdog(limit_s=0.6, stop=stops)  # no folder: the stacks go to stderr
    with w.phase("step", 2):
        time.sleep(0.4)
        with w.phase("push", 2):  # its own deadline (0.4 + 0.6) comes after the step's (0.6)
            time.sleep(0.8)
    assert stops.done.wait(5)
    [line] = stops.lines
    assert line.startswith("step 2's push ran past 0.6 s") and line.endswith("the stacks are above")
    w.close()


def test_the_median_rule_stops_a_step_much_longer_than_the_others():
    stops = Stops()
    w = Watchdog(factor=4.0, stop=stops)
    w.steps = [0.1, 0.1, 0.1]
    with w.phase("step", 4):
        time.sleep(0.8)
    assert stops.done.wait(5)
    assert stops.lines[0].startswith("step 4's step ran past 0.4 s (train.run.step_timeout_factor)")


def test_each_rank_names_itself_and_waits_for_the_other_ranks_dumps(tmp_path):
    stops = Stops()
    w = Watchdog(limit_s=0.2, folder=tmp_path, rank=1, world=2, stop=stops, grace_s=3.0)
    started = time.monotonic()

    def peer_dumps_late():
        time.sleep(1.0)
        stacks_file(tmp_path, 0).parent.mkdir(exist_ok=True)
        stacks_file(tmp_path, 0).write_text("=== rank 0 ...\n")

    threading.Thread(target=peer_dumps_late).start()
    with w.phase("step", 3):
        time.sleep(1.6)
    assert stops.done.wait(5)
    assert stops.lines[0].startswith("rank 1: step 3's step ran past 0.2 s")
    assert time.monotonic() - started >= 1.0  # it waited for rank 0's dump (not the whole grace)
    w.close()


def test_rank_0_writes_the_step_it_runs_where_the_restart_launcher_asks(tmp_path, monkeypatch):
    beat = tmp_path / "heartbeat.json"
    monkeypatch.setenv(HEARTBEAT_ENV, str(beat))
    with Watchdog().phase("step", 5):  # written even without limits
        assert json.loads(beat.read_text())["step"] == 5
    with Watchdog(rank=1).phase("step", 6):
        pass
    assert json.loads(beat.read_text())["step"] == 5  # only rank 0 writes it


def test_timed_returns_or_raises_what_the_call_does_and_stops_a_call_past_its_limit():
    assert timed(lambda: 41 + 1, 5, "adding", "k") == 42
    assert timed(lambda: 42, 0, "adding", "k") == 42  # 0: no limit, no thread
    with pytest.raises(ZeroDivisionError):
        timed(lambda: 1 / 0, 5, "dividing", "k")

    def stop(line):
        raise Stopped(line)

    with pytest.raises(Stopped, match=r"^rank 1: the weight push of agent1 took more than 0\.2 s \(train\.hardware\."
                                      r"vllm\.push_timeout_s\); the engine may be hung"):
        timed(lambda: time.sleep(2), 0.2, "rank 1: the weight push of agent1", "train.hardware.vllm.push_timeout_s",
              stop)


def test_timed_runs_the_call_with_the_callers_torch_threads():
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert timed(torch.get_num_threads, 5, "asking", "k") == 1
    finally:
        torch.set_num_threads(before)


def test_where_hung_names_another_threads_place():
    ready, release = threading.Event(), threading.Event()

    def parked():
        ready.set()
        release.wait(5)

    t = threading.Thread(target=parked)
    t.start()
    ready.wait(5)
    try:
        assert "(wait)" in where_hung(t.ident)
    finally:
        release.set()
        t.join()
