"""Per-job limits (cgroups), and the interpreter visible in the jail wherever it lives."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from comarl.sandbox import Sandbox, SandboxLimits, TestJob
from comarl.sandbox.cgroups import JobCgroup, cgroup_version

ROOT = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, mounts and cgroups need root")

# Four children each touching `mib` MiB; the parent counts those that finished. A child holds its
# block until all four hold theirs (or 5 s pass), so the four always overlap: without that barrier a
# fast machine could let one child exit before the next allocates and the per-job sum never exceed.
FORKS = textwrap.dedent("""
    import os, select, time
    def children(mib):
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        pids = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                os.close(go_w); os.close(ready_r)
                try:
                    block = b"x" * (mib * 1024 * 1024)
                    os.write(ready_w, b"1")
                    os.read(go_r, 1)
                    os._exit(0 if len(block) else 1)
                except MemoryError:
                    os._exit(1)
            pids.append(pid)
        os.close(ready_w); os.close(go_r)
        held, ended, deadline = 0, {}, time.monotonic() + 5.0
        while held + len(ended) < 4 and time.monotonic() < deadline:
            if select.select([ready_r], [], [], 0.05)[0]:
                held += len(os.read(ready_r, 4))
            for p in pids:
                if p not in ended and os.waitpid(p, os.WNOHANG)[0] == p:
                    ended[p] = False  # killed before it held its block
        os.close(go_w)
        return sum(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 0 for p in pids if p not in ended)
""")


@needs_root
def test_memory_is_bounded_over_all_processes_of_a_job():
    # Each child stays under RLIMIT_AS (per process); only a per-job bound stops all four together.
    limits = SandboxLimits(memory_mb=256, test_timeout_s=10.0, total_timeout_s=30.0)
    with Sandbox(limits, workers=1, cache_size=0) as box:
        if box.cgroup_mode == "rlimits":
            pytest.skip("no usable cgroup here: the documented fallback is per-process RLIMIT_AS")
        [r] = box.run_tests([TestJob(FORKS, ("assert children(120) == 4", "assert children(8) == 4"))])
    assert r.passed == [False, True], r.errors  # 4 x 120 MiB > 256 MiB; 4 x 8 MiB fits


def test_cgroup_create_limits_and_cleanup():
    if os.geteuid() != 0 or cgroup_version() is None:
        pytest.skip("needs root and a cgroup v1 (memory, pids) or v2 hierarchy")
    cg = JobCgroup.create(f"comarl-test-{os.getpid()}", memory_mb=64, max_processes=5)
    if cg is None:
        pytest.skip("cgroups present but not writable here")
    try:
        if cg.version == 1:
            mem, pids = cg.dirs
            assert Path(mem, "memory.limit_in_bytes").read_text().strip() == str(64 * 1024 * 1024)
            assert Path(pids, "pids.max").read_text().strip() == "5"
        else:
            assert Path(cg.dirs[0], "memory.max").read_text().strip() == str(64 * 1024 * 1024)
            assert Path(cg.dirs[0], "pids.max").read_text().strip() == "5"
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        cg.add(proc.pid)
        assert cg.pids() == [proc.pid]
        cg.kill_all()
        assert proc.wait(timeout=5) == -9 and cg.pids() == []
    finally:
        cg.remove()
    assert not any(os.path.exists(d) for d in cg.dirs)


@needs_root
def test_venv_under_tmp_is_visible_read_only_in_the_jail(tmp_path):
    assert str(tmp_path).startswith("/tmp/"), "pytest's tmp_path is expected under /tmp"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "tmpvenv_probe.py").write_text("VALUE = 42\n")
    os.chmod(tmp_path, 0o755)
    # comarl/__init__ imports torch, which this bare venv lacks: load the sandbox package alone
    script = textwrap.dedent(f"""
        import sys, types
        pkg = types.ModuleType("comarl")
        pkg.__path__ = [{str(ROOT / "comarl")!r}]
        sys.modules["comarl"] = pkg
        from comarl.sandbox import Sandbox, SandboxLimits, TestJob
        prog = ("import sys, tmpvenv_probe\\nV = tmpvenv_probe.VALUE\\n"
                "def write_next_to_it():\\n    open(tmpvenv_probe.__file__ + '.w', 'w').write('x')\\n")
        with Sandbox(SandboxLimits(test_timeout_s=5.0), workers=1, cache_size=0) as box:
            [r] = box.run_tests([TestJob(prog, ("assert V == 42", "write_next_to_it()"),
                                         packages=("tmpvenv_probe",))])
            [hidden] = box.run_tests([TestJob(prog, ("assert V == 42",))])
        assert hidden.program_error == "ModuleNotFoundError: No module named 'tmpvenv_probe'", hidden.program_error
        print(r.program_error, r.passed, r.errors[1])
    """)
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    program_error, passed, write_error = out.stdout.strip().split(" ", 2)
    assert program_error == "None" and passed == "[True," and write_error.startswith("False]")
    assert "Read-only file system" in out.stdout or "Permission" in out.stdout, out.stdout
    assert not (site / "tmpvenv_probe.py.w").exists()
