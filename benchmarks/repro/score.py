"""Held-out scores of a team, as ``comarl.runs.heldout.heldout_score`` defines them, for every row of the grid.

``heldout_score`` scores the first turn of a parallel team. The grid also needs the pipeline baseline (the second
agent sees the first one's text) and tasks with a second turn (coding with feedback), so :func:`team_score` walks
the episode itself with the same conventions: ``samples`` completions per agent and item (the k-th samples
together), drawn under ``seed`` inside a forked RNG so the caller's random stream is not touched, one batched
generate call per agent and turn; an item's score is the mean over its samples of the *last* turn's team reward
(or environment metric); the spread is the standard error over items. For a one-turn parallel team with
``share_prefix=False`` it draws the same completions as ``heldout_score`` (tested); the grid shares each prompt's
prefill between its samples, as training does.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from comarl.generation.team import generate_for_agents
from comarl.runs.heldout import mean_and_stderr


def _team(reward) -> float:
    return float(np.mean(getattr(reward, "values", [reward])))


@torch.no_grad()
def team_score(agents: Sequence, env, items: Sequence[dict], samples: int = 4, greedy: bool = False, seed: int = 0,
               metrics: Sequence[str] = (), pipeline: Callable | None = None, max_turns: int = 1,
               share_prefix: bool = True, generator: Callable | None = None, keep: bool = False,
               item_id: Callable[[dict], str] | None = None) -> dict:
    """Score ``agents`` on ``items`` without training.

    Args:
        pipeline: ``(state, first_agent_text) -> second agent's prompt``: at the first turn agent 1 writes first
            and agent 2 is prompted with its text (the reference's pipeline baseline); None: all agents at once.
        max_turns: turns to play; a branch that the environment ends earlier keeps its last transition.
        share_prefix: prefill each first-turn prompt once for its ``samples`` completions, as training does
            (``TrainConfig.hardware.share_prefix``); the same distributions, a quarter of the prefill at 4
            samples. False draws exactly what ``heldout_score`` draws (tested).
        generator: the team generator (``comarl.generation.team`` contract) every call goes through; None:
            Hugging Face ``generate``. A vLLM generator samples from its engines' own random stream, not under
            ``seed``, and ignores ``share_prefix`` (its prefix cache shares prompt blocks).
        keep: also return ``"records"``, one per item: ``{"id", "samples": [...]}``, each sample
            ``{"turns": [{"texts", "tokens", "capped"} per turn, one entry per agent], "reward": last turn's team
            reward, <metric>: ...}``: what the analysis rescores (the texts), and the completions' lengths in new
            tokens (EOS not counted) with whether each hit ``max_new_tokens`` (no EOS came).
        item_id: ``item -> id`` for the records (default: the item's position).
    Returns:
        ``{"reward": {mean, stderr, per_item}, "first_turn_reward": {...}, <metric>: {...}, "samples", "greedy"}``;
        a metric an environment does not report is left out.
    """
    if not items:
        raise ValueError("team_score: no items")
    k = 1 if greedy else samples
    gen = generator or generate_for_agents
    states = [env.reset(item) for item in items for _ in range(k)]  # item-major, k copies
    first: list = [None] * len(states)
    last: list = [None] * len(states)
    live = list(range(len(states)))
    turns: list[list[dict]] = [[] for _ in states]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for turn in range(max_turns):
            cur = [states[i] for i in live]
            if turn == 0:  # one prompt per item, k samples: exactly heldout_score's generate call
                roots = cur[::k]
                ids = [a.encode_prompts([s.prompts[j] for s in roots]) for j, a in enumerate(agents)]
                if pipeline is None:
                    comps = gen(agents, ids, k, greedy=greedy, share_prefix=share_prefix)
                else:
                    one = gen(agents[:1], ids[:1], k, greedy=greedy, share_prefix=share_prefix)[0]
                    second = [pipeline(s, t) for s, t in zip(cur, one.texts)]
                    comps = [one, gen(agents[1:2], [agents[1].encode_prompts(second)], 1, greedy=greedy)[0]]
            else:
                ids = [a.encode_prompts([s.prompts[j] for s in cur]) for j, a in enumerate(agents)]
                comps = gen(agents, ids, 1, greedy=greedy)
            texts = [tuple(c.texts[n] for c in comps) for n in range(len(cur))]
            if keep:
                for n, i in enumerate(live):
                    turns[i].append(_turn_record(comps, n))
            trans = env.step_batch(cur, texts)
            nxt = []
            for i, tr in zip(live, trans):
                last[i] = tr
                if turn == 0:
                    first[i] = tr
                if not tr.done and tr.next_state is not None:
                    states[i] = tr.next_state
                    nxt.append(i)
            live = nxt
            if not live:
                break

    def per_item(values: list[float]) -> dict:
        per = [float(np.mean(values[p * k:(p + 1) * k])) for p in range(len(items))]
        mean, se = mean_and_stderr(per)
        return {"mean": mean, "stderr": se, "per_item": per}

    out = {"reward": per_item([_team(t.reward) for t in last]),
           "first_turn_reward": per_item([_team(t.reward) for t in first]),
           "samples": k, "greedy": greedy, "items": len(items)}
    for name in metrics:
        if all(name in t.metrics for t in last):
            out[name] = per_item([float(t.metrics[name]) for t in last])
    if keep:
        kept = [m for m in metrics if m in out]
        out["records"] = [
            {"id": item_id(item) if item_id else str(p),
             "samples": [{"turns": turns[i], "reward": _team(last[i].reward),
                          **{m: float(last[i].metrics[m]) for m in kept}} for i in range(p * k, (p + 1) * k)]}
            for p, item in enumerate(items)]
    return out


def _turn_record(comps: Sequence, n: int) -> dict:
    """Sample ``n`` of one turn, one entry per agent: its text, its length in new tokens (EOS not counted) and
    whether it hit the token cap (no EOS before ``max_new_tokens``)."""
    return {"texts": [c.texts[n] for c in comps],
            "tokens": [len(c.ids[n]) - (0 if c.truncated[n] else 1) for c in comps],
            "capped": [bool(c.truncated[n]) for c in comps]}
