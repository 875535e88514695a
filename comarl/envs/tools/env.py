"""The cooperative function-calling environment (one turn).

Every agent sees the request and the function schemas with its role
instruction (``role_mode``) and writes calls (``call_format``); the team's
calls are the union of the agents' calls without canonical repeats, scored by
:func:`reward.score_team` against the item's BFCL possible answer, as an
unordered set (``bfcl_parallel``) or in order (``bfcl_multiturn_flat``).

Each response is read twice: by comarl's lenient parser (:func:`calls.parse_calls`)
and as BFCL's pipeline reads a prompting model's text (:func:`bfcl_decode.decode_bfcl`).
``scoring`` picks the reading the reward uses; both exact matches are always in the
metrics (``exact_lenient``, ``exact_bfcl``) and in :meth:`ToolCallEnv.summarize`.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

from ..base import EnvState, EvalRecord, Transition, mean_or_none, scalar_reward
from . import prompts as P
from .bfcl_decode import decode_bfcl
from .calls import FORMATS, parse_calls
from .reward import RewardWeights, reward_weights, score_team, team_exact

ARG_KEYS = ("role_mode", "call_format", "reward", "prompt", "scoring")
SCORINGS = ("lenient", "bfcl")
EXACTS = ("exact_bfcl", "exact_lenient")


class ToolCallEnv:
    """One-turn team function calling (see the module docstring).

    Args:
        name: the registered name (for messages).
        num_agents: N >= 1.
        role_mode: ``self_select`` | ``split_by_order`` | ``same_prompt``.
        call_format: ``python`` (one call per line) | ``python_list`` (BFCL's ``[f(a=1), g(b=2)]``) |
            ``json`` (BFCL's ``function``/``parameters`` objects) | ``auto`` (asks for Python, reads either).
        weights: reward weights.
        ordered: exact match in order (flattened multi-turn) instead of as a set.
        template: prompt template with ``{role}``, ``{functions}``, ``{request}``, ``{format}``
            (and optionally ``{num_agents}``).
        scoring: ``lenient`` (the reward reads comarl's forgiving parse) | ``bfcl`` (the reward reads
            the calls BFCL's decoder gets; a response it cannot decode has no call).
    """

    max_turns = 1

    def __init__(self, name: str, num_agents: int, role_mode: str, call_format: str, weights: RewardWeights,
                 ordered: bool, template: str = P.TEMPLATE, scoring: str = "lenient"):
        self.name = name
        self.scoring = scoring
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

    @property
    def bfcl_format(self) -> str:
        """How BFCL decodes the answers: ``json`` for the JSON format, else Python."""
        return "json" if self.call_format == "json" else "python"

    def score(self, item: Mapping[str, Any], responses: Sequence[str]) -> tuple[float, dict[str, float]]:
        """Reward and metrics of one joint response; ``exact`` is the scoring mode's verdict,
        ``exact_lenient`` and ``exact_bfcl`` the two readings' verdicts."""
        if len(responses) != self.num_agents:
            raise ValueError(f"{self.name}: joint action has {len(responses)} responses, "
                             f"environment has {self.num_agents} agents")
        names = [f["name"] for f in item["function"]]
        readings = {"lenient": [parse_calls(r, self.call_format, names) for r in responses],
                    "bfcl": [decode_bfcl(r, self.bfcl_format) for r in responses]}
        used = readings[self.scoring]
        reward, metrics = score_team([p.calls for p in used], [p.ok for p in used], item["ground_truth"],
                                     item["function"], self.weights, self.ordered)
        for mode, parsed in readings.items():
            metrics[f"exact_{mode}"] = metrics["exact"] if mode == self.scoring else float(
                team_exact([p.calls for p in parsed], item["ground_truth"], item["function"], self.ordered))
        metrics["bfcl_decode_fail"] = sum(not p.ok for p in readings["bfcl"]) / len(responses)
        return reward, metrics

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for state, resp in zip(states, responses, strict=True):
            reward, metrics = self.score(state.item, resp)
            out.append(Transition(reward, True, None, metrics))
        return out

    def summarize(self, records: Sequence[EvalRecord]) -> dict[str, Any]:
        """``comarl eval`` summary.

        Keys: ``items``, ``samples``, ``scoring`` (the reading the reward used), ``exact_bfcl``
        (share of exact samples with each response decoded as BFCL's prompting handlers do: the
        number BFCL would give; overall and ``by_category``), ``exact_lenient`` (the same with
        comarl's lenient parser), ``exact`` (the scoring mode's), ``exact_any`` (share of items with
        an exact sample among their n, scoring mode), ``reward`` (mean), ``terms`` (mean of each
        reward term) and ``agent_call_share`` (agent i's distinct calls / all agents' distinct calls).
        """
        by_cat: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in ("exact", *EXACTS)}
        every: dict[str, list[float]] = {m: [] for m in ("exact", *EXACTS)}
        any_exact, rewards = [], []
        terms: dict[str, list[float]] = defaultdict(list)
        calls = [0.0] * self.num_agents
        for rec in records:
            hits = []
            for tr in rec.transitions:
                m = tr.metrics
                hits.append(m["exact"])
                for key in every:
                    every[key].append(m[key])
                    by_cat[key][str(rec.item.get("category", "unknown"))].append(m[key])
                rewards.append(scalar_reward(tr.reward, self.name))
                for k in ("parse", "name_f1", "args", "count", "cross_duplicate", "repeated", "lazy", "unbalanced"):
                    terms[k].append(m[k])
                for i in range(self.num_agents):
                    calls[i] += m[f"calls_agent{i}"]
            any_exact.append(float(any(hits)))
        total = sum(calls)
        exact = {key: {"overall": mean_or_none(v),
                       "by_category": {c: mean_or_none(x) for c, x in sorted(by_cat[key].items())}}
                 for key, v in every.items()}
        return {
            "items": len(records), "samples": len(every["exact"]), "num_agents": self.num_agents,
            "role_mode": self.role_mode, "scoring": self.scoring, **exact,
            "exact_any": mean_or_none(any_exact),
            "reward": {"mean": mean_or_none(rewards), "max_possible": self.weights.max_reward()},
            "terms": {k: mean_or_none(v) for k, v in terms.items()},
            "agent_call_share": [c / total if total else None for c in calls],
        }

    def render_table(self, summary: Mapping[str, Any]) -> str:
        """A plain-text table of :meth:`summarize`: both exact matches per category and overall
        (BFCL's decoding first), and the agents' call shares."""
        bfcl, lenient = summary["exact_bfcl"], summary["exact_lenient"]
        rows = [(c, v, lenient["by_category"].get(c)) for c, v in bfcl["by_category"].items()]
        rows.append(("overall", bfcl["overall"], lenient["overall"]))
        width = max(len(c) for c, _, _ in rows)
        lines = [f"{'category':{width}s}  BFCL exact  lenient exact",
                 *(f"{c:{width}s}  {_pct(b):>10s}  {_pct(x):>13s}" for c, b, x in rows),
                 "BFCL exact: responses decoded as BFCL's prompting handlers do (the benchmark's number); "
                 "lenient: comarl's forgiving parser", f"reward reads: {summary['scoring']}"]
        shares = ", ".join(f"agent{i} {_pct(v)}" for i, v in enumerate(summary["agent_call_share"]))
        lines.append(f"share of the calls: {shares}")
        return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:5.1f}%"


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
    scoring = args.get("scoring", "lenient")
    if scoring not in SCORINGS:
        raise ValueError(f"env.args.scoring: expected one of {SCORINGS}, got {scoring!r}")
    template = args.get("prompt") or P.TEMPLATE
    if not isinstance(template, str) or any("{" + k + "}" not in template
                                            for k in ("role", "functions", "request", "format")):
        raise ValueError("env.args.prompt: the template must contain {role}, {functions}, {request} and {format}")
    return ToolCallEnv(name, num_agents, role_mode, call_format, reward_weights(args.get("reward")), ordered, template,
                       scoring)
