"""HumanEval, MBPP and CoopHumanEval: a helper agent and a main agent (or one agent).

Modes (``env.args.mode``):

- ``helper_main`` (two agents, the default with 2 agents): agent 0 writes the
  helper ``aux(...)``, agent 1 writes the entry point and may call it.
- ``single`` (one agent, the baseline): the agent writes everything.

Presets (``env.args.preset``): ``comarl`` (default: AST-based checks, every
test of the benchmark counted, see ``rewards.py``) or ``paper`` (the MAGRPO
paper's reward, text checks and test extraction included, see
``paper_rewards.py`` and ``paper_text.py``).

Registers ``humaneval``, ``mbpp`` and ``coophumaneval`` on import.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..base import EnvState, Transition
from ..registry import EnvEntry, register_env
from .assemble import Assembly, assemble, calls_helper, ignores_helper_result, is_thin_wrapper
from .data import load_function_items, normalize_function_item
from .extract import extract_code
from .feedback import Outcome, check_turn_args, feedback_text, revision_prompts
from .passk import render_table, summarize_records
from .prompts import templates
from .expert import Expert
from .paper_feedback import PAPER_FEEDBACK_MODES, PaperReport, paper_followups, slice_tests
from .paper_rewards import paper_code_reward
from .paper_text import (PAPER_SETUP, function_text, has_return, ignores_helper, is_wrapper, paper_pass_count,
                         paper_program, paper_test_lines, paper_test_snippets, prompt_imports, uses_helper)
from .rewards import CodeLevels, CodeRewardWeights, code_reward
from .runner import SandboxRunner, make_job

MODES = ("helper_main", "single")
PRESETS = ("comarl", "paper")


def _weights(cls, values: Mapping[str, Any] | None, key: str):
    try:
        return cls(**dict(values or {}))
    except TypeError as e:
        raise ValueError(f"env.args.{key}: {e}") from e


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
        preset: "comarl" or "paper" (reward and default prompts; see module docstring).
        sandbox_slice: preset paper: the first N test lines shown in feedback (negative: last N; None: all).
        expert: preset paper, feedback ``expert_edits``: ``Expert`` arguments (model, max_new_tokens,
            retries, agent).
    """

    def __init__(self, dataset: str, num_agents: int = 2, mode: str | None = None, helper_name: str = "aux",
                 max_turns: int = 1, feedback: str = "diagnosis", prompts: Mapping[str, str] | None = None,
                 rewards: Mapping[str, Any] | None = None, sandbox: Mapping[str, Any] | None = None,
                 workers: int = 2, pass_k: Sequence[int] = (1, 2, 4, 8, 16), max_failures: int = 3,
                 history: str = "last", preset: str = "comarl", sandbox_slice: int | None = None,
                 expert: Mapping[str, Any] | None = None):
        if preset not in PRESETS:
            raise ValueError(f"env.args.preset: must be one of {PRESETS}, got {preset!r}")
        if preset == "paper" and rewards:
            raise ValueError("env.args.rewards: the paper preset has fixed weights; remove env.args.rewards")
        self.preset = preset
        mode = mode or ("single" if num_agents == 1 else "helper_main")
        if mode not in MODES:
            raise ValueError(f"env.args.mode: must be one of {MODES}, got {mode!r}")
        need = 2 if mode == "helper_main" else 1
        if num_agents != need:
            raise ValueError(f"env.args.mode={mode!r} needs {need} agent(s), the config has {num_agents}")
        check_turn_args(feedback, max_turns, history, PAPER_FEEDBACK_MODES if preset == "paper" else ())
        if feedback == "expert_edits" and not expert:
            raise ValueError("env.args.expert: feedback expert_edits needs an expert model, e.g. {model: tiny}")
        if mode == "single" and feedback == "expert_edits":
            raise ValueError("env.args.feedback: expert_edits needs the helper_main mode (two agents), as in the paper")
        self.sandbox_slice = sandbox_slice
        self.expert = Expert(**dict(expert)) if expert and feedback == "expert_edits" else None
        self.history = history
        self.dataset, self.num_agents, self.mode = dataset, num_agents, mode
        self.helper_name, self.max_turns, self.feedback = helper_name, max_turns, feedback
        self.templates = templates(dict(prompts or {}), preset)
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
        for resp in responses:
            if len(resp) != self.num_agents:
                raise ValueError(f"joint action has {len(resp)} responses, environment has {self.num_agents} agents")
        if self.preset == "paper":
            return self._paper_step_batch(states, responses)
        assemblies = [self._assemble(state.item, resp) for state, resp in zip(states, responses)]
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
        return self._next_turn(state, resp, outcome, frac, reward, metrics)

    def _next_turn(self, state: EnvState, resp: Sequence[str], outcome: Outcome, frac: float, reward: float,
                   metrics: dict[str, float]) -> Transition:
        text = feedback_text(self.feedback, outcome, self.max_failures)
        blocks = [self.templates["revise"].format(previous=extract_code(r) or r.strip(), feedback=text) for r in resp]
        nxt, kept = revision_prompts(self.first_prompts(state.item), state.info.get("revisions"), blocks, self.history)
        info = {"feedback": text, "pass_rate": frac, "revisions": kept}
        return Transition(reward, False, state.advanced(resp, nxt, info), metrics)

    # ---- preset "paper" ----
    def _paper_step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        attempts = [self._paper_attempt(s.item, r) for s, r in zip(states, responses)]
        # with more turns ahead, a program whose main is missing still runs: its test results feed the feedback
        jobs = [make_job(a.program, a.tests, PAPER_SETUP, s.item["entry_point"])
                if a.parses and a.tests and (a.main_defined or (self.max_turns > 1 and a.main_fn)) else None
                for a, s in zip(attempts, states)]
        reports = self.runner.run(jobs)
        out = [self._paper_transition(s, r, a, rep) for s, r, a, rep in zip(states, responses, attempts, reports)]
        return self._paper_followups(states, responses, attempts, reports, out)

    def _paper_attempt(self, item: Mapping[str, Any], resp: Sequence[str]) -> "PaperAttempt":
        helper_text = resp[0] if self.mode == "helper_main" else ""
        helper_fn = function_text(helper_text, self.helper_name)
        main_fn = function_text(resp[-1], item["entry_point"])
        program = paper_program(helper_fn, main_fn, prompt_imports(item["prompt"]))
        try:
            ast.parse(program)
            parses, syntax_error = True, None
        except SyntaxError as e:
            parses, syntax_error = False, f"line {e.lineno}, col {e.offset}: {e.msg}"
        except ValueError as e:  # e.g. null bytes
            parses, syntax_error = False, str(e)
        return PaperAttempt(helper_fn, main_fn, has_return(helper_fn), has_return(main_fn), program, parses,
                            syntax_error, tuple(paper_test_snippets(item.get("test_source"), item["entry_point"])))

    def _paper_transition(self, state: EnvState, resp: Sequence[str], a: "PaperAttempt", rep) -> Transition:
        n = len(a.tests)
        errors = tuple(rep.errors) if rep is not None else (None,) * n
        passed = paper_pass_count(list(errors)) if rep is not None and a.main_defined else 0
        calls = uses_helper(a.main_fn, self.helper_name)
        wrapper = is_wrapper(a.main_fn, self.helper_name)
        reward, parts = paper_code_reward(
            a.helper_defined, a.main_defined, a.parses, n, passed, helper_found=bool(a.helper_fn),
            calls_helper=calls, wrapper=wrapper, ignored=ignores_helper(a.main_fn, self.helper_name))
        frac = passed / n if n else 0.0
        passed_all = n > 0 and passed == n
        metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(a.parses),
                   "main_defined": float(a.main_defined), **parts}
        if self.mode == "helper_main":
            metrics.update(helper_defined=float(a.helper_defined), calls_helper=float(calls), thin_wrapper=float(wrapper))
        if passed_all or state.turn + 1 >= self.max_turns:
            return Transition(reward, True, None, metrics)
        if self.feedback not in PAPER_FEEDBACK_MODES:  # the comarl modes (plain, diagnosis) on paper scoring
            outcome = Outcome(
                main_defined=a.main_defined, compiled=a.parses, syntax_error=a.syntax_error,
                program_error=rep.program_error if rep is not None else None, tests=a.tests,
                passed=tuple(e is None for e in errors) if rep is not None else (False,) * n, errors=errors,
                entry_point=state.item["entry_point"], helper=self.helper_name if self.mode == "helper_main" else None,
                calls_helper=calls, thin_wrapper=wrapper)
            return self._next_turn(state, resp, outcome, frac, reward, metrics)
        return Transition(reward, False, None, metrics)  # next state: _paper_followups

    def _paper_report(self, state: EnvState, a: "PaperAttempt", rep) -> PaperReport:
        lines = paper_test_lines(state.item.get("test_source"), state.item["entry_point"])
        shown = slice_tests(len(lines), self.sandbox_slice)
        if a.parses and not a.main_fn:  # nothing to run: every test fails on the missing name, as it did there
            tests = tuple(lines[shown])
            errors = tuple(f"NameError: name '{state.item['entry_point']}' is not defined" for _ in tests)
        elif rep is None or not a.parses:
            tests, errors = (), ()
        else:
            errs = list(rep.errors) if rep.program_error is None else [rep.program_error] * len(lines)
            tests, errors = tuple(lines[shown]), tuple(errs[shown])
        return PaperReport(
            helper=self.helper_name if self.mode == "helper_main" else None, entry_point=state.item["entry_point"],
            helper_fn=a.helper_fn, main_fn=a.main_fn, helper_defined=a.helper_defined, main_defined=a.main_defined,
            parses=a.parses, syntax_error=a.syntax_error, tests=tests, errors=errors,
            calls_helper=uses_helper(a.main_fn, self.helper_name), ignores_result=ignores_helper(a.main_fn, self.helper_name),
            wrapper=is_wrapper(a.main_fn, self.helper_name))

    def _paper_followups(self, states, responses, attempts, reports, transitions) -> list[Transition]:
        """Give every transition that continues without a next state yet (the comarl modes made theirs) its next
        state, with prompts from the paper feedback mode."""
        cont = [i for i, t in enumerate(transitions) if not t.done and t.next_state is None]
        if not cont:
            return transitions
        edits: dict[int, tuple[str, str]] = {}
        if self.feedback == "expert_edits":
            asks = [{"prompt": states[i].item["prompt"], "helper": self.helper_name,
                     "entry_point": states[i].item["entry_point"], "code": attempts[i].program} for i in cont]
            edits = dict(zip(cont, self.expert.edits(asks)))
        out = list(transitions)
        for i in cont:
            s, r, t = states[i], responses[i], transitions[i]
            report = self._paper_report(s, attempts[i], reports[i])
            hist = s.history or tuple(() for _ in s.prompts)
            histories = [h + ((p, x),) for h, p, x in zip(hist, s.prompts, r)]
            nxt = paper_followups(self.feedback, report, histories, self.first_prompts(s.item), edits.get(i))
            info = {"pass_rate": t.metrics["pass_rate"], "feedback": self.feedback}
            out[i] = Transition(t.reward, False, s.advanced(r, nxt, info), t.metrics)
        return out

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
