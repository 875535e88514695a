"""Centralised actor: one model writes every role's response in one completion, in tagged sections.

:class:`CentralizedEnv` wraps an N-agent environment as a one-agent one: its
prompt is ``prompt_builder(item, the N role prompts)``; a completion is split
back into N responses by ``parser(completion, N)`` and scored by the wrapped
environment, unchanged. A completion the parser rejects (it raises
:class:`ParseError`) gets ``failure_reward`` and ends its branch; the rollout
logs ``central/parse_failure`` (the fraction of completions that failed).
Any algorithm of the library then trains the single model (MAGRPO is GRPO
with one agent; MADPO's pairs are pairs of whole completions). ``summarize``
and ``render_table`` pass the wrapped environment's evaluation summary
through (on the parsed role responses), so ``comarl eval`` prints the same
table for the single-model baseline as for a decentralised team.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..envs.base import EnvState, Environment, Transition, rollout_modules


class ParseError(ValueError):
    """A centralised completion could not be split into one response per role."""


@dataclass(frozen=True)
class TaggedFormat:
    """Sections ``<agent_0> ... </agent_0>`` (``tag`` = "agent_{i}"), one per role, and a prompt asking for them."""

    tag: str = "agent_{i}"
    """Section tag name; ``{i}`` is the role index (0-based)."""

    def build_prompt(self, item: Mapping[str, Any], prompts: Sequence[str]) -> str:
        """One prompt holding every role's own prompt and the required output format."""
        roles = "\n\n".join(f"Role {i} prompt:\n{p}" for i, p in enumerate(prompts))
        fmt = "\n".join(f"<{self.tag.format(i=i)}>\n...\n</{self.tag.format(i=i)}>" for i in range(len(prompts)))
        return (f"Write the separate responses of {len(prompts)} roles. Each must answer its own prompt.\n\n"
                f"{roles}\n\nReturn exactly one section per role, in this format:\n{fmt}\n")

    def parse(self, completion: str, num_roles: int) -> list[str]:
        """[N] section contents (stripped). Raises ParseError when a role's section is missing."""
        out = []
        for i in range(num_roles):
            t = re.escape(self.tag.format(i=i))
            m = re.search(rf"<\s*{t}\s*>(.*?)<\s*/\s*{t}\s*>", completion, flags=re.DOTALL | re.IGNORECASE)
            if m is None:
                raise ParseError(f"no <{self.tag.format(i=i)}>...</{self.tag.format(i=i)}> section for role {i}")
            out.append(m.group(1).strip())
        return out


class CentralizedEnv:
    """``env`` (N roles) seen as a one-agent environment whose single response carries every role's text.

    Args:
        env: the N-agent environment, unchanged.
        prompt_builder: ``(item, role prompts) -> prompt`` (default :class:`TaggedFormat`'s).
        parser: ``(completion, N) -> N responses``, raising :class:`ParseError` (default :class:`TaggedFormat`'s).
        failure_reward: reward of an unparsable completion (the environment's failure value, e.g. its
            minimum reward); None = ``env.failure_reward`` when the environment defines it, else 0.0.
    """

    def __init__(self, env: Environment,
                 prompt_builder: Callable[[Mapping[str, Any], Sequence[str]], str] | None = None,
                 parser: Callable[[str, int], Sequence[str]] | None = None, failure_reward: float | None = None):
        fmt = TaggedFormat()
        self.env = env
        self.roles = env.num_agents
        self.num_agents = 1
        self.max_turns = getattr(env, "max_turns", 1)
        self.prompt_builder = prompt_builder or fmt.build_prompt
        self.parser = parser or fmt.parse
        self.failure_reward = float(failure_reward if failure_reward is not None
                                    else getattr(env, "failure_reward", 0.0))

    def _wrap(self, inner: EnvState, outer: EnvState | None, completion: str = "") -> EnvState:
        prompt = self.prompt_builder(inner.item, inner.prompts)
        if outer is None:
            return EnvState(item=inner.item, prompts=(prompt,), info={"inner": inner})
        return outer.advanced([completion], [prompt], info={"inner": inner})

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        return self._wrap(self.env.reset(item), None)

    def rollout_modules(self) -> list:
        return rollout_modules(self.env)

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out: list[Transition | None] = [None] * len(states)
        parsed, where = [], []
        for j, (state, resp) in enumerate(zip(states, responses)):
            try:
                roles = list(self.parser(resp[0], self.roles))
                if len(roles) != self.roles:
                    raise ParseError(f"parser gave {len(roles)} responses for {self.roles} roles")
            except ParseError:
                out[j] = Transition(self.failure_reward, True, metrics={"central/parse_failure": 1.0})
                continue
            parsed.append((state.info["inner"], roles))
            where.append(j)
        inner = self.env.step_batch([s for s, _ in parsed], [r for _, r in parsed]) if parsed else []
        for j, tr in zip(where, inner):
            # no next state ends the branch, done or not (as the rollout reads a transition)
            nxt = None if tr.done or tr.next_state is None else self._wrap(tr.next_state, states[j], responses[j][0])
            out[j] = Transition(tr.reward, tr.done, nxt, {**tr.metrics, "central/parse_failure": 0.0})
        answered = [t for t in out if t is not None]
        if len(answered) != len(out):
            raise ValueError(f"CentralizedEnv: the wrapped env answered {len(inner)} of {len(parsed)} joint actions")
        return answered

    # -- evaluation: the wrapped environment's summary, on the parsed role responses
    def summarize(self, records) -> dict[str, Any]:
        """The wrapped environment's ``summarize`` over each record's parsed role responses (an unparsable
        completion counts as N empty responses, scored with ``failure_reward``), plus
        ``central: {parse_failure, samples}``."""
        mapped, fails, total = [], 0, 0
        for rec in records:
            responses = []
            for resp in rec.responses:
                total += 1
                try:
                    roles = tuple(self.parser(resp[0], self.roles))
                    if len(roles) != self.roles:
                        raise ParseError(f"parser gave {len(roles)} responses for {self.roles} roles")
                except ParseError:
                    roles, fails = ("",) * self.roles, fails + 1
                responses.append(roles)
            mapped.append(dataclasses.replace(rec, responses=responses))
        out = dict(self.env.summarize(mapped)) if hasattr(self.env, "summarize") and mapped else {}
        out["central"] = {"parse_failure": fails / total if total else None, "samples": total}
        return out

    def render_table(self, summary: dict[str, Any]) -> str:
        inner = {k: v for k, v in summary.items() if k != "central"}
        text = (self.env.render_table(inner) if hasattr(self.env, "render_table")
                else json.dumps(inner, indent=2, default=str)[:4000])
        fail = summary.get("central", {}).get("parse_failure")
        return text + (f"\ncentralised actor: parse failures {fail:.4f}" if fail is not None else "")

    def close(self) -> None:
        getattr(self.env, "close", lambda: None)()
