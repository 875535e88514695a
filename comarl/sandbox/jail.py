"""Child-side isolation: namespaces, private tmp mounts, rlimits, dropping root.

Runs inside the sandbox child (``harness.py`` loads it by file path), before
any untrusted code is read, so it uses the standard library only. Every step
that the OS may refuse (namespaces, mounts) is best effort and reported in the
returned notes; the steps that guard the trainer (rlimits, dropping root) raise.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """unshare(2); os.unshare exists only from Python 3.12."""
    if hasattr(os, "unshare"):
        os.unshare(flags)
    else:
        _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def new_network_namespace(as_root: bool) -> str:
    """Leave the host network: a new namespace with only a downed loopback."""
    try:
        if as_root:
            unshare(CLONE_NEWNET)
        else:  # unprivileged: a user namespace mapping our own ids grants the right
            uid, gid = os.getuid(), os.getgid()
            unshare(CLONE_NEWUSER | CLONE_NEWNET)
            for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                               ("/proc/self/gid_map", f"{gid} {gid} 1")):
                with open(path, "w") as f:
                    f.write(text)
        return "network: new namespace"
    except OSError as e:
        return f"network: host (unshare refused: {e})"


def private_mounts(workdir: str, uid: int, gid: int, tmp_mb: int) -> str:
    """A mount namespace where every world-writable dir is a fresh small tmpfs.

    The job's ``workdir`` (created by the parent under one of those dirs) is
    re-created, empty and owned by ``uid``, inside the new tmpfs, so nothing the
    job writes reaches the host disk and it cannot see other jobs' files.
    """
    try:
        unshare(CLONE_NEWNS)
        mount("none", "/", None, MS_REC | MS_PRIVATE)
    except OSError as e:
        return f"mounts: shared with host ({e})"
    for d in WORLD_WRITABLE:
        if os.path.isdir(d) and not os.path.islink(d):
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
    if any(workdir.startswith(d + "/") for d in WORLD_WRITABLE):
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        os.chown(workdir, uid, gid)
    return "mounts: private tmpfs " + ",".join(WORLD_WRITABLE)


def _blocker(path: str) -> tuple[str, str] | None:
    """(dir, child) for the first ancestor of ``path`` that 'other' cannot traverse."""
    parts = [p for p in path.split("/") if p]
    cur = "/"
    for name in parts:
        if not os.stat(cur).st_mode & stat.S_IXOTH:
            return cur, name
        cur = os.path.join(cur, name)
    return None


def expose(paths: list[str]) -> list[str]:
    """Make ``paths`` reachable by an unprivileged uid inside our mount namespace.

    An ancestor dir that 'other' cannot enter (e.g. /root, 0700, holding a pyenv
    Python) is covered by an empty 0755 tmpfs into which only the needed child
    is bind-mounted back; the rest of that dir stays hidden. Returns the
    covered dirs.
    """
    covered: list[str] = []
    for _ in range(4):  # a deeper blocker shows up only after the outer one is covered
        need: dict[str, set[str]] = {}
        for p in paths:
            if os.path.exists(p) and (b := _blocker(p)) is not None:
                need.setdefault(b[0], set()).add(b[1])
        if not need:
            break
        for d, children in need.items():
            fds = {c: os.open(os.path.join(d, c), os.O_PATH) for c in children}
            try:
                mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
                for c, fd in fds.items():
                    target = os.path.join(d, c)
                    if stat.S_ISDIR(os.fstat(fd).st_mode):
                        os.mkdir(target)
                    else:
                        open(target, "w").close()
                    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            finally:
                for fd in fds.values():
                    os.close(fd)
            covered.append(d)
    return covered


def new_pid_namespace(remount_proc: bool) -> str:
    """Continue as pid 1 of a new pid namespace; the original process only waits.

    When pid 1 of a namespace dies, the kernel kills and reaps every process
    left in it, so nothing the job forked outlives it, not even as a zombie
    re-parented to the trainer. The waiting process passes on pid 1's exit
    status, or dies of the same signal.
    """
    try:
        unshare(CLONE_NEWPID)
    except OSError as e:
        return f"pids: host namespace ({e})"
    pid = os.fork()
    if pid:  # the original process: wait, then mirror the outcome
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(1)
            except InterruptedError:
                continue
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
    if remount_proc:  # /proc showing only this namespace's processes
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return "pids: new namespace" + (", private /proc" if remount_proc else "")


def set_limits(cpu_s: int, memory_mb: int, file_size_mb: int, nproc: int | None) -> None:
    """Hard rlimits for this process and everything it spawns."""
    mib = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_mb * mib, file_size_mb * mib))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mib, memory_mb * mib))


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` with no supplementary groups, for good."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != gid:
        raise RuntimeError(f"privilege drop to uid {uid} failed")


def no_new_privileges() -> None:
    """No setuid binaries may raise privileges again; die with the parent."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL; must follow the uid change


def isolate(workdir: str, uid: int | None, gid: int | None, limits: dict, needed_paths: list[str]) -> list[str]:
    """All isolation steps, in order. ``uid is None``: keep the current user.

    Namespaces and mounts need root; without it only the network step is
    tried (through a user namespace). Returns notes on the best-effort steps.
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # before the fork: no core dumps anywhere
    notes = []
    if limits["no_network"]:
        notes.append(new_network_namespace(as_root=os.geteuid() == 0))
    if uid is not None:
        notes.append(private_mounts(workdir, uid, gid, tmp_mb=max(64, 4 * limits["file_size_mb"])))
        private = notes[-1].startswith("mounts: private")
        if private and (covered := expose(needed_paths)):
            notes.append("exposed through " + ",".join(covered))
        notes.append(new_pid_namespace(remount_proc=private))
    os.chdir(workdir)
    set_limits(limits["cpu_time_s"], limits["memory_mb"], limits["file_size_mb"],
               limits["max_processes"] if uid is not None else None)
    if uid is not None:
        drop_privileges(uid, gid)
    no_new_privileges()
    stdlib = os.path.dirname(os.__file__)
    if not os.access(stdlib, os.R_OK | os.X_OK):  # the program's imports would all fail
        raise RuntimeError(f"the standard library {stdlib} is not readable by uid {os.getuid()}")
    return notes
