"""HumanEval, MBPP and CoopHumanEval: a helper agent and a main agent (or one agent).

Modes (``env.args.mode``):

- ``helper_main`` (two agents, the default with 2 agents): agent 0 writes the
  helper ``aux(...)``, agent 1 writes the entry point and may call it.
- ``single`` (one agent, the baseline): the agent writes everything.

The rules (prompts, program, sandbox job, reward, next-turn prompts) are the
preset's (``env.args.preset``, chosen in ``presets/__init__.py``): ``default``
(alias ``comarl``: AST-based checks, every test of the benchmark counted) or
``paper`` (the MAGRPO paper's reward, text checks and test extraction
included). This class holds the checked settings, the sandbox runner and the
expert, and runs each turn with ``turns.step_batch``.

Registers ``humaneval``, ``mbpp`` and ``coophumaneval`` on import.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...core.seams import TextGenerator
from ..base import EnvState, Transition
from ..registry import EnvEntry, register_env
from .data import load_function_items, normalize_function_item
from .expert import Expert
from .feedback import check_turn_args
from .passk import render_table, summarize_records
from .presets import FUNCTION_PRESETS, choose
from .presets.records import FunctionSettings
from .prompts import function_prompts, templates
from .runner import SandboxRunner
from .turns import step_batch

MODES = ("helper_main", "single")


class FunctionCodingEnv:
    """Function-level coding task for one or two agents.

    Args:
        dataset: "humaneval", "mbpp" or "coophumaneval" (items are normalised with it).
        num_agents: 1 (single) or 2 (helper_main).
        mode: "helper_main" or "single"; default from ``num_agents``.
        helper_name: the helper function's name.
        max_turns: turns per episode; > 1 feeds test results back.
        feedback: "plain" or "diagnosis" (multi-turn only), or a mode of the preset's ``feedback_modes``.
        history: "last" (the newest attempt + feedback after the task) or "all" (every earlier attempt).
        prompts: template overrides by role (helper, main, single, revise).
        rewards: reward weights, as the preset reads them (``CodeRewardWeights`` fields for ``default``).
        sandbox: ``SandboxLimits`` fields; ``workers``: sandbox processes.
        pass_k: the k values ``summarize`` reports.
        max_failures: failed tests listed in the diagnosis.
        preset: "default" (alias "comarl") or "paper" (see module docstring).
        sandbox_slice: paper feedback modes: the first N test lines shown (negative: last N; None: all).
        expert: feedback ``expert_edits``: the helper that writes the edits (``seams.TextGenerator``: prompts ->
            texts), built by the Team from ``helpers:`` and injected (a config names it: ``env.args.expert: NAME``).
        expert_retries: tries per request until the expert's answer holds the JSON edits.
    """

    def __init__(self, dataset: str, num_agents: int = 2, mode: str | None = None, helper_name: str = "aux",
                 max_turns: int = 1, feedback: str = "diagnosis", prompts: Mapping[str, str] | None = None,
                 rewards: Mapping[str, Any] | None = None, sandbox: Mapping[str, Any] | None = None,
                 workers: int = 2, pass_k: Sequence[int] = (1, 2, 4, 8, 16), max_failures: int = 3,
                 history: str = "last", preset: str = "default", sandbox_slice: int | None = None,
                 expert: TextGenerator | None = None, expert_retries: int = 3):
        self.preset = choose(FUNCTION_PRESETS, preset)
        weights = self.preset.weights(rewards)
        mode = mode or ("single" if num_agents == 1 else "helper_main")
        if mode not in MODES:
            raise ValueError(f"env.args.mode: must be one of {MODES}, got {mode!r}")
        need = 2 if mode == "helper_main" else 1
        if num_agents != need:
            raise ValueError(f"env.args.mode={mode!r} needs {need} agent(s), the config has {num_agents}")
        check_turn_args(feedback, max_turns, history, self.preset.feedback_modes)
        if feedback == "expert_edits" and expert is None:
            raise ValueError("env.args.expert: feedback expert_edits needs an expert: name a helper of helpers: "
                             "(docs/helpers.md), e.g. helpers: {coder: {model: tiny}} and env.args.expert: coder")
        if mode == "single" and feedback == "expert_edits":
            raise ValueError("env.args.feedback: expert_edits needs the helper_main mode (two agents), as in the paper")
        self.expert = Expert(expert, expert_retries) if expert is not None and feedback == "expert_edits" else None
        self.dataset, self.num_agents, self.max_turns = dataset, num_agents, max_turns
        self.settings = FunctionSettings(
            mode=mode, roles=("helper", "main") if mode == "helper_main" else ("single",), helper_name=helper_name,
            max_turns=max_turns, feedback=feedback, history=history, max_failures=max_failures,
            templates=templates(dict(prompts or {}), self.preset.templates), weights=weights,
            sandbox_slice=sandbox_slice)
        self.runner = SandboxRunner(sandbox, workers)
        self.pass_k = tuple(pass_k)

    def first_prompts(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        return function_prompts(self.settings, item)

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        item = normalize_function_item(dict(item), self.dataset)
        return EnvState(item=item, prompts=self.first_prompts(item))

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        return step_batch(self.preset, self.settings, self.runner, self.num_agents, states, responses,
                          lambda settings, branches: self.preset.followups(settings, branches, self.expert))

    # ---- evaluation ----
    def summarize(self, records) -> dict[str, Any]:
        """Team pass@k per task and overall (see ``passk.summarize_records``)."""
        return summarize_records(records, self.pass_k)

    render_table = staticmethod(render_table)

    def close(self) -> None:
        self.runner.close()


def _entry(dataset: str, description: str) -> EnvEntry:
    def build(num_agents: int = 2, **args: Any) -> FunctionCodingEnv:
        return FunctionCodingEnv(dataset, num_agents, **args)

    def load_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
        return load_function_items(dataset, source, split, limit)

    return EnvEntry(build, load_items, description, helpers=("expert",))


register_env("humaneval", _entry("humaneval", "HumanEval (164): helper aux + main entry point, or one agent"))
register_env("mbpp", _entry("mbpp", "MBPP sanitized (427) or OpenMLRL HumanEval-style MBPP: helper + main, "
                                    "or one agent"))
register_env("coophumaneval", _entry("coophumaneval", "CoopHumanEval (82): problems meant for a helper + main split"))
