"""comarl's own coding preset, ``default`` (alias ``comarl``): the rules of docs/coding.md.

Function-level tasks: the joint program is assembled with the AST (``assemble.py``), every test of the
benchmark runs with the benchmark's setup, the level reward has configurable weights (``rewards.py``,
``env.args.rewards``), and later turns show each agent its code with ``plain`` or ``diagnosis`` feedback.
The tests are split into visible and hidden ones (``visible_tests.py``): the diagnosis quotes only visible
failures, and the reward's pass fraction counts only hidden tests, so copying what feedback quoted earns
nothing.

ClassEval: methods split by ``env.args.split`` and merged into the benchmark's class (``class_merge.py``), one
test per ``TestCase`` class, ``class_reward`` with configurable weights; the diagnosis adds, per agent, the
methods it did not write and the other agents' methods it wrote.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..assemble import Assembly, assemble, calls_helper, is_thin_wrapper
from ..class_merge import MergedClass, merge_class, split_methods
from ..feedback import Outcome, feedback_text, revised
from ..prompts import DEFAULTS, class_prompts, function_prompts
from ..rewards import ClassRewardWeights, CodeLevels, CodeRewardWeights, class_reward, code_reward
from ..runner import make_job
from ..visible_tests import TestSplit, split_tests
from .records import Branch, ClassPreset, ClassSettings, FunctionPreset, FunctionSettings, NextTurn, Scored


def _weights(cls, values: Mapping[str, Any] | None):
    try:
        return cls(**dict(values or {}))
    except TypeError as e:
        raise ValueError(f"env.args.rewards: {e}") from e


# ---- function-level tasks (HumanEval, MBPP, CoopHumanEval)

def function_weights(rewards: Mapping[str, Any] | None) -> CodeRewardWeights:
    return _weights(CodeRewardWeights, rewards)


def function_attempt(settings: FunctionSettings, item: Mapping[str, Any], resp: Sequence[str]) -> Assembly:
    """The joint program: agent 0's helper (helper_main) and the last agent's entry point."""
    helper = resp[0] if settings.mode == "helper_main" else None
    return assemble(item["prompt"], item["entry_point"], resp[-1], helper, settings.helper_name)


def function_job(settings: FunctionSettings, item: Mapping[str, Any], a: Assembly):
    """Every benchmark test, with the benchmark's setup; nothing runs without an entry point that parses.

    With a helper agent, each agent's code runs as its own program in its own process and the main program calls
    the helper across the sandbox (``TestJob.helper``): neither can rebind or swap the other's function, and the
    sandbox reports whether the helper was called and whether its result reached the output."""
    if not (a.main_defined and a.compiled):
        return None
    if settings.mode == "helper_main":
        from comarl.sandbox import HelperProgram
        return make_job(a.main_program, item["tests"], item.get("setup", ""), item["entry_point"],
                        helper=HelperProgram(a.helper_program, settings.helper_name))
    return make_job(a.program, item["tests"], item.get("setup", ""), item["entry_point"])


def helper_use(rep, split: TestSplit) -> tuple[bool, bool]:
    """(the main program called the helper during the tests, the helper's result decided a counted test): what
    ran, from the sandbox's report (``helper_calls``, ``helper_needed``), never from the text."""
    if rep is None or not rep.helper_calls:
        return False, False
    called = sum(rep.helper_calls) > 0
    used = any(rep.helper_needed[i] for i in split.hidden if i < len(rep.helper_needed))
    return called, used


def quotes_failures(settings: FunctionSettings) -> bool:
    """The feedback quotes failed tests: a later turn exists and its feedback is the diagnosis."""
    return settings.max_turns > 1 and settings.feedback == "diagnosis"


def function_split(settings: FunctionSettings, item: Mapping[str, Any]) -> TestSplit:
    return split_tests(item["tests"], item["prompt"], item["entry_point"], quotes_failures(settings))


def _pick(values: tuple, idx: tuple[int, ...]) -> tuple:
    return tuple(values[i] for i in idx)


def function_score(settings: FunctionSettings, item: Mapping[str, Any], a: Assembly, rep) -> Scored:
    with_helper = settings.mode == "helper_main"
    helper = settings.helper_name
    tests = tuple(item["tests"])
    passed = tuple(rep.passed) if rep is not None else (False,) * len(tests)
    errors = tuple(rep.errors) if rep is not None else (None,) * len(tests)
    split = function_split(settings, item)
    hidden_passed = _pick(passed, split.hidden)
    frac = sum(hidden_passed) / len(hidden_passed) if hidden_passed else 0.0
    called, used = helper_use(rep, split) if with_helper else (False, False)
    lv = CodeLevels(
        helper_defined=a.helper_defined, main_defined=a.main_defined, compiled=a.compiled, pass_fraction=frac,
        calls_helper=used, thin_wrapper=is_thin_wrapper(a.main_node, helper), ignored_result=called and not used)
    reward, parts = code_reward(lv, settings.weights, with_helper)
    passed_all = bool(passed) and all(passed)
    metrics = {"pass_rate": frac, "pass_rate_all": sum(passed) / len(passed) if passed else 0.0,
               "passed_all": float(passed_all), "compiled": float(a.compiled), "main_defined": float(a.main_defined),
               **parts}
    if with_helper:
        metrics.update(helper_defined=float(a.helper_defined), calls_helper=float(called), helper_used=float(used),
                       thin_wrapper=float(lv.thin_wrapper))
    if rep is not None:
        metrics["timed_out"] = float(rep.timed_out)
    outcome = Outcome(
        main_defined=a.main_defined, compiled=a.compiled, syntax_error=a.syntax_error,
        program_error=rep.program_error if rep is not None else None, tests=_pick(tests, split.visible),
        passed=_pick(passed, split.visible), errors=_pick(errors, split.visible),
        entry_point=item["entry_point"], helper=helper if with_helper else None,
        calls_helper=called or calls_helper(a.main_node, helper), thin_wrapper=lv.thin_wrapper,
        helper_ignored=called and not used and frac > 0,
        hidden_total=len(split.hidden), hidden_passed=sum(hidden_passed),
        masked=tuple(i in split.masked for i in split.visible))
    return Scored(reward, metrics, passed_all, outcome)


def function_revision(settings: FunctionSettings, b: Branch) -> NextTurn:
    """The first-turn prompt + the ``revise`` block (the agent's own code and the feedback on the joint program)."""
    text = feedback_text(settings.feedback, b.scored.outcome, settings.max_failures)
    prompts, kept = revised(function_prompts(settings, b.state.item), b.state.info.get("revisions"), b.responses,
                            [text] * len(b.responses), settings.templates, settings.history)
    return prompts, {"feedback": text, "pass_rate": b.scored.metrics["pass_rate"], "revisions": kept}


def function_followups(settings: FunctionSettings, branches: Sequence[Branch], expert: Any = None) -> list[NextTurn]:
    return [function_revision(settings, b) for b in branches]


FUNCTION = FunctionPreset(
    name="default", templates=DEFAULTS, feedback_modes=(), weights=function_weights, attempt=function_attempt,
    job=function_job, score=function_score, followups=function_followups)


# ---- ClassEval

def class_weights(rewards: Mapping[str, Any] | None) -> ClassRewardWeights:
    return _weights(ClassRewardWeights, rewards)


def class_assignment(settings: ClassSettings, item: Mapping[str, Any]) -> list[list[str]]:
    return split_methods(item["methods"], settings.num_agents, settings.split)


def class_attempt(settings: ClassSettings, item: Mapping[str, Any], resp: Sequence[str]) -> MergedClass:
    return merge_class(item, resp, class_assignment(settings, item))


def class_job(settings: ClassSettings, item: Mapping[str, Any], m: MergedClass):
    """One test per ``TestCase`` class with the benchmark's setup (whose runner drops assertion messages); every
    method pinned to its part of the merged class; nothing runs when the class does not parse."""
    if not m.compiled:
        return None
    from comarl.sandbox import Pinned
    pinned = [Pinned(item["class_name"], name, lo, hi) for name, (lo, hi) in m.spans.items()]
    return make_job(m.program, item["tests"], item["setup"], item["class_name"], item.get("packages", ()),
                    pinned=pinned)


def class_score(settings: ClassSettings, item: Mapping[str, Any], m: MergedClass, rep) -> Scored:
    tests = tuple(item["tests"])
    passed = tuple(rep.passed) if rep is not None else (False,) * len(tests)
    errors = tuple(rep.errors) if rep is not None else (None,) * len(tests)
    rebound = list(rep.rebound) if rep is not None else []
    counted = (False,) * len(passed) if rebound else passed  # a method replaced at run time: no test counts
    frac = sum(counted) / len(counted) if counted else 0.0
    overlap_share = len(m.overlap) / len(item["methods"]) if item["methods"] else 0.0
    reward, parts = class_reward(m.method_share, m.compiled, frac, overlap_share, settings.weights)
    passed_all = bool(passed) and all(passed)
    passed_all = passed_all and not rebound
    metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(m.compiled),
               "method_share": m.method_share, "overlap_share": overlap_share, "rebound": float(bool(rebound)),
               **parts}
    notes = (f"Methods replaced while the tests ran: {', '.join(rebound)}; no test counts.",) if rebound else ()
    outcome = Outcome(main_defined=any(m.written), compiled=m.compiled, syntax_error=m.syntax_error, notes=notes,
                      program_error=rep.program_error if rep is not None else None, tests=tests,
                      passed=counted, errors=errors, entry_point=item["class_name"])
    return Scored(reward, metrics, passed_all, outcome)


def class_followups(settings: ClassSettings, branches: Sequence[Branch]) -> list[NextTurn]:
    """Per agent: the feedback on the merged class + the methods it did not write and others' it wrote."""
    out = []
    for b in branches:
        item, m = b.state.item, b.attempt
        assignment = class_assignment(settings, item)
        texts = []
        for i, mine in enumerate(assignment):
            notes = []
            missing = [x for x in mine if x not in m.written[i]]
            if missing:
                notes.append(f"You did not write: {', '.join(missing)}.")
            dup = [x for x in m.overlap if x in m.written[i] and x not in mine]
            if dup:
                notes.append(f"You wrote methods assigned to another agent: {', '.join(dup)}.")
            o = replace(b.scored.outcome, notes=b.scored.outcome.notes + tuple(notes))
            texts.append(feedback_text(settings.feedback, o, settings.max_failures))
        prompts, kept = revised(class_prompts(settings, assignment, item), b.state.info.get("revisions"),
                                b.responses, texts, settings.templates, settings.history)
        out.append((prompts, {"pass_rate": b.scored.metrics["pass_rate"], "revisions": kept}))
    return out


CLASS = ClassPreset(
    name="default", templates=DEFAULTS, weights=class_weights, assignment=class_assignment, attempt=class_attempt,
    job=class_job, score=class_score, followups=class_followups)
