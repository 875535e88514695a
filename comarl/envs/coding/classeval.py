"""ClassEval: agents split a class's methods and their methods are merged into the class.

The rules are the preset's (``env.args.preset``, chosen in ``presets/__init__.py``):

- ``default`` (alias ``comarl``): methods split by ``env.args.split`` (``alternate``:
  method j to agent ``j mod N``; ``halves``: contiguous chunks), merged into the
  benchmark's class (``class_merge.py``), one test snippet per benchmark
  ``unittest.TestCase`` class, ``class_reward`` with ``env.args.rewards``.
- ``paper``: the MAGRPO paper's (``paper_classeval.py``, ``paper_rewards.py``):
  methods split by parameter count, the stubs of the skeleton replaced in
  place, one counted test per test method, reward 2*valid/M + 4*passed/run -
  overlap/M (0 when the merged module does not compile).

This class holds the checked settings and the sandbox runner and runs each turn
with ``turns.step_batch``. Registers ``classeval`` on import.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..base import EnvState, Transition
from ..registry import EnvEntry, register_env
from .class_merge import SPLITS
from .data import load_classeval_items, normalize_classeval_item
from .feedback import check_turn_args
from .passk import render_table, summarize_records
from .presets import CLASS_PRESETS, choose
from .presets.records import ClassSettings
from .prompts import class_prompts, templates
from .runner import SandboxRunner
from .turns import step_batch


class ClassEvalEnv:
    """ClassEval for N agents (N=1: one agent writes every method).

    Args:
        num_agents: agents sharing the methods.
        split: "alternate" or "halves" (preset ``default``; ``paper`` splits by parameter count).
        max_turns / feedback / history / prompts / sandbox / workers / pass_k / max_failures:
            as in ``FunctionCodingEnv`` (template roles: class, revise).
        rewards: reward weights, as the preset reads them (``ClassRewardWeights`` fields for ``default``).
        preset: "default" (alias "comarl") or "paper" (see module docstring).
    """

    def __init__(self, num_agents: int = 2, split: str = "alternate", max_turns: int = 1, feedback: str = "diagnosis",
                 prompts: Mapping[str, str] | None = None, rewards: Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None, workers: int = 2, pass_k: Sequence[int] = (1, 2, 4, 8, 16),
                 max_failures: int = 3, history: str = "last", preset: str = "default"):
        self.preset = choose(CLASS_PRESETS, preset)
        weights = self.preset.weights(rewards)
        if num_agents < 1:
            raise ValueError(f"classeval needs at least one agent, got {num_agents}")
        if split not in SPLITS:
            raise ValueError(f"env.args.split: must be one of {SPLITS}, got {split!r}")
        check_turn_args(feedback, max_turns, history)
        self.num_agents, self.max_turns = num_agents, max_turns
        self.settings = ClassSettings(
            num_agents=num_agents, split=split, max_turns=max_turns, feedback=feedback, history=history,
            max_failures=max_failures, templates=templates(dict(prompts or {}), self.preset.templates), weights=weights)
        self.runner = SandboxRunner(sandbox, workers)
        self.pass_k = tuple(pass_k)

    def first_prompts(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        return class_prompts(self.settings, self.preset.assignment(self.settings, item), item)

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        item = normalize_classeval_item(dict(item))
        return EnvState(item=item, prompts=self.first_prompts(item))

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        return step_batch(self.preset, self.settings, self.runner, self.num_agents, states, responses)

    def summarize(self, records) -> dict[str, Any]:
        """Team pass@k per class and overall (see ``passk.summarize_records``)."""
        return summarize_records(records, self.pass_k)

    render_table = staticmethod(render_table)

    def close(self) -> None:
        self.runner.close()


def _build(num_agents: int = 2, **args: Any) -> ClassEvalEnv:
    return ClassEvalEnv(num_agents, **args)


register_env("classeval", EnvEntry(_build, load_classeval_items,
                                   "ClassEval (100 classes): agents split the methods; unittest classes as tests"))
