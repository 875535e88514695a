"""What a coding preset is: the record an environment delegates its rules to.

A preset decides everything about a benchmark that is a rule rather than state: the default prompts, how a
joint response becomes a program and a sandbox job, how the sandbox's report becomes the reward and the
metrics, and what each agent reads on the next turn. The environments (``FunctionCodingEnv``,
``ClassEvalEnv``) hold the state (settings, the sandbox runner, the expert) and run one turn as
``turns.step_batch`` does::

    attempt = preset.attempt(settings, item, joint_response)    # per joint action: parse and assemble
    job     = preset.job(settings, item, attempt)               # a TestJob, or None when nothing can run
    reports = runner.run(jobs)                                  # one sandbox call for the whole batch
    scored  = preset.score(settings, item, attempt, report)     # reward, metrics, passed_all, outcome
    # a branch ends when scored.passed_all or at the last turn; the others, in one call:
    nexts   = preset.followups(settings, branches, expert)      # (next prompts, info) per continuing branch

Members are plain functions (the records below hold them), so a preset is read top to bottom in its own
module (``default.py``, ``paper.py``) and added by writing one (docs/coding.md, "Presets").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..feedback import Outcome

if TYPE_CHECKING:
    from comarl.sandbox import TestJob, TestReport

    from ...base import EnvState

Item = Mapping[str, Any]
NextTurn = tuple[tuple[str, ...], dict[str, Any]]  # one prompt per agent, EnvState.info


@dataclass(frozen=True)
class FunctionSettings:
    """The checked ``env.args`` of a function-level task (HumanEval, MBPP, CoopHumanEval), as presets read them.

    Attributes:
        mode: "helper_main" (agent 0 writes the helper, agent 1 the entry point) or "single".
        roles: the template role of each agent: ("helper", "main") or ("single",).
        helper_name: the helper function's name (``aux``).
        max_turns / feedback / history / max_failures: multi-turn feedback (``feedback.py``).
        templates: prompt templates by role (the preset's, updated with ``env.args.prompts``).
        weights: what the preset's ``weights`` made of ``env.args.rewards`` (None when it takes none).
        sandbox_slice: the first N test lines feedback shows (negative: last N; None: all); paper modes only.
    """

    mode: str
    roles: tuple[str, ...]
    helper_name: str
    max_turns: int
    feedback: str
    history: str
    max_failures: int
    templates: Mapping[str, str]
    weights: Any
    sandbox_slice: int | None = None


@dataclass(frozen=True)
class ClassSettings:
    """The checked ``env.args`` of ClassEval, as presets read them.

    Attributes:
        num_agents: agents sharing the class's methods.
        split: ``env.args.split`` ("alternate" or "halves"; a preset may assign methods its own way).
        max_turns / feedback / history / max_failures / templates / weights: as in :class:`FunctionSettings`.
    """

    num_agents: int
    split: str
    max_turns: int
    feedback: str
    history: str
    max_failures: int
    templates: Mapping[str, str]
    weights: Any


@dataclass(frozen=True)
class Scored:
    """What the reward made of one joint attempt.

    Attributes:
        reward: the team reward.
        metrics: ``Transition.metrics`` (at least ``pass_rate`` and ``passed_all``).
        passed_all: every test passed (the branch ends here).
        outcome: what went wrong, as the ``plain`` / ``diagnosis`` feedback reads it.
    """

    reward: float
    metrics: dict[str, float]
    passed_all: bool
    outcome: Outcome


@dataclass(frozen=True)
class Branch:
    """One joint action whose episode goes on: the state before it, the responses, and what they gave."""

    state: "EnvState"
    responses: tuple[str, ...]
    attempt: Any
    report: "TestReport | None"
    scored: Scored


@dataclass(frozen=True)
class FunctionPreset:
    """A preset of the function-level tasks; every member but ``name``, ``templates`` and ``feedback_modes``
    is a function.

    Attributes:
        name: the preset's name (the key it is chosen by).
        templates: default prompt templates by role (helper, main, single, class, revise; ``prompts.py``).
        feedback_modes: feedback modes this preset accepts besides ``plain`` and ``diagnosis``.
        weights: ``env.args.rewards`` (a mapping or None) -> the reward weights ``score`` reads; raises
            ValueError naming ``env.args.rewards`` when they are bad or the preset has fixed weights.
        attempt: (settings, item, joint response) -> the preset's parsed attempt (any type ``job``,
            ``score`` and ``followups`` read).
        job: (settings, item, attempt) -> the sandbox ``TestJob`` (program, test snippets, trusted setup,
            the one exposed name; ``runner.make_job``), or None when nothing is worth running.
        score: (settings, item, attempt, report or None) -> :class:`Scored`.
        followups: (settings, continuing branches, expert or None) -> one (next prompts, info) per branch,
            in order; ``expert`` is the ``Expert`` of feedback ``expert_edits``.
    """

    name: str
    templates: Mapping[str, str]
    feedback_modes: tuple[str, ...]
    weights: Callable[[Mapping[str, Any] | None], Any]
    attempt: Callable[[FunctionSettings, Item, Sequence[str]], Any]
    job: Callable[[FunctionSettings, Item, Any], "TestJob | None"]
    score: Callable[[FunctionSettings, Item, Any, "TestReport | None"], Scored]
    followups: Callable[[FunctionSettings, Sequence[Branch], Any], list[NextTurn]]


@dataclass(frozen=True)
class ClassPreset:
    """A preset of ClassEval; the members are those of :class:`FunctionPreset` (with :class:`ClassSettings`,
    ``followups`` without an expert) and:

    Attributes:
        assignment: (settings, item) -> the method names each agent writes (one list per agent); the
            first-turn prompts and the feedback show it.
    """

    name: str
    templates: Mapping[str, str]
    weights: Callable[[Mapping[str, Any] | None], Any]
    assignment: Callable[[ClassSettings, Item], list[list[str]]]
    attempt: Callable[[ClassSettings, Item, Sequence[str]], Any]
    job: Callable[[ClassSettings, Item, Any], "TestJob | None"]
    score: Callable[[ClassSettings, Item, Any, "TestReport | None"], Scored]
    followups: Callable[[ClassSettings, Sequence[Branch]], list[NextTurn]]
