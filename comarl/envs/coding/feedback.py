"""Feedback text for the next turn of a multi-turn coding episode.

``plain``: only asks for a revision (the previous attempt is shown by the
``revise`` template). ``diagnosis``: what went wrong: syntax error with line
and message, an error raised while defining the program, each failed
*visible* test with its error (at most ``max_failures``), the pass counts
and, with a helper, whether the main function calls it. Hidden tests
(``visible_tests.py``) are counted, never quoted: neither their inputs, their
expected values nor their errors (a unittest message says ``expected != actual``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .extract import extract_code
from .visible_tests import masked_line

FEEDBACK_MODES = ("plain", "diagnosis")
HISTORY_MODES = ("last", "all")


@dataclass(frozen=True)
class Outcome:
    """What a joint attempt did, as the feedback needs it.

    Attributes:
        main_defined: the entry point (or, for ClassEval, any method) was written.
        compiled / syntax_error: whether the program parses, and why not.
        program_error: exception while defining the program, if any.
        tests / passed / errors: the visible test snippets (the diagnosis may quote them), and their results.
        hidden_total / hidden_passed: the hidden tests (never quoted) and how many passed.
        masked: per visible test, quote it without its expected value (``visible_tests.TestSplit.masked``).
        helper: helper name when there is a helper role, else None.
        calls_helper / thin_wrapper: cooperation checks on the main function.
        helper_ignored: the main function called the helper but no test's outcome depended on its result.
        entry_point: the function (or class) name the task asks for.
    """

    main_defined: bool
    compiled: bool
    syntax_error: str | None
    program_error: str | None
    tests: tuple[str, ...]
    passed: tuple[bool, ...]
    errors: tuple[str | None, ...]
    entry_point: str
    helper: str | None = None
    calls_helper: bool = False
    thin_wrapper: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    helper_ignored: bool = False
    hidden_total: int = 0
    hidden_passed: int = 0
    masked: tuple[bool, ...] = ()


def _short(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def _test_line(snippet: str) -> str:
    """The assert (or last line) of a test snippet: what the agent should see."""
    lines = [l for l in snippet.strip().splitlines() if l.strip()]
    asserts = [l.strip() for l in lines if l.strip().startswith("assert")]
    return asserts[-1] if asserts else lines[-1].strip() if lines else ""


def feedback_text(mode: str, o: Outcome, max_failures: int = 3) -> str:
    """The feedback paragraph for ``mode`` ("plain" or "diagnosis")."""
    if mode == "plain":
        return "Your code did not pass all tests."
    if mode != "diagnosis":
        raise ValueError(f"env.args.feedback: must be one of {FEEDBACK_MODES}, got {mode!r}")
    out = ["Diagnosis of the joint program:"]
    if not o.main_defined:
        out.append(f"- `{o.entry_point}` is not defined.")
    if not o.compiled:
        out.append(f"- Syntax error at {o.syntax_error}.")
    elif o.program_error:
        out.append(f"- Error while defining the program: {_short(o.program_error)}")
    if o.compiled and o.tests:
        n_pass = sum(o.passed)
        out.append(f"- Tests passed: {n_pass}/{len(o.tests)}.")
        masked = o.masked or (False,) * len(o.tests)
        failed = [(t, e, m) for t, p, e, m in zip(o.tests, o.passed, o.errors, masked) if not p]
        for test, err, mask in failed[:max_failures]:
            line = masked_line(test, o.entry_point) if mask else _test_line(test)
            out.append(f"- Failed: `{_short(line, 200)}` -> {_short(err or 'failed', 200)}")
        if len(failed) > max_failures:
            out.append(f"- ... and {len(failed) - max_failures} more failed tests.")
    if o.compiled and o.hidden_total:
        out.append(f"- Hidden tests passed: {o.hidden_passed}/{o.hidden_total} (not shown).")
    if o.helper is not None and o.main_defined:
        if not o.calls_helper:
            out.append(f"- `{o.entry_point}` does not call the helper `{o.helper}`.")
        elif o.thin_wrapper:
            out.append(f"- `{o.entry_point}` only returns `{o.helper}(...)`; it should add its own logic.")
        elif o.helper_ignored:
            out.append(f"- `{o.entry_point}` calls the helper `{o.helper}`, but its result does not change what "
                       f"`{o.entry_point}` returns.")
        else:
            out.append(f"- `{o.entry_point}` calls the helper `{o.helper}`.")
    out.extend(f"- {n}" for n in o.notes)
    return "\n".join(out)


def revision_prompts(first: tuple[str, ...], earlier: tuple[tuple[str, ...], ...] | None, blocks: list[str],
                     history: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Next prompts of a multi-turn coding episode, one per agent.

    ``blocks[i]`` is agent i's new revise block (its attempt + feedback);
    ``earlier`` the blocks of earlier turns (None at turn 1). ``history="last"``
    shows only the newest block after the first prompt, ``"all"`` every block in
    order. Returns (prompts, all blocks so far) so the env can carry the blocks
    in ``EnvState.info``.
    """
    earlier = earlier or tuple(() for _ in first)
    kept = tuple(prev + (b,) for prev, b in zip(earlier, blocks))
    shown = kept if history == "all" else tuple(k[-1:] for k in kept)
    return tuple(p + "".join(s) for p, s in zip(first, shown)), kept


def revised(first: tuple[str, ...], earlier: tuple[tuple[str, ...], ...] | None, responses: Sequence[str],
            texts: Sequence[str], templates: Mapping[str, Any],
            history: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """:func:`revision_prompts` where agent i's new block is the ``revise`` template filled with the code of its
    response ``responses[i]`` (the whole text when no code is found) and ``texts[i]``."""
    blocks = [templates["revise"].format(previous=extract_code(r) or r.strip(), feedback=t)
              for r, t in zip(responses, texts)]
    return revision_prompts(first, earlier, blocks, history)


def check_turn_args(feedback: str, max_turns: int, history: str, paper_modes: tuple[str, ...] = ()) -> None:
    """The multi-turn arguments every coding environment takes; errors name the env.args key.

    ``paper_modes``: the extra feedback modes the environment accepts (preset ``paper``).
    """
    if feedback not in FEEDBACK_MODES + paper_modes:
        hint = (" (level_feedback, level_passed, passed and expert_edits exist for humaneval, mbpp and "
                "coophumaneval with env.args.preset=paper)") if not paper_modes else ""
        raise ValueError(f"env.args.feedback: must be one of {FEEDBACK_MODES + paper_modes}, got {feedback!r}{hint}")
    if max_turns < 1:
        raise ValueError(f"env.args.max_turns: must be >= 1, got {max_turns}")
    if history not in HISTORY_MODES:
        raise ValueError(f"env.args.history: must be one of {HISTORY_MODES}, got {history!r}")
