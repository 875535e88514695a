"""TravelPlanner reads every text in linear time (#46): the regexes that backtracked (a fence left open, long
values with many commas or parentheses) are replaced by one-pass readers that capture what the regexes did,
checked against them on generated short texts; overlong and deeply nested answers are parse failures."""
import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from comarl.envs.travel.evaluate import before_paren, name_city
from comarl.envs.travel.parse import MAX_DEPTH, MAX_VALUE_CHARS, fence_body, parse_agent

PIECES = st.lists(st.sampled_from(["```", "json", "`", ",", ", ", "(", ")", "(A B)", " ", "\n", "\t", "\x1c",
                                   "Coco", "Rockford", "x"]), max_size=12).map("".join)
PROFILE = settings(max_examples=800, derandomize=True, deadline=None, database=None)


def _regex_name_city(value):  # the benchmark's reading, as evaluate.py had it
    m = re.search(r"(.*?),\s*([^,]+)(\(\w[\w\s]*\))?$", value)
    return (m.group(1).strip(), _regex_before_paren(m.group(2).strip()).strip()) if m else ("-", "-")


def _regex_before_paren(s):
    m = re.search(r"^(.*?)\([^)]*\)", s)
    return m.group(1) if m else s


@PROFILE
@given(PIECES)
def test_one_pass_readers_capture_what_the_regexes_did(text):
    assert name_city(text) == _regex_name_city(text)
    assert before_paren(text) == _regex_before_paren(text)
    m = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    assert fence_body(text) == (m.group(1) if m else None)


def test_examples_by_hand():
    assert name_city("Coco Bambu, Rockford") == ("Coco Bambu", "Rockford")
    assert name_city("A, B(Illinois)\n") == ("A", "B") and name_city("x\nA, B") == ("A", "B")
    assert name_city("no comma") == name_city("ends with a comma,") == ("-", "-")
    assert before_paren("Bemidji(Minnesota)") == "Bemidji" and before_paren("a (b") == "a (b"
    assert fence_body('```json\n{"days": []}\n```') == '{"days": []}\n' and fence_body("```open") is None


def test_adversarial_answers_are_parse_failures_in_linear_time():
    long_value = '{"days": [{"day": 1, "lunch": "' + "a, " * MAX_VALUE_CHARS + '"}]}'
    cases = {"```json" + " \n" * 40_000: "no JSON", "```" + " " * 60_000: "no JSON",
             "[" * 5000: "deeper", '{"days": [' * 40 + "]}" * 40: "deeper", long_value: "longer",
             "x" * 200_000: "longer"}
    for text, why in cases.items():
        start = time.perf_counter()
        p = parse_agent(text, 3)
        assert time.perf_counter() - start < 1.0, text[:40]
        assert not p.ok and why in p.error, (text[:40], p.error)
    assert MAX_DEPTH == 32
    value = "x(" * 20_000 + "," + " a," * 20_000 + "b(c"  # the regexes took minutes on such values
    start = time.perf_counter()
    name_city(value), before_paren(value)
    assert time.perf_counter() - start < 0.5
