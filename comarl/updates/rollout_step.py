"""The rollout part of an on-policy step, shared by the policy-gradient and the online DPO updates.

A step's items are cut into ``gradient_accumulation_steps`` chunks, each rolled out as one breadth-first
tree (``rollout.collect_rollout``) with the team's models whole (``Team.gathered``). Under
``fsdp_gather: agent`` a rank with fewer chunks joins the others' per-agent gathers. A critic, when the
update has one, values the trees right after: value heads on the agents' models inside the same gather,
a separate critic one column at a time in its own (the whole agents and the whole critic are never in
memory together).
"""
from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from typing import Any, Iterable, Protocol

import torch

from ..rollout import collect_rollout, join_rollout, rollout_metrics


class RollingTeam(Protocol):
    """What a rollout reads of a team (``core.seams.TeamView`` has it; so has the generation worker's
    ``updates.overlap.SamplingTeam``): the agents and the context in which their models are whole."""

    agents: list[Any]

    def gathered(self, models: Iterable[torch.nn.Module] | None = None, *, env: Any = None, rollout: bool = False,
                 also: Iterable[torch.nn.Module] = ()) -> AbstractContextManager[Any]: ...


def chunks_of(items: list, n_chunks: int) -> list[list]:
    """``items`` cut into ``n_chunks`` consecutive chunks (the last may be shorter; none when empty)."""
    size = math.ceil(len(items) / n_chunks) if items else 0
    return [items[i:i + size] for i in range(0, len(items), size)] if size else []


def roll_out(team: RollingTeam, env, items: list[dict], settings, n_chunks: int, critic=None):
    """-> (rollouts [one per chunk], what the critic prepared (``critics.Prepared``: metrics and advantages) or
    None without a critic, rollout seconds)."""
    t0 = time.perf_counter()
    chunks = chunks_of(items, n_chunks)
    lockstep = settings.lockstep  # one agent gathered at a time: ranks with fewer chunks join the rest
    n_rollouts = lockstep.max(len(chunks)) if lockstep is not None else len(chunks)  # (a collective: first)
    heads_now = critic is not None and critic.on_agents and lockstep is None
    with team.gathered(env=env, rollout=True, also=critic.modules() if heads_now else []):
        rollouts = [collect_rollout(team.agents, env, c, settings) for c in chunks]
        for _ in range(n_rollouts - len(chunks)):
            join_rollout(team.agents, settings, env)
        t_roll = time.perf_counter() - t0
        prepared = critic.prepare(rollouts) if heads_now else None  # values, GAE (critics/)
    if critic is not None and not heads_now:  # one value model gathered at a time (a head: with its agent)
        prepared = critic.prepare(rollouts, scope=lambda c: team.gathered(critic.column_modules(c)))
    return rollouts, prepared, t_roll


def rollout_step_metrics(rollouts, values: dict) -> tuple[dict[str, float], dict[str, float]]:
    """(metrics, per-node observation counts) of a step's rollouts, with ``reward/mean`` and the critic's."""
    metrics, counts = rollout_metrics(rollouts)  # per-node metrics weighted by their nodes
    metrics["reward/mean"] = metrics.get("reward/turn0", float("nan"))
    metrics.update(values)
    return metrics, counts


def step_times(dt: float, t_roll: float, batch) -> dict[str, float]:
    """``time/step_s``, ``time/rollout_s``, ``time/update_s`` of a step that took ``dt`` seconds, ``t_roll`` of them
    rolling out; a batch sampled ahead (``PromptBatch.rolled``): the worker's rollout seconds (spent beside the
    trainer) and a step of the seconds waited for it plus the update."""
    rolled = getattr(batch, "rolled", None)
    if rolled is None:
        return {"time/step_s": dt, "time/rollout_s": t_roll, "time/update_s": dt - t_roll}
    return {"time/step_s": rolled.wait_s + dt, "time/rollout_s": rolled.rollout_s, "time/update_s": dt}


__all__ = ["RollingTeam", "chunks_of", "roll_out", "rollout_step_metrics", "step_times"]
