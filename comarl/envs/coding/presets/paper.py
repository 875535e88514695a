"""The MAGRPO paper's coding preset, ``paper``: its reward, test extraction, ClassEval split and prompts, number
for number (docs/reproduction_coding.md lists every quirk kept and why).

Building blocks, each a set of pure functions tested against the reference code: ``paper_text.py`` (the
function-level text handling), ``paper_rewards.py`` (both rewards), ``paper_feedback.py`` (the paper's
multi-turn prompts), ``paper_classeval.py`` (ClassEval's split, merge and test counting). The comarl feedback
mode ``diagnosis`` works here too, through the default preset's revision prompts.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..feedback import Outcome, feedback_text, revised
from ..paper_classeval import (RUN_ONE_SETUP, chosen_methods, class_name, compiles, incomplete_methods,
                               merge_into_skeleton, overlap_count, paper_class_counts, param_split,
                               program_with_tests, test_snippets)
from ..paper_feedback import PAPER_FEEDBACK_MODES, PaperReport, paper_followups, slice_tests
from ..paper_rewards import paper_class_reward, paper_code_reward
from ..paper_text import (PAPER_SETUP, function_text, has_return, ignores_helper, is_wrapper, paper_pass_count,
                          paper_program, paper_test_lines, paper_test_snippets, prompt_imports, uses_helper)
from ..prompts import DEFAULTS, class_prompts, function_prompts
from ..runner import make_job
from ..testcases import program_imports, safe_imports, third_party
from . import default
from .records import Branch, ClassPreset, ClassSettings, FunctionPreset, FunctionSettings, NextTurn, Scored

# The same role, constraints and output format as the MAGRPO paper's prompts, in our own words (the
# verbatim wording is in the reference repositories; see docs/reproduction_coding.md). The paper asked
# for bare code without fences: its reward strips fences anyway.
PAPER_HELPER = """Write a helper function for the coding problem below.

Problem:
{prompt}
Rules:
- Name the helper `{helper}`; the main function will call it, so it must return something useful.
- Give it real parameters and end it with a return statement.
- Output only the function: no markdown fences, no text before or after it, no tests, no usage examples.
"""

PAPER_MAIN = """Implement the required function for the coding problem below.

Problem:
{prompt}
A helper function `{helper}(...)` written by another agent is available to you.
Rules:
- Define `{entry_point}` with exactly the parameters shown above and return the result.
- Call `{helper}(...)` and use what it returns; do not define `{helper}` yourself.
- Output only the function: no markdown fences, no text before or after it, no tests, no usage examples.
"""

PAPER_SINGLE = """Implement the required function for the coding problem below.

Problem:
{prompt}
Rules:
- Define `{entry_point}` with exactly the parameters shown above and return the result.
- Output only the function: no markdown fences, no text before or after it, no tests, no usage examples.
"""

PAPER_CLASS = """You are one of the agents completing the Python class `{class_name}`.

You implement only these methods:
{methods_list}

Rules:
- Output only Python `def` blocks for your methods, named exactly as listed.
- No class header, no imports, no markdown fences, no explanations.
- If no method is listed for you, output nothing.

Class skeleton:
{skeleton}
"""

TEMPLATES = {**DEFAULTS, "helper": PAPER_HELPER, "main": PAPER_MAIN, "single": PAPER_SINGLE, "class": PAPER_CLASS}


def fixed_weights(rewards: Mapping[str, Any] | None) -> None:
    """The paper's weights are part of its reward: ``env.args.rewards`` is refused."""
    if rewards:
        raise ValueError("env.args.rewards: the paper preset has fixed weights; remove env.args.rewards")
    return None


# ---- function-level tasks (HumanEval, MBPP, CoopHumanEval)

@dataclass(frozen=True)
class PaperAttempt:
    """A joint attempt as the paper preset sees it (texts, checks, program and test snippets)."""

    helper_fn: str
    main_fn: str
    helper_defined: bool
    main_defined: bool
    program: str
    parses: bool
    syntax_error: str | None
    tests: tuple[str, ...]


def function_attempt(settings: FunctionSettings, item: Mapping[str, Any], resp: Sequence[str]) -> PaperAttempt:
    """The paper's program: the prompt's imports, the helper ``aux`` and the entry point, found by text."""
    helper_text = resp[0] if settings.mode == "helper_main" else ""
    helper_fn = function_text(helper_text, settings.helper_name)
    main_fn = function_text(resp[-1], item["entry_point"])
    program = paper_program(helper_fn, main_fn, prompt_imports(item["prompt"]))
    try:
        ast.parse(program)
        parses, syntax_error = True, None
    except SyntaxError as e:
        parses, syntax_error = False, f"line {e.lineno}, col {e.offset}: {e.msg}"
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes; CPython's parser on deep or odd text
        parses, syntax_error = False, f"{type(e).__name__}: {e}"
    return PaperAttempt(helper_fn, main_fn, has_return(helper_fn), has_return(main_fn), program, parses,
                        syntax_error, tuple(paper_test_snippets(item.get("test_source"), item["entry_point"])))


def function_job(settings: FunctionSettings, item: Mapping[str, Any], a: PaperAttempt):
    # with more turns ahead, a program whose main is missing still runs: its test results feed the feedback
    if a.parses and a.tests and (a.main_defined or (settings.max_turns > 1 and a.main_fn)):
        return make_job(a.program, a.tests, PAPER_SETUP, item["entry_point"])
    return None


def function_score(settings: FunctionSettings, item: Mapping[str, Any], a: PaperAttempt, rep) -> Scored:
    helper, with_helper = settings.helper_name, settings.mode == "helper_main"
    n = len(a.tests)
    errors = tuple(rep.errors) if rep is not None else (None,) * n
    passed = paper_pass_count(list(errors)) if rep is not None and a.main_defined else 0
    calls = uses_helper(a.main_fn, helper)
    wrapper = is_wrapper(a.main_fn, helper)
    reward, parts = paper_code_reward(
        a.helper_defined, a.main_defined, a.parses, n, passed, helper_found=bool(a.helper_fn),
        calls_helper=calls, wrapper=wrapper, ignored=ignores_helper(a.main_fn, helper))
    frac = passed / n if n else 0.0
    passed_all = n > 0 and passed == n
    metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(a.parses),
               "main_defined": float(a.main_defined), **parts}
    if with_helper:
        metrics.update(helper_defined=float(a.helper_defined), calls_helper=float(calls), thin_wrapper=float(wrapper))
    outcome = Outcome(  # what the comarl feedback modes (diagnosis) read
        main_defined=a.main_defined, compiled=a.parses, syntax_error=a.syntax_error,
        program_error=rep.program_error if rep is not None else None, tests=a.tests,
        passed=tuple(e is None for e in errors) if rep is not None else (False,) * n, errors=errors,
        entry_point=item["entry_point"], helper=helper if with_helper else None,
        calls_helper=calls, thin_wrapper=wrapper)
    return Scored(reward, metrics, passed_all, outcome)


def function_report(settings: FunctionSettings, item: Mapping[str, Any], a: PaperAttempt, rep) -> PaperReport:
    """What the paper's feedback modes say about one attempt (the reward's test results, ``sandbox_slice``d)."""
    helper = settings.helper_name
    lines = paper_test_lines(item.get("test_source"), item["entry_point"])
    shown = slice_tests(len(lines), settings.sandbox_slice)
    if a.parses and not a.main_fn:  # nothing to run: every test fails on the missing name, as it did there
        tests = tuple(lines[shown])
        errors = tuple(f"NameError: name '{item['entry_point']}' is not defined" for _ in tests)
    elif rep is None or not a.parses:
        tests, errors = (), ()
    else:
        errs = list(rep.errors) if rep.program_error is None else [rep.program_error] * len(lines)
        tests, errors = tuple(lines[shown]), tuple(errs[shown])
    return PaperReport(
        helper=helper if settings.mode == "helper_main" else None, entry_point=item["entry_point"],
        helper_fn=a.helper_fn, main_fn=a.main_fn, helper_defined=a.helper_defined, main_defined=a.main_defined,
        parses=a.parses, syntax_error=a.syntax_error, tests=tests, errors=errors,
        calls_helper=uses_helper(a.main_fn, helper), ignores_result=ignores_helper(a.main_fn, helper),
        wrapper=is_wrapper(a.main_fn, helper))


def function_followups(settings: FunctionSettings, branches: Sequence[Branch], expert: Any = None) -> list[NextTurn]:
    """The paper's next prompts for its feedback modes (``paper_feedback.py``); ``expert_edits`` asks the expert
    once for the whole batch. ``diagnosis`` is comarl's: the default preset's revision prompts."""
    if settings.feedback not in PAPER_FEEDBACK_MODES:
        return default.function_followups(settings, branches)
    edits: list[Any] = [None] * len(branches)
    if settings.feedback == "expert_edits":
        asks = [{"prompt": b.state.item["prompt"], "helper": settings.helper_name,
                 "entry_point": b.state.item["entry_point"], "code": b.attempt.program} for b in branches]
        edits = list(expert.edits(asks))
    out = []
    for b, e in zip(branches, edits):
        s = b.state
        report = function_report(settings, s.item, b.attempt, b.report)
        hist = s.history or tuple(() for _ in s.prompts)
        histories = [h + ((p, x),) for h, p, x in zip(hist, s.prompts, b.responses)]
        nxt = paper_followups(settings.feedback, report, histories, function_prompts(settings, s.item), e)
        out.append((nxt, {"pass_rate": b.scored.metrics["pass_rate"], "feedback": settings.feedback}))
    return out


FUNCTION = FunctionPreset(
    name="paper", templates=TEMPLATES, feedback_modes=PAPER_FEEDBACK_MODES, weights=fixed_weights,
    attempt=function_attempt, job=function_job, score=function_score, followups=function_followups)


# ---- ClassEval

@dataclass(frozen=True)
class PaperClassAttempt:
    """The merged class as the paper built it.

    Attributes:
        methods: the skeleton's stub methods (to write); chosen: method -> the assigned agent's text that parses.
        overlap: methods two or more agents wrote; merged: the skeleton with the chosen methods, reformatted.
        compiles: the merged class followed by the test module compiles; tests: one snippet per test method.
    """

    methods: list[str]
    chosen: dict[str, str]
    overlap: int
    merged: str
    compiles: bool
    tests: tuple[str, ...]


def class_assignment(settings: ClassSettings, item: Mapping[str, Any]) -> list[list[str]]:
    """By parameter count (``paper_classeval.param_split``); ``env.args.split`` is not read."""
    split = param_split(item["skeleton"], settings.num_agents)
    return [[m for m, a in split.items() if a == i] for i in range(settings.num_agents)]


def class_attempt(settings: ClassSettings, item: Mapping[str, Any], resp: Sequence[str]) -> PaperClassAttempt:
    methods = incomplete_methods(item["skeleton"])
    chosen = chosen_methods(list(resp), methods, param_split(item["skeleton"], settings.num_agents))
    merged = merge_into_skeleton(item["skeleton"], class_name(item["skeleton"]) or "", chosen)
    # the compile check is the reference's (class + tests as one module); the job runs the class alone
    # and the tests as trusted snippets, out of the program's reach
    return PaperClassAttempt(methods, chosen, overlap_count(list(resp), methods), merged,
                             compiles(program_with_tests(merged, item["test"])), tuple(test_snippets(item["test"])))


def _allowed(lines: list[str], item: Mapping[str, Any]) -> list[str]:
    """Import lines that import only the standard library or the task's own packages (the harness runs them)."""
    allowed = set(item.get("packages", ()))
    return [l for l in lines if set(third_party([l])) <= allowed]


def class_job(settings: ClassSettings, item: Mapping[str, Any], a: PaperClassAttempt):
    # the reference ran the tests in the program's module: they saw the names the program imported (and
    # only those); here the same import lines run as trusted setup, so the names are the harness's own
    if not (a.compiles and a.tests):
        return None
    setup = RUN_ONE_SETUP + safe_imports(_allowed(program_imports(a.merged), item))
    return make_job(a.merged, a.tests, setup, item["class_name"], item.get("packages", ()))


def class_score(settings: ClassSettings, item: Mapping[str, Any], a: PaperClassAttempt, rep) -> Scored:
    tests, methods = a.tests, a.methods
    errors = tuple(rep.errors) if rep is not None else (None,) * len(tests)
    run, passed = paper_class_counts(list(errors), rep.program_stdout) if rep is not None else (0, 0)
    reward, parts = paper_class_reward(len(methods), len(a.chosen), a.overlap, a.compiles, run, passed)
    frac = max(passed, 0) / len(tests) if tests else 0.0
    passed_all = bool(tests) and passed == len(tests)
    metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(a.compiles),
               "method_share": len(a.chosen) / len(methods) if methods else 0.0,
               "overlap_share": a.overlap / len(methods) if methods else 0.0, **parts}
    outcome = Outcome(
        main_defined=bool(a.chosen), compiled=a.compiles,
        syntax_error=None if a.compiles else "the merged class does not compile",
        program_error=rep.program_error if rep is not None else None, tests=tests,
        passed=tuple(rep.passed) if rep is not None else (False,) * len(tests), errors=errors,
        entry_point=item["class_name"])
    return Scored(reward, metrics, passed_all, outcome)


def class_followups(settings: ClassSettings, branches: Sequence[Branch]) -> list[NextTurn]:
    """comarl's revision prompts (the paper ran ClassEval for one turn): the same feedback for every agent."""
    out = []
    for b in branches:
        item = b.state.item
        text = feedback_text(settings.feedback, b.scored.outcome, settings.max_failures)
        prompts, kept = revised(class_prompts(settings, class_assignment(settings, item), item),
                                b.state.info.get("revisions"), b.responses, [text] * len(b.responses),
                                settings.templates, settings.history)
        out.append((prompts, {"pass_rate": b.scored.metrics["pass_rate"], "revisions": kept}))
    return out


CLASS = ClassPreset(
    name="paper", templates=TEMPLATES, weights=fixed_weights, assignment=class_assignment, attempt=class_attempt,
    job=class_job, score=class_score, followups=class_followups)
