"""The coding environments' text readers in linear time (#46): the fence regex of ``extract.py`` and the paper's
wrapper regex (``paper_text.assigned_from``) backtracked quadratically; their one-pass replacements capture
what the regexes did (checked on generated texts), and ``quiet_parse`` turns every parser failure into
SyntaxError."""
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comarl.envs.coding.extract import extract_code, fences, quiet_parse, split_blocks
from comarl.envs.coding.paper_text import assigned_from, is_wrapper
from comarl.envs.tools.calls import fenced_blocks

PROFILE = settings(max_examples=400, derandomize=True, deadline=None, database=None)
FENCE_TEXT = st.lists(st.sampled_from(["```", "`", "\n", " ", "\t", "py", "python", "é", "+", ".", "-", "x y", "_",
                                       "\x1c", "①"]), max_size=12).map("".join)
LINE = st.lists(st.sampled_from(["a", "b1", "_", " ", "\t", "=", "aux", "(", ")", "x", "é", "=aux(", "aux ("]),
                max_size=10).map("".join)


@PROFILE
@given(FENCE_TEXT)
def test_fences_capture_what_the_regexes_did(text):
    tagged = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
    assert fences(text) == tagged.findall(text)
    assert fenced_blocks(text) == re.findall(r"```[ \t]*[\w+.-]*[^\n]*\n(.*?)(?:```|\Z)", text, re.DOTALL)


@PROFILE
@given(LINE)
def test_assigned_from_captures_what_the_regex_did(line):
    m = re.search(r"(\w+)\s*=\s*aux\s*\(", line)
    assert assigned_from(line, "aux") == (m.group(1) if m else None)


def test_by_hand():
    assert fences("a\n```py3 x\nf()\n```") == [("py3", "f()\n")]
    assert assigned_from("x = 1; result = aux(x)", "aux") == "result"
    assert is_wrapper("def f(x):\n    v = aux(x)\n    return v") and not is_wrapper("def f(x):\n    return 1\n    v")


@pytest.mark.parametrize("code", ["x " * 3000, "(" * 300, "-" * 5000 + "1", "a = '\x00'"])
def test_every_parser_failure_is_a_syntax_error(code):
    """ValueError (a null byte), RecursionError, and CPython's MemoryError on ~2,000 bare names in a row."""
    with pytest.raises(SyntaxError):
        quiet_parse(code)
    split_blocks(code)  # falls back to blocks by indentation


def test_long_texts_take_linear_time():
    texts = ["```" * 20_000, "```python\n" * 6_000, "def f():\n    " + "a" * 60_000 + "\n    return b"]
    start = time.perf_counter()
    for text in texts:
        extract_code(text)
        is_wrapper(text)
    assert time.perf_counter() - start < 2.0
