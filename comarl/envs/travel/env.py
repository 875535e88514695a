"""The TravelPlanner environment: N planners fill disjoint fields of one itinerary.

One turn. Agent i owns the plan fields ``roles[i]`` (default: agent 0
logistics = current city, transportation, accommodation; agent 1 daily
experience = breakfast, attraction, lunch, dinner). Each prompt holds the
query, its constraints, the route scaffold, the role's budget share and a
role-specific catalog fitted to ``catalog_chars`` (``catalog.py``). Responses
are parsed (``parse.py``), merged into the benchmark's plan format, checked
(``evaluate.py``) and scored (``reward.py``). ``summarize`` reports the
benchmark's metrics.

Two ways to hold the policies to the JSON format: ``prefill`` forces only the
opening as prompt tokens; ``structured`` declares the whole answer as a schema
(``comarl/core/schema.py``, :meth:`TravelEnv.answer_schema`): the skeleton for every
day of the query and every owned field is forced during generation and left
out of the loss, the policy writes only the values (each capped at
``slot_tokens``), and every structured answer parses.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ...core.prefill import restore, with_prefill
from ...core.schema import Schema, Slot, with_schema
from ..base import EnvState, EvalRecord, Transition, scalar_reward
from ..registry import EnvEntry, register_env
from . import catalog as C
from .data import item_query, load_items
from .evaluate import COMMONSENSE, DELIVERY, FIELDS, HARD, delivered, evaluate_plan, invented_in_day
from .parse import merge, parse_agent
from .reference import parse_reference
from .reward import TravelRewardWeights, reward_weights, team_reward

DEFAULT_ROLES = {1: (FIELDS,), 2: (C.LOGISTICS_FIELDS, C.EXPERIENCE_FIELDS)}
DEFAULT_NAMES = {1: ("planner",), 2: ("logistics", "experience")}
ARG_KEYS = ("roles", "role_names", "catalog_chars", "reward", "prefill", "structured", "slot_tokens", "delivery")
# most tokens a policy may write for one value under ``structured`` (annotated plans, characters: current city
# <= 62, transportation <= 126 with many digits, accommodation <= 77, meals <= 63, attractions <= 229)
SLOT_TOKENS = {"current_city": 24, "transportation": 64, "accommodation": 32, "breakfast": 24, "lunch": 24,
               "dinner": 24, "attraction": 64}
# the catalog groups a field's owner sees ("move A -> B", "stay City", "eat City", "see City")
CATALOG_KIND = {"transportation": "move", "accommodation": "stay", "breakfast": "eat", "lunch": "eat",
                "dinner": "eat", "attraction": "see"}
ENTITY_FIELDS = ("transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")

PROMPT = """You are the {role} planner in a team of {n} that writes one travel plan together; \
the others fill the fields you do not own.
Request: {query}
Constraints:
{constraints}
Route (follow it; "from A to B" is a travel day):
{route}
Budget: your fields may cost about ${share:,.0f} of the ${budget:,.0f} total (costs are for all {people} people).
Catalog (copy a value exactly: the text before " | "):
{catalog}
Answer with JSON only, one entry per day 1..{days}, with exactly your fields: {fields}.
Use "-" when a field needs nothing{hints}.
Example: {example}"""

HINTS = {"transportation": "; transportation only on travel days",
         "accommodation": "; no accommodation on the last day",
         "attraction": '; attraction is a list like ["Name, City", "Name, City"]',
         "breakfast": "; each restaurant at most once in the whole trip"}
STRUCTURED_HINTS = {**HINTS, "attraction": '; attraction is one string like "Name, City;Name, City;"'}
STRUCTURED_NOTE = "\nThe JSON keys and brackets are written for you: you write only each value and its closing quote."


class TravelEnv:
    """See the module docstring. Built by :func:`build`."""

    max_turns = 1

    def __init__(self, roles: Sequence[Sequence[str]], role_names: Sequence[str], catalog_chars: int,
                 weights: TravelRewardWeights, prefill: bool = False, structured: bool = False,
                 slot_tokens: Mapping[str, int] | None = None, delivery: str = "benchmark"):
        self.prefill = prefill
        self.delivery = delivery
        self.structured = structured
        self.slot_tokens = {**SLOT_TOKENS, **(slot_tokens or {})}
        self.roles = tuple(tuple(r) for r in roles)
        self.role_names = tuple(role_names)
        self.num_agents = len(self.roles)
        self.catalog_chars = catalog_chars
        self.weights = weights

    # -- prompts
    def answer_prefix(self, agent: int) -> str:
        """The forced start of agent ``agent``'s JSON when ``prefill`` is on ("" otherwise):
        the skeleton through its first value's opening quote."""
        return f'{{"days": [{{"day": 1, "{self.roles[agent][0]}": "' if self.prefill else ""

    def answer_schema(self, agent: int, days: int) -> Schema:
        """Agent ``agent``'s whole answer for a ``days``-day trip: one object per day with its owned fields,
        each value a slot of ``slot_tokens[field]`` tokens closed by a quote, e.g. for one logistics day
        ``{"days": [{"day": 1, "current_city": "`` SLOT ``, "transportation": "`` SLOT ``, "accommodation": "``
        SLOT ``}]}``."""
        parts: list = []
        text = '{"days": ['
        for d in range(1, days + 1):
            text += ("" if d == 1 else ", ") + f'{{"day": {d}, '
            for n, f in enumerate(self.roles[agent]):
                parts += [text + ("" if n == 0 else ", ") + f'"{f}": "', Slot(self.slot_tokens[f])]
                text = ""
            text = "}"
        return Schema((*parts, text + "]}"))
    def reset(self, item: Mapping[str, Any]) -> EnvState:
        if "reference" not in item or "query" not in item:
            raise KeyError(f"travelplanner: item lacks 'reference'/'query'; build items with the env's load_items "
                           f"(fields: {sorted(item)})")
        q, ref = item_query(item), parse_reference(item["reference"])
        route = C.route_scaffold(q, ref)
        floors = C.cost_floors(q, ref, route)
        shares = C.budget_split(q.budget, [sum(floors[f] for f in fields) for fields in self.roles])
        prompts, dropped = [], []
        for i, fields in enumerate(self.roles):
            kinds = {CATALOG_KIND[f] for f in fields if f in CATALOG_KIND}
            lines = (C.logistics_lines(q, ref, route) if kinds & {"move", "stay"} else []) + \
                    (C.experience_lines(q, ref, route) if kinds & {"eat", "see"} else [])
            kept, n_drop = C.fit([ln for ln in lines if ln.group.split()[0] in kinds], self.catalog_chars)
            dropped.append(n_drop)
            example = {"days": [{"day": 1, **{f: "..." for f in fields}}, {"day": 2, **{f: "..." for f in fields}}]}
            prompts.append(PROMPT.format(
                role=self.role_names[i], n=self.num_agents, query=item["query"], constraints=q.describe(),
                route="\n".join(f"Day {r.day}: {r.current_city}" for r in route), share=shares[i], budget=q.budget,
                people=q.people, catalog=C.render(kept) or "(nothing)", days=q.days, fields=", ".join(fields),
                hints="".join((STRUCTURED_HINTS if self.structured else HINTS).get(f, "") for f in fields),
                example=json.dumps(example)) + (STRUCTURED_NOTE if self.structured else ""))
        if self.structured:
            prompts = [with_schema(p, self.answer_schema(i, q.days)) for i, p in enumerate(prompts)]
        else:
            prompts = [with_prefill(p, self.answer_prefix(i)) for i, p in enumerate(prompts)]
        return EnvState(item=item, prompts=tuple(prompts), info={"catalog_dropped": tuple(dropped)})

    # -- scoring
    def score(self, item: Mapping[str, Any], responses: Sequence[str],
              dropped: Sequence[int] = ()) -> tuple[float, dict[str, float]]:
        """Team reward and metrics of one joint response (the policies' completions; with ``prefill``
        the forced opening is put back in front of each before parsing)."""
        if len(responses) != self.num_agents:
            raise ValueError(f"travelplanner: joint action has {len(responses)} responses, "
                             f"env has {self.num_agents} agents")
        q, ref = item_query(item), parse_reference(item["reference"])
        parsed = [parse_agent(restore(self.answer_prefix(i), r), q.days) for i, r in enumerate(responses)]
        m = merge(parsed, self.roles, q.days)
        verdict = evaluate_plan(q, m.plan, ref, self.delivery)
        filled = invented = 0
        grounded_by_agent = [0] * self.num_agents
        owner = {f: i for i, fs in enumerate(self.roles) for f in fs}
        for day in m.plan:
            for f in ENTITY_FIELDS:
                if day[f] != "-":
                    filled += 1
                    bad = bool(invented_in_day({"current_city": day["current_city"], f: day[f]}, ref))
                    invented += bad
                    grounded_by_agent[owner[f]] += not bad
        lc = q.local_constraints()
        applicable = ["budget"] + [k for k, key in (("room_rule", "house rule"), ("room_type", "room type"),
                                                    ("cuisine", "cuisine"), ("transportation", "transportation"))
                                   if lc[key] is not None]
        value, terms = team_reward(self.weights, parsed=[p.ok for p in parsed], filled_values=filled,
                                   invented_values=invented, verdict=verdict, applicable_hard=applicable,
                                   budget=q.budget, foreign_slots=sum(m.foreign), total_slots=q.days * len(FIELDS),
                                   filled_per_agent=m.filled)
        metrics = {f"travel/{k}": float(v) for k, v in terms.items()}
        metrics["travel/delivered"] = float(delivered(m.plan, self.delivery))
        for k in COMMONSENSE:
            metrics[f"commonsense/{k}"] = float(bool(verdict.commonsense[k][0]))
        for k in HARD:
            metrics[f"hard_applies/{k}"] = float(k in applicable)
            metrics[f"hard/{k}"] = float(k in applicable and verdict.hard is not None and bool(verdict.hard[k][0]))
        metrics["commonsense_pass"] = float(verdict.commonsense_pass)
        metrics["hard_pass"] = float(verdict.hard_pass)
        metrics["final_pass"] = float(verdict.final_pass)
        for i, p in enumerate(parsed):
            slots = q.days * len(self.roles[i])
            metrics[f"agent{i}/parse_fail"] = float(not p.ok)
            metrics[f"agent{i}/repaired"] = float(p.repaired)
            metrics[f"agent{i}/filled"] = m.filled[i] / slots
            ent = sum(1 for f in self.roles[i] if f in ENTITY_FIELDS) * q.days
            metrics[f"agent{i}/grounded"] = grounded_by_agent[i] / ent if ent else 0.0
            metrics[f"agent{i}/foreign"] = float(m.foreign[i])
            if i < len(dropped):
                metrics[f"agent{i}/catalog_dropped"] = float(dropped[i])
        return value, metrics

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for state, resp in zip(states, responses, strict=True):
            value, metrics = self.score(state.item, resp, state.info.get("catalog_dropped", ()))
            out.append(Transition(value, True, None, metrics))
        return out

    # -- evaluation
    def summarize(self, records: Sequence[EvalRecord]) -> dict[str, Any]:
        """The benchmark's metrics over every sampled joint response.

        Keys: ``samples``, ``delivery_rate``, ``commonsense_micro`` (passed
        commonsense checks / 8 per sample), ``commonsense_macro`` (share passing
        all 8), ``hard_micro`` (passed / applicable hard checks),
        ``hard_macro``, ``final_pass_rate``, ``per_check`` (pass rate of each
        check over the samples it applies to), ``roles`` (per role: share of its
        slots filled and grounded, parse-failure rate, catalog entries dropped),
        ``reward_mean``, ``max_reward``.
        """
        ms = [t.metrics for r in records for t in r.transitions]
        rewards = [scalar_reward(t.reward, "travelplanner") for r in records for t in r.transitions]
        n = len(ms)
        if not n:
            return {"samples": 0}

        def mean(key):
            return sum(m.get(key, 0.0) for m in ms) / n

        applies = {k: sum(m[f"hard_applies/{k}"] for m in ms) for k in HARD}
        per_check = {k: mean(f"commonsense/{k}") for k in COMMONSENSE}
        per_check.update({k: (sum(m[f"hard/{k}"] for m in ms) / applies[k] if applies[k] else None) for k in HARD})
        total_hard = sum(applies.values())
        return {
            "samples": n, "items": len(records), "num_agents": self.num_agents,
            "delivery_rate": mean("travel/delivered"),
            "commonsense_micro": sum(m[f"commonsense/{k}"] for m in ms for k in COMMONSENSE) / (len(COMMONSENSE) * n),
            "commonsense_macro": mean("commonsense_pass"),
            "hard_micro": sum(m[f"hard/{k}"] for m in ms for k in HARD) / total_hard if total_hard else None,
            "hard_macro": mean("hard_pass"),
            "final_pass_rate": mean("final_pass"),
            "per_check": per_check,
            "roles": {name: {"fields": list(self.roles[i]), "filled": mean(f"agent{i}/filled"),
                             "grounded": mean(f"agent{i}/grounded"), "parse_fail": mean(f"agent{i}/parse_fail"),
                             "catalog_dropped": mean(f"agent{i}/catalog_dropped")}
                      for i, name in enumerate(self.role_names)},
            "reward_mean": sum(rewards) / n, "max_reward": self.weights.max_reward,
        }

    @staticmethod
    def render_table(summary: Mapping[str, Any]) -> str:
        """``summarize`` output as a plain-text table."""
        if not summary.get("samples"):
            return "travelplanner: no samples"

        def pct(v):
            return "  n/a" if v is None else f"{100 * v:5.1f}%"

        rows = [("delivery rate", summary["delivery_rate"]), ("commonsense micro", summary["commonsense_micro"]),
                ("commonsense macro", summary["commonsense_macro"]), ("hard micro", summary["hard_micro"]),
                ("hard macro", summary["hard_macro"]), ("final pass rate", summary["final_pass_rate"])]
        rows += [(f"  {k}", v) for k, v in summary["per_check"].items()]
        lines = [f"travelplanner: {summary['samples']} samples over {summary['items']} items",
                 f"{'metric':<36}{'value':>8}"] + [f"{k:<36}{pct(v):>8}" for k, v in rows]
        lines.append(f"{'role':<14}{'filled':>8}{'grounded':>10}{'parse fail':>12}{'dropped':>9}")
        for name, r in summary["roles"].items():
            lines.append(f"{name:<14}{pct(r['filled']):>8}{pct(r['grounded']):>10}{pct(r['parse_fail']):>12}"
                         f"{r['catalog_dropped']:>9.1f}")
        lines.append(f"reward mean {summary['reward_mean']:.3f} (max {summary['max_reward']:.2f})")
        return "\n".join(lines)


def build(num_agents: int = 2, **args: Any) -> TravelEnv:
    """The environment from ``env.args``: ``roles`` (one field list per agent; every plan field exactly
    once), ``role_names``, ``catalog_chars`` (per-agent catalog budget, default 6000), ``reward`` (weights),
    ``prefill`` (force the JSON opening, see :meth:`TravelEnv.answer_prefix` and ``comarl.core.prefill``),
    ``structured`` (force the whole JSON skeleton, values sampled; :meth:`TravelEnv.answer_schema`),
    ``slot_tokens`` (with ``structured``: most tokens per value, one int for every field or a
    ``{field: int}`` mapping over the defaults ``SLOT_TOKENS``), ``delivery`` (``benchmark``, the default:
    any non-empty plan is delivered and checked, as ``eval.py`` does; ``comarl_strict``: a plan with no
    value at all is not delivered and passes nothing; see :func:`evaluate.delivered`).

    Raises:
        ValueError: naming the bad key.
    """
    unknown = set(args) - set(ARG_KEYS)
    if unknown:
        raise ValueError(f"env.args: unknown key(s) {sorted(unknown)} for travelplanner; known: {', '.join(ARG_KEYS)}")
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
        raise ValueError(f"travelplanner: num_agents must be a positive integer, got {num_agents!r}")
    roles = args.get("roles")
    if roles is None:
        if num_agents not in DEFAULT_ROLES:
            raise ValueError(f"travelplanner: no default roles for {num_agents} agents; set env.args.roles "
                             f"(one list of fields per agent from {list(FIELDS)})")
        roles = DEFAULT_ROLES[num_agents]
    if isinstance(roles, str) or not isinstance(roles, Sequence) or len(roles) != num_agents:
        raise ValueError(f"env.args.roles: expected {num_agents} field lists (one per agent), got {roles!r}")
    seen: list[str] = []
    for i, fs in enumerate(roles):
        if isinstance(fs, str) or not isinstance(fs, Sequence) or not fs:
            raise ValueError(f"env.args.roles[{i}]: expected a non-empty list of fields, got {fs!r}")
        for f in fs:
            if f not in FIELDS:
                raise ValueError(f"env.args.roles[{i}]: unknown field {f!r}; fields: {', '.join(FIELDS)}")
        seen += list(fs)
    dup = sorted({f for f in seen if seen.count(f) > 1})
    missing = [f for f in FIELDS if f not in seen]
    if dup or missing:
        raise ValueError(f"env.args.roles: every field must be owned by exactly one agent "
                         f"(twice: {dup or 'none'}; unowned: {missing or 'none'})")
    names = args.get("role_names") or (DEFAULT_NAMES.get(num_agents) if args.get("roles") is None else None) \
        or tuple(f"agent{i}" for i in range(num_agents))
    if len(names) != num_agents:
        raise ValueError(f"env.args.role_names: expected {num_agents} names, got {names!r}")
    chars = args.get("catalog_chars", 6000)
    if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
        raise ValueError(f"env.args.catalog_chars: expected a non-negative integer, got {chars!r}")
    prefill = args.get("prefill", False)
    if not isinstance(prefill, bool):
        raise ValueError(f"env.args.prefill: expected true or false, got {prefill!r}")
    structured = args.get("structured", False)
    if not isinstance(structured, bool):
        raise ValueError(f"env.args.structured: expected true or false, got {structured!r}")
    if structured and prefill:
        raise ValueError("env.args: structured and prefill exclude each other (structured already forces the "
                         "opening, and the rest of the skeleton); set one")
    delivery = args.get("delivery", "benchmark")
    if delivery not in DELIVERY:
        raise ValueError(f"env.args.delivery: expected one of {DELIVERY}, got {delivery!r}")
    return TravelEnv(roles, names, chars, reward_weights(args.get("reward")), prefill, structured,
                     _slot_tokens(args.get("slot_tokens")), delivery)


def _slot_tokens(value: Any) -> dict[str, int]:
    """``env.args.slot_tokens``: None (defaults), one positive int for every field, or ``{field: int}``."""
    def ok(n):
        return isinstance(n, int) and not isinstance(n, bool) and n >= 1

    if value is None:
        return {}
    if ok(value):
        return {f: value for f in FIELDS}
    if isinstance(value, Mapping):
        for f, n in value.items():
            if f not in FIELDS:
                raise ValueError(f"env.args.slot_tokens: unknown field {f!r}; fields: {', '.join(FIELDS)}")
            if not ok(n):
                raise ValueError(f"env.args.slot_tokens.{f}: expected a positive integer, got {n!r}")
        return dict(value)
    raise ValueError(f"env.args.slot_tokens: expected a positive integer or a {{field: integer}} mapping, "
                     f"got {value!r}")


register_env("travelplanner", EnvEntry(build, load_items, "TravelPlanner: logistics + daily-experience planners, "
                                                          "scored by the benchmark's constraints"))
