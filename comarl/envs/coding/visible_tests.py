"""Which of a task's tests the agents may see, and which only the reward counts (preset ``default``).

Multi-turn feedback that quotes a failed test with its input and expected value hands the answer to the next
turn: a policy that copies every quoted ``assert f(x) == y`` into a lookup table passes those tests without
coding (issue #37 measured MBPP 0.01 -> 0.94 at turn 2). So the tests of a task are split once:

- **visible**: tests whose checked call the prompt already shows (MBPP's example, a HumanEval docstring's
  ``>>> f(1)``), and, when the feedback quotes failures, the first third of the others (at least one, when
  three or more are left): the diagnosis may quote these, input and expected value;
- **hidden**: the rest; never quoted (the feedback gives only their count passed), and the only tests the
  reward counts, at every turn, so turn 1 and turn 2 are scored on the same tests and nothing an agent was
  shown is worth anything.

Tests that check the same call (same input) go to the same side. A task whose tests cannot be split (one
test, or one ``check(candidate)`` with a loop) has no feedback-visible test: the diagnosis then quotes no
expected value. A task whose every test is shown by the prompt counts them all (there is nothing else).

ClassEval needs no split: its tests are ``unittest`` classes whose code the agents never see, and the runner
drops every assertion's message (unittest's ``first != second`` holds the expected value), so its diagnosis names
failed test methods and error types only; a visible/hidden split there would not help anyway, as the methods of
one test class often expect the same values.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Sequence

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class TestSplit:
    """Indices into a task's ``tests``.

    Attributes:
        visible: tests the feedback may quote (with input and expected value); the reward ignores them.
        hidden: tests never quoted; the reward's pass fraction is over these.
        in_prompt: how many of ``visible`` the prompt itself shows.
    """

    __test__ = False  # not a pytest class

    visible: tuple[int, ...]
    hidden: tuple[int, ...]
    in_prompt: int = 0


def _last_assert(snippet: str) -> ast.Assert | None:
    try:
        tree = ast.parse(snippet)
    except (SyntaxError, ValueError, RecursionError):
        return None
    asserts = [n for n in tree.body if isinstance(n, ast.Assert)]
    return asserts[-1] if asserts else None


def checked_call(snippet: str, entry_point: str) -> tuple[str, ...]:
    """Spellings, without whitespace, of the call of the entry point the test checks (``f(1,2)``, as written and
    as unparsed, ``candidate`` read as the entry point); the test's text itself when it checks no single call."""
    node = _last_assert(snippet)
    if node is not None:
        calls = [n for n in ast.walk(node.test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id in (entry_point, "candidate")]
        if calls:
            call = calls[0]
            written = ast.get_source_segment(snippet, call) or ""
            unparsed = ast.unparse(ast.Call(ast.Name(entry_point), call.args, call.keywords))
            written = re.sub(r"^candidate\b", entry_point, written)
            return tuple(dict.fromkeys(_SPACE.sub("", t) for t in (written, unparsed) if t))
    return (_SPACE.sub("", snippet),)


def split_tests(tests: Sequence[str], prompt: str, entry_point: str, quotes_failures: bool) -> TestSplit:
    """The :class:`TestSplit` of one task (module docstring). ``quotes_failures``: the feedback quotes failed
    tests (multi-turn ``diagnosis``); without it only the tests the prompt shows are visible."""
    flat_prompt = _SPACE.sub("", prompt)
    groups: dict[str, list[int]] = {}
    shown: set[str] = set()
    for i, test in enumerate(tests):
        spellings = checked_call(test, entry_point)
        key = spellings[-1]
        groups.setdefault(key, []).append(i)
        if any(s in flat_prompt for s in spellings if len(s) > len(entry_point) + 2):
            shown.add(key)
    in_prompt = [i for k, idx in groups.items() if k in shown for i in idx]
    rest = [idx for k, idx in groups.items() if k not in shown]
    if not rest:  # the prompt shows every test: nothing is hidden, they all count
        return TestSplit(visible=(), hidden=tuple(range(len(tests))), in_prompt=0)
    quoted = len(rest) // 3 if quotes_failures and len(rest) >= 3 else 0
    visible = sorted(in_prompt + [i for idx in rest[:quoted] for i in idx])
    hidden = sorted(i for idx in rest[quoted:] for i in idx)
    return TestSplit(visible=tuple(visible), hidden=tuple(hidden), in_prompt=len(in_prompt))

