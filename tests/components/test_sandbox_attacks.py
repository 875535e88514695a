"""Reward integrity: a program scores a pass only by computing the right values.

Each attack is a *wrong* solution plus a trick that used to (or could) fake a
pass; each goes through a coding environment's reward path (HumanEval/2,
MBPP 4, ClassEval_0) and must score pass rate 0. The honest reference solution
of the same task passes in the same batch, so a sandbox that fails everything
cannot pass this file. By class: comparison/hash/bool/arithmetic objects,
patching builtins and modules, frame and object-graph walking, forging
records, shadowing harness names, early and late exits, fake markers.
"""
from __future__ import annotations

import pytest

from comarl.envs.coding import classeval as classeval_mod
from comarl.envs.coding import function_env
from comarl.envs.coding.data import load_classeval_items, load_function_items
from comarl.sandbox import Sandbox, SandboxLimits, TestJob

LIMITS = {"test_timeout_s": 3.0, "total_timeout_s": 30.0}
HE = "def truncate_number(number: float) -> float:\n"  # HumanEval/2; its tests use ==, abs(...) < 1e-6
MB = "def heap_queue_largest(nums, n):\n"              # MBPP 4; tests: assert f(...) == [85, 75, 65]

ALWAYS_EQUAL = '''
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    def __hash__(self): return 0
    def __bool__(self): return True
    def __abs__(self): return self
    def __sub__(self, other): return self
    def __rsub__(self, other): return self
    def __float__(self): return 0.0
    def __len__(self): return 3
    def __iter__(self): return iter([85, 75, 65])
'''

FUNCTION_ATTACKS = {
    # objects overriding comparison, hash, bool, arithmetic
    "always_equal": ALWAYS_EQUAL + "{head}    return Anything()\n",
    "always_equal_float": "class F(float):\n    def __eq__(self, o): return True\n    __hash__ = float.__hash__\n"
                          "    def __sub__(self, o): return F(0.0)\n    def __abs__(self): return F(0.0)\n"
                          "    def __lt__(self, o): return True\n"
                          "{head}    return F(7.25)\n",
    "always_equal_list": "class L(list):\n    def __eq__(self, o): return True\n{head}    return L([1])\n",
    # patching builtins and modules
    "patch_builtins": "import builtins, json, unittest, sys\n"
                      "builtins.compile = lambda *a, **k: compile('pass', '<x>', 'exec')\n"
                      "builtins.exec = lambda *a, **k: None\nbuiltins.AssertionError = type('N', (Exception,), {{}})\n"
                      "json._default_encoder = None\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
                      "sys.modules['unittest'] = None\nsys.modules['json'] = None\n{head}    return 0\n",
    # frame and object-graph walking to reach harness state
    "frame_walk": "import sys, gc\n"
                  "{head}    f = sys._getframe(1)\n"
                  "    while f is not None:\n"
                  "        g = f.f_globals\n"
                  "        for key in ('OPS', 'ok', 'result', 'verdict'):\n"
                  "            if isinstance(g.get(key), dict):\n"
                  "                for op in list(g[key]):\n"
                  "                    g[key][op] = lambda *a, **k: ((True, ([], {{}})), False)\n"
                  "        f = f.f_back\n"
                  "    for o in gc.get_objects():\n"
                  "        if isinstance(o, dict) and 'nonce' in o:\n"
                  "            raise SystemExit('found ' + str(o['nonce']))\n"
                  "    return None\n",
    # the harness's globals through the caller's frame (scored 164/164 and 427/427 before)
    "harness_globals": "import sys\n"
                       "f = sys._getframe(1)\n"
                       "while f is not None:\n"
                       "    for key in ('_exec', 'exec', 'run_snippet', '_setitimer'):\n"
                       "        if key in f.f_globals:\n"
                       "            f.f_globals[key] = lambda *a, **k: None\n"
                       "    f = f.f_back\n"
                       "{head}    return 0\n",
    # forging records on every fd (result channel, the worker's own pipe)
    "forge_records": "import os, json\n"
                     "for fd in range(3, 256):\n"
                     "    for rec in ({{'k': 'test', 'i': 0, 'error': None}}, {{'k': 'done', 'crashed': None}}):\n"
                     "        try:\n"
                     "            os.write(fd, ('0' * 32 + ' ' + json.dumps(rec) + '\\n').encode())\n"
                     "        except OSError:\n"
                     "            pass\n"
                     "{head}    return 0\n",
    # shadowing names the tests use
    "shadow_builtins": "def abs(x):\n    return 0\ndef isinstance(*a):\n    return True\ndef len(x):\n    return 3\n"
                       "def sorted(*a, **k):\n    return [85, 75, 65]\nclass AssertionError(Exception):\n    pass\n"
                       "candidate = None\ndef check(c):\n    pass\n{head}    return 0\n",
    # exits, early and late
    "exit_in_body": "{head}    return 0\nimport sys\nsys.exit(0)\n",
    "os_exit_in_call": "import os\n{head}    os._exit(0)\n",
    "exit_in_call": "import sys\n{head}    sys.exit(0)\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\n{head}    return 0\n",
    # fake markers
    "fake_markers": "print('PASS'); print('OK'); print('{{\"k\": \"done\"}}')\nimport sys\n"
                    "sys.stderr.write('Ran 1 test\\nOK\\n')\n{head}    return 0\n",
}


def _run_function(env, items, responses):
    states = [env.reset(i) for i in items]
    return env.step_batch(states, [(r,) for r in responses])


def _items(shared_data, dataset, folder, task_id):
    items = load_function_items(dataset, str(shared_data / folder), None, None)
    return next(i for i in items if i["task_id"] == task_id)


@pytest.mark.parametrize("dataset, folder, task_id, head", [
    ("humaneval", "humaneval", "HumanEval/2", HE), ("mbpp", "mbpp", "4", MB)])
def test_function_attacks_score_zero(shared_data, dataset, folder, task_id, head):
    """Through the reward path, and as bare sandbox jobs (the environment's assembler drops top-level
    statements, which must not be what saves us)."""
    item = _items(shared_data, dataset, folder, task_id)
    names = list(FUNCTION_ATTACKS)
    programs = [FUNCTION_ATTACKS[n].format(head=head) for n in names]
    env = function_env.FunctionCodingEnv(dataset, 1, mode="single", sandbox=LIMITS)
    try:
        trs = _run_function(env, [item] * (len(names) + 1), [item["reference"]] + programs)
    finally:
        env.close()
    assert trs[0].metrics["pass_rate"] == 1.0, "the reference must pass"
    scored = {n: t.metrics["pass_rate"] for n, t in zip(names, trs[1:])}
    assert scored == {n: 0.0 for n in names}, f"reward path: attacks that scored: {scored}"

    jobs = [TestJob(p, tuple(item["tests"]), entry_points=(item["entry_point"],))
            for p in [item["prompt"] + item["reference"]] + programs]
    with Sandbox(SandboxLimits(**LIMITS), workers=2, cache_size=0) as box:
        reports = box.run_tests(jobs)
    assert reports[0].pass_fraction == 1.0
    scored = {n: r.pass_fraction for n, r in zip(names, reports[1:])}
    assert scored == {n: 0.0 for n in names}, f"bare jobs: attacks that scored: {scored}"


def test_worker_never_holds_the_tests():
    """The tests (with a marker) are not anywhere in the program's process: not in its memory (every private
    anonymous mapping and the heap, read with ctypes: where Python keeps its objects), frames, stdin (gc's object
    walks are refused in the worker since round 3); the scan finds the marker once the program makes it."""
    prog = ("import ctypes, os, re, sys\n"
            "def leaks():\n"
            "    pat = 'MARK' + 'ER_' + 'Q7'\n"
            "    hits = 0\n"
            # the whole marker is never built here: a hit is two halves met in memory the program did not make
            "    head, tail = ('ER_' + 'Q7 ex').encode(), ('pec' + 'ted 42').encode()\n"
            "    for line in open('/proc/self/maps').read().splitlines():\n"
            "        m = re.match(r'([0-9a-f]+)-([0-9a-f]+) rw\\S* \\S+ \\S+ 0 *(\\[heap\\])?$', line)\n"
            "        if not m:\n"  # private anonymous memory and the heap: where Python keeps its objects
            "            continue\n"
            "        lo, hi = int(m.group(1), 16), int(m.group(2), 16)\n"
            "        block = ctypes.string_at(lo, hi - lo)\n"
            "        at = block.find(head)\n"
            "        while at >= 0:\n"
            "            hits += block.startswith(tail, at + len(head))\n"
            "            at = block.find(head, at + 1)\n"
            "    f = sys._getframe()\n"
            "    while f is not None:\n"
            "        hits += sum(1 for v in f.f_locals.values() if type(v) is str and v is not pat and pat in v)\n"
            "        f = f.f_back\n"
            "    hits += len(os.read(0, 1 << 20))\n"
            "    return hits\n"
            "def mem_sees_itself():\n"  # the scan works: it finds a string the program made
            "    global probe\n"
            "    probe = ''.join(['MARK', 'ER_', 'Q7 expected 42'])\n"  # built at run time: no folded constant
            "    return leaks() >= 1\n")
    with Sandbox(SandboxLimits(test_timeout_s=5.0), workers=1, cache_size=0) as box:
        [r] = box.run_tests([TestJob(prog, ("x = 'MARKER_Q7 expected 42'\nassert leaks() == 0",
                                            "import gc\nassert mem_sees_itself()"), )])
    assert r.passed == [True, True], r.errors


def test_classeval_runner_override_and_fake_class_score_zero(shared_data):
    item = load_classeval_items(str(shared_data / "classeval"), None, 1)[0]
    name = item["class_name"]
    attacks = [
        # the harness's test runner, redefined by the response (scored the maximum on 88/100 before)
        "def _run_test_class(cls):\n    return None\n"
        f"class {name}:\n    def __init__(self, *a, **k):\n        pass\n",
        # an instance whose every method returns an always-equal object
        ALWAYS_EQUAL + f"class {name}:\n    def __init__(self, *a, **k):\n        pass\n"
        "    def __getattr__(self, n):\n        return lambda *a, **k: Anything()\n",
        # patching unittest inside the program
        "import unittest\nunittest.TestCase.run = lambda self, result=None: None\n"
        "unittest.TextTestRunner.run = lambda self, s: type('R', (), {'failures': [], 'errors': [], 'testsRun': 1})()\n"
        f"class {name}:\n    pass\n",
    ]
    env = classeval_mod.ClassEvalEnv(1, sandbox=LIMITS)
    try:
        trs = env.step_batch([env.reset(item) for _ in range(len(attacks) + 1)],
                             [(item["reference"],)] + [(a,) for a in attacks])
    finally:
        env.close()
    assert trs[0].metrics["pass_rate"] == 1.0
    assert [t.metrics["pass_rate"] for t in trs[1:]] == [0.0] * len(attacks)
