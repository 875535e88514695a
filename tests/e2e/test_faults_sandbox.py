"""A sandbox worker pool that dies mid-run (issue #33): a slot whose cgroup is removed or whose uid claim is lost
is rebuilt and the job run once more, logged; a second failure raises SandboxError naming the job. A job whose
processes merely died is the program's crash (0), never re-run: a program must not earn a second chance.

The rule is tested on fakes everywhere; the real pool deaths need root and a writable cgroup (skipped elsewhere).
docs/sandbox.md ("When the pool dies") and docs/faults.md describe it for users."""
import fcntl
import os
import threading
import time

import pytest

from comarl.sandbox import Sandbox, SandboxError, SandboxLimits, TestJob, TestReport
from comarl.sandbox.runner import SlotFailure
from comarl.sandbox.slots import Slot, describe_job, run_with_rerun
from comarl.sandbox.uids import kill_uid, lock_path, pids_of_uid

SLOW = TestJob(program="import time\ntime.sleep(1.0)\ndef f(x):\n    return x + 1\n", tests=("assert f(1) == 2",))
LIMITS = SandboxLimits(test_timeout_s=5.0, total_timeout_s=30.0)


def _report(passed: bool) -> TestReport:
    return TestReport(compiled=True, syntax_error=None, program_error=None, passed=[passed],
                      errors=[None if passed else "Crashed: killed by SIGKILL"], timed_out=False,
                      crashed=not passed, stdout="", stderr="", duration_s=0.1)


class Script:
    """A fake slot runner: each attempt takes the next outcome (a report, or an exception to raise)."""

    def __init__(self, *outcomes):
        self.outcomes, self.attempts, self.rebuilt, self.lines = list(outcomes), 0, 0, []

    def attempt(self, job, slot):
        self.attempts += 1
        out = self.outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out

    def rebuild(self, slot):
        self.rebuilt += 1

    def run(self):
        return run_with_rerun(SLOW, Slot(0), self.attempt, self.rebuild, "job abc (program 'x', 1 tests)",
                              self.lines.append)


# ---------------------------------------------------------------- the rule, on fakes

def test_a_slot_failure_rebuilds_the_slot_and_runs_the_job_once_more():
    s = Script(SlotFailure("the slot's cgroup was removed during the job"), _report(True))
    assert s.run().passed == [True]
    assert (s.attempts, s.rebuilt) == (2, 1)
    assert s.lines == ["sandbox: worker slot 0 failed running job abc (program 'x', 1 tests): the slot's cgroup "
                       "was removed during the job; rebuilt the slot, running the job once more"]


def test_a_second_slot_failure_is_an_error_naming_the_job_and_never_a_third_run():
    s = Script(SlotFailure("cgroup gone"), SlotFailure("setup failed"), _report(True))
    with pytest.raises(SandboxError, match=r"job abc \(program 'x', 1 tests\) failed twice for reasons outside the "
                                           r"program: cgroup gone; then, on a rebuilt slot: setup failed"):
        s.run()
    assert s.attempts == 2


def test_a_crashed_program_is_its_own_result_and_other_errors_pass_through():
    s = Script(_report(False))
    assert s.run().crashed and (s.attempts, s.rebuilt) == (1, 0)
    s = Script(KeyError("bug"))
    with pytest.raises(KeyError):
        s.run()
    assert s.rebuilt == 0


def test_a_slot_that_cannot_be_rebuilt_names_the_job():
    def rebuild(slot):
        raise SandboxError("worker slot 0's cgroup could not be created again")

    with pytest.raises(SandboxError, match=r"job abc .* failed for a reason outside the program \(cgroup gone\), "
                                           r"and its worker slot could not be rebuilt"):
        run_with_rerun(SLOW, Slot(0), Script(SlotFailure("cgroup gone")).attempt, rebuild, "job abc (program 'x', "
                       "1 tests)", print)


def test_describe_job_names_the_key_and_first_line():
    assert describe_job(SLOW, "3f2a9c1b0d4e5f") == "job 3f2a9c1b0d4e (program 'import time', 1 tests)"


# ---------------------------------------------------------------- real pool deaths (root, cgroups)

@pytest.fixture
def box():
    if os.geteuid() != 0:
        pytest.skip("worker slots own uids and cgroups only when the trainer runs as root")
    with Sandbox(LIMITS, workers=1, cache_size=0) as b:
        if b.cgroup_mode == "rlimits":
            pytest.skip("no writable cgroup here")
        yield b


def _running(slot, timeout=20.0):
    """Wait until the slot's job has processes (its harness and worker), then a little, so the program runs."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not slot.cgroup.missing() and len(slot.cgroup.pids()) >= 2:
            time.sleep(0.3)
            return True
        time.sleep(0.02)
    return False


def _take_apart(slot, times: int, remove: bool = True):
    """As a service manager stopping the trainer's scope does: kill every process of the slot's cgroup, then remove
    the cgroup; ``times`` jobs in a row (the rebuilt slot's cgroup has the same path). ``remove=False``: only kill."""
    def run():
        for _ in range(times):
            if not _running(slot):
                return
            cg = slot.cgroup
            cg.kill_all()
            if remove:
                for d in cg.dirs:
                    for _ in range(200):
                        try:
                            os.rmdir(d)
                            break
                        except OSError:
                            time.sleep(0.01)
            time.sleep(0.2)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_cgroup_removed_during_a_job_is_rebuilt_and_the_job_passes(box):
    """Before issue #33 the killed job scored 0 (crashed)."""
    slot = box.slots[0]
    helper = _take_apart(slot, 1)
    with pytest.warns(RuntimeWarning, match="removed during the job"):
        [r] = box.run_tests([SLOW])
    helper.join()
    assert r.passed == [True] and not r.crashed
    assert len(box.restarts) == 1 and "worker slot 0 failed running job" in box.restarts[0]
    assert slot.cgroup.missing() is None


def test_cgroup_removed_twice_is_an_error_naming_the_job(box):
    helper = _take_apart(box.slots[0], 2)
    with pytest.warns(RuntimeWarning), pytest.raises(SandboxError) as e:
        box.run_tests([SLOW])
    helper.join()
    assert "(program 'import time', 1 tests) failed twice for reasons outside the program" in str(e.value)
    with pytest.warns(RuntimeWarning, match="was broken"):  # the slot is rebuilt before the next job
        [r] = box.run_tests([TestJob(program="def g():\n    return 1\n", tests=("assert g() == 1",))])
    assert r.passed == [True]


def test_processes_killed_without_other_evidence_are_the_programs_crash(box):
    """The program could have killed its own harness (same uid) or made the OOM killer pick it: no second run."""
    helper = _take_apart(box.slots[0], 1, remove=False)
    [r] = box.run_tests([SLOW])
    helper.join()
    assert r.crashed and r.passed == [False] and box.restarts == []


def test_cgroup_removed_between_jobs_is_rebuilt_before_the_next(box):
    """Before issue #33: FileNotFoundError out of run_tests (the next job could not join the cgroup)."""
    job = TestJob(program="def g():\n    return 1\n", tests=("assert g() == 1",))
    box.run_tests([job])
    for d in box.slots[0].cgroup.dirs:
        os.rmdir(d)
    with pytest.warns(RuntimeWarning, match="was broken"):
        [r] = box.run_tests([TestJob(program="def g():\n    return 2\n", tests=("assert g() == 2",))])
    assert r.passed == [True] and box.slots[0].cgroup.missing() is None


def test_uid_claim_lost_and_its_processes_killed_mid_job_reruns_on_a_new_uid(box):
    """A temp cleaner removes the uid's lock file and another trainer claims the uid, killing every process of it."""
    slot = box.slots[0]
    old = slot.uid
    theirs = []

    def other_trainer():
        if _running(slot):
            os.unlink(lock_path(old))
            fd = os.open(lock_path(old), os.O_CREAT | os.O_RDWR, 0o600)  # claim_uids in the other trainer
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            theirs.append(fd)
            kill_uid(old)  # what it does on start-up with the uids it claimed

    t = threading.Thread(target=other_trainer, daemon=True)
    t.start()
    try:
        with pytest.warns(RuntimeWarning, match=f"claim on uid {old} was lost during the job"):
            [r] = box.run_tests([SLOW])
        t.join()
        assert r.passed == [True] and theirs and box.uids != [old] and not pids_of_uid(box.uids[0])
    finally:
        for fd in theirs:
            os.close(fd)
