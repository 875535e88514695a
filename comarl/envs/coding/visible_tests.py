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

A visible failure is quoted without its expected value (``== ...``) when a hidden test expects the same value
(or the test is not an ``==`` of one call), even where the prompt shows that test in its own words: the
feedback never quotes a value a hidden test expects. Otherwise a policy that answers every call with the value
the feedback quoted most (``True`` for a yes/no task) passes the hidden tests that share it (measured: HumanEval
0.11 -> 0.20 at turn 2 before this rule).

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
        masked: the visible tests quoted without their expected value (a hidden test expects the same value).
    """

    __test__ = False  # not a pytest class

    visible: tuple[int, ...]
    hidden: tuple[int, ...]
    in_prompt: int = 0
    masked: tuple[int, ...] = ()


def _last_assert(snippet: str) -> ast.Assert | None:
    try:
        tree = ast.parse(snippet)
    except (SyntaxError, ValueError, RecursionError):
        return None
    asserts = [n for n in tree.body if isinstance(n, ast.Assert)]
    return asserts[-1] if asserts else None


def _expected(node: ast.Assert | None, entry_point: str) -> ast.expr | None:
    """The side of the last assert's ``==`` that is not the call of the entry point (the expected value)."""
    if node is None or not (isinstance(node.test, ast.Compare) and len(node.test.ops) == 1
                            and isinstance(node.test.ops[0], (ast.Eq, ast.Is))):
        return None
    left, right = node.test.left, node.test.comparators[0]
    calls = lambda e: any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)  # noqa: E731
                          and n.func.id in (entry_point, "candidate") for n in ast.walk(e))
    return right if calls(left) and not calls(right) else left if calls(right) and not calls(left) else None


def expected_value(snippet: str, entry_point: str) -> str | None:
    """The expected value a test compares the entry point's result with, as normalised text (None: not an
    ``==`` / ``is`` test of one call)."""
    node = _expected(_last_assert(snippet), entry_point)
    if node is None:
        return None
    try:
        return repr(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)


def masked_line(snippet: str, entry_point: str) -> str:
    """The test's last assert with its expected value replaced by ``...``."""
    node = _last_assert(snippet)
    expected = _expected(node, entry_point)
    if node is None or expected is None:
        return "assert ..."
    test = node.test
    assert isinstance(test, ast.Compare)
    dots = ast.Constant(...)
    masked = (ast.Compare(dots, test.ops, test.comparators) if expected is test.left
              else ast.Compare(test.left, test.ops, [dots]))
    return "assert " + ast.unparse(masked)


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
    hidden_values = {expected_value(tests[i], entry_point) for i in hidden}
    masked = tuple(i for i in visible if (v := expected_value(tests[i], entry_point)) is None or v in hidden_values)
    return TestSplit(visible=tuple(visible), hidden=tuple(hidden), in_prompt=len(in_prompt), masked=masked)

