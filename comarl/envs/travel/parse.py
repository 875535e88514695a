"""Agent output -> per-day field assignments, and the deterministic merge into one plan.

Format (stated in every prompt): one JSON object
``{"days": [{"day": 1, "<field>": "<value>", ...}, ...]}`` with ``"-"`` for
nothing; ``attraction`` may be a list of ``"Name, City"`` strings.

Repairs, only where the meaning is unambiguous: a Markdown code fence around
the JSON, text before the first ``{`` or after its matching ``}``, trailing
commas before ``}``/``]``, a bare list of day objects, numbers written as
numbers. Anything else (no JSON, two entries for one day, a day outside the
trip, a non-object day) is a parse failure, counted in the metrics.

Every text gets an answer in time linear in its length: a response longer than
``MAX_CHARS``, JSON nested deeper than ``MAX_DEPTH`` or a value longer than
``MAX_VALUE_CHARS`` (the benchmark's longest is 229 characters; the evaluator's
regexes are slow on long ones) is a parse failure too.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from .evaluate import FIELDS

MAX_CHARS = 100_000
MAX_DEPTH = 32
MAX_VALUE_CHARS = 1_000


@dataclass
class Parsed:
    """One agent's output. ``ok`` False means a parse failure (``error`` says why);
    ``values[(day, field)]`` holds every assignment, owned or not."""

    ok: bool
    values: dict[tuple[int, str], str] = field(default_factory=dict)
    error: str | None = None
    repaired: bool = False


def fence_body(text: str) -> str | None:
    """What ``re.search(r"```(?:json)?\\s*(.*?)```", text, re.S)`` captures, found with ``str.find`` (the regex
    backtracks quadratically on a fence left open): after the first three backticks, an optional ``json`` and
    whitespace, up to the next three backticks; None without them."""
    start = text.find("```")
    if start < 0:
        return None
    k = start + 3 + (4 if text.startswith("json", start + 3) else 0)
    while k < len(text) and text[k].isspace():  # \s is str.isspace
        k += 1
    end = text.find("```", k)  # none: no later start closes either (no backticks were skipped)
    return text[k:end] if end >= 0 else None


def _json_object(text: str) -> tuple[Any, bool]:
    """The first balanced JSON value starting at ``{`` or ``[``; raises ValueError."""
    if len(text) > MAX_CHARS:
        raise ValueError(f"the output is longer than {MAX_CHARS:,} characters")
    repaired = False
    t = text.strip()
    fence = fence_body(t)
    if fence is not None:
        t, repaired = fence.strip(), True
    starts = [i for i in (t.find("{"), t.find("[")) if i >= 0]
    if not starts:
        raise ValueError("no JSON object in the output")
    start = min(starts)
    depth, in_str, esc, end = 0, False, False, None
    for i in range(start, len(t)):
        c = t[i]
        if in_str:
            esc = c == "\\" and not esc
            if c == '"' and not esc:
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
        elif c in "}]":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
    if end is None:
        raise ValueError("unbalanced JSON (the output stops before the object closes)")
    body = t[start:end]
    repaired |= start > 0 or end < len(t)
    try:
        return json.loads(body), repaired
    except json.JSONDecodeError:
        fixed = re.sub(r",\s*([}\]])", r"\1", body)
        try:
            return json.loads(fixed), True
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON: {e.msg} at char {e.pos}") from None


def _value(field_name: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list) and field_name == "attraction":
        names = [str(x).strip() for x in v if str(x).strip() not in ("", "-")]
        joined = "".join(n + ";" for n in names) or "-"
        if len(joined) > MAX_VALUE_CHARS:
            raise ValueError(f"day field {field_name!r} is longer than {MAX_VALUE_CHARS:,} characters")
        return joined
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        s = str(v).strip()
        if len(s) > MAX_VALUE_CHARS:
            raise ValueError(f"day field {field_name!r} is longer than {MAX_VALUE_CHARS:,} characters")
        if field_name == "attraction" and s not in ("", "-") and not s.endswith(";"):
            s += ";"
        return s or "-"
    raise ValueError(f"day field {field_name!r} must be a string, got {type(v).__name__}")


def parse_agent(text: str, days: int) -> Parsed:
    """Parse one agent's response for a ``days``-day trip (see module docstring)."""
    try:
        obj, repaired = _json_object(text)
        if isinstance(obj, dict):
            if "days" not in obj or not isinstance(obj["days"], list):
                raise ValueError('the object has no "days" list')
            obj = obj["days"]
        values: dict[tuple[int, str], str] = {}
        seen: set[int] = set()
        for entry in obj:
            if not isinstance(entry, dict):
                raise ValueError(f"a day entry is {type(entry).__name__}, not an object")
            d = entry.get("day")
            if isinstance(d, str) and d.strip().isdigit():
                d = int(d)
            if not isinstance(d, int) or isinstance(d, bool) or not 1 <= d <= days:
                raise ValueError(f"day {d!r} is not a day of the {days}-day trip")
            if d in seen:
                raise ValueError(f"day {d} appears twice")
            seen.add(d)
            for k, v in entry.items():
                if k in FIELDS:
                    values[(d, k)] = _value(k, v)
        return Parsed(True, values, None, repaired)
    except ValueError as e:
        return Parsed(False, {}, str(e))


@dataclass
class Merged:
    """The team's plan and who did what.

    Attributes:
        plan: ``days`` dicts in the benchmark's format.
        filled: per agent, owned slots it filled (value other than ``"-"``).
        foreign: per agent, slots it wrote that another role owns (ignored in the plan).
    """

    plan: list[dict[str, Any]]
    filled: list[int]
    foreign: list[int]


def merge(parsed: Sequence[Parsed], roles: Sequence[Sequence[str]], days: int) -> Merged:
    """Each slot takes its owner's value; ``"-"`` where the owner wrote nothing."""
    owner = {f: i for i, fs in enumerate(roles) for f in fs}
    plan = []
    for d in range(1, days + 1):
        day: dict[str, Any] = {"days": d}
        for f in FIELDS:
            day[f] = parsed[owner[f]].values.get((d, f), "-") if parsed[owner[f]].ok else "-"
        plan.append(day)
    filled = [sum(1 for (_, f), v in p.values.items() if owner.get(f) == i and v != "-") for i, p in enumerate(parsed)]
    foreign = [sum(1 for (_, f), v in p.values.items() if owner.get(f) != i and v != "-") for i, p in enumerate(parsed)]
    return Merged(plan, filled, foreign)
