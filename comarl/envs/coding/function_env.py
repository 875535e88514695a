"""HumanEval, MBPP and CoopHumanEval: a helper agent and a main agent (or one agent).

Modes (``env.args.mode``):

- ``helper_main`` (two agents, the default with 2 agents): agent 0 writes the
  helper ``aux(...)``, agent 1 writes the entry point and may call it.
- ``single`` (one agent, the baseline): the agent writes everything.

Registers ``humaneval``, ``mbpp`` and ``coophumaneval`` on import.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..base import EnvState, Transition
from ..registry import EnvEntry, register_env
from .assemble import Assembly, assemble, calls_helper, ignores_helper_result, is_thin_wrapper
from .data import load_function_items, normalize_function_item
from .extract import extract_code
from .feedback import Outcome, check_turn_args, feedback_text, revision_prompts
from .passk import render_table, summarize_records
from .prompts import templates
from .rewards import CodeLevels, CodeRewardWeights, code_reward
from .runner import SandboxRunner, make_job

MODES = ("helper_main", "single")


def _weights(cls, values: Mapping[str, Any] | None, key: str):
    try:
        return cls(**dict(values or {}))
    except TypeError as e:
        raise ValueError(f"env.args.{key}: {e}") from e


class FunctionCodingEnv:
    """Function-level coding task for one or two agents.

    Args:
        dataset: "humaneval", "mbpp" or "coophumaneval" (items are normalised with it).
        num_agents: 1 (single) or 2 (helper_main).
        mode: "helper_main" or "single"; default from ``num_agents``.
        helper_name: the helper function's name.
        max_turns: turns per episode; > 1 feeds test results back.
        feedback: "plain" or "diagnosis" (multi-turn only).
        history: "last" (the newest attempt + feedback after the task) or "all" (every earlier attempt).
        prompts: template overrides by role (helper, main, single, revise).
        rewards: ``CodeRewardWeights`` fields.
        sandbox: ``SandboxLimits`` fields; ``workers``: sandbox processes.
        pass_k: the k values ``summarize`` reports.
        max_failures: failed tests listed in the diagnosis.
    """

    def __init__(self, dataset: str, num_agents: int = 2, mode: str | None = None, helper_name: str = "aux",
                 max_turns: int = 1, feedback: str = "diagnosis", prompts: Mapping[str, str] | None = None,
                 rewards: Mapping[str, Any] | None = None, sandbox: Mapping[str, Any] | None = None,
                 workers: int = 2, pass_k: Sequence[int] = (1, 2, 4, 8, 16), max_failures: int = 3,
                 history: str = "last"):
        mode = mode or ("single" if num_agents == 1 else "helper_main")
        if mode not in MODES:
            raise ValueError(f"env.args.mode: must be one of {MODES}, got {mode!r}")
        need = 2 if mode == "helper_main" else 1
        if num_agents != need:
            raise ValueError(f"env.args.mode={mode!r} needs {need} agent(s), the config has {num_agents}")
        check_turn_args(feedback, max_turns, history)
        self.history = history
        self.dataset, self.num_agents, self.mode = dataset, num_agents, mode
        self.helper_name, self.max_turns, self.feedback = helper_name, max_turns, feedback
        self.templates = templates(dict(prompts or {}))
        self.weights = _weights(CodeRewardWeights, rewards, "rewards")
        self.runner = SandboxRunner(sandbox, workers)
        self.pass_k, self.max_failures = tuple(pass_k), max_failures
        self.roles = ("helper", "main") if mode == "helper_main" else ("single",)

    # ---- prompts ----
    def first_prompts(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        fields = {"prompt": item["prompt"], "entry_point": item["entry_point"], "helper": self.helper_name}
        return tuple(self.templates[role].format(**fields) for role in self.roles)

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        item = normalize_function_item(dict(item), self.dataset)
        return EnvState(item=item, prompts=self.first_prompts(item))

    # ---- scoring ----
    def _assemble(self, item: Mapping[str, Any], resp: Sequence[str]) -> Assembly:
        if self.mode == "single":
            return assemble(item["prompt"], item["entry_point"], resp[0], None, self.helper_name)
        return assemble(item["prompt"], item["entry_point"], resp[1], resp[0], self.helper_name)

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        if len(states) != len(responses):
            raise ValueError(f"step_batch got {len(states)} states and {len(responses)} joint responses")
        assemblies = []
        for state, resp in zip(states, responses):
            if len(resp) != self.num_agents:
                raise ValueError(f"joint action has {len(resp)} responses, environment has {self.num_agents} agents")
            assemblies.append(self._assemble(state.item, resp))
        jobs = [make_job(a.program, s.item["tests"], s.item.get("setup", ""), s.item["entry_point"])
                if a.main_defined and a.compiled else None
                for a, s in zip(assemblies, states)]
        reports = self.runner.run(jobs)
        return [self._transition(s, r, a, rep) for s, r, a, rep in zip(states, responses, assemblies, reports)]

    def _transition(self, state: EnvState, resp: Sequence[str], a: Assembly, rep) -> Transition:
        with_helper = self.mode == "helper_main"
        tests = tuple(state.item["tests"])
        passed = tuple(rep.passed) if rep is not None else (False,) * len(tests)
        errors = tuple(rep.errors) if rep is not None else (None,) * len(tests)
        frac = sum(passed) / len(passed) if passed else 0.0
        lv = CodeLevels(
            helper_defined=a.helper_defined, main_defined=a.main_defined, compiled=a.compiled, pass_fraction=frac,
            calls_helper=calls_helper(a.main_node, self.helper_name),
            thin_wrapper=is_thin_wrapper(a.main_node, self.helper_name),
            ignored_result=ignores_helper_result(a.main_node, self.helper_name))
        reward, parts = code_reward(lv, self.weights, with_helper)
        passed_all = bool(passed) and all(passed)
        metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(a.compiled),
                   "main_defined": float(a.main_defined), **parts}
        if with_helper:
            metrics.update(helper_defined=float(a.helper_defined), calls_helper=float(lv.calls_helper),
                           thin_wrapper=float(lv.thin_wrapper))
        if rep is not None:
            metrics["timed_out"] = float(rep.timed_out)
        if passed_all or state.turn + 1 >= self.max_turns:
            return Transition(reward, True, None, metrics)
        outcome = Outcome(
            main_defined=a.main_defined, compiled=a.compiled, syntax_error=a.syntax_error,
            program_error=rep.program_error if rep is not None else None, tests=tests, passed=passed, errors=errors,
            entry_point=state.item["entry_point"], helper=self.helper_name if with_helper else None,
            calls_helper=lv.calls_helper, thin_wrapper=lv.thin_wrapper)
        text = feedback_text(self.feedback, outcome, self.max_failures)
        blocks = [self.templates["revise"].format(previous=extract_code(r) or r.strip(), feedback=text) for r in resp]
        nxt, kept = revision_prompts(self.first_prompts(state.item), state.info.get("revisions"), blocks, self.history)
        info = {"feedback": text, "pass_rate": frac, "revisions": kept}
        return Transition(reward, False, state.advanced(resp, nxt, info), metrics)

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

    return EnvEntry(build, load_items, description)


register_env("humaneval", _entry("humaneval", "HumanEval (164): helper aux + main entry point, or one agent"))
register_env("mbpp", _entry("mbpp", "MBPP sanitized (427) or OpenMLRL HumanEval-style MBPP: helper + main, or one agent"))
register_env("coophumaneval", _entry("coophumaneval", "CoopHumanEval (82): problems meant for a helper + main split"))
