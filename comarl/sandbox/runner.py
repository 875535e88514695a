"""Parent side of one job: spawn the harness, feed it, watch the clock, read results.

Two clocks kill the whole job (process group, uid, cgroup): ``total_timeout_s``
after the spawn, and ``test_timeout_s + HARD_GRACE_S`` after the harness's last
record once it has sent one, whatever the processes inside do.
"""
from __future__ import annotations

import json
import os
import struct
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from comarl.sandbox.cgroups import JobCgroup
from comarl.sandbox.types import SandboxLimits, TestJob, TestReport
from comarl.sandbox.uids import kill_uid
from comarl.sandbox.worker_view import worker_view

HARNESS = Path(__file__).with_name("harness.py")
MAX_RESULT_BYTES = 1 << 20
DRAIN_S = 1.0  # after the child exits, how long leftover output may still arrive
HARD_GRACE_S = 1.0  # a phase (program body, one snippet) ends by test_timeout_s + this, or the job is killed


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): e.g. isolation was refused, or a job's slot failed twice."""


class SlotFailure(SandboxError):
    """Evidence that the worker slot failed, not the program, of a kind the program cannot forge: the harness could
    not start, the job's isolation was never set up (``setup_failed``, sent before any program code runs), or the
    slot's cgroup directory was gone (only root outside the job can remove it). ``Sandbox`` rebuilds the slot and
    runs the job once more (docs/sandbox.md, "When the pool dies")."""


# the trainer's import path, for the child started without ``site``: stdlib, site-packages and .pth entries
SYS_PATH = [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]


def child_env(workdir: str) -> dict[str, str]:
    """A minimal environment: nothing of the trainer's variables is passed on."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class _Capped:
    """Keeps the first ``cap`` bytes written to it and counts the rest."""

    def __init__(self, cap: int):
        self.cap, self.data, self.dropped = cap, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        self.data += chunk[:max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _kill(pid: int, uid: int | None, cgroup: JobCgroup | None) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is not None:
        cgroup.kill_all()
    if uid is not None:
        kill_uid(uid)  # also the processes that left the group (setsid)


def _frame(obj) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack("<I", len(data)) + data


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def run_job(job: TestJob, limits: SandboxLimits, uid: int | None, cgroup: JobCgroup | None = None) -> TestReport:
    """Run ``job`` in a fresh isolated child; ``uid`` None keeps the current user; ``cgroup`` bounds the job."""
    start = time.monotonic()
    deadline = start + limits.total_timeout_s
    workdir = tempfile.mkdtemp(prefix="comarl-sbx-")
    nonce = secrets.token_hex(16)
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        # frame 1 reaches the worker too; frame 2 (tests, nonce) only the trusted harness
        view = worker_view(job.packages) if uid is not None else None
        helper = None if job.helper is None else {"program": job.helper.program, "name": job.helper.name,
                                                  "ablate": job.helper.ablate}
        payload = _frame({"program": job.program, "setup": job.setup, "workdir": workdir, "uid": uid, "gid": uid,
                          "limits": asdict(limits), "sys_path": SYS_PATH, "view": view, "helper": helper}) + _frame(
            {"nonce": nonce, "tests": list(job.tests), "entry_points": list(job.entry_points),
             "pinned": [[p.class_name, p.attribute, p.first_line, p.last_line] for p in job.pinned]})
        rfd, wfd = os.pipe()
        try:
            # -S: no site import (~40 ms a job); the harness takes our sys.path instead (site-packages included)
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(HARNESS), str(wfd)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(wfd,),
                                    cwd=workdir, env=child_env(workdir), start_new_session=True)
        except OSError as e:  # out of processes, memory or descriptors: nothing of the job has run
            os.close(rfd)
            raise SlotFailure(f"the harness could not be started ({type(e).__name__}: {e})") from e
        except BaseException:
            os.close(rfd)
            raise
        finally:
            os.close(wfd)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all three PIPE
        out, err = _Capped(limits.max_output_bytes), _Capped(limits.max_output_bytes)
        res = _Capped(MAX_RESULT_BYTES)
        try:
            if cgroup is not None:
                try:
                    cgroup.add(proc.pid)  # before it reads the job, so before it forks
                except OSError as e:  # the job has not been sent: nothing of it has run
                    raise SlotFailure(f"the slot's cgroup cannot take the job ({cgroup.missing() or e})") from e
            timed_out = _pump(proc, payload, {proc.stdout.fileno(): out, proc.stderr.fileno(): err, rfd: res},
                              deadline, uid, cgroup, rfd, limits.test_timeout_s + HARD_GRACE_S)
        finally:
            _kill(proc.pid, uid, cgroup)
            proc.wait()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                f.close()
            os.close(rfd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    gone = cgroup.missing() if cgroup is not None else None
    if gone:  # removed from outside while the job ran (the program runs as another uid in a private root)
        raise SlotFailure(f"the slot's cgroup was removed during the job ({gone}); its processes went with it")
    records = _parse(res.data, nonce)
    return _report(job, records, timed_out, proc.returncode, out, err, time.monotonic() - start, nonce)


def _pump(proc: subprocess.Popen, payload: bytes, sinks: dict, deadline: float, uid: int | None,
          cgroup: JobCgroup | None, result_fd: int, phase_s: float) -> bool:
    """Write the job, read every pipe into its sink; True when a deadline hit.

    Once a record arrived on ``result_fd`` (only the trusted harness holds it), the next one must
    come within ``phase_s``."""
    end = deadline
    sel = selectors.DefaultSelector()
    stdin = proc.stdin
    assert stdin is not None  # Popen(stdin=PIPE)
    stdin_fd = stdin.fileno()
    os.set_blocking(stdin_fd, False)
    sel.register(stdin_fd, selectors.EVENT_WRITE)
    for fd in sinks:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    sent, exited_at = 0, None
    while sel.get_map():
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
            _kill(proc.pid, uid, cgroup)  # leftovers that still hold our pipes open
        limit = end if exited_at is None else min(end, exited_at + DRAIN_S)
        if now >= limit:
            return exited_at is None
        for key, _ in sel.select(timeout=min(0.05, limit - now)):
            fd = key.fd
            try:
                if fd == stdin_fd:
                    sent += os.write(fd, payload[sent:sent + 65536])
                    if sent >= len(payload):
                        sel.unregister(fd)
                        stdin.close()
                    continue
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                sel.unregister(fd)
                continue
            if chunk:
                sinks[fd].add(chunk)
                if fd == result_fd:
                    end = min(deadline, time.monotonic() + phase_s)
            else:
                sel.unregister(fd)
    return False


def _parse(data: bytes | bytearray, nonce: str) -> list[dict]:
    """The harness's records; lines without the nonce (forged) are dropped."""
    prefix = nonce.encode() + b" "
    records = []
    for line in bytes(data).split(b"\n"):
        if line.startswith(prefix):
            try:
                rec = json.loads(line[len(prefix):])
            except ValueError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
    return records


def _report(job: TestJob, records: list[dict], timed_out: bool, returncode: int | None,
            out: _Capped, err: _Capped, duration: float, nonce: str = "") -> TestReport:
    first: dict = {}
    tests: dict[int, str | None] = {}
    calls: dict[int, int] = {}
    needed: dict[int, bool] = {}
    rebound: set[str] = set()
    for rec in records:
        k = rec.get("k")
        if k == "test" and isinstance(rec.get("i"), int):
            tests.setdefault(rec["i"], rec.get("error"))
            if isinstance(rec.get("calls"), int):
                calls.setdefault(rec["i"], rec["calls"])
        elif k == "ablated" and isinstance(rec.get("i"), int):
            needed.setdefault(rec["i"], rec.get("needed") is True)
        elif k == "rebound" and isinstance(rec.get("names"), list):
            rebound.update(str(n) for n in rec["names"])
        elif k not in first:
            first[k] = rec
    if "setup_failed" in first:  # sent before the program runs (harness.py): the program cannot send it
        raise SlotFailure(f"sandbox isolation failed: {first['setup_failed'].get('error')}; "
                          f"stderr: {err.text()[-2000:]}")
    done = "done" in first
    worker_crash = first["done"].get("crashed") if done else None
    died = ("Timeout (total)" if timed_out else
            f"Crashed: {worker_crash}" if worker_crash else f"Crashed: {_exit_text(returncode)}")
    compiled = "compiled" in first and first["compiled"].get("error") is None
    syntax_error = first["compiled"].get("error") if "compiled" in first else None
    if not compiled:
        program_error = None if "compiled" in first else died
        not_run = "NotRun: syntax error" if "compiled" in first else died
    elif "program" in first:
        program_error = first["program"].get("error")
        not_run = "NotRun: program failed" if program_error else died
    else:
        program_error = died
        not_run = "NotRun: program failed"
    errors = [tests[i] if i in tests else not_run for i in range(len(job.tests))]
    passed = [i in tests and tests[i] is None for i in range(len(job.tests))]
    mark = f"\0{nonce}:body\0".encode()  # harness.body_mark
    body, found, rest = bytes(out.data).partition(mark)
    stdout = (body + rest).decode("utf-8", errors="replace")
    program_stdout = body.decode("utf-8", errors="replace") if found else stdout
    notes = first.get("isolation", {}).get("notes")
    isolation = tuple(str(n) for n in notes) if isinstance(notes, list) else ()
    n = len(job.tests)
    helper_error = None
    if job.helper is not None:
        helper_error = str(first["helper"].get("error")) if first.get("helper", {}).get("error") is not None else (
            None if "helper" in first else not_run)
    return TestReport(compiled=compiled, syntax_error=syntax_error, program_error=program_error,
                      passed=passed, errors=errors, timed_out=timed_out,
                      crashed=bool(worker_crash) or (not done and not timed_out),
                      stdout=stdout, stderr=err.text(), duration_s=duration, isolation=isolation,
                      program_stdout=program_stdout, helper_error=helper_error,
                      helper_calls=[calls.get(i, 0) for i in range(n)] if job.helper is not None else [],
                      helper_needed=[passed[i] and needed.get(i, False) for i in range(n)]
                      if job.helper is not None else [],
                      rebound=sorted(rebound))
