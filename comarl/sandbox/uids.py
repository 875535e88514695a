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
import time

UID_RANGE = range(61000, 65000)


def running_as_root() -> bool:
    return os.geteuid() == 0


def lock_path(uid: int) -> str:
    return os.path.join(tempfile.gettempdir(), "comarl-sandbox-uids", str(uid))


def claim_uids(n: int) -> list[tuple[int, int]]:
    """Claim ``n`` unused uids; returns (uid, lock_fd) pairs; release with :func:`release`."""
    lock_dir = os.path.dirname(lock_path(0))
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    used = {p.pw_uid for p in pwd.getpwall()}
    claimed: list[tuple[int, int]] = []
    for uid in UID_RANGE:
        if len(claimed) == n:
            return claimed
        if uid in used:
            continue
        fd = os.open(lock_path(uid), os.O_CREAT | os.O_RDWR, 0o600)
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


def claim_intact(uid: int, fd: int) -> bool:
    """Whether our lock on ``uid`` still guards it: the lock file at its path is the one we hold. A temp cleaner
    that removes the file lets another trainer claim the uid (and kill every process of it on start-up)."""
    try:
        here, held = os.stat(lock_path(uid)), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def release(claimed: list[tuple[int, int]]) -> None:
    for _, fd in claimed:
        os.close(fd)  # closing drops the flock


def pids_of_uid(uid: int) -> list[int]:
    """Live (not zombie) pids whose real uid is ``uid``, read from /proc."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f if line[:4] in (b"Stat", b"Uid:"))
            if int(fields[b"Uid"].split()[0]) == uid and not fields[b"State"].strip().startswith(b"Z"):
                pids.append(int(name))
        except (OSError, ValueError, KeyError, IndexError):
            continue  # the process is gone
    return pids


def kill_uid(uid: int, wait_s: float = 2.0) -> int:
    """SIGKILL every process of ``uid`` until none is alive; returns how many signals were sent."""
    if uid not in UID_RANGE:  # never the trainer's own user
        raise ValueError(f"refusing to kill uid {uid}: not a sandbox uid")
    hit, deadline = 0, time.monotonic() + wait_s
    while (pids := pids_of_uid(uid)) and time.monotonic() < deadline:  # a fork bomb forks meanwhile
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                hit += 1
            except ProcessLookupError:
                pass
        time.sleep(0.005)
    return hit
