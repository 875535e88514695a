"""Reward levels, pass@k and feedback text, with numbers worked out by hand."""
import pytest

from comarl.envs.base import EvalRecord, Transition
from comarl.envs.coding.feedback import Outcome, feedback_text
from comarl.envs.coding.passk import pass_at_k, render_table, summarize_records
from comarl.envs.coding.rewards import (ClassRewardWeights, CodeLevels, CodeRewardWeights, class_reward,
                                        code_reward, code_reward_max)

W = CodeRewardWeights()


def lv(**kw):
    base = dict(helper_defined=True, main_defined=True, compiled=True, pass_fraction=1.0, calls_helper=True)
    base.update(kw)
    return CodeLevels(**base)


@pytest.mark.parametrize("levels, expected", [
    # 0.4 + 0.6 + 0.5 + 1.0*0.5 + 0.5 (uses) + 1.0 (not wrapper)
    (lv(pass_fraction=0.5), 3.5),
    # full marks
    (lv(), 4.0),
    # thin wrapper: no 1.0 bonus -> 0.4+0.6+0.5+1.0+0.5
    (lv(thin_wrapper=True), 3.0),
    # result ignored: 0.4+0.6+0.5+0.25+0.5+1.0-0.5
    (lv(pass_fraction=0.25, ignored_result=True), 2.75),
    # no test passes: no cooperation terms -> 0.4+0.6+0.5
    (lv(pass_fraction=0.0), 1.5),
    # does not call the helper: 0.4+0.6+0.5+1.0
    (lv(calls_helper=False), 2.5),
    # helper missing: 0.6+0.5+1.0, no cooperation terms
    (lv(helper_defined=False), 2.1),
    # joint program does not parse: stop after level 1
    (lv(compiled=False), 1.0),
    # main missing: only the helper's 0.4
    (lv(main_defined=False), 0.4),
])
def test_code_reward_levels_helper_main(levels, expected):
    reward, parts = code_reward(levels, W, with_helper=True)
    assert reward == pytest.approx(expected)
    assert sum(parts.values()) == pytest.approx(expected)


def test_code_reward_single_and_normalized():
    assert code_reward_max(W, True) == pytest.approx(4.0)
    assert code_reward_max(W, False) == pytest.approx(2.1)
    # single: 0.6 + 0.5 + 0.5 ; helper and coop terms never count
    r, _ = code_reward(lv(pass_fraction=0.5), W, with_helper=False)
    assert r == pytest.approx(1.6)
    rn, _ = code_reward(lv(pass_fraction=0.5), CodeRewardWeights(normalize=True), with_helper=False)
    assert rn == pytest.approx(1.6 / 2.1)
    custom = CodeRewardWeights(tests=3.0, not_wrapper=0.0)
    r, _ = code_reward(lv(pass_fraction=0.5), custom, with_helper=True)
    assert r == pytest.approx(0.4 + 0.6 + 0.5 + 1.5 + 0.5)


def test_class_reward():
    w = ClassRewardWeights()
    # 1.0*0.75 + 0.5 + 2.0*0.5 - 0.5*0.25
    r, parts = class_reward(0.75, True, 0.5, 0.25, w)
    assert r == pytest.approx(2.125) and parts["r_overlap"] == pytest.approx(-0.125)
    # not parsed: tests do not count
    assert class_reward(1.0, False, 1.0, 0.0, w)[0] == pytest.approx(1.0)
    assert class_reward(1.0, True, 1.0, 0.0, ClassRewardWeights(normalize=True))[0] == pytest.approx(1.0)
    # junk text: the skeleton with stub methods parses, but no method was written: no compile term (#46)
    assert class_reward(0.0, True, 0.0, 0.0, w) == (0.0, {"r_methods": 0.0, "r_compiled": 0.0, "r_tests": 0.0,
                                                         "r_overlap": 0.0})


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 2, 0.5),        # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 3, 0.9),        # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (10, 3, 1, 0.3),       # pass@1 = c/n
    (3, 0, 2, 0.0),
    (4, 3, 2, 1.0),        # n - c < k
    (4, 2, 2, 5 / 6),      # 1 - C(2,2)/C(4,2) = 1 - 1/6
])
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_bad_input():
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def _t(passed, rate, reward):
    return Transition(reward, True, None, {"passed_all": float(passed), "pass_rate": rate})


def test_summarize_records_per_task_and_overall():
    recs = [
        EvalRecord({"task_id": "A"}, [("", "")] * 4,
                   [_t(1, 1.0, 4.0), _t(0, 0.5, 2.0), _t(0, 0.0, 1.0), _t(0, 0.5, 1.0)]),
        EvalRecord({"task_id": "B"}, [("", "")] * 2, [_t(1, 1.0, 4.0), _t(1, 1.0, 4.0)]),
    ]
    s = summarize_records(recs, ks=(1, 2, 4))
    a, b = s["per_task"]["A"], s["per_task"]["B"]
    assert (a["n"], a["correct"]) == (4, 1)
    assert a["pass@1"] == pytest.approx(0.25) and a["pass@2"] == pytest.approx(0.5)
    assert a["pass@4"] == pytest.approx(1.0)
    assert a["pass_rate"] == pytest.approx(0.5) and a["reward"] == pytest.approx(2.0)
    assert "pass@4" not in b and b["pass@2"] == 1.0
    o = s["overall"]
    assert o["pass@1"] == pytest.approx((0.25 + 1.0) / 2) and o["pass@4"] == pytest.approx(1.0) and o["tasks"] == 2
    table = render_table(s, per_task=True)
    assert "pass@1" in table.splitlines()[0] and "0.6250" in table and table.splitlines()[-1].startswith("B")


def _outcome(**kw):
    base = dict(main_defined=True, compiled=True, syntax_error=None, program_error=None,
                tests=("candidate = f\nassert candidate(1) == 2\n", "candidate = f\nassert candidate(2) == 4\n"),
                passed=(True, False), errors=(None, "AssertionError"), entry_point="f", helper="aux",
                calls_helper=False)
    base.update(kw)
    return Outcome(**base)


def test_feedback_diagnosis_lists_failures_and_helper_use():
    text = feedback_text("diagnosis", _outcome())
    assert "Tests passed: 1/2." in text
    assert "Failed: `assert candidate(2) == 4` -> AssertionError" in text
    assert "assert candidate(1) == 2" not in text
    assert "`f` does not call the helper `aux`." in text
    wrapper = feedback_text("diagnosis", _outcome(calls_helper=True, thin_wrapper=True))
    assert "only returns `aux(...)`" in wrapper


def test_feedback_diagnosis_syntax_and_program_errors():
    text = feedback_text("diagnosis", _outcome(compiled=False, syntax_error="line 3: invalid syntax"))
    assert "Syntax error at line 3: invalid syntax." in text and "Tests passed" not in text
    text = feedback_text("diagnosis", _outcome(program_error="NameError: name 'x' is not defined",
                                               passed=(False, False)))
    assert "Error while defining the program: NameError" in text and "Tests passed: 0/2." in text
    assert "`f` is not defined." in feedback_text("diagnosis", _outcome(main_defined=False))


def test_feedback_plain_and_bad_mode():
    assert feedback_text("plain", _outcome()) == "Your code did not pass all tests."
    with pytest.raises(ValueError, match="env.args.feedback"):
        feedback_text("verbose", _outcome())
