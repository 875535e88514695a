"""Unprivileged uids for sandbox workers, and killing everything a uid runs.

Each worker gets a uid of its own (not in /etc/passwd), claimed across
processes with an flock, so one job's fork bomb cannot use up another job's
RLIMIT_NPROC, jobs cannot signal each other, and after a job every process of
that uid can be killed, including ones that left the process group.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import signal
import tempfile

UID_RANGE = range(61000, 65000)


def running_as_root() -> bool:
    return os.geteuid() == 0


def claim_uids(n: int) -> list[tuple[int, int]]:
    """Claim ``n`` unused uids; returns (uid, lock_fd) pairs; release with :func:`release`."""
    lock_dir = os.path.join(tempfile.gettempdir(), "comarl-sandbox-uids")
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    used = {p.pw_uid for p in pwd.getpwall()}
    claimed: list[tuple[int, int]] = []
    for uid in UID_RANGE:
        if len(claimed) == n:
            return claimed
        if uid in used:
            continue
        fd = os.open(os.path.join(lock_dir, str(uid)), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        claimed.append((uid, fd))
    if len(claimed) < n:
        release(claimed)
        raise RuntimeError(f"no free sandbox uid left in {UID_RANGE}")
    return claimed


def release(claimed: list[tuple[int, int]]) -> None:
    for _, fd in claimed:
        os.close(fd)  # closing drops the flock


def pids_of_uid(uid: int) -> list[int]:
    """Pids whose real uid is ``uid`` (read from /proc)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(name))
                        break
        except (OSError, ValueError, IndexError):
            continue  # the process is gone
    return pids


def kill_uid(uid: int, rounds: int = 20) -> int:
    """SIGKILL every process of ``uid`` until none is left; returns how many were hit."""
    if uid not in UID_RANGE:  # never the trainer's own user
        raise ValueError(f"refusing to kill uid {uid}: not a sandbox uid")
    hit = 0
    for _ in range(rounds):  # a fork bomb may fork between listing and killing
        pids = pids_of_uid(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                hit += 1
            except ProcessLookupError:
                pass
    return hit
