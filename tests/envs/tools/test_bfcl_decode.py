"""The ``bfcl`` scoring mode: responses decoded as BFCL's pipeline decodes a prompting model's text,
checked against ``bfcl-eval`` itself (its ``default_decode_ast_prompting``, the format check and the AST
checker) on hand-written texts and on every question's gold answer written in many forms."""
import re
import time
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comarl.envs.tools.bfcl import build_parallel
from comarl.envs.tools.bfcl_decode import call_list_span, decode_bfcl
from comarl.envs.tools.calls import ToolCall, format_call

ENV = build_parallel(2, scoring="bfcl")
JSON_ENV = build_parallel(2, scoring="bfcl", call_format="json")


# -- by hand

HAND = [
    "[f(n=1), g.h(s='x')]", "f(n=1)", "  [f(n=1)]\n", "f(n=1)\ng.h(s='x')", "```python\n[f(n=1)]\n```",
    "```\n[f(n=1)]\n```", "[f(n=96 * 1)]", "[f(n=2 ** 3 - 1.5, s='a' + 'b')]", "[f(n=1 / 0)]", "[f(n=x * 2)]",
    "[f(n=+5)]", "[f(n=-5)]", "[f(n=--5)]", "[f(n=not True)]", "[f(1, n=2)]", "[f(n=1, n=2)]",
    "<think>maybe f(n=9)</think>\n\n[f(n=1)]", "<think>cut off f(n=1)", "[]", "", "None", "[f(n=1)];",
    "(f(n=1), g.h(s='x'))", "[(f(n=1), g.h(s='x'))]", "- f(n=1)\n- g.h(s='x')", "1. f(n=1)\n2. g.h(s='x')",
    "Here you go: [f(n=1)]", "[f(**{'n': 1})]", "[f(n={**{'a': 1}})]", "[f(n=x[0], m=len(y), k=..., p=math.pi)]",
    "[f(n=[1, (2, 3)], d={'a': [True, None]}, e=b'x')]", "[f(n=g(a=1))]", "[f(n=lambda: 1)]", "[f(n={1, 2})]",
    "[f(n=1 if x else 2)]", "[f(n=f'{x}')]", "[a.b.c(n=1)]", "[x[0].f(n=1)]", "[f(n=1)][0]", "'[f(n=1)]'",
]
JSON_HAND = [
    '[{"function": "f", "parameters": {"n": 1}}]', '```json\n[{"function": "f", "parameters": {"n": {"a": 1}}}]\n```',
    'Sure: [{"function": "f", "parameters": {"n": 1}}, {"function": "g", "parameters": {}}] done',
    '{"function": "f", "parameters": {"n": 1}}', '[{"name": "f", "arguments": {"n": 1}}]', "nonsense", "[]",
    '[{"function": "f", "parameters": 3}]', '[{"function": "f", "parameters": {"n": 1}}, 7]', '[{"function": "f"}]',
]


@pytest.mark.parametrize("fmt, text", [("python", t) for t in HAND] + [("json", t) for t in JSON_HAND])
def test_decoding_by_hand_matches_bfcl(bfcl, fmt, text):
    want = bfcl.decode(text, fmt)
    got = decode_bfcl(text, fmt)
    assert [c.as_bfcl() for c in got.calls] == (want or [])
    # one deliberate difference, in ``ok`` only (the reward's parse term): BFCL reads JSON that does not
    # parse as an empty answer, which its format check accepts; comarl counts it as not parsed
    no_json = fmt == "json" and want == [] and got.errors and "no JSON list" in got.errors[0]
    assert got.ok == (want is not None) or no_json, got.errors


def test_decoding_examples():
    """What the module docstring promises, without bfcl-eval installed."""
    assert [c.as_bfcl() for c in decode_bfcl("[f(num1=96 * 1), g.h(b='x')]").calls] == [{"f": {"num1": 96}},
                                                                                           {"g.h": {"b": "x"}}]
    for text in ("f(a=1)\ng(b=2)", "```python\n[f(a=1)]\n```", "[f(a=1)];", "(f(a=1), g(b=2))", "- f(a=1)"):
        assert not decode_bfcl(text).ok and not decode_bfcl(text).calls
    assert decode_bfcl("[f(a=+5, b=x, c=g())]").calls == (ToolCall("f", {"a": -5, "b": "x", "c": "g()"}),)
    assert decode_bfcl("[f(2, a=1)]").calls == (ToolCall("f", {"a": 1}),)        # positional dropped
    assert decode_bfcl("").ok and decode_bfcl("[]").ok and not decode_bfcl("").calls
    assert decode_bfcl('[{"function": "f", "parameters": {"a": 1}}]', "json").calls == (ToolCall("f", {"a": 1}),)
    assert not decode_bfcl('[{"name": "f", "arguments": {"a": 1}}]', "json").ok
    with pytest.raises(ValueError, match="BFCL decoding format"):
        decode_bfcl("[]", "xml")


# -- every question, every form


def _list(calls):
    return "[" + ", ".join(map(format_call, calls)) + "]"


def _first_number_as(calls, fmt):
    """The calls written as a list with the first number argument (not a bool) rewritten by ``fmt``."""
    for i, c in enumerate(calls):
        for k, v in c.args.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                parts = [format_call(x) for x in calls]
                args = ", ".join(f"{a}={fmt(w) if a == k else repr(w)}" for a, w in c.args.items())
                parts[i] = f"{c.name}({args})"
                return "[" + ", ".join(parts) + "]"
    return None


FORMS = {
    "bfcl_list": _list,
    "spaced_list": lambda cs: "\n  " + _list(cs) + "  \n",
    "bare_fence": lambda cs: "```\n" + _list(cs) + "\n```",
    "after_reasoning": lambda cs: "<think>\nThe user wants calls.\n</think>\n\n" + _list(cs),
    "one_per_line": lambda cs: "\n".join(map(format_call, cs)),
    "python_fence": lambda cs: "```python\n" + _list(cs) + "\n```",
    "prose_around": lambda cs: "Here are the calls:\n" + _list(cs) + "\nLet me know if you need more.",
    "bullets": lambda cs: "\n".join("- " + format_call(c) for c in cs),
    "numbered": lambda cs: "\n".join(f"{i + 1}. {format_call(c)}" for i, c in enumerate(cs)),
    "trailing_semicolon": lambda cs: _list(cs) + ";",
    "semicolon_lines": lambda cs: "\n".join(format_call(c) + ";" for c in cs),
    "tuple_of_calls": lambda cs: "(" + ", ".join(map(format_call, cs)) + ")",
    "tuple_in_list": lambda cs: "[(" + ", ".join(map(format_call, cs)) + ")]",
    "unclosed_reasoning": lambda cs: "<think>\nI will call " + _list(cs),
    "times_one": lambda cs: _first_number_as(cs, lambda v: f"{v!r} * 1"),
    "unary_plus": lambda cs: _first_number_as(cs, lambda v: f"+{v!r}"),
    "positional_extra": lambda cs: "[" + ", ".join(f"{c.name}(0, {format_call(c)[len(c.name) + 1:]}" if j == 0
                                                  else format_call(c) for j, c in enumerate(cs)) + "]",
}
JSON_FORMS = {
    "json_bfcl": lambda cs: "[" + ", ".join(format_call(c, "json") for c in cs) + "]",
    "json_bfcl_fenced": lambda cs: "```json\n[" + ", ".join(format_call(c, "json") for c in cs) + "]\n```",
    "json_name_arguments": lambda cs: "[" + ", ".join(
        format_call(c, "json").replace('"function":', '"name":', 1).replace('"parameters":', '"arguments":', 1)
        for c in cs) + "]",
}


def test_every_form_of_every_answer_scores_as_bfcl(items, bfcl):
    """Each question's gold answer (as tests/envs/tools/test_bfcl_checker.py writes it out) in each form, written
    by one agent while the other writes []: the env's ``exact_bfcl`` is bfcl-eval's verdict on every
    one; ``exact_lenient`` is what comarl's lenient parser makes of it."""
    from test_bfcl_checker import gold_calls

    tally = defaultdict(lambda: [0, 0, 0])   # form -> [cases, BFCL exact, lenient exact]
    for item in items:
        calls = gold_calls(item, 0)
        for forms, env, fmt in ((FORMS, ENV, "python"), (JSON_FORMS, JSON_ENV, "json")):
            for form, write in forms.items():
                text = write(calls)
                if text is None:
                    continue
                m = env.score(item, [text, "[]"])[1]
                assert m["exact_bfcl"] == m["exact"] == float(bfcl.exact(item, text, fmt)), (item["id"], form, text)
                t = tally[form]
                t[0] += 1
                t[1] += m["exact_bfcl"]
                t[2] += m["exact_lenient"]
    tally = {k: tuple(v) for k, v in tally.items()}
    # BFCL's form, and what BFCL's decoder strips or its handler drops, pass everywhere (parallel_178
    # reversed is the only order trap, and these keep the gold order)
    for form in ("bfcl_list", "spaced_list", "bare_fence", "after_reasoning", "json_bfcl", "json_bfcl_fenced"):
        assert tally[form] == (440, 440, 440), form
    # BFCL computes 96 * 1 (300 answers have a non-negative number); a unary + reads as minus there, so
    # only the 10 answers whose number is 0 pass; the lenient parser reads +v as v
    assert tally["times_one"] == (300, 300, 300) and tally["unary_plus"] == (300, 10, 300)
    # forms comarl's lenient parser reads and BFCL rejects (every answer here has 2 or more calls)
    for form in ("one_per_line", "semicolon_lines", "python_fence", "prose_around", "bullets", "numbered",
                 "trailing_semicolon", "tuple_of_calls", "tuple_in_list", "json_name_arguments"):
        assert tally[form] == (440, 0, 440), form
    assert tally["unclosed_reasoning"] == (440, 0, 0)
    # BFCL drops positional arguments: an extra positional one changes nothing there; comarl's lenient
    # parser refuses the call
    assert tally["positional_extra"] == (440, 440, 0)
    assert sum(t[0] for t in tally.values()) == 8520


# -- BFCL's JSON span, found in one pass

@settings(max_examples=800, derandomize=True, deadline=None, database=None)
@given(st.lists(st.sampled_from(["[", "]", "{", "}", ",", " ", "\n", "x", '"a"', "\u2003", "{}"]), max_size=14)
       .map("".join))
def test_call_list_span_is_bfcls_regex(text):
    """``call_list_span`` finds where BFCL's regex matches (the regex backtracks exponentially on ``[{},{},...``
    left open; on these short texts it is fast)."""
    m = re.search(r"\[\s*{.*?}\s*(?:,\s*{.*?}\s*)*\]", text, re.DOTALL)
    assert call_list_span(text) == (m.span() if m else None)


def test_call_list_span_is_linear():
    start = time.perf_counter()
    assert call_list_span("[{" + "},{" * 20_000) is None  # the regex: hours
    assert call_list_span('x [{"a": 1}, {"b": 2}] y') == (2, 22)
    assert time.perf_counter() - start < 1.0
