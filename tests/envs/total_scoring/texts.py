"""What a policy might write, as hypothesis strategies and a fixed adversarial list (the fuzz suite's inputs).

Shapes: free unicode text; JSON (and plans, TravelPlanner's answer); call lists in Python and BFCL's JSON form, with
arithmetic in the arguments; code, fenced or not; huge numbers; deep nesting; empty and blank text; pieces of these
joined, and cut off mid-way as a generation that hit its token limit.
"""
import json

from hypothesis import strategies as st

NAMES = ["calculate_em_force", "spotify.play", "cd", "sort", "f", "aux", "x_or_y", "has_close_elements"]
EXPRESSIONS = [
    "96 * 1", "len('') + 96", "(1 < 2) * 96", "96 + 0 * 2 ** 5000", "'%(x)s' % {}", "10 ** 4096 * 10 ** 4096",
    "2 ** 2 ** 2 ** 2 ** 2", "9 ** 9 ** 9", "'a' * 10 ** 9", "'%.999999999f' % 1.0", "1 / 0", "x * 2", "[1] * 10 ** 8",
    "0x" + "f" * 5000, "-" * 300 + "1", "(" * 120 + "1" + ")" * 120, "not 5", "+5", "{None: None, 'None': True}",
    "{[1]: 2}", "b'x' * 3", "1e999", "1j", "...", "sorted([3, 1]) + []",
]
PLAN_VALUES = ["Coco Bambu, Rockford", "-", "from Sarasota to Chicago", "Flight Number: F3573659, from A to B",
               "Self-driving, from A to B, duration: 1 hour", "Taxi, from A to B", "Burpee Museum, Rockford;",
               "a, " * 400, "x(" * 300, ",,,,", "\n,\n"]
CODE_LINES = ["def aux(x):", "def has_close_elements(numbers, threshold):", "    return x", "    return aux(numbers)",
              "    return len(numbers) > 1", "class X:", "    def f(self):", "        return 1", "import math",
              "from typing import List", "x = aux(1)", "    '''doc'''", "@property", "if True:", "    pass",
              "def x_or_y(n, x, y):", "    return x if n > 1 else y", "print('hi')", "def (:", "    return (",
              "assert candidate(1) == 2", "raise SystemExit", "import os; os._exit(0)"]
HUGE = ["9" * 5000, "0x" + "f" * 5000, "1e99999", "-1e-99999", "10 ** 4096 * 10 ** 4096", str(2 ** 64), "NaN",
        "Infinity", "-0.0"]


def _nested(k: int, kind: str) -> str:
    return {"list": "[" * k + "]" * k, "paren": "(" * k + "1" + ")" * k, "json": '{"a": ' * k + "1" + "}" * k,
            "open": "[{" * k, "call": "f(a=" * k + "1" + ")" * k}[kind]


_JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                         st.sampled_from(PLAN_VALUES + EXPRESSIONS))
JSON = st.recursive(_JSON_SCALAR, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), c, max_size=4)),
                    max_leaves=10).map(json.dumps)
PLAN = st.lists(st.fixed_dictionaries(
    {"day": st.one_of(st.integers(-1, 9), st.sampled_from(["1", "x", ""]))},
    optional={f: st.one_of(st.sampled_from(PLAN_VALUES), st.text(max_size=20), st.lists(st.sampled_from(PLAN_VALUES),
                                                                                        max_size=3),
                           st.integers(), st.none(), st.floats())
              for f in ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner",
                        "accommodation")}), max_size=5).map(lambda days: json.dumps({"days": days}))
VALUE = st.one_of(st.integers().map(repr), st.floats().map(repr), st.text(max_size=10).map(repr),
                  st.sampled_from(EXPRESSIONS + ["True", "None", "[1, 2]", "{'a': 1}", "(1,)", "x"]))
CALL = st.tuples(st.sampled_from(NAMES + ["g.h", "__import__"]),
                 st.lists(st.tuples(st.sampled_from(["b_field", "area", "d_time", "artist", "duration", "folder",
                                                     "file_name", "n", "a"]), VALUE), max_size=4)).map(
    lambda t: f"{t[0]}({', '.join(f'{k}={v}' for k, v in t[1])})")
CALLS = st.one_of(
    st.lists(CALL, max_size=4).map(lambda cs: "[" + ", ".join(cs) + "]"),
    st.lists(CALL, max_size=4).map("\n".join),
    st.lists(st.tuples(st.sampled_from(NAMES), st.dictionaries(st.sampled_from(["b_field", "area", "n"]),
                                                               _JSON_SCALAR, max_size=3)),
             max_size=3).map(lambda cs: json.dumps([{"function": n, "parameters": p} for n, p in cs])),
)
CODE = st.lists(st.sampled_from(CODE_LINES), max_size=8).map("\n".join)
FENCED = st.tuples(st.sampled_from(["", "python", "py", "json", "text", " python extra"]), st.one_of(CODE, CALLS, JSON),
                   st.booleans()).map(lambda t: f"```{t[0]}\n{t[1]}" + ("\n```" if t[2] else ""))
NESTED = st.tuples(st.integers(1, 400), st.sampled_from(["list", "paren", "json", "open", "call"])).map(
    lambda t: _nested(*t))
PIECE = st.one_of(st.text(max_size=40), JSON, PLAN, CALLS, CODE, FENCED, NESTED, st.sampled_from(HUGE),
                  st.sampled_from(["", " ", "\n", "[]", "{}", "<think>", "</think>", "---", "\ud800", "\x00"]))
TEXT = st.one_of(
    PIECE,
    st.lists(PIECE, min_size=2, max_size=3).map("\n".join),
    st.tuples(PIECE, st.integers(0, 100)).map(lambda t: t[0][:len(t[0]) * t[1] // 100]),  # cut off mid-way
)

# Long and pathological texts: each took seconds to hours, or raised, before #46 (probes of the readers).
ADVERSARIAL = [
    "", " ", "\n", "[]", "{}", "x " * 3000, "```" * 16_000, "```python\n" * 4000, "```json" + " \n" * 20_000,
    "[{" + "},{" * 3000, "[" * 3000 + "]" * 3000, '{"days": [' * 300, "f(" * 20_000, "a" * 60_000, "(" * 50_000,
    "def f():\n    " + "a" * 40_000 + "\n    return b", "from " * 10_000, "x(" * 20_000 + "," + " a," * 20_000,
    "[f(a='%(x)s' % {})]", "[f(a=10 ** 4096 * 10 ** 4096)]", "[f(a=0x" + "f" * 5000 + ")]", "[f(a=(10**4000)**4000)]",
    "[f(a=2 ** 2 ** 2 ** 2 ** 2)]", "[f(a='%*d' % (10**9, 1))]", "[f(a=" + "1+" * 5000 + "1)]", "9" * 5000,
    '[{"function": "f", "parameters": ' + "[" * 3000 + "]" * 3000 + "}]", "\ud800\udfff\x00\u202e" * 100,
    '{"days": [{"day": 1, "lunch": "' + "a, " * 20_000 + '"}]}', "<think>" * 5000, "🙂" * 20_000,
]
