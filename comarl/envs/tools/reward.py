"""The team reward for cooperative function calling.

Each agent's response is parsed into calls; the team's calls are the multiset
union of the agents' calls (:func:`calls.merge_calls`: a call written by several
agents counts once, a call one agent writes k times counts k times; values are
read as their parameter's declared type first, so ``h=6`` and ``h=6.0`` for a
float ``h`` are one call). The reward is

    exact * [team calls match the gold answer as BFCL's checker decides]
    + parse * (share of agents whose response parsed)
    + name_f1 * (F1 of the multisets of function names, team vs gold)
    + args * (mean over gold calls of the argument score of its matched team call)
    + count * max(0, 1 - |team calls - gold calls| / gold calls)
    - cross_duplicate * min(1, calls written by more than one agent / gold calls)
    - repeated * min(1, surplus repeats / gold calls)
    - lazy * (share of agents without a call; only when gold calls >= agents)
    - unbalanced * min(1, sum_i |calls_i - even share_i| / gold calls)

An agent's surplus repeats of a call are its copies beyond the number of gold
calls that call matches (at least 1): writing ``draw(mu=5)`` twice when two
such draws are asked for is no repeat. ``calls_i`` is agent i's calls less its
surplus repeats.

The argument score of a (team call, gold call) pair is 0 for another function
name, else the share of the gold call's parameters the call gets right (given
and accepted by :func:`checker.check_value`, or left out and optional), times
``g / (g + unknown)`` for ``unknown`` parameters the gold call does not have.
Team calls are paired with gold calls greedily, best score first. The even
share sorts the agents' counts, so which agent takes more does not matter.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from . import checker as C
from .calls import ToolCall, call_key, merge_calls


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the reward terms (see the module docstring); YAML ``env.args.reward``."""

    exact: float = 1.0
    """Team calls match the gold answer exactly (BFCL's verdict)."""
    parse: float = 0.05
    """Share of agents whose response parsed (calls, or an explicit ``[]``)."""
    name_f1: float = 0.25
    """F1 of the function names (multisets), team vs gold."""
    args: float = 0.35
    """Mean argument score of the gold calls' matched team calls."""
    count: float = 0.10
    """Number of team calls close to the number of gold calls."""
    cross_duplicate: float = 0.20
    """Penalty: the same call written by more than one agent."""
    repeated: float = 0.05
    """Penalty: an agent repeating a call more often than the gold answer has use for."""
    lazy: float = 0.15
    """Penalty: share of agents with no call."""
    unbalanced: float = 0.15
    """Penalty: distance of the agents' call counts from an even split."""

    def max_reward(self) -> float:
        return self.exact + self.parse + self.name_f1 + self.args + self.count


def reward_weights(raw: Mapping[str, Any] | None) -> RewardWeights:
    """``env.args.reward`` -> :class:`RewardWeights`; unknown keys and non-numbers are errors naming the key."""
    raw = dict(raw or {})
    known = [f.name for f in fields(RewardWeights)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"env.args.reward: unknown key(s) {unknown}; known: {', '.join(known)}")
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"env.args.reward.{k}: expected a number, got {v!r}")
    return RewardWeights(**{k: float(v) for k, v in raw.items()})


def name_f1(calls: Sequence[ToolCall], gold: Sequence[C.Gold]) -> float:
    """F1 of function-name multisets. ``[f, f, g]`` vs gold ``[f, g, g]``: overlap 2, P = R = 2/3, F1 = 2/3."""
    pred = Counter(c.name for c in calls)
    ref = Counter(next(iter(g)) for g in gold)
    overlap = sum((pred & ref).values())
    if not overlap:
        return 0.0
    p, r = overlap / sum(pred.values()), overlap / sum(ref.values())
    return 2 * p * r / (p + r)


def arg_score(schemas: Sequence[Mapping[str, Any]], call: ToolCall, gold: C.Gold) -> float:
    """Share of the gold call's parameters that ``call`` gets right, discounted for unknown ones."""
    (name, answer), = gold.items()
    if call.name != name:
        return 0.0
    schema = C.find_schema(schemas, name)
    props = (schema or {}).get("parameters", {}).get("properties", {})
    if not answer:
        return 1.0 if not call.args else 0.5
    right = 0
    for p, accepted in answer.items():
        if p in call.args:
            right += p in props and C.check_value(props[p], call.args[p], accepted) is None
        else:
            right += "" in accepted
    unknown = sum(p not in answer for p in call.args)
    return right / (len(answer) + unknown)


def matched_arg_score(schemas: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall], gold: Sequence[C.Gold]) -> float:
    """Mean over gold calls of the score of the team call paired with it (greedy, best first; unpaired: 0)."""
    if not gold:
        return 0.0
    pairs = sorted(((arg_score(schemas, c, g), i, j) for i, c in enumerate(calls) for j, g in enumerate(gold)),
                   key=lambda t: -t[0])
    used_c, used_g, total = set(), set(), 0.0
    for s, i, j in pairs:
        if s <= 0:
            break
        if i not in used_c and j not in used_g:
            used_c.add(i)
            used_g.add(j)
            total += s
    return total / len(gold)


def even_split(total: int, agents: int) -> list[int]:
    """``even_split(5, 2) -> [3, 2]``: the most balanced counts, largest first."""
    return [total // agents + (i < total % agents) for i in range(agents)]


def team_exact(per_agent: Sequence[Sequence[ToolCall]], gold: Sequence[C.Gold],
               schemas: Sequence[Mapping[str, Any]], ordered: bool = False) -> bool:
    """Whether the agents' merged calls match ``gold`` as BFCL's checker decides (as a set, or in order)."""
    team = merge_calls(per_agent, schemas)
    return (C.match_ordered if ordered else C.match_unordered)(schemas, team, gold) is None


def score_team(per_agent: Sequence[Sequence[ToolCall]], parsed_ok: Sequence[bool], gold: Sequence[C.Gold],
               schemas: Sequence[Mapping[str, Any]], w: RewardWeights,
               ordered: bool = False) -> tuple[float, dict[str, float]]:
    """The team reward and its terms.

    Args:
        per_agent: each agent's calls as written (N lists).
        parsed_ok: per agent, whether its response parsed.
        gold: BFCL possible answer (G gold calls).
        schemas: the task's function schemas.
        w: weights.
        ordered: exact match in order (flattened multi-turn) instead of as a set.
    Returns:
        ``(reward, metrics)``; metrics hold each term, ``exact``, the call counts and
        ``calls_agent{i}`` (agent i's calls less its surplus repeats).
    """
    n, g = len(per_agent), len(gold)
    team = merge_calls(per_agent, schemas)
    exact = float(team_exact(per_agent, gold, schemas, ordered))
    parse = sum(map(bool, parsed_ok)) / n if n else 0.0
    f1 = name_f1(team, gold)
    args = matched_arg_score(schemas, team, gold)
    count = max(0.0, 1 - abs(len(team) - g) / g) if g else float(not team)
    keys = [Counter(call_key(c, schemas) for c in cs) for cs in per_agent]
    examples = {call_key(c, schemas): c for cs in per_agent for c in cs}
    fills = {k: sum(C.check_call(C.find_schema(schemas, next(iter(gc))), c, gc) is None for gc in gold)
             for k, c in examples.items()}
    surplus = [sum(max(0, v - max(1, fills[k])) for k, v in ks.items()) for ks in keys]
    cross = sum(v - 1 for v in Counter(k for ks in keys for k in ks).values())
    counts = [len(cs) - s for cs, s in zip(per_agent, surplus)]
    lazy = sum(c == 0 for c in counts) / n if n and g >= n else 0.0
    if g:
        gaps = (abs(a - b) for a, b in zip(sorted(counts, reverse=True), even_split(g, n)))
        unbalanced = min(1.0, sum(gaps) / g)
    else:
        unbalanced = 0.0
    denom = max(g, 1)
    cross_rate, repeated_rate = min(1.0, cross / denom), min(1.0, sum(surplus) / denom)
    reward = (w.exact * exact + w.parse * parse + w.name_f1 * f1 + w.args * args + w.count * count
              - w.cross_duplicate * cross_rate - w.repeated * repeated_rate - w.lazy * lazy - w.unbalanced * unbalanced)
    metrics = {"exact": exact, "parse": parse, "name_f1": f1, "args": args, "count": count,
               "cross_duplicate": cross_rate, "repeated": repeated_rate, "lazy": lazy, "unbalanced": unbalanced,
               "team_calls": float(len(team)), "gold_calls": float(g),
               **{f"calls_agent{i}": float(c) for i, c in enumerate(counts)}}
    return float(reward), metrics
