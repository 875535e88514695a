"""A generating judge as the reward: a helper model (``helpers:``, local or hosted) reads every agent's prompt and
response and answers with a score; the score, divided by ``max_score``, replaces the environment's reward.

``env.judge`` (:class:`JudgeSettings`) names the helper and the prompt; :class:`JudgeEnv` wraps the environment
as ``RewardModelEnv`` does for a fitted reward model (the environment's own reward is logged as
``env/env_reward``; its prompts, turns, team graph and summaries stay its own). One request per joint response,
all of a step's in one call, so a hosted judge's ``concurrency`` spreads them. The last number in the answer is
the score (clipped to [0, max_score]); an answer with none gets ``failure_reward`` and counts in
``env/judge_unparsed``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..core.config_io import ConfigError
from ..core.seams import TextGenerator
from ..critics.joint_input import role_marker_template
from ..envs.base import AgentRewards, EnvState, Environment, Transition

JUDGE_PROMPT = """Rate how well these agents solved their task together, from 0 (not at all) to {max_score:g}
(perfectly).

{joint}

Answer with the score last, as: Score: <number>"""

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass
class JudgeSettings:
    """``env.judge``: a helper model that scores each joint response (docs/helpers.md)."""

    helper: str = ""
    """The helper (helpers.<name>: a local model or a hosted endpoint) that writes the scores."""
    prompt: str = JUDGE_PROMPT
    """The judge's prompt: {joint} is every agent's prompt and response (role markers), {max_score} the scale."""
    max_score: float = 10.0
    """The top of the judge's scale: reward = score / max_score, in [0, 1]."""
    failure_reward: float = 0.0
    """The reward of an answer that holds no number."""

    def validate(self, where: str = "env.judge") -> None:
        if not self.helper:
            raise ConfigError(f"{where}.helper: name the helper (helpers.<name>) that judges")
        if "{joint}" not in self.prompt:
            raise ConfigError(f"{where}.prompt: must contain {{joint}} (the agents' prompts and responses)")
        if not self.max_score > 0:
            raise ConfigError(f"{where}.max_score: must be > 0, got {self.max_score}")


def judge_score(text: str, max_score: float) -> float | None:
    """The last number in ``text`` over ``max_score``, clipped to [0, 1]; None when there is no number."""
    found = _NUMBER.findall(text or "")
    if not found:
        return None
    return min(max(float(found[-1]) / max_score, 0.0), 1.0)


class JudgeEnv:
    """``env`` with the judge's score as the team reward (module docstring)."""

    def __init__(self, env: Environment, judge: TextGenerator, settings: JudgeSettings):
        self.env, self.judge, self.settings = env, judge, settings
        self.num_agents = env.num_agents
        self.max_turns = getattr(env, "max_turns", 1)

    def __getattr__(self, name: str):
        if name in ("env", "judge", "settings") or name.startswith("__"):  # (not set yet: copy, pickle)
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, item) -> EnvState:
        return self.env.reset(item)

    def close(self) -> None:
        getattr(self.env, "close", lambda: None)()

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        trs = self.env.step_batch(states, responses)
        s = self.settings
        asks = [s.prompt.format(joint=role_marker_template(list(st.prompts), list(r)), max_score=s.max_score)
                for st, r in zip(states, responses)]
        answers = self.judge(asks)
        if len(answers) != len(asks):
            raise RuntimeError(f"env.judge: the judge returned {len(answers)} answers for {len(asks)} joint responses")
        out = []
        for tr, answer in zip(trs, answers):
            score = judge_score(answer, s.max_score)
            own = sum(tr.reward.values) / len(tr.reward.values) if isinstance(tr.reward, AgentRewards) else tr.reward
            out.append(Transition(s.failure_reward if score is None else score, tr.done, tr.next_state,
                                  {**tr.metrics, "env_reward": float(own), "judge_unparsed": float(score is None)}))
        return out


__all__ = ["JUDGE_PROMPT", "JudgeEnv", "JudgeSettings", "judge_score"]
