"""Preset ``paper`` of the function-level coding envs reproduces the reference reward on stored inputs.

The fixtures under tests/fixtures/paper/ hold inputs and the reference code's outputs (OpenMLRL
LLM_Collab_Code_Generation ``execution_reward_aux``, run outside the project); see
docs/reproduction_coding.md for how they were made. The fast test runs the first task of each fixture
(every variant kind), the slow one all of them.
"""
import json
from pathlib import Path

import pytest

from comarl.envs.coding.classeval import ClassEvalEnv
from comarl.envs.coding.data import load_classeval_items, load_function_items
from comarl.envs.coding.paper_classeval import incomplete_methods, merge_into_skeleton, method_snippets, param_split
from comarl.envs.coding.function_env import FunctionCodingEnv
from comarl.envs.coding.paper_rewards import paper_code_reward, paper_class_reward
from comarl.envs.coding.paper_text import (function_text, has_return, ignores_helper, is_wrapper, keep_def_blocks,
                                           paper_pass_count, paper_test_lines, paper_test_snippets, prompt_imports,
                                           uses_helper)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "paper"
SOURCES = {"humaneval": "humaneval", "coophumaneval": "coophumaneval", "mbpp": "mbpp_openmlrl/mbpp_raw.json"}
SANDBOX = {"test_timeout_s": 10, "total_timeout_s": 60}


def _check(shared_data, dataset, first_task_only):
    records = json.loads((FIXTURES / f"coding_{dataset}.json").read_text())
    if first_task_only:
        records = [r for r in records if r["task_id"] == records[0]["task_id"]]
    items = {it["task_id"]: it for it in load_function_items(dataset, str(shared_data / SOURCES[dataset]), None, None)}
    wrong = []
    for n in (1, 2):
        sub = [r for r in records if r["agents"] == n]
        env = FunctionCodingEnv(dataset, n, preset="paper", sandbox=SANDBOX)
        try:
            states = [env.reset(items[r["task_id"]]) for r in sub]
            out = env.step_batch(states, [(r["main"],) if n == 1 else (r["helper"], r["main"]) for r in sub])
        finally:
            env.close()
        wrong += [(r["task_id"], r["tag"], r["reward"], t.reward) for r, t in zip(sub, out)
                  if abs(t.reward - r["reward"]) > 1e-9]
    assert not wrong, wrong
    return len(records)


@pytest.mark.parametrize("dataset", sorted(SOURCES))
def test_paper_preset_matches_reference_first_task(shared_data, dataset):
    assert _check(shared_data, dataset, first_task_only=True) >= 30


@pytest.mark.slow
@pytest.mark.parametrize("dataset", sorted(SOURCES))
def test_paper_preset_matches_reference_all(shared_data, dataset):
    assert _check(shared_data, dataset, first_task_only=False) >= 200


def _check_classeval(shared_data, first_task_only):
    records = json.loads((FIXTURES / "coding_classeval.json").read_text())
    if first_task_only:
        records = [r for r in records if r["task_id"] == records[0]["task_id"]]
    items = {it["task_id"]: it for it in load_classeval_items(str(shared_data / "classeval"), None, None)}
    wrong = []
    for n in (1, 2):
        sub = [r for r in records if len(r["texts"]) == n]
        env = ClassEvalEnv(n, preset="paper", sandbox={"test_timeout_s": 40, "total_timeout_s": 125})
        try:
            out = env.step_batch([env.reset(items[r["task_id"]]) for r in sub], [tuple(r["texts"]) for r in sub])
        finally:
            env.close()
        wrong += [(r["task_id"], r["tag"], r["reward"], t.reward) for r, t in zip(sub, out)
                  if abs(t.reward - r["reward"]) > 1e-9]
    assert not wrong, wrong
    return len(records)


def test_paper_classeval_matches_reference_first_class(shared_data):
    assert _check_classeval(shared_data, first_task_only=True) >= 15


@pytest.mark.slow
def test_paper_classeval_matches_reference_all(shared_data):
    assert _check_classeval(shared_data, first_task_only=False) >= 180


# ---- the pure pieces, numbers by hand ----

def test_paper_code_reward_levels():
    # main missing: only the helper's 0.4
    assert paper_code_reward(True, False, True, 5, 5, True, True, False, False)[0] == pytest.approx(0.4)
    # parses, 2 of 5 tests, main calls the helper, not a wrapper, result ignored: 0.4+0.6+0.5+0.4+0.5+1.0-0.5
    r, parts = paper_code_reward(True, True, True, 5, 2, True, True, False, True)
    assert r == pytest.approx(2.9) and parts["r_coop"] == pytest.approx(1.0)
    # no tests passed: no bonus; no test lines: stops at 1.5
    assert paper_code_reward(True, True, True, 5, 0, True, True, False, False)[0] == pytest.approx(1.5)
    assert paper_code_reward(True, True, True, 0, 0, True, True, False, False)[0] == pytest.approx(1.5)
    # helper text found but not "defined" (no return): bonus still paid, 0.6+0.5+1+0.5+1
    assert paper_code_reward(False, True, True, 4, 4, True, True, False, False)[0] == pytest.approx(3.6)


def test_paper_class_reward():
    # 3 of 4 methods valid, 5 of 10 tests, 1 overlap: 1.5 + 2 - 0.25
    assert paper_class_reward(4, 3, 1, True, 10, 5)[0] == pytest.approx(3.25)
    assert paper_class_reward(4, 3, 1, False, 10, 5)[0] == 0.0
    assert paper_class_reward(0, 0, 0, True, 0, 0)[0] == 0.0


def test_paper_text_quirks():
    code = "Sure!\n```python\ndef f(x):\n    def g(y):\n        return y\n    return g(x)\n```\nDone."
    # the nested def starts a new block: f's last line is lost
    assert keep_def_blocks(code) == "def f(x):\n\n    def g(y):\n        return y"
    assert function_text(code, "f").endswith("return y") and has_return(function_text(code, "f"))
    assert has_return("def f():\n    # return x\n    pass") and not has_return("def f():\n    pass")
    assert prompt_imports("from typing import List\n\nimport math\nfrom typing import List\n") == \
        "from typing import List\nimport math"
    test = "def check(candidate):\n    assert candidate(1) == 2\n    assert(candidate(2) == 3)\n" \
           "    assert abs(candidate(3) - 1) < 1e-6\n    assert candidate(1) == 2\n"
    assert paper_test_lines(test, "f") == ["assert f(1) == 2", "assert abs(f(3) - 1) < 1e-6"]
    assert paper_test_snippets(test, "f")[0] == "eval('f(1)')\neval('2')\nassert f(1) == 2\n"
    assert uses_helper('def f(x):\n    """aux(x) would help"""\n    return x')
    assert is_wrapper("def f(x):\n    return aux(x)") and is_wrapper("def f(x):\n    r = aux(x)\n    return r")
    assert not is_wrapper("def f(x):\n    r = aux(x)\n    return r + 1")
    assert ignores_helper("def f(x):\n    aux (x)\n    return 1")
    assert not ignores_helper("def f(x):\n    aux(x)\n    return 1")
    assert paper_pass_count([None, "Timeout", "Timeout", None, "Timeout", None]) == 2


def test_paper_preset_rejects_reward_weights():
    with pytest.raises(ValueError, match="env.args.rewards"):
        FunctionCodingEnv("humaneval", 2, preset="paper", rewards={"tests": 2.0})
    with pytest.raises(ValueError, match="env.args.preset"):
        FunctionCodingEnv("humaneval", 2, preset="papers")


SKELETON = '''import os

class Box:
    """A box."""

    def __init__(self):
        self.items = []

    def add(self, x):
        """Add x."""
        pass

    def size(self):
        raise NotImplementedError("later")

    @property
    def empty(self):
        """Empty?"""
'''


def test_paper_classeval_split_and_merge():
    assert incomplete_methods(SKELETON) == ["add", "size", "empty"]
    # one parameter (self) -> agent 0, else agent 1; one agent takes all
    assert param_split(SKELETON, 2) == {"add": 1, "size": 0, "empty": 0}
    assert set(param_split(SKELETON, 1).values()) == {0}
    text = "```python\nclass Box:\n    def size(self):\n        return len(self.items)\n    def add(self, x):\n" \
           "        self.items.append(x)\n```"
    assert method_snippets(text, {"size"}) == {"size": "def size(self):\n        return len(self.items)"}
    merged = merge_into_skeleton(SKELETON, "Box", {"size": "def size(self):\n    return len(self.items)"})
    assert "        return len(self.items)" in merged and "NotImplementedError" not in merged
    # a decorated stub: the paper replaced the decorator lines only, so the old stub stays after the new method
    merged = merge_into_skeleton(SKELETON, "Box", {"empty": "def empty(self):\n    return not self.items"})
    assert merged.count("def empty(self):") == 2
