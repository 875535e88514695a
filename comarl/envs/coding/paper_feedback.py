"""Next-turn prompts of the MAGRPO paper's multi-turn coding runs (``env.args.feedback``).

Modes (content as in the reference repository's ``external/`` modes, our wording):

- ``level_feedback`` (the paper's default): per agent, every earlier prompt and
  response of that agent, then static and execution diagnostics (helper and main
  found or missing and why, syntax with line and column, tests passed, every
  failing test with its error) and, for the main agent only, notes on how it
  uses the helper.
- ``level_passed``: the agent's previous function and short signals
  (implementation, syntax, tests; helper use for the main agent).
- ``passed``: the previous function and one signal: all levels passed or not.
- ``plain``: the previous function and a request to revise it.
- ``expert_edits``: the first-turn prompt again, followed by edits an expert
  model proposed for this agent (``expert.py``).

``sandbox_slice`` N keeps the first N test lines for feedback (negative: the
last N, 0/None: all). Feedback reuses the reward's test results for those
lines instead of running them a second time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

PAPER_FEEDBACK_MODES = ("level_feedback", "level_passed", "passed", "plain", "expert_edits")
_NONE = "<no implementation found>"


@dataclass(frozen=True)
class PaperReport:
    """What the feedback says about one joint attempt.

    Attributes:
        helper / entry_point: names; ``helper`` is None in single-agent mode.
        helper_fn / main_fn: the functions as the paper's extraction found them ("" if absent).
        helper_defined / main_defined: found with a return statement.
        parses / syntax_error: the joint program parses, else "line L, col C: message".
        tests / errors: the test lines shown (after ``sandbox_slice``) and their results
            (None = passed); both empty when the tests did not run.
        calls_helper / ignores_result / wrapper: the main function's use of the helper.
    """

    helper: str | None
    entry_point: str
    helper_fn: str
    main_fn: str
    helper_defined: bool
    main_defined: bool
    parses: bool
    syntax_error: str | None
    tests: tuple[str, ...]
    errors: tuple[str | None, ...]
    calls_helper: bool = False
    ignores_result: bool = False
    wrapper: bool = False

    @property
    def passed(self) -> int:
        return sum(e is None for e in self.errors)


def slice_tests(n_tests: int, sandbox_slice: int | None) -> slice:
    """Which of ``n_tests`` test lines feedback shows (see module docstring)."""
    if not sandbox_slice:
        return slice(0, n_tests)
    return slice(0, sandbox_slice) if sandbox_slice > 0 else slice(max(0, n_tests + sandbox_slice), n_tests)


def _found(defined: bool, text: str) -> str:
    if defined:
        return "FOUND"
    return "MISSING (no return statement)" if text else "MISSING (not defined)"


def _history(turns: Sequence[tuple[str, str]], whose: str) -> list[str]:
    if not turns:
        return []
    out = ["History - your earlier prompts:"]
    out += [f"- Turn {t} prompt:\n{p}" for t, (p, _) in enumerate(turns, 1)]
    out += ["", f"History - your earlier {whose} responses:"]
    out += [f"- Turn {t} response:\n{r}" for t, (_, r) in enumerate(turns, 1)]
    return out + [""]


def _tests_lines(r: PaperReport) -> list[str]:
    if not r.tests:
        return ["- Tests: no test cases found" if r.parses else "- Tests: not run (the program does not parse)"]
    out = [f"- Tests: {r.passed}/{len(r.tests)} passed"]
    out += [f"  Failed case: {t} -> {e}" for t, e in zip(r.tests, r.errors) if e is not None]
    return out


def _helper_use(r: PaperReport) -> str:
    if not r.main_defined:
        return "main is missing, so its use of the helper cannot be checked"
    if not r.calls_helper:
        return f"main does NOT call {r.helper}"
    if r.ignores_result:
        return f"main calls {r.helper} but throws its result away"
    return f"main calls {r.helper} and uses its result"


def _revise(name: str) -> str:
    return f"Revise your {name}(...) accordingly. Output only the function code, nothing else."


def level_feedback(r: PaperReport, histories: Sequence[Sequence[tuple[str, str]]]) -> tuple[str, ...]:
    """One prompt per agent (helper first when there is one); ``histories[i]``: agent i's (prompt, response) turns."""
    syntax = "OK" if r.parses else f"ERROR ({r.syntax_error})"
    main_diag = [f"- Main {r.entry_point}: {_found(r.main_defined, r.main_fn)}"]
    if r.helper is None:
        lines = (_history(histories[0], "") + ["Static and execution diagnostics:"] + main_diag
                 + [f"- Syntax: {syntax}"] + _tests_lines(r) + ["", _revise(r.entry_point)])
        return ("\n".join(lines),)
    helper_diag = [f"- Helper {r.helper}: {_found(r.helper_defined, r.helper_fn)}"]
    shared = [f"- Syntax: {syntax}"] + _tests_lines(r)
    helper = (_history(histories[0], f"{r.helper}(...)") + ["Static and execution diagnostics:"] + helper_diag
              + main_diag + shared + ["", _revise(r.helper)])
    notes = [f"- Helper use: {_helper_use(r)}"] if r.main_defined else []
    if r.main_defined and r.wrapper:
        notes.append(f"- Warning: main only wraps {r.helper}; give it logic of its own")
    main = (_history(histories[1], "main") + ["Static and execution diagnostics:"] + main_diag + helper_diag
            + shared + notes + ["", _revise(r.entry_point)])
    return "\n".join(helper), "\n".join(main)


def _test_signal(r: PaperReport) -> str:
    if not r.tests:
        return "No tests found"
    if r.passed == len(r.tests):
        return "Passed all tests"
    return "No tests passed" if r.passed == 0 else f"Passed {r.passed}/{len(r.tests)} tests"


def _previous(label: str, fn: str) -> list[str]:
    return [f"Your previous {label}:", fn or _NONE, ""]


def level_passed(r: PaperReport) -> tuple[str, ...]:
    """Previous function + short signals per agent."""
    syntax = "Syntax correct" if r.parses else "Syntax not correct"
    impl = lambda ok: "OK" if ok else "No implementation found in the required form"  # noqa: E731
    main = (_previous(f"{r.entry_point} implementation", r.main_fn)
            + ["Signals:", f"- Implementation: {impl(r.main_defined)}", f"- Syntax: {syntax}",
               f"- Tests: {_test_signal(r)}"])
    if r.helper is None:
        return ("\n".join(main + ["", _revise(r.entry_point)]),)
    main.append(f"- Helper use: {_helper_use(r)}")
    helper = (_previous(f"{r.helper}(...) implementation", r.helper_fn)
              + ["Signals:", f"- Implementation: {impl(r.helper_defined)}", f"- Syntax: {syntax}",
                 f"- Tests: {_test_signal(r)}", "", _revise(r.helper)])
    return "\n".join(helper), "\n".join(main + ["", _revise(r.entry_point)])


def passed(r: PaperReport) -> tuple[str, ...]:
    """Previous function + one pass/fail signal per agent."""
    ok = r.parses and r.main_defined and bool(r.tests) and r.passed == len(r.tests)
    signal = "Signal: " + ("All levels passed" if ok else "Not all levels passed")
    ask = lambda name: f"Revise your {name}(...) if needed. Output only the function code."  # noqa: E731
    main = "\n".join(_previous(f"{r.entry_point} implementation", r.main_fn) + [signal, "", ask(r.entry_point)])
    if r.helper is None:
        return (main,)
    helper = "\n".join(_previous(f"{r.helper}(...) implementation", r.helper_fn) + [signal, "", ask(r.helper)])
    return helper, main


def plain(r: PaperReport) -> tuple[str, ...]:
    """Previous function + a request to revise it, no signals."""
    ask = lambda name: f"Revise your {name}(...). Output only the function code."  # noqa: E731
    main = "\n".join(_previous(f"{r.entry_point} implementation", r.main_fn) + [ask(r.entry_point)])
    if r.helper is None:
        return (main,)
    return "\n".join(_previous(f"{r.helper}(...) implementation", r.helper_fn) + [ask(r.helper)]), main


def with_expert_edits(first_prompts: Sequence[str], edits: Sequence[str]) -> tuple[str, ...]:
    """The first-turn prompts again, each followed by the expert's edits for that agent (if any)."""
    return tuple(p + (f"\n\nProposed edits from an expert:\n{e}" if e.strip() else "")
                 for p, e in zip(first_prompts, edits))


def paper_followups(mode: str, r: PaperReport, histories: Sequence[Sequence[tuple[str, str]]],
                    first_prompts: Sequence[str], edits: Sequence[str] | None = None) -> tuple[str, ...]:
    """Next prompts (one per agent) for ``mode``; ``edits`` only for ``expert_edits``."""
    if mode == "level_feedback":
        return level_feedback(r, histories)
    if mode == "level_passed":
        return level_passed(r)
    if mode == "passed":
        return passed(r)
    if mode == "plain":
        return plain(r)
    if mode == "expert_edits":
        return with_expert_edits(first_prompts, edits or [""] * len(first_prompts))
    raise ValueError(f"env.args.feedback: must be one of {PAPER_FEEDBACK_MODES}, got {mode!r}")
