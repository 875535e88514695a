"""Which tests the agents may see (``visible_tests.py``): worked by hand on small tasks."""
from __future__ import annotations

from comarl.envs.coding.feedback import Outcome, feedback_text
from comarl.envs.coding.visible_tests import checked_call, expected_value, masked_line, split_tests

PROMPT = "def f(x):\n    \"\"\"Double x.\n    >>> f(2)\n    4\n    \"\"\"\n"
TESTS = [f"candidate = f\nassert candidate({x}) == {2 * x}\n" for x in (2, 3, 5, 7, 11, 13, 17)]


def test_checked_call_reads_candidate_as_the_entry_point():
    assert checked_call(TESTS[0], "f") == ("f(2)",)
    assert checked_call("assert set(g((3, 4), (4,))) == {4}\n", "g") == ("g((3,4),(4,))",)
    assert checked_call("for i in range(3):\n    assert f(i) == 2 * i\n", "f") == (
        "foriinrange(3):assertf(i)==2*i",)


def test_split_hides_two_thirds_of_what_the_prompt_does_not_show():
    # f(2) is in the prompt (visible); 6 others: the first 6 // 3 = 2 visible when failures are quoted
    s = split_tests(TESTS, PROMPT, "f", quotes_failures=True)
    assert s.visible == (0, 1, 2) and s.hidden == (3, 4, 5, 6) and s.in_prompt == 1
    single = split_tests(TESTS, PROMPT, "f", quotes_failures=False)
    assert single.visible == (0,) and single.hidden == (1, 2, 3, 4, 5, 6)


def test_same_call_goes_to_the_same_side_and_few_tests_stay_hidden():
    tests = ["assert f(1) == 2\n", "assert f(1) == 2\n", "assert f(9) == 18\n"]
    s = split_tests(tests, "def f(x): ...", "f", quotes_failures=True)
    assert s.visible == () and s.hidden == (0, 1, 2)  # two distinct calls: too few to quote one
    everything_shown = split_tests(["assert f(2) == 4\n"], PROMPT, "f", quotes_failures=True)
    assert everything_shown.visible == () and everything_shown.hidden == (0,)


def test_a_visible_value_a_hidden_test_expects_is_masked():
    tests = ["assert f(1) == True\n", "assert f(2) == 7\n", "assert abs(f(3) - 1) < 1e-9\n",
             "assert f(4) == True\n", "assert f(5) == False\n", "assert f(6) == 8\n",
             "assert f(7) == True\n", "assert f(8) == 9\n", "assert f(9) == 10\n"]
    s = split_tests(tests, "def f(x): ...", "f", quotes_failures=True)
    assert s.visible == (0, 1, 2) and s.masked == (0, 2)  # True is expected by hidden tests; `abs` is not ==
    assert expected_value(tests[0], "f") == "True" and expected_value(tests[2], "f") is None
    assert masked_line(tests[0], "f") == "assert f(1) == ..."
    assert masked_line("candidate = f\nassert 5 == candidate(1)\n", "f") == "assert ... == candidate(1)"
    o = Outcome(main_defined=True, compiled=True, syntax_error=None, program_error=None,
                tests=tuple(tests[i] for i in s.visible), passed=(False, False, False), errors=("AssertionError",) * 3,
                entry_point="f", hidden_total=6, hidden_passed=1, masked=(True, False, True))
    text = feedback_text("diagnosis", o, max_failures=3)
    assert "`assert f(1) == ...`" in text and "`assert f(2) == 7`" in text and "`assert ...`" in text
    assert "Hidden tests passed: 1/6 (not shown)." in text
    assert all(t.strip() not in text for t in tests[3:])
