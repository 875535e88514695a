"""Automatic restarts: ``comarl train CONFIG --max-restarts N [--nproc-per-node W]`` (or ``train.run.max_restarts``).

The launcher runs the training as a child process (``python -m comarl.cli train ...``; with ``W`` > 1 under
``torchrun --standalone``, which stops every rank when one dies) and watches how it ends:

* status 0: the run is done;
* status 2 (a mistake in the config or the data, which would happen again) or 130 (Ctrl-C): not restarted;
* anything else is a death a restart can get past: a crash, a hang or a timeout (the watchdog and the engine
  limits stop the run with status 3, ``compute/watchdog.py``), a killed process or rank. The run is started again
  from its newest checkpoint that verifies (``train.run.resume=latest``; a run that died before its first checkpoint
  starts over, ``train.run.overwrite=true``), after a back-off (``train.run.restart_backoff_s``, doubled for each
  further restart, at most 300 s), at most N times;
* a run that fails the same way twice in a row at the same step is not restarted again: it would only fail again
  (no restart loop). "The same way": the same kind (hung, killed by the same signal, the same exception line)
  at the same step (the step the child's rank 0 was running, from its heartbeat file).

Each restart is logged as one JSON line in ``OUTPUT_DIR/restarts.jsonl`` (when, the exit status, the cause, the
step, what it resumed from, the back-off), and printed as one ``comarl:`` line. NeMo RL's ``ft_launcher``
(heartbeats, ``--max-restarts``) is the model; this is the small version for one node.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..compute.watchdog import HEARTBEAT_ENV, HUNG_EXIT
from ..core.config_io import ConfigError

LOG = "restarts.jsonl"
"""The run folder's log of restarts."""
MAX_BACKOFF_S = 300.0
NO_RESTART = {2: "a mistake in the config or the data (it would stop the same way again)", 130: "Ctrl-C"}
CLI = ("-m", "comarl.cli")
"""What the child runs after ``python`` (or ``torchrun``): the command line."""


@dataclass
class Failure:
    """How one attempt ended: its exit ``status``, the exit ``code`` of the process that failed (under torchrun a
    rank's, from torchrun's summary; else the status), the ``step`` it was running (0: before the first), the
    ``kind`` two failures are compared by, and the ``cause`` a person reads."""

    status: int
    code: int
    step: int
    kind: str
    cause: str

    def same_as(self, other: "Failure | None") -> bool:
        return other is not None and (self.step, self.kind) == (other.step, other.kind)


_RANK = re.compile(r"^\[(?:default)?rank(\d+)\]:\s?")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(:|$)")
_TORCHRUN_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)")
_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_TORCHRUN_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\)")


def classify(status: int, tail: Sequence[str], step: int) -> Failure:
    """The :class:`Failure` of a child that ended with ``status`` and printed ``tail`` (its last stderr lines).

    Under torchrun the launcher's own status is 1 for any failed rank; the first failed rank (torchrun's "Root
    Cause") and its exit code or signal are in torchrun's summary, its lines carry a ``[rankN]:`` prefix, and a
    rank that stops the run prints ``comarl: run stopped: ...``.
    """
    root_at = next((i for i, x in enumerate(tail) if "Root Cause" in x), 0)
    summary = tail[root_at:]
    code = status
    m = next((m for x in summary for m in [_TORCHRUN_EXIT.search(x)] if m), None) if status == 1 else None
    root = next((m.group(1) for x in summary for m in [_TORCHRUN_RANK.match(x)] if m), None) if m else None
    if m:
        code = int(m.group(1))
    sig = next((m for x in summary for m in [_TORCHRUN_SIGNAL.search(x)] if m), None) if root else None
    ranked = [(r.group(1) if r else None, _RANK.sub("", x.rstrip())) for x in tail for r in [_RANK.match(x)]]
    stops = [x for _, x in ranked if x.startswith("comarl: run stopped:")]
    own = [x for r, x in ranked if r == root] if root is not None and any(r == root for r, _ in ranked) else \
        [x for _, x in ranked]
    exceptions = exception_lines(own)
    if stops or code == HUNG_EXIT:
        line = stops[-1].removeprefix("comarl: run stopped: ") if stops else f"exit status {HUNG_EXIT}"
        kind = "timed out" if "took more than" in line else "hung" if "ran past" in line else "stopped"
        return Failure(status, code, step, kind, line)
    if code < 0 or sig is not None:
        number = -code if code < 0 else int(sig.group(1)) if sig else 0
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"
        who = f"rank {root}" if root is not None else "the run"
        return Failure(status, code, step, f"killed by {name}", f"{who} was killed by {name}")
    if exceptions:
        return Failure(status, code, step, exceptions[-1], exceptions[-1])
    return Failure(status, code, step, f"exit status {code}", f"exit status {code}")


def exception_lines(lines: Sequence[str]) -> list[str]:
    """The exception line (``Name: message``) ending each Python traceback in ``lines``."""
    out, inside = [], False
    for x in lines:
        if x.startswith("Traceback (most recent call last):"):
            inside = True
        elif inside and x.strip() and not x[:1].isspace() and _EXCEPTION.match(x.strip()):
            out.append(x.strip())
            inside = False
    return out


def read_step(heartbeat: Path) -> int:
    """The step the child's rank 0 last started (0: none, or no heartbeat)."""
    try:
        return int(json.loads(heartbeat.read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def resume_point(out: Path) -> Path | None:
    """The newest checkpoint of the run in ``out`` that verifies (None: none yet)."""
    from ..runs import checkpoint as ckpt
    from ..runs import run_dir

    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the child warns about each broken newer checkpoint when it resumes
        return ckpt.resume_checkpoint("latest", out, run_dir.read_run_id(out))
    return None


def restart_args(args: Sequence[str], resume: Path | None) -> list[str]:
    """The child's ``train`` arguments for a restart: the user's, with ``train.run.resume=latest`` when there is a
    checkpoint to resume, else ``train.run.overwrite=true`` (a run that died before its first checkpoint starts over;
    a ``train.run.resume`` the user gave is kept then)."""
    resumes = ("train.run.resume=", "train.run.resume=")
    overwrites = ("train.run.overwrite=", "train.run.overwrite=")
    if resume is not None:
        return [a for a in args if not a.startswith(resumes + overwrites)] + ["train.run.resume=latest"]
    return [a for a in args if not a.startswith(overwrites)] + ["train.run.overwrite=true"]


def backoff(restart: int, base: float) -> float:
    """Seconds before restart number ``restart`` (1-based): ``base``, doubled each time, at most 300."""
    return min(base * 2 ** (restart - 1), MAX_BACKOFF_S)


def command(program: Sequence[str], nproc: int) -> list[str]:
    """``python PROGRAM`` or, for ``nproc`` > 1 ranks, ``python -m torch.distributed.run --standalone ...``."""
    if nproc <= 1:
        return [sys.executable, *program]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), *program]


def run_child(cmd: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``cmd``, passing its stderr through to ours; (its exit status, its last 200 stderr lines)."""
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    tail: deque[str] = deque(maxlen=200)
    pending = b""

    def pump() -> None:
        nonlocal pending
        assert proc.stderr is not None
        out = getattr(sys.stderr, "buffer", None)
        while chunk := proc.stderr.read1(65536):  # type: ignore[attr-defined]  # a BufferedReader
            if out is not None:
                out.write(chunk)
                out.flush()
            else:
                sys.stderr.write(chunk.decode(errors="replace"))
            pending += chunk
            *done, pending = pending.split(b"\n")
            tail.extend(x.decode(errors="replace") for x in done)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        status = proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reaches the child too (same process group); wait for it to end
        status = proc.wait()
    reader.join(10)
    if pending:
        tail.append(pending.decode(errors="replace"))
    return status, list(tail)


def supervise(args: Sequence[str], out: str | Path, max_restarts: int, backoff_s: float, nproc: int = 1,
              program: Sequence[str] = CLI, run: Callable = run_child, sleep: Callable[[float], None] = time.sleep,
              debug: bool = False) -> int:
    """Run ``comarl train ARGS`` (``args``: the config and its overrides) until it ends well, restarting it as the
    module docstring says; returns the exit status to leave with. ``program``: what ``python`` runs (a test's
    worker script); ``run(cmd, env) -> (status, stderr tail)`` and ``sleep``: a test's fakes."""
    out = Path(out)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    child = list(args) + ["train.run.max_restarts=0"] + (["--debug"] if debug else [])
    last: Failure | None = None
    restarts = 0
    with tempfile.TemporaryDirectory(prefix="comarl-heartbeat-") as tmp:
        heartbeat = Path(tmp) / "heartbeat.json"
        env[HEARTBEAT_ENV] = str(heartbeat)
        while True:
            heartbeat.unlink(missing_ok=True)
            status, tail = run(command(program, nproc) + ["train", *child], env)
            if status == 0:
                return 0
            failure = classify(status, tail, read_step(heartbeat))
            if failure.code in NO_RESTART:
                return failure.code
            exit_status = 128 - status if status < 0 else status
            where = f"at step {failure.step}" if failure.step else "before its first step"
            if failure.same_as(last):
                print(f"comarl: not restarting: the run failed the same way twice in a row {where} "
                      f"({failure.cause}); each attempt is in {out / LOG}", file=sys.stderr, flush=True)
                return exit_status
            if restarts >= max_restarts:
                print(f"comarl: not restarting: {restarts} restart{'s' if restarts != 1 else ''} used "
                      f"(--max-restarts / train.run.max_restarts); the run died {where} ({failure.cause})",
                      file=sys.stderr, flush=True)
                return exit_status
            restarts += 1
            resume = resume_point(out)
            child = restart_args(child, resume)
            wait = backoff(restarts, backoff_s)
            frm = resume.name if resume is not None else "the start (no checkpoint yet)"
            log(out, {"restart": restarts, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **asdict(failure),
                      "resumed_from": frm, "backoff_s": wait})
            print(f"comarl: restart {restarts} of {max_restarts} in {wait:g} s: the run died {where} "
                  f"({failure.cause}); resuming from {frm}", file=sys.stderr, flush=True)
            sleep(wait)
            last = failure


def log(out: Path, row: dict) -> None:
    """Append ``row`` to ``out/restarts.jsonl``."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOG, "a") as f:
        f.write(json.dumps(row) + "\n")


def check_supervised(cfg, max_restarts: int, nproc: int) -> None:
    """What restarts need: a run folder (to resume from and to log in), and not being a rank of torchrun
    already (the launcher starts the ranks itself)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("--max-restarts / --nproc-per-node: this process is already a torchrun rank; run "
                          "`comarl train CONFIG --max-restarts N --nproc-per-node W` without torchrun (it starts "
                          "torchrun itself)")
    if max_restarts and not cfg.train.run.output_dir:
        raise ConfigError("train.run.max_restarts: restarts resume from the run's checkpoints and log into its "
                          "folder; set train.run.output_dir")
    if nproc < 1:
        raise ConfigError(f"--nproc-per-node: must be >= 1, got {nproc}")


__all__ = ["Failure", "backoff", "check_supervised", "classify", "command", "restart_args", "resume_point",
           "supervise"]
