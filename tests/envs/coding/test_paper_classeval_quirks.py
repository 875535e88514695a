"""ClassEval under ``preset: paper`` counts tests as the reference code does, quirks included.

Expected rewards come from running the reference reward (OpenMLRL/LLM_Collab_Code_Completion,
``rewards/CE_reward.py``) outside this repository on the same responses. Over all 100 classes the preset
now equals it on: the reference solutions (97; the other 3 are ClassEval_50's read-only file under root,
ClassEval_58's unseeded mines, ClassEval_84's MagicMock), every method ``return None`` (100), the
solution with a ``print`` after the last method (100) and a solution whose methods go wrong after 8
calls in the process, which makes the order of the tests matter (100). Before: 98, 20 and 42.
"""
from __future__ import annotations

import ast

import pytest

from comarl.envs.coding import classeval as classeval_mod
from comarl.envs.coding.data import load_classeval_items
from comarl.envs.coding.paper_classeval import _first_class, bad_count, incomplete_methods, paper_class_counts
from comarl.envs.coding.paper_classeval import test_methods as run_order

LIMITS = {"test_timeout_s": 30.0, "total_timeout_s": 120.0, "cpu_time_s": 90}


def test_passed_is_run_minus_failures_errors_and_skips():
    ok, fail = None, "_PaperVerdict: bad=1; AssertionError: 1 != 2"
    twice = "_PaperVerdict: bad=2; AttributeError: 'NoneType' object has no attribute 'close'"
    assert paper_class_counts([ok, ok, fail]) == (3, 2)
    assert paper_class_counts([twice, twice, ok]) == (3, -1)  # 3 - 2 - 2: negative, as in the reference
    # a message the harness did not build counts one failure; a claimed 0 counts one too
    assert [bad_count(e) for e in (ok, twice, "Timeout", "_PaperVerdict: bad=0; x", "AssertionError: bad=5")] == \
        [0, 2, 1, 1, 1]
    # the third timeout ends the run: the tests after it were never run
    assert paper_class_counts([ok, "Timeout", ok, "Timeout", "Timeout", ok, ok]) == (5, 2)
    # any text on stdout while the module was imported: the reference's JSON result did not parse
    assert paper_class_counts([ok, ok], program_stdout="done\n") == (0, 0)
    assert paper_class_counts([ok, ok], program_stdout="\n  \n") == (2, 2)


def test_test_classes_run_in_alphabetical_order():
    test = ("import unittest\nclass ZTest(unittest.TestCase):\n    def test_b(self): pass\n    def test_a(self): pass\n"
            "class ATest(unittest.TestCase):\n    def test_z(self): pass\n")
    assert run_order(test) == [("ATest", "test_z"), ("ZTest", "test_a"), ("ZTest", "test_b")]


def _none_methods(item) -> str:
    """Every method to write, returning None (the skeleton's signatures)."""
    cls = _first_class(item["skeleton"])
    names = set(incomplete_methods(item["skeleton"]))
    return "\n\n".join(f"def {d.name}({ast.unparse(d.args)}):\n    return None"
                       for d in cls.body if isinstance(d, ast.FunctionDef) and d.name in names)


def _wrong_after_8_calls(item) -> str:
    """The solution, each of whose methods returns None once 8 method calls happened in the process."""
    src = item["reference"]
    lines, names = src.splitlines(), set(incomplete_methods(item["skeleton"]))
    inserts = []
    for cls in (n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)):
        for f in cls.body:
            if isinstance(f, ast.FunctionDef) and f.name in names and f.body:
                ind = " " * f.body[0].col_offset
                inserts.append((f.body[0].lineno - 1,
                                [ind + "_b = __import__('builtins').__dict__.setdefault('_calls', [])",
                                 ind + "_b.append(1)", ind + "if len(_b) > 8:", ind + "    return None"]))
    for at, block in sorted(inserts, reverse=True):
        lines[at:at] = block
    return "\n".join(lines) + "\n"


def test_the_three_cases_score_as_the_reference(shared_data):
    items = {i["task_id"]: i for i in load_classeval_items(str(shared_data / "classeval"), None, None)}
    cases = [  # (task, response, the reference's reward, this preset's reward before)
        ("ClassEval_63", items["ClassEval_63"]["reference"].rstrip() + "\nprint('done')\n", 2.0, 6.0),
        ("ClassEval_45", _none_methods(items["ClassEval_45"]), -2.0, 2.0),  # fails in the body and in tearDown
        ("ClassEval_67", _wrong_after_8_calls(items["ClassEval_67"]), 3.4117647058823533, 3.6470588235294117),
    ]
    env = classeval_mod.ClassEvalEnv(1, sandbox=LIMITS, preset="paper")
    try:
        trs = env.step_batch([env.reset(items[t]) for t, _, _, _ in cases], [(r,) for _, r, _, _ in cases])
    finally:
        env.close()
    assert [t.reward for t in trs] == pytest.approx([ref for _, _, ref, _ in cases], abs=1e-12)
