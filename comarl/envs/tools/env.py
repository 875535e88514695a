"""The cooperative function-calling environment (one turn).

Every agent sees the request and the function schemas with its role
instruction (``role_mode``) and writes calls (``call_format``); the team's
calls are the union of the agents' calls without canonical repeats, scored by
:func:`reward.score_team` against the item's BFCL possible answer, as an
unordered set (``bfcl_parallel``) or in order (``bfcl_multiturn_flat``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

from ..base import EnvState, EvalRecord, Transition
from . import prompts as P
from .calls import FORMATS, parse_calls
from .reward import RewardWeights, reward_weights, score_team

ARG_KEYS = ("role_mode", "call_format", "reward", "prompt")


class ToolCallEnv:
    """One-turn team function calling (see the module docstring).

    Args:
        name: the registered name (for messages).
        num_agents: N >= 1.
        role_mode: ``self_select`` | ``split_by_order`` | ``same_prompt``.
        call_format: ``python`` | ``json`` | ``auto`` (what agents are asked to write; ``auto``
            asks for Python and reads either).
        weights: reward weights.
        ordered: exact match in order (flattened multi-turn) instead of as a set.
        template: prompt template with ``{role}``, ``{functions}``, ``{request}``, ``{format}``
            (and optionally ``{num_agents}``).
    """

    max_turns = 1

    def __init__(self, name: str, num_agents: int, role_mode: str, call_format: str, weights: RewardWeights,
                 ordered: bool, template: str = P.TEMPLATE):
        self.name = name
        self.num_agents = num_agents
        self.role_mode = role_mode
        self.call_format = call_format
        self.weights = weights
        self.ordered = ordered
        self.template = template

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        missing = [k for k in ("request", "function", "ground_truth") if k not in item]
        if missing:
            raise KeyError(f"{self.name}: item lacks {missing}; build items with the environment's load_items "
                           f"(fields: {sorted(item)})")
        fmt = "python" if self.call_format == "auto" else self.call_format
        return EnvState(item=item, prompts=tuple(
            P.render(self.template, item, i, self.num_agents, self.role_mode, fmt, self.ordered)
            for i in range(self.num_agents)))

    def score(self, item: Mapping[str, Any], responses: Sequence[str]) -> tuple[float, dict[str, float]]:
        """Reward and metrics of one joint response."""
        if len(responses) != self.num_agents:
            raise ValueError(f"{self.name}: joint action has {len(responses)} responses, environment has {self.num_agents} agents")
        names = [f["name"] for f in item["function"]]
        parsed = [parse_calls(r, self.call_format, names) for r in responses]
        return score_team([p.calls for p in parsed], [p.ok for p in parsed], item["ground_truth"],
                          item["function"], self.weights, self.ordered)

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for state, resp in zip(states, responses, strict=True):
            reward, metrics = self.score(state.item, resp)
            out.append(Transition(reward, True, None, metrics))
        return out

    def summarize(self, records: Sequence[EvalRecord]) -> dict[str, Any]:
        """``comarl eval`` summary.

        Keys: ``items``, ``samples``, ``exact`` (share of exact samples, overall and
        ``by_category``), ``exact_any`` (share of items with an exact sample among
        their n), ``reward`` (mean), ``terms`` (mean of each reward term) and
        ``agent_call_share`` (agent i's distinct calls / all agents' distinct calls).
        """
        by_cat: dict[str, list[float]] = defaultdict(list)
        exact, any_exact, rewards = [], [], []
        terms: dict[str, list[float]] = defaultdict(list)
        calls = [0.0] * self.num_agents
        for rec in records:
            hits = []
            for tr in rec.transitions:
                m = tr.metrics
                hits.append(m["exact"])
                by_cat[str(rec.item.get("category", "unknown"))].append(m["exact"])
                rewards.append(float(tr.reward))
                for k in ("parse", "name_f1", "args", "count", "cross_duplicate", "repeated", "lazy", "unbalanced"):
                    terms[k].append(m[k])
                for i in range(self.num_agents):
                    calls[i] += m[f"calls_agent{i}"]
            exact += hits
            any_exact.append(float(any(hits)))
        total = sum(calls)
        return {
            "items": len(records), "samples": len(exact), "num_agents": self.num_agents, "role_mode": self.role_mode,
            "exact": {"overall": _mean(exact), "by_category": {c: _mean(v) for c, v in sorted(by_cat.items())}},
            "exact_any": _mean(any_exact), "reward": {"mean": _mean(rewards), "max_possible": self.weights.max_reward()},
            "terms": {k: _mean(v) for k, v in terms.items()},
            "agent_call_share": [c / total if total else None for c in calls],
        }

    def render_table(self, summary: Mapping[str, Any]) -> str:
        """A plain-text table of :meth:`summarize`: exact match per category and overall, agents' call shares."""
        ex = summary["exact"]
        rows = [(c, v) for c, v in ex["by_category"].items()] + [("overall", ex["overall"])]
        width = max(len(c) for c, _ in rows)
        lines = [f"{'category':{width}s}  exact"] + [f"{c:{width}s}  {_pct(v)}" for c, v in rows]
        shares = ", ".join(f"agent{i} {_pct(v)}" for i, v in enumerate(summary["agent_call_share"]))
        lines.append(f"share of the calls: {shares}")
        return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:5.1f}%"


def _mean(xs: Sequence[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None


def build_env(name: str, num_agents: int, args: Mapping[str, Any], ordered: bool) -> ToolCallEnv:
    """Check ``env.args`` and build; errors name the key."""
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
        raise ValueError(f"{name}: num_agents must be a positive integer, got {num_agents!r}")
    unknown = sorted(set(args) - set(ARG_KEYS))
    if unknown:
        raise ValueError(f"env.args: unknown key(s) {unknown} for {name}; known: {', '.join(ARG_KEYS)}")
    role_mode = args.get("role_mode", "self_select")
    if role_mode not in P.ROLE_MODES:
        raise ValueError(f"env.args.role_mode: expected one of {P.ROLE_MODES}, got {role_mode!r}")
    call_format = args.get("call_format", "python")
    if call_format not in FORMATS:
        raise ValueError(f"env.args.call_format: expected one of {FORMATS}, got {call_format!r}")
    template = args.get("prompt") or P.TEMPLATE
    if not isinstance(template, str) or any("{" + k + "}" not in template for k in ("role", "functions", "request", "format")):
        raise ValueError("env.args.prompt: the template must contain {role}, {functions}, {request} and {format}")
    return ToolCallEnv(name, num_agents, role_mode, call_format, reward_weights(args.get("reward")), ordered, template)
