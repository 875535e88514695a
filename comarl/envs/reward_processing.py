"""Reward processing for any environment: ``processed = reward_scale * raw + reward_shift``.

Applied by wrapping the environment (``experiment.build_env`` does it from
``env.reward_scale`` / ``env.reward_shift``), so everything downstream of
``step_batch`` -- returns, advantages, ``early_stop_reward`` and the
sibling-mean termination -- sees the processed reward, as in the reference
trainer (CoMLRL's ``reward_processor``: scale first, then shift). Each
transition also carries the raw team reward as the metric ``reward_raw``
(logged as ``env/reward_raw`` next to ``reward/mean``, the processed one);
evaluation summaries are computed on the raw rewards.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from .base import AgentRewards, EnvState, Environment, EvalRecord, Reward, Transition, rollout_modules


def process_reward(reward: Reward, scale: float, shift: float) -> Reward:
    """``scale * r + shift`` for a team reward, or for each value of :class:`AgentRewards`.

    ``process_reward(2.0, 0.5, -4.0) == -3.0``;
    ``process_reward(AgentRewards((1.0, 3.0)), 2.0, 1.0) == AgentRewards((3.0, 7.0))``.
    """
    if isinstance(reward, AgentRewards):
        return AgentRewards(tuple(scale * float(v) + shift for v in reward.values))
    return scale * float(reward) + shift


def _unprocess(reward: Reward, scale: float, shift: float) -> Reward:
    if isinstance(reward, AgentRewards):
        return AgentRewards(tuple((float(v) - shift) / scale for v in reward.values))
    return (float(reward) - shift) / scale


def team_mean(reward: Reward) -> float:
    """The team reward, or the mean of the per-agent rewards."""
    if isinstance(reward, AgentRewards):
        return sum(reward.values) / len(reward.values)
    return float(reward)


class ProcessedRewardEnv:
    """``env`` with every transition's reward scaled and shifted (composition, not a subclass).

    Args:
        env: any environment.
        scale: multiplies the raw reward (must not be 0: the reward would carry nothing).
        shift: added after scaling.
    """

    def __init__(self, env: Environment, scale: float = 1.0, shift: float = 0.0):
        if scale == 0:
            raise ValueError("env.reward_scale: must not be 0 (every reward would become reward_shift)")
        self.env, self.scale, self.shift = env, float(scale), float(shift)

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    @property
    def max_turns(self) -> int:
        return getattr(self.env, "max_turns", 1)

    def reset(self, item) -> EnvState:
        return self.env.reset(item)

    def rollout_modules(self) -> list:
        return rollout_modules(self.env)

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for tr in self.env.step_batch(states, responses):
            metrics = {**tr.metrics, "reward_raw": team_mean(tr.reward)}
            out.append(replace(tr, reward=process_reward(tr.reward, self.scale, self.shift), metrics=metrics))
        return out

    def summarize(self, records: Sequence[EvalRecord]) -> dict[str, Any]:
        """The wrapped environment's summary, computed on the raw rewards ({} when it has none)."""
        if not hasattr(self.env, "summarize"):
            return {}
        raw = [replace(r, transitions=[replace(t, reward=_unprocess(t.reward, self.scale, self.shift))
                                       for t in r.transitions]) for r in records]
        return self.env.summarize(raw)

    def render_table(self, summary: dict[str, Any]) -> str:
        if hasattr(self.env, "render_table"):
            return self.env.render_table(summary)
        import json

        return json.dumps(summary, indent=2, default=str)[:4000]

    def close(self) -> None:
        getattr(self.env, "close", lambda: None)()


def with_reward_processing(env: Environment, scale: float = 1.0, shift: float = 0.0):
    """``env`` itself when ``scale == 1`` and ``shift == 0``, else a :class:`ProcessedRewardEnv`."""
    if scale == 1 and shift == 0:
        return env
    return ProcessedRewardEnv(env, scale, shift)
