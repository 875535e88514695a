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
import stat
from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers (glibc has no wrapper)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 36
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


def private_mounts(workdir: str, uid: int, gid: int, tmp_mb: int, needed_paths: Sequence[str] = ()) -> str:
    """A mount namespace where every world-writable dir is a fresh small tmpfs.

    The job's ``workdir`` (created by the parent under one of those dirs) is
    re-created, empty and owned by ``uid``, inside the new tmpfs, so nothing the
    job writes reaches the host disk and it cannot see other jobs' files.
    ``needed_paths`` that live under those dirs (a virtual environment in
    ``/tmp``) are bind-mounted back read-only at the same place.
    """
    try:
        unshare(CLONE_NEWNS)
        mount("none", "/", None, MS_REC | MS_PRIVATE)
    except OSError as e:
        return f"mounts: shared with host ({e})"
    under = sorted({p for p in needed_paths
                    if any(p.startswith(d + "/") for d in WORLD_WRITABLE) and os.path.exists(p)})
    under = [p for i, p in enumerate(under) if not any(p.startswith(q + "/") for q in under[:i])]
    keep = {p: os.open(p, os.O_PATH) for p in under}  # opened before the tmpfs hides them
    try:
        for d in WORLD_WRITABLE:
            if os.path.isdir(d) and not os.path.islink(d):
                mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
        for p, fd in keep.items():
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(p, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(p), mode=0o755, exist_ok=True)
                open(p, "w").close()
            mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
            mount("none", p, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        for fd in keep.values():
            os.close(fd)
    if any(workdir.startswith(d + "/") for d in WORLD_WRITABLE):
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        os.chown(workdir, uid, gid)
    return "mounts: private tmpfs " + ",".join(WORLD_WRITABLE) + ("; read-only " + ",".join(under) if under else "")


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


def become_subreaper() -> None:
    """Orphans of this process's descendants (a worker whose parent died, what a pid namespace leaves when its
    first process dies) come to it, so the harness can reap every process of its job before it exits: a zombie
    still counts against the slot cgroup's ``pids.max`` until someone reaps it."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_children(wait_s: float) -> None:
    """Reap every child (and adopted orphan) until none is left or ``wait_s`` passes."""
    import time
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.002)


def new_pid_namespace() -> bool:
    """The next child this process forks is pid 1 of a new pid namespace.

    When pid 1 of a namespace dies, the kernel kills and reaps every process
    left in it, so nothing the job forked outlives it. Returns False when the
    OS refuses.
    """
    try:
        unshare(CLONE_NEWPID)
        return True
    except OSError:
        return False


def private_proc() -> None:
    """In pid 1 of the new namespace: a mount namespace of its own with a /proc of that namespace only."""
    unshare(CLONE_NEWNS)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def private_root(plan: list, workdir: str) -> str:
    """In the forked worker (root, pid 1 of its pid namespace): a root of its own, then pivot into it.

    ``plan`` comes from ``worker_view.worker_view`` (computed by the trusted parent): every
    operation is applied below an empty tmpfs, which then becomes ``/``; the old root is
    detached, so nothing of the host outside the plan is reachable by any path. Also a
    fresh IPC namespace: System V segments and POSIX message queues of other jobs are not
    visible, and this job's vanish with it (and stop being charged to the slot's memory).
    """
    import platform
    unshare(CLONE_NEWNS | CLONE_NEWIPC)
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    os.umask(0o022)
    base = workdir.rstrip("/") + ".root." + os.urandom(6).hex()  # a job's workers share its /tmp
    os.mkdir(base, 0o755)
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    for op in plan:
        kind, path = op[0], op[1]
        target = base + path
        if kind == "link":
            if not os.path.lexists(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.symlink(op[2], target)
            continue
        if kind in ("dir", "rw", "mask", "tmpfs", "proc"):
            os.makedirs(target, exist_ok=True)
        elif not os.path.lexists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "w").close()
        if kind == "mask":
            # root-owned: read-only to the job
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        elif kind == "tmpfs":
            mount("tmpfs", target, "tmpfs", MS_NOSUID, "mode=0755,size=1m")
        elif kind == "proc":
            mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        else:
            mount(path, target, None, MS_BIND)
            if kind in ("dir", "file"):
                mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(base)
    nr = PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise OSError(f"pivot_root: no syscall number known for {platform.machine()}")
    _check(_libc.syscall(ctypes.c_long(nr), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")
    mount("none", "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    try:
        os.rmdir(base)  # the empty mount point left in the job's /tmp
    except OSError:
        pass
    return "filesystem: private root (interpreter, allowed packages, job tmpfs); ipc: private"


def set_limits(cpu_s: int, memory_mb: int, file_size_mb: int, nproc: int | None, open_files: int = 256) -> None:
    """Hard rlimits for this process and everything it spawns (``open_files``: RLIMIT_NOFILE of each)."""
    mib = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_mb * mib, file_size_mb * mib))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mib, memory_mb * mib))


def paired_gid(uid: int, gid: int | None) -> int:
    """The job's gid, which comes wherever its uid does (the runner sends gid = uid); refuses a uid without one."""
    if gid is None:
        raise ValueError(f"sandbox uid {uid} came without a gid")
    return gid


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


def prepare_job(workdir: str, uid: int | None, gid: int | None, limits: dict, needed_paths: list[str]) -> dict:
    """Steps shared by the trusted harness and the worker, taken before the worker is forked.

    No core dumps; a new network namespace (best effort); as root with a uid
    to drop to, a private mount namespace (``private_mounts``, ``expose``).
    Returns what worked; ``pidns`` is False here: the harness takes a pid
    namespace for each worker it forks (``harness.spawn_worker``).
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    notes = []
    if limits["no_network"]:
        notes.append(new_network_namespace(as_root=os.geteuid() == 0))
    private = False
    if uid is not None:
        tmp_mb = max(64, 4 * limits["file_size_mb"])
        notes.append(private_mounts(workdir, uid, paired_gid(uid, gid), tmp_mb, needed_paths))
        private = notes[-1].startswith("mounts: private")
        if private and (covered := expose(needed_paths)):
            notes.append("exposed through " + ",".join(covered))
    return {"notes": notes, "private": private, "pidns": False}


def isolate_worker(workdir: str, uid: int | None, gid: int | None, limits: dict, prepared: dict,
                   view: list | None = None, seccomp=None) -> list[str]:
    """In the forked worker, before any model code; returns notes on what applied.

    With root's pid and mount namespaces (``prepared``): a session of its own (a signal
    to its process group never reaches the harness), a private root built from ``view``
    with a fresh IPC namespace and /proc. Then rlimits, the uid, no new privileges and
    the ``seccomp`` filter (the module, loaded by path by the harness)."""
    notes = []
    if prepared["pidns"] and prepared["private"]:
        os.setsid()
        if view:
            notes.append(private_root(view, workdir))
        else:
            private_proc()
            notes.append("filesystem: host, read-only where not the job's (no view given)")
    else:
        notes.append("filesystem: host; ipc: host; session: shared (needs root and mount/pid namespaces)")
    os.chdir(workdir)
    set_limits(limits["cpu_time_s"], limits["memory_mb"], limits["file_size_mb"],
               limits["max_processes"] if uid is not None else None, limits["open_files"])
    if uid is not None:
        drop_privileges(uid, paired_gid(uid, gid))
    no_new_privileges()
    if seccomp is not None:
        notes.append(seccomp.install())
    stdlib = os.path.dirname(os.__file__)
    if not os.access(stdlib, os.R_OK | os.X_OK):  # the program's imports would all fail
        raise RuntimeError(f"the standard library {stdlib} is not readable by uid {os.getuid()}")
    return notes


def become_trusted_runner(workdir: str, uid: int | None, gid: int | None) -> None:
    """The harness after the fork: the job's uid too (files the tests write are the job's), not dumpable.

    Not dumpable: a process of the same uid cannot ptrace it or open its
    ``/proc/<pid>/fd`` (matters where there is no pid namespace).
    """
    os.chdir(workdir)
    if uid is not None:
        drop_privileges(uid, paired_gid(uid, gid))
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
