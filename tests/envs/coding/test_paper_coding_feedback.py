"""Feedback modes of the coding paper preset: per-agent prompts, sandbox_slice, the expert."""
import pytest

from comarl.envs.coding.data import load_function_items
from comarl.envs.coding.expert import Expert, last_json_edits
from comarl.envs.coding.function_env import FunctionCodingEnv
from comarl.envs.coding.paper_feedback import PaperReport, level_feedback, level_passed, passed, slice_tests
from comarl.generation.helper_settings import HelperSpec
from comarl.generation.helpers import LocalHelper

REPORT = PaperReport(helper="aux", entry_point="f", helper_fn="def aux(x):\n    return x",
                     main_fn="def f(x):\n    return aux(x)",
                     helper_defined=True, main_defined=True, parses=True, syntax_error=None,
                     tests=("assert f(1) == 2", "assert f(2) == 2", "assert f(3) == 4"),
                     errors=("AssertionError", None, "TypeError: bad"), calls_helper=True, wrapper=True)
HIST = [(("helper prompt", "helper answer"),), (("main prompt", "main answer"),)]


def test_level_feedback_is_per_agent_with_history_and_every_failure():
    helper, main = level_feedback(REPORT, HIST)
    for text in (helper, main):
        assert "Tests: 1/3 passed" in text
        assert "Failed case: assert f(1) == 2 -> AssertionError" in text
        assert "Failed case: assert f(3) == 4 -> TypeError: bad" in text
    assert "helper prompt" in helper and "helper answer" in helper and "main answer" not in helper
    assert "main prompt" in main and "main answer" in main and "helper answer" not in main
    # helper-use notes go to the main agent only
    assert "Helper use" in main and "Helper use" not in helper and "only wraps aux" in main and "Warning" not in helper
    assert helper.rstrip().endswith("Revise your aux(...) accordingly. Output only the function code, nothing else.")


def test_short_modes():
    helper, main = level_passed(REPORT)
    assert "Passed 1/3 tests" in main and "Helper use" in main and "Helper use" not in helper
    assert "def aux(x)" in helper and "def f(x)" in main
    assert all("Not all levels passed" in t for t in passed(REPORT))
    single = PaperReport(helper=None, entry_point="f", helper_fn="", main_fn="", helper_defined=False,
                         main_defined=False, parses=False, syntax_error="line 1, col 2: invalid syntax", tests=(),
                         errors=())
    (text,) = level_feedback(single, [()])
    assert "MISSING (not defined)" in text and "ERROR (line 1, col 2: invalid syntax)" in text and "aux" not in text


def test_slice_tests():
    assert slice_tests(5, 1) == slice(0, 1) and slice_tests(5, None) == slice(0, 5) and slice_tests(5, 0) == slice(0, 5)
    assert list(range(5))[slice_tests(5, -2)] == [3, 4]


def test_last_json_edits():
    assert last_json_edits('noise {"aux": "a1"} then {"aux": "x", "main": "y"} end') == ("x", "y")
    assert last_json_edits("no json {here") is None


def test_env_level_feedback_with_sandbox_slice(shared_data):
    item = load_function_items("coophumaneval", str(shared_data / "coophumaneval"), "train[:1]", None)[0]
    env = FunctionCodingEnv("coophumaneval", 2, preset="paper", max_turns=2, feedback="level_feedback", sandbox_slice=1)
    try:
        resp = ("def aux(n):\n    return n > 100\n", "def x_or_y(n, x, y):\n    r = aux(n)\n    return x if r else y\n")
        t = env.step_batch([env.reset(item)], [resp])[0]
    finally:
        env.close()
    assert not t.done and len(t.next_state.prompts) == 2
    main = t.next_state.prompts[1]
    # only the first assert is shown (it fails: 7 is prime but aux says no)
    assert "Tests: 0/1 passed" in main and "assert x_or_y(7, 34, 12) == 34 -> AssertionError" in main
    assert t.next_state.history[1][0][1] == resp[1]


def test_expert_edits_needs_an_expert_and_runs_with_the_tiny_model():
    with pytest.raises(ValueError, match="env.args.expert"):
        FunctionCodingEnv("humaneval", 2, preset="paper", max_turns=2, feedback="expert_edits")
    with pytest.raises(ValueError, match="preset=paper"):
        FunctionCodingEnv("humaneval", 2, max_turns=2, feedback="level_feedback")
    with pytest.raises(ValueError, match="built helper"):  # the environment builds no model from a spec
        Expert({"model": "tiny"})
    tiny = LocalHelper("expert", HelperSpec(model="tiny", max_new_tokens=4))
    edits = Expert(tiny, retries=2).edits(
        [{"prompt": "def f(x):\n", "helper": "aux", "entry_point": "f", "code": "def f(x):\n    return x"}])
    assert edits == [("", "")]  # a random tiny model writes no JSON: no edits, as the paper's fallback
    assert tiny.calls == 2 and tiny.loads == 1  # both tries, one model


def test_the_expert_asks_again_only_where_no_json_came_back():
    """The injected helper is any prompts -> texts function: requests whose answer parses are not asked again."""
    asked = []

    def helper(prompts):
        asked.append(len(prompts))
        return ['{"aux": "a1", "main": "m1"}' if "def g" in p or len(asked) > 1 else "no json" for p in prompts]

    ask = {"helper": "aux", "entry_point": "f", "code": "x"}
    edits = Expert(helper, retries=3).edits([{**ask, "prompt": "def f():"}, {**ask, "prompt": "def g():"}])
    assert edits == [("a1", "m1"), ("a1", "m1")] and asked == [2, 1]


def test_paper_scoring_with_diagnosis_feedback(shared_data):
    """``feedback: diagnosis`` (a comarl mode) on paper scoring: the next prompts are the first-turn prompts plus the
    ``revise`` block with the diagnosis (this raised "must be one of (level_feedback, ...)" before)."""
    item = load_function_items("coophumaneval", str(shared_data / "coophumaneval"), "train[:1]", None)[0]
    env = FunctionCodingEnv("coophumaneval", 2, preset="paper", max_turns=2, feedback="diagnosis")
    try:
        state = env.reset(item)
        resp = ("def aux(n):\n    return n > 100\n", "def x_or_y(n, x, y):\n    r = aux(n)\n    return x if r else y\n")
        t = env.step_batch([state], [resp])[0]
    finally:
        env.close()
    assert not t.done and t.metrics["passed_all"] == 0.0
    helper, main = t.next_state.prompts
    assert helper.startswith(state.prompts[0]) and main.startswith(state.prompts[1])
    assert "Diagnosis of the joint program:" in main and "return x if r else y" in main
    assert t.next_state.info["feedback"].startswith("Diagnosis") and len(t.next_state.info["revisions"]) == 2
