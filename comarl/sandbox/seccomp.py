"""A seccomp filter for the worker: the kernel calls a test job never needs are refused.

The worker runs model code as an unprivileged uid with ``no_new_privs``; what
is left of the kernel's surface is what any user may call. Some of that is
still more than running Python needs and is how sandboxes get escaped or
probed: sockets of any family but ``AF_UNIX`` (``AF_NETLINK`` and ``AF_VSOCK``
reach the kernel and the host past the network namespace), ``personality``
and ``modify_ldt``, new namespaces (``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*``
flag: a user namespace gives root-like powers inside it), ``mount`` and the
new mount API, ``ptrace`` and the cross-process memory calls, ``bpf``,
``keyctl``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (its requests
are not seen by seccomp), module loading, ``kexec``, ``reboot`` and the
clock setters. Each is answered ``EPERM``; ``clone3`` is answered ``ENOSYS``
because its flags sit behind a pointer the filter cannot read, and glibc then
falls back to ``clone``, whose flags it can. x32 system calls (x86_64) are
refused as a whole.

The filter is a classic BPF program (``struct sock_filter``) installed with
``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)``; children inherit it and it
cannot be removed. Standard library only: the harness loads this file by
path. x86_64 and aarch64 are covered; elsewhere :func:`install` returns a note
saying the filter is off.
"""
from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
X32_BIT = 0x40000000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
NEW_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80

# names refused with EPERM; numbers per architecture (asm/unistd.h)
DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "ptrace", "process_vm_readv",
          "process_vm_writev", "bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr", "pidfd_getfd", "kexec_load", "kexec_file_load",
          "init_module", "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon",
          "swapoff", "reboot", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
          "quotactl", "lookup_dcookie", "vhangup", "iopl", "ioperm", "kcmp", "personality", "modify_ldt")
AF_UNIX = 1  # the one socket family a job may create (socket, socketpair): no AF_NETLINK, AF_VSOCK, AF_INET...
ARCHES = {
    "x86_64": (0xC000003E, {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "keyctl": 250,
        "add_key": 248, "request_key": 249, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pidfd_getfd": 438,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "swapon": 167, "swapoff": 168, "reboot": 169,
        "acct": 163, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "syslog": 103, "quotactl": 179, "lookup_dcookie": 212, "vhangup": 153, "iopl": 172, "ioperm": 173,
        "kcmp": 312, "personality": 135, "modify_ldt": 154, "clone": 56, "clone3": 435, "socket": 41,
        "socketpair": 53}),
    "aarch64": (0xC00000B7, {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "keyctl": 219, "add_key": 217,
        "request_key": 218, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pidfd_getfd": 438,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "swapon": 224, "swapoff": 225, "reboot": 142,
        "acct": 89, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "syslog": 116, "quotactl": 60, "lookup_dcookie": 18, "vhangup": 58, "kcmp": 272, "personality": 92,
        "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199}),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _assemble(lines: list) -> bytes:
    """Resolve labels: each line is ``(code, k)``, ``(code, k, true_label, false_label)`` (a jump, labels or
    None for the next instruction) or a ``str`` label marking the next instruction. Classic BPF jumps only
    forward, by at most 255 instructions."""
    where: dict[str, int] = {}
    insns: list[tuple] = []
    for line in lines:
        if isinstance(line, str):
            where[line] = len(insns)
        else:
            insns.append(line)
    out = []
    for i, insn in enumerate(insns):
        code, k, *jumps = insn
        jt, jf = ((where[j] - i - 1 if j is not None else 0) for j in (jumps or [None, None]))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError(f"seccomp filter: jump out of range at instruction {i}")
        out.append(_insn(code, k, jt, jf))
    return b"".join(out)


def program(machine: str) -> bytes:
    """The filter for ``machine`` (``platform.machine()``), as the bytes of a ``sock_filter`` array.

    Layout: check the architecture (another one is refused: a 32-bit call table
    would read other numbers), load the call number, refuse x32 calls, one
    ``JEQ`` per denied call jumping to the EPERM return, ``clone3`` to ENOSYS,
    ``clone`` to a test of its flags argument, ``socket`` / ``socketpair`` to a
    test of the address family (``AF_UNIX`` only), else allow.
    """
    arch, nums = ARCHES[machine]
    denied = [nums[n] for n in DENIED if n in nums]
    lines: list = [(LD_W_ABS, 4),  # seccomp_data.arch
                   (JEQ_K, arch, None, "eperm"),
                   (LD_W_ABS, 0)]  # seccomp_data.nr
    if machine == "x86_64":
        lines.append((JGE_K, X32_BIT, "eperm", None))
    lines += [(JEQ_K, nr, "eperm", None) for nr in denied]
    lines += [(JEQ_K, nums["clone3"], "enosys", None),
              (JEQ_K, nums["clone"], "clone", None),
              (JEQ_K, nums["socket"], "socket", None),
              (JEQ_K, nums["socketpair"], "socket", None),
              "allow", (RET_K, RET_ALLOW),
              "eperm", (RET_K, RET_ERRNO | errno.EPERM),
              "enosys", (RET_K, RET_ERRNO | errno.ENOSYS),
              "clone", (LD_W_ABS, 16),  # seccomp_data.args[0], low 32 bits (little-endian): clone's flags
              (JSET_K, NEW_NAMESPACE_FLAGS, "clone_eperm", None),
              (RET_K, RET_ALLOW),
              "clone_eperm", (RET_K, RET_ERRNO | errno.EPERM),
              "socket", (LD_W_ABS, 16),  # the address family
              (JEQ_K, AF_UNIX, None, "socket_eperm"),
              (RET_K, RET_ALLOW),
              "socket_eperm", (RET_K, RET_ERRNO | errno.EPERM)]
    return _assemble(lines)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> str:
    """Install the filter on this process (and everything it forks from now on); returns a note.

    Needs ``no_new_privs`` (set here too). Raises OSError when the kernel
    refuses a filter it should take; returns an "off" note where the
    architecture is not covered or the kernel has no seccomp."""
    machine = platform.machine()
    if machine not in ARCHES:
        return f"seccomp: off (no filter for {machine})"
    code = program(machine)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(err, err)}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        if err == errno.EINVAL:
            return "seccomp: off (the kernel has no seccomp filters)"
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")
    return f"seccomp: on ({len(DENIED)} calls refused, clone without new namespaces, sockets AF_UNIX only)"
