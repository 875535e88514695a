"""ClassEval: agents split a class's methods and their methods are merged into the class.

Split rule (``env.args.split``), over the benchmark's method order m_0..m_{M-1}
and N agents:

- ``alternate`` (default): method j goes to agent ``j mod N``.
- ``halves``: contiguous chunks of ``ceil(M/N)`` methods: agent 0 the first chunk, ...

Merged program: the benchmark's ``import_statement`` lines and the agents'
imports / the agents' module-level helper functions / the class header and
``__init__`` from the benchmark's ``class_constructor`` / each method: the
version of the agent it was assigned to, else another agent's version, else a
stub that raises ``NotImplementedError`` / extra methods agents added.
Tests: one snippet per benchmark ``unittest.TestCase`` class.

Preset ``paper`` (``env.args.preset``) replaces split, merge, tests and reward
with the MAGRPO paper's (``paper_classeval.py``, ``paper_rewards.py``):
methods split by parameter count, the stubs of the skeleton replaced in
place, one counted test per test method, reward 2*valid/M + 4*passed/run -
overlap/M (0 when the merged module does not compile).

Registers ``classeval`` on import.
"""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..base import EnvState, Transition
from ..registry import EnvEntry, register_env
from .data import load_classeval_items, normalize_classeval_item
from .extract import Block, extract_code, is_stub, parses, split_blocks
from .feedback import Outcome, check_turn_args, feedback_text, revision_prompts
from .passk import render_table, summarize_records
from .prompts import templates
from .paper_classeval import (RUN_ONE_SETUP, chosen_methods, class_name, compiles, incomplete_methods,
                              merge_into_skeleton, overlap_count, paper_class_counts, param_split, program_with_tests,
                              test_snippets)
from .paper_rewards import paper_class_reward
from .rewards import ClassRewardWeights, class_reward
from .runner import SandboxRunner, make_job
from .testcases import program_imports, safe_imports, third_party

SPLITS = ("alternate", "halves")
_SELF_DEF = re.compile(r"^(?:async\s+)?def\s+\w+\s*\(\s*self\b")


def split_methods(methods: Sequence[str], num_agents: int, rule: str = "alternate") -> list[list[str]]:
    """Methods per agent under ``rule`` (see module docstring)."""
    if rule == "alternate":
        return [list(methods[i::num_agents]) for i in range(num_agents)]
    if rule == "halves":
        size = max(1, math.ceil(len(methods) / num_agents))
        return [list(methods[i * size:(i + 1) * size]) for i in range(num_agents)]
    raise ValueError(f"env.args.split: must be one of {SPLITS}, got {rule!r}")


@dataclass(frozen=True)
class AgentCode:
    """What one agent's response contributes: imports, helper functions, methods by name."""

    imports: list[str]
    helpers: list[Block]
    methods: dict[str, Block]


def _class_body_blocks(block: Block) -> list[Block]:
    lines = block.text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.lstrip().startswith("class ")), 0)
    return split_blocks(textwrap.dedent("\n".join(lines[start + 1:])))


def parse_agent_code(response: str) -> AgentCode:
    """Methods (from any class in the response, or top-level ``def f(self, ...)``), helpers and imports."""
    imports, helpers, methods = [], [], {}
    for b in split_blocks(extract_code(response)):
        if b.kind == "import":
            imports.append(b.text)
        elif b.kind == "class":
            for m in _class_body_blocks(b):
                if m.kind == "def":
                    methods[m.name] = m
        elif b.kind == "def":
            first = next(l for l in b.text.splitlines() if not l.startswith("@"))
            if _SELF_DEF.match(first):
                methods[b.name] = b
            else:
                helpers.append(b)
    return AgentCode(imports, helpers, methods)


@dataclass(frozen=True)
class MergedClass:
    """The merged program and what the reward needs.

    Attributes:
        program: imports + helpers + class.
        written: per agent, the benchmark methods it wrote with a real body.
        method_share: share of the benchmark methods with a real body in the class.
        overlap: benchmark methods written by two or more agents.
        compiled / syntax_error: whether ``program`` parses.
    """

    program: str
    written: tuple[tuple[str, ...], ...]
    method_share: float
    overlap: tuple[str, ...]
    compiled: bool
    syntax_error: str | None


def _indent(text: str) -> str:
    return textwrap.indent(text, "    ", lambda l: True if l.strip() else False)


def merge_class(item: Mapping[str, Any], responses: Sequence[str], assignment: Sequence[Sequence[str]]) -> MergedClass:
    """Merge the agents' methods into the benchmark's class (rules in the module docstring)."""
    methods = list(item["methods"])
    codes = [parse_agent_code(r) for r in responses]
    written = [tuple(m for m in methods if m in c.methods and not is_stub(c.methods[m])) for c in codes]
    owner = {m: i for i, ms in enumerate(assignment) for m in ms}

    chosen = {}
    for m in methods:
        order = ([owner[m]] if m in owner else []) + [i for i in range(len(codes)) if i != owner.get(m)]
        for i in order:
            if m in written[i]:
                chosen[m] = codes[i].methods[m].text
                break
    extra = {}
    for c in codes:
        for name, b in c.methods.items():
            if name not in methods and name != "__init__" and name not in extra:
                extra[name] = b.text

    imports = list(dict.fromkeys(list(item.get("import_statement") or []) + [i for c in codes for i in c.imports]))
    helpers = {b.name: b.text for c in codes for b in c.helpers}
    ctor = item["class_constructor"].rstrip().splitlines()
    header, init = ctor[0].rstrip(), "\n".join(ctor[1:])
    parts = [header]
    if item.get("class_description", "").strip():
        parts.append(item["class_description"].rstrip())
    if init.strip():
        parts.append(textwrap.indent(textwrap.dedent(init), "    "))
    for m in methods:
        text = chosen.get(m) or f"def {m}(self, *args, **kwargs):\n    raise NotImplementedError({m + ' was not written'!r})"
        parts.append(_indent(text))
    parts.extend(_indent(t) for t in extra.values())
    program = "\n".join(imports) + "\n\n" + "\n\n".join(helpers.values()) + "\n\n" + "\n\n".join(parts) + "\n"
    ok, err = parses(program)
    overlap = tuple(m for m in methods if sum(m in w for w in written) >= 2)
    share = len(chosen) / len(methods) if methods else 0.0
    return MergedClass(program, tuple(written), share, overlap, ok, err)


class ClassEvalEnv:
    """ClassEval for N agents (N=1: one agent writes every method).

    Args:
        num_agents: agents sharing the methods.
        split: "alternate" or "halves".
        max_turns / feedback / history / prompts / sandbox / workers / pass_k / max_failures:
            as in ``FunctionCodingEnv`` (template roles: class, revise).
        rewards: ``ClassRewardWeights`` fields (preset comarl only).
        preset: "comarl" (default) or "paper" (see module docstring; ``split`` is then by parameter count).
    """

    def __init__(self, num_agents: int = 2, split: str = "alternate", max_turns: int = 1, feedback: str = "diagnosis",
                 prompts: Mapping[str, str] | None = None, rewards: Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None, workers: int = 2, pass_k: Sequence[int] = (1, 2, 4, 8, 16),
                 max_failures: int = 3, history: str = "last", preset: str = "comarl"):
        if preset not in ("comarl", "paper"):
            raise ValueError(f"env.args.preset: must be one of ('comarl', 'paper'), got {preset!r}")
        if preset == "paper" and rewards:
            raise ValueError("env.args.rewards: the paper preset has fixed weights; remove env.args.rewards")
        self.preset = preset
        if num_agents < 1:
            raise ValueError(f"classeval needs at least one agent, got {num_agents}")
        if split not in SPLITS:
            raise ValueError(f"env.args.split: must be one of {SPLITS}, got {split!r}")
        check_turn_args(feedback, max_turns, history)
        self.history = history
        self.num_agents, self.split, self.max_turns, self.feedback = num_agents, split, max_turns, feedback
        self.templates = templates(dict(prompts or {}), preset)
        try:
            self.weights = ClassRewardWeights(**dict(rewards or {}))
        except TypeError as e:
            raise ValueError(f"env.args.rewards: {e}") from e
        self.runner = SandboxRunner(sandbox, workers)
        self.pass_k, self.max_failures = tuple(pass_k), max_failures

    def assignment(self, item: Mapping[str, Any]) -> list[list[str]]:
        if self.preset == "paper":
            split = param_split(item["skeleton"], self.num_agents)
            return [[m for m, a in split.items() if a == i] for i in range(self.num_agents)]
        return split_methods(item["methods"], self.num_agents, self.split)

    def first_prompts(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        parts = self.assignment(item)
        out = []
        for i, mine in enumerate(parts):
            others = [m for j, ms in enumerate(parts) if j != i for m in ms]
            out.append(self.templates["class"].format(
                skeleton=item["skeleton"].strip(), class_name=item["class_name"], methods=", ".join(mine) or "(none)",
                others=", ".join(others) or "(none)", methods_list="\n".join(f"- {m}" for m in mine) or "(none)"))
        return tuple(out)

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        item = normalize_classeval_item(dict(item))
        return EnvState(item=item, prompts=self.first_prompts(item))

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        if len(states) != len(responses):
            raise ValueError(f"step_batch got {len(states)} states and {len(responses)} joint responses")
        merged = []
        for s, resp in zip(states, responses):
            if len(resp) != self.num_agents:
                raise ValueError(f"joint action has {len(resp)} responses, environment has {self.num_agents} agents")
        if self.preset == "paper":
            return self._paper_step_batch(states, responses)
        for s, resp in zip(states, responses):
            merged.append(merge_class(s.item, resp, self.assignment(s.item)))
        jobs = [make_job(m.program, s.item["tests"], s.item["setup"], s.item["class_name"], s.item.get("packages", ()))
                if m.compiled else None for m, s in zip(merged, states)]
        reports = self.runner.run(jobs)
        return [self._transition(s, r, m, rep) for s, r, m, rep in zip(states, responses, merged, reports)]

    def _transition(self, state: EnvState, resp: Sequence[str], m: MergedClass, rep) -> Transition:
        item = state.item
        tests = tuple(item["tests"])
        passed = tuple(rep.passed) if rep is not None else (False,) * len(tests)
        errors = tuple(rep.errors) if rep is not None else (None,) * len(tests)
        frac = sum(passed) / len(passed) if passed else 0.0
        overlap_share = len(m.overlap) / len(item["methods"]) if item["methods"] else 0.0
        reward, parts = class_reward(m.method_share, m.compiled, frac, overlap_share, self.weights)
        passed_all = bool(passed) and all(passed)
        metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(m.compiled),
                   "method_share": m.method_share, "overlap_share": overlap_share, **parts}
        if passed_all or state.turn + 1 >= self.max_turns:
            return Transition(reward, True, None, metrics)
        blocks = []
        for i, (mine, r) in enumerate(zip(self.assignment(item), resp)):
            notes = []
            missing = [x for x in mine if x not in m.written[i]]
            if missing:
                notes.append(f"You did not write: {', '.join(missing)}.")
            dup = [x for x in m.overlap if x in m.written[i] and x not in mine]
            if dup:
                notes.append(f"You wrote methods assigned to another agent: {', '.join(dup)}.")
            o = Outcome(main_defined=any(m.written), compiled=m.compiled, syntax_error=m.syntax_error,
                        program_error=rep.program_error if rep is not None else None, tests=tests, passed=passed,
                        errors=errors, entry_point=item["class_name"], notes=tuple(notes))
            text = feedback_text(self.feedback, o, self.max_failures)
            blocks.append(self.templates["revise"].format(previous=extract_code(r) or r.strip(), feedback=text))
        nxt, kept = revision_prompts(self.first_prompts(item), state.info.get("revisions"), blocks, self.history)
        return Transition(reward, False, state.advanced(resp, nxt, {"pass_rate": frac, "revisions": kept}), metrics)

    # ---- preset "paper" ----
    def _paper_step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        attempts = []
        for s, resp in zip(states, responses):
            item = s.item
            methods = incomplete_methods(item["skeleton"])
            chosen = chosen_methods(list(resp), methods, param_split(item["skeleton"], self.num_agents))
            merged = merge_into_skeleton(item["skeleton"], class_name(item["skeleton"]) or "", chosen)
            program = program_with_tests(merged, item["test"])
            # the compile check is the reference's (class + tests as one module); the job runs the class alone
            # and the tests as trusted snippets, out of the program's reach
            attempts.append((methods, chosen, overlap_count(list(resp), methods), merged, compiles(program),
                             tuple(test_snippets(item["test"]))))
        # the reference ran the tests in the program's module: they saw the names the program imported (and
        # only those); here the same import lines run as trusted setup, so the names are the harness's own
        jobs = [make_job(a[3], a[5], RUN_ONE_SETUP + safe_imports(_allowed(program_imports(a[3]), s.item)),
                         s.item["class_name"], s.item.get("packages", ())) if a[4] and a[5] else None
                for a, s in zip(attempts, states)]
        reports = self.runner.run(jobs)
        out = []
        for s, resp, (methods, chosen, overlap, program, ok, tests), rep in zip(states, responses, attempts, reports):
            errors = tuple(rep.errors) if rep is not None else (None,) * len(tests)
            run, passed = paper_class_counts(list(errors), rep.program_stdout) if rep is not None else (0, 0)
            reward, parts = paper_class_reward(len(methods), len(chosen), overlap, ok, run, passed)
            frac = max(passed, 0) / len(tests) if tests else 0.0
            passed_all = bool(tests) and passed == len(tests)
            metrics = {"pass_rate": frac, "passed_all": float(passed_all), "compiled": float(ok),
                       "method_share": len(chosen) / len(methods) if methods else 0.0,
                       "overlap_share": overlap / len(methods) if methods else 0.0, **parts}
            if passed_all or s.turn + 1 >= self.max_turns:
                out.append(Transition(reward, True, None, metrics))
                continue
            passed_flags = tuple(rep.passed) if rep is not None else (False,) * len(tests)
            o = Outcome(main_defined=bool(chosen), compiled=ok, syntax_error=None if ok else "the merged class does not compile",
                        program_error=rep.program_error if rep is not None else None, tests=tests, passed=passed_flags,
                        errors=errors, entry_point=s.item["class_name"])
            text = feedback_text(self.feedback, o, self.max_failures)
            blocks = [self.templates["revise"].format(previous=extract_code(r) or r.strip(), feedback=text) for r in resp]
            nxt, kept = revision_prompts(self.first_prompts(s.item), s.info.get("revisions"), blocks, self.history)
            out.append(Transition(reward, False, s.advanced(resp, nxt, {"pass_rate": frac, "revisions": kept}), metrics))
        return out

    def summarize(self, records) -> dict[str, Any]:
        """Team pass@k per class and overall (see ``passk.summarize_records``)."""
        return summarize_records(records, self.pass_k)

    render_table = staticmethod(render_table)

    def close(self) -> None:
        self.runner.close()


def _allowed(lines: list[str], item: Mapping[str, Any]) -> list[str]:
    """Import lines that import only the standard library or the task's own packages (the harness runs them)."""
    allowed = set(item.get("packages", ()))
    return [l for l in lines if set(third_party([l])) <= allowed]


def _build(num_agents: int = 2, **args: Any) -> ClassEvalEnv:
    return ClassEvalEnv(num_agents, **args)


register_env("classeval", EnvEntry(_build, load_classeval_items,
                                   "ClassEval (100 classes): agents split the methods; unittest classes as tests"))
