"""Coding teams in stages: a planner whose plan the coder reads, and a solver -> verifier -> fixer chain.

Both wrap a one-agent ``FunctionCodingEnv`` (``mode: single``): its items, prompts, sandbox, reward and
pass@k summary are the benchmark's as they are for one agent; the team only changes who writes what.

- ``<dataset>_planner`` (``humaneval_planner``, ``coophumaneval_planner``, ``mbpp_planner``): agent 0
  writes a plan in words, agent 1 (stage 2) writes the program reading it; the program is tested as one
  agent's would be. Multi-turn: the next prompts are the single agent's revision prompt (the coder's) and
  the planning prompt with that revision prompt appended (the planner's).
- ``mbpp_chain`` (also ``humaneval_chain``): agent 0 solves, agent 1 (aligned) reads the draft and writes a
  review, agent 2 (aligned) reads both and writes the final program; a fixer answer without a ``def`` keeps
  the draft. The final program is scored; the draft is tested too (``score_draft``) and reported as the
  metrics ``draft_*`` (``env/draft_passed_all`` next to ``env/passed_all``): per-stage pass rates. One turn.

``env.args`` are the wrapped environment's (``preset``, ``rewards``, ``sandbox``, ``workers``, ``pass_k``,
``max_turns``...) plus ``prompts`` for the team's own templates (``plan``, ``code``, ``review``, ``fix``).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Mapping, Sequence

from ...core.stages import Stage, StageGraph
from ..base import EnvState, Transition
from ..coding.data import load_function_items
from ..coding.function_env import FunctionCodingEnv
from ..registry import EnvEntry, register_env

PLAN = """Plan a solution to the coding problem below for another agent, who will write the code from your plan.

Problem:
{prompt}
Instructions:
- Describe the algorithm in a few short numbered steps: the cases to handle and how to compute the result.
- Do not write code.
"""

CODE = """{task}
A planner wrote this plan for you; follow it where it is right:
{plan}
"""

REVIEW = """Review the solution below to the coding problem. Point out every bug and any case it gets wrong, \
in a few short lines; if it is correct, say so.

Problem:
{prompt}
Solution:
```python
{draft}
```
"""

FIX = """{task}
A first attempt and a review of it:
```python
{draft}
```
Review:
{review}
Write the corrected, complete code (or the attempt itself if it is right). Output only Python code.
"""

TEMPLATES = {"plan": PLAN, "code": CODE, "review": REVIEW, "fix": FIX}


def _templates(prompts: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(TEMPLATES)
    for key, value in (prompts or {}).items():
        if key not in TEMPLATES:
            raise ValueError(f"env.args.prompts.{key}: unknown template of this team; known: {', '.join(TEMPLATES)}")
        out[key] = value
    return out


class _OneCoder:
    """The wrapped one-agent environment and the translation of states to it (agent ``coder``'s view)."""

    def __init__(self, dataset: str, args: Mapping[str, Any]):
        args = dict(args)
        if args.get("mode", "single") != "single":
            raise ValueError("env.args.mode: a coding team wraps the one-agent (single) mode; leave mode out")
        args.pop("mode", None)
        self.inner = FunctionCodingEnv(dataset, 1, mode="single", **args)
        self.max_turns = self.inner.max_turns

    def inner_state(self, state: EnvState, coder: int) -> EnvState:
        history = (state.history[coder],) if state.history else ()
        return replace(state, prompts=(state.prompts[coder],), history=history)

    def summarize(self, records) -> dict[str, Any]:
        return self.inner.summarize(records)

    def render_table(self, summary: dict[str, Any]) -> str:
        return self.inner.render_table(summary)

    def close(self) -> None:
        self.inner.close()


class PlannerCoderEnv(_OneCoder):
    """Agent 0 plans, agent 1 codes from the plan (see the module docstring)."""

    num_agents = 2

    def __init__(self, dataset: str, num_agents: int = 2, prompts: Mapping[str, str] | None = None, **args: Any):
        if num_agents != 2:
            raise ValueError(f"{dataset}_planner needs 2 agents (planner, coder), the config has {num_agents}")
        super().__init__(dataset, args)
        self.templates = _templates(prompts)
        self.stages = StageGraph((Stage((0,)), Stage((1,))), names=("Planner", "Coder"))

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        state = self.inner.reset(item)
        return replace(state, prompts=(self.templates["plan"].format(prompt=state.item["prompt"]), state.prompts[0]))

    def stage_prompt(self, state: EnvState, agent: int, inputs: Mapping[int, str]) -> str:
        return self.templates["code"].format(task=state.prompts[1].rstrip(), plan=inputs[0].strip())

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        trs = self.inner.step_batch([self.inner_state(s, 1) for s in states], [(r[1],) for r in responses])
        out = []
        for s, r, tr in zip(states, responses, trs):
            metrics = {**tr.metrics, "plan_words": float(len(r[0].split()))}
            nxt = None
            if tr.next_state is not None:  # the coder revises; the planner re-plans from the same feedback
                coder_next = tr.next_state.prompts[0]
                plan_next = f"{self.templates['plan'].format(prompt=s.item['prompt'])}\nThe last attempt:\n{coder_next}"
                history = ((s.history[0] if s.history else ()) + ((s.prompts[0], r[0]),), tr.next_state.history[0])
                nxt = replace(tr.next_state, prompts=(plan_next, coder_next), history=history)
            out.append(Transition(tr.reward, tr.done, nxt, metrics))
        return out


_CODE_BLOCK = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def _code(text: str) -> str:
    """The first fenced code block of ``text``, else the text."""
    m = _CODE_BLOCK.search(text)
    return (m.group(1) if m else text).strip()


class SolverChainEnv(_OneCoder):
    """Agent 0 solves, agent 1 reviews the draft, agent 2 writes the final program (see the module docstring)."""

    num_agents = 3

    def __init__(self, dataset: str, num_agents: int = 3, prompts: Mapping[str, str] | None = None,
                 score_draft: bool = True, **args: Any):
        if num_agents != 3:
            raise ValueError(f"{dataset}_chain needs 3 agents (solver, verifier, fixer), the config has {num_agents}")
        if args.get("max_turns", 1) != 1:
            raise ValueError("env.args.max_turns: the solver -> verifier -> fixer chain is one turn (the fixer is "
                             "its revision)")
        super().__init__(dataset, args)
        self.templates, self.score_draft = _templates(prompts), bool(score_draft)
        self.stages = StageGraph((Stage((0,)), Stage((1,), aligned=True), Stage((2,), aligned=True)),
                                 names=("Solver", "Verifier", "Fixer"))

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        state = self.inner.reset(item)
        task = state.prompts[0]
        return replace(state, prompts=(task, self.templates["review"].format(prompt=state.item["prompt"], draft=""),
                                       task))

    def stage_prompt(self, state: EnvState, agent: int, inputs: Mapping[int, str]) -> str:
        draft = _code(inputs.get(0, ""))
        if agent == 1:
            return self.templates["review"].format(prompt=state.item["prompt"], draft=draft)
        return self.templates["fix"].format(task=state.prompts[2].rstrip(), draft=draft,
                                            review=inputs.get(1, "").strip())

    def final(self, responses: Sequence[str]) -> str:
        """The fixer's program, or the solver's draft when the fixer wrote no function."""
        return responses[2] if "def " in responses[2] else responses[0]

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        inner_states = [self.inner_state(s, 0) for s in states]
        trs = self.inner.step_batch(inner_states, [(self.final(r),) for r in responses])
        drafts = self.inner.step_batch(inner_states, [(r[0],) for r in responses]) if self.score_draft else \
            [None] * len(states)
        out = []
        for r, tr, draft in zip(responses, trs, drafts):
            metrics = {**tr.metrics, "fixer_kept_draft": float("def " not in r[2])}
            if draft is not None:
                metrics.update({f"draft_{k}": v for k, v in draft.metrics.items() if k in ("pass_rate", "passed_all")})
            out.append(Transition(tr.reward, True, None, metrics))
        return out


def _entry(dataset: str, cls, description: str) -> EnvEntry:
    def build(num_agents: int = cls.num_agents, **args: Any):
        return cls(dataset, num_agents, **args)

    def load_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
        return load_function_items(dataset, source, split, limit)

    return EnvEntry(build, load_items, description)


for _ds in ("humaneval", "coophumaneval", "mbpp"):
    register_env(f"{_ds}_planner", _entry(_ds, PlannerCoderEnv, f"{_ds}: a planner's plan, then the coder's program "
                                                                 f"(2 stages)"))
for _ds in ("mbpp", "humaneval"):
    register_env(f"{_ds}_chain", _entry(_ds, SolverChainEnv, f"{_ds}: solver -> verifier -> fixer, one turn "
                                                             f"(3 aligned stages)"))
