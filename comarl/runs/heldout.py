"""Held-out score: the team's reward on items it never trains on, before and after training.

One batched ``generate`` call per agent over all held-out prompts (``samples``
completions each, greedy by default, so the number does not move between two
calls on the same weights), then one ``env.step_batch``. The score of an item
is the mean first-turn team reward of its samples; the spread is the standard
error of the mean over items, because the items (not the samples) are what
varies between one held-out set and another. :func:`records_score` computes the
same score from an evaluation's records (``comarl eval``, the demo).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..core.stages import stage_graph, stage_prompt


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) of ``values`` [n]; the error is ``std(ddof=1) / sqrt(n)``, 0 for n = 1."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("mean_and_stderr: no values")
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return float(v.mean()), se


@dataclass(frozen=True)
class HeldOutScore:
    """Per-item mean team reward on the held-out items, with their mean and standard error."""

    per_item: tuple[float, ...]
    """Mean first-turn team reward of each held-out item, in item order."""
    samples: int
    """Completions per agent and item (1 with greedy decoding)."""
    greedy: bool
    """True when the completions were decoded greedily."""

    @property
    def mean(self) -> float:
        return mean_and_stderr(self.per_item)[0]

    @property
    def stderr(self) -> float:
        return mean_and_stderr(self.per_item)[1]

    def __str__(self) -> str:
        return self.describe()

    def describe(self, what: str = "posts") -> str:
        """``0.753 ± 0.021 (mean ± s.e. over 24 posts, 4 samples each)``, the items called ``what``."""
        how = "greedy" if self.greedy else f"{self.samples} sample{'s' if self.samples != 1 else ''} each"
        return f"{self.mean:.3f} ± {self.stderr:.3f} (mean ± s.e. over {len(self.per_item)} {what}, {how})"

    def to_json(self) -> dict:
        return {"mean": self.mean, "stderr": self.stderr, "per_item": list(self.per_item),
                "samples": self.samples, "greedy": self.greedy}


def paired_gain(before: HeldOutScore, after: HeldOutScore) -> tuple[float, float]:
    """(mean, standard error) of ``after - before`` per item [n]: both scores come from the same items, so the
    gain's spread is that of the per-item differences, tighter than the two scores' errors combined."""
    if len(before.per_item) != len(after.per_item):
        raise ValueError(f"paired_gain: {len(before.per_item)} items before, {len(after.per_item)} after")
    return mean_and_stderr([a - b for a, b in zip(after.per_item, before.per_item)])


def records_score(records: Sequence, items: Sequence[dict], greedy: bool = False) -> HeldOutScore:
    """The held-out score of an evaluation (``evaluation.evaluate_agents``' records): each item's mean first-turn
    team reward over its samples, in ``items`` order; what ``comarl eval`` prints as its score and the demo as
    its held-out score.

    Raises:
        ValueError: an item without a record, or records with different sample counts.
    """
    where = {id(it): i for i, it in enumerate(items)}
    rewards: list[list[float] | None] = [None] * len(items)
    for rec in records:
        i = where.get(id(rec.item))
        if i is None:
            raise ValueError("records_score: a record's item is not one of the items given")
        rewards[i] = [_team_reward(t.reward) for t in rec.transitions]
    missing = [i for i, r in enumerate(rewards) if not r]
    if missing:
        raise ValueError(f"records_score: items {missing[:5]} have no scored sample")
    counts = {len(r) for r in rewards if r}
    if len(counts) != 1:
        raise ValueError(f"records_score: items hold different sample counts {sorted(counts)}")
    return HeldOutScore(per_item=tuple(float(np.mean(r)) for r in rewards if r), samples=counts.pop(), greedy=greedy)


def _team_reward(reward) -> float:
    """A float reward, or the mean of per-agent rewards (``AgentRewards.values``)."""
    return float(np.mean(getattr(reward, "values", [reward])))


def _staged_joints(agents, env, graph, states, k: int, greedy: bool, batch_size: int,
                   generate_for_agents) -> list[tuple[str, ...]]:
    """A team graph's joint responses, ``k`` per item (item-major): the first stage writes k samples per item,
    every later agent one per branch, from the prompt holding what it reads (``comarl/core/stages.py``); one
    ``generate`` per agent and stage."""
    n = len(agents)
    branches: list[tuple[Any, dict[int, str]]] = [(s, {}) for s in states for _ in range(k)]  # (state, agent -> text)
    for si, stage in enumerate(graph.stages):
        acting = [stage.route.chosen(stage.agents, ctx) if stage.route is not None else stage.agents
                  for _, ctx in branches]
        mine = [[b for b, act in enumerate(acting) if i in act] for i in range(n)]
        if si == 0:  # one prompt per item, k samples of it
            mine = [[b for b in m if b % k == 0] for m in mine]
        texts_in = [[stage_prompt(env, graph, branches[b][0], i,
                                  {a: branches[b][1][a] for a in graph.reads_of(i) if a in branches[b][1]})
                     for b in mine[i]] for i in range(n)]
        prompt_ids = [agent.encode_prompts(texts_in[i]) if texts_in[i] else [] for i, agent in enumerate(agents)]
        per = k if si == 0 else 1
        comps = generate_for_agents(agents, prompt_ids, per, greedy=greedy, batch_size=batch_size)
        for i in range(n):
            for w, b in enumerate(mine[i]):
                for j in range(per):
                    branches[b + j][1][i] = comps[i].texts[w * per + j]
    return [tuple(ctx.get(i, "") for i in range(n)) for _, ctx in branches]


@torch.no_grad()
def heldout_score(agents: Sequence, env, items: Sequence[dict], samples: int = 1, greedy: bool = True,
                  seed: int = 0, batch_size: int = 0, generator=None) -> HeldOutScore:
    """Score ``agents`` on ``items`` without training (first turn of each item).

    ``greedy`` decodes one completion per agent and item; otherwise ``samples``
    completions at the agents' temperature, drawn under ``seed`` inside a forked
    RNG, so the caller's random stream (the training run's) is not touched and
    two calls on the same weights give the same number. With a team graph the
    first stage writes those, and every later agent one per branch, reading it. ``batch_size`` caps the
    prompts per ``generate`` call (0: all in one call). ``generator``: the team generator
    (``generation/team.py``; a trainer's ``Trainer.generator``, e.g. its vLLM engines, whose sampling stream
    is the engine's own: ``seed`` then fixes greedy runs only); None: Hugging Face ``generate``.
    """
    from ..generation.team import generate_for_agents

    team_generate = generator or generate_for_agents
    if not items:
        raise ValueError("heldout_score: no held-out items")
    k = 1 if greedy else samples
    if k < 1:
        raise ValueError(f"heldout_score: samples must be >= 1, got {samples}")
    states = [env.reset(item) for item in items]
    graph = stage_graph(env, len(agents))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if graph.is_single:
            prompt_ids = [agent.encode_prompts([s.prompts[i] for s in states]) for i, agent in enumerate(agents)]
            comps = team_generate(agents, prompt_ids, k, greedy=greedy, batch_size=batch_size)
            joint = [tuple(c.texts[p * k + j] for c in comps) for p in range(len(states)) for j in range(k)]
        else:
            joint = _staged_joints(agents, env, graph, states, k, greedy, batch_size, team_generate)
    joint_states = [s for s in states for _ in range(k)]
    rewards = [_team_reward(t.reward) for t in env.step_batch(joint_states, joint)]
    per_item = tuple(float(np.mean(rewards[p * k:(p + 1) * k])) for p in range(len(states)))
    return HeldOutScore(per_item=per_item, samples=k, greedy=greedy)


__all__ = ["HeldOutScore", "heldout_score", "mean_and_stderr", "paired_gain", "records_score"]
