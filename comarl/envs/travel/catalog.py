"""What each role sees: a route scaffold, a budget split and a compact catalog within a character budget.

A catalog line is ``value | facts``: the agent copies ``value`` (the exact text the
benchmark's plan format wants, e.g. ``"Coco Bambu, Rockford"``) into its JSON.
Lines are grouped by (kind, city) and ranked by usefulness inside a group
(entries that break a query constraint last, then cheaper first; restaurants
serving a requested cuisine first). Groups are interleaved, one line per group
per round, and lines are taken in that order until ``max_chars`` is reached, so
the least useful entries are dropped first and every city keeps some options.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .evaluate import ROOM_TYPE_OK
from .query import TravelQuery
from .reference import Reference

LOGISTICS_FIELDS = ("current_city", "transportation", "accommodation")
EXPERIENCE_FIELDS = ("breakfast", "attraction", "lunch", "dinner")
_RULE_TEXT = {"smoking": "No smoking", "parties": "No parties", "children under 10": "No children under 10",
              "visitors": "No visitors", "pets": "No pets"}


@dataclass(frozen=True)
class DayRoute:
    """Day ``day`` (1-based): a move ``origin -> city`` or a stay in ``city`` (origin None)."""

    day: int
    city: str
    origin: str | None = None

    @property
    def current_city(self) -> str:
        return f"from {self.origin} to {self.city}" if self.origin else self.city


def route_scaffold(q: TravelQuery, ref: Reference) -> list[DayRoute]:
    """The day-by-day route the reference information implies.

    Each leg happens on its flight date when the reference gives one, otherwise
    legs are spread evenly (first day, ..., last day). Days between legs are
    stays in the city reached last.
    """
    legs = ref.legs
    if not legs:
        return [DayRoute(d + 1, q.dest) for d in range(q.days)]
    on_day: dict[int, tuple[str, str]] = {}
    for k, leg in enumerate(legs):
        if leg.date in q.dates:
            d = q.dates.index(leg.date) + 1
        else:
            d = 1 + (round(k * (q.days - 1) / (len(legs) - 1)) if len(legs) > 1 else 0)
        on_day.setdefault(d, (leg.origin, leg.dest))
    out, city = [], q.org
    for d in range(1, q.days + 1):
        if d in on_day:
            origin, city = on_day[d]
            out.append(DayRoute(d, city, origin))
        else:
            out.append(DayRoute(d, city))
    return out


def nights(route: Sequence[DayRoute]) -> dict[str, int]:
    """City -> nights spent there (every day but the last ends with a night in its city)."""
    out: dict[str, int] = {}
    for r in route[:-1]:
        out[r.city] = out.get(r.city, 0) + 1
    return out


def transport_value(kind: str, row_or_text, origin: str, dest: str) -> str:
    if kind == "flight":
        r = row_or_text
        return (f"Flight Number: {r['Flight Number']}, from {origin} to {dest}, Departure Time: {r['DepTime']}, "
                f"Arrival Time: {r['ArrTime']}")
    text = str(row_or_text)
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Line:
    """One catalog entry: ``group`` ("move A -> B", "stay City", "eat City", "see City"), ``rank``
    (smaller = more useful, compared inside a group only) and the ``text`` shown."""

    group: str
    rank: tuple
    text: str


def entity_name(name: object) -> str:
    """The name as an agent should copy it: its first line (a few reference names hold line
    breaks; the benchmark matches names by substring, so the first line still matches)."""
    return str(name).split("\n")[0].strip()


def logistics_lines(q: TravelQuery, ref: Reference, route: Sequence[DayRoute]) -> list[Line]:
    """Transport options of every move of the route and the accommodations of every city."""
    lines = []
    moves = {(r.origin, r.city) for r in route if r.origin}
    for f in ref.flights:
        key = (f["OriginCityName"], f["DestCityName"])
        if key not in moves:
            continue
        bad = q.transportation == "no flight"
        v = transport_value("flight", f, *key)
        lines.append(Line(f"move {key[0]} -> {key[1]}", (bad, float(f["Price"])),
                          f"{v} | ${float(f['Price']):.0f}/person"))
    for (mode, a, b), cost in ref.ground.items():
        if cost is None or (a, b) not in moves:
            continue
        bad = q.transportation == "no self-driving" and mode == "self-driving"
        per = "car of 5" if mode == "self-driving" else "taxi of 4"
        v = transport_value(mode, ref.ground_text[(mode, a, b)], a, b)
        lines.append(Line(f"move {a} -> {b}", (bad, cost), f"{v} | ${cost:.0f}/{per}"))
    stay = nights(route)
    for city, rows in ref.accommodations.items():
        for r in rows:
            rule_bad = q.house_rule is not None and _RULE_TEXT[q.house_rule] in str(r.get("house_rules"))
            type_bad = q.room_type is not None and not ROOM_TYPE_OK[q.room_type](r.get("room type"))
            too_long = float(r.get("minimum nights") or 0) > stay.get(city, 0)
            price = float(r["price"]) * math.ceil(q.people / float(r.get("maximum occupancy") or 1))
            lines.append(Line(f"stay {city}", (rule_bad or type_bad or too_long, price),
                              f"{entity_name(r['NAME'])}, {city} | ${float(r['price']):.0f}/night, "
                              f"max {int(r['maximum occupancy'])} people | {r.get('room type')} | "
                              f"{r.get('house_rules')} | min {int(r['minimum nights'])} nights"))
    return lines


def experience_lines(q: TravelQuery, ref: Reference, route: Sequence[DayRoute]) -> list[Line]:
    """Restaurants and attractions of every destination city on the route."""
    lines = []
    cities = {r.city for r in route} | {r.origin for r in route if r.origin}
    cities.discard(q.org)
    for city in [c for c in ref.cities if c in cities]:
        for r in ref.restaurants.get(city, ()):
            hits = sum(c in str(r.get("Cuisines")) for c in q.cuisine)
            lines.append(Line(f"eat {city}", (-hits, float(r["Average Cost"])),
                              f"{entity_name(r['Name'])}, {city} | ${float(r['Average Cost']):.0f}/person | "
                              f"{r.get('Cuisines')}"))
        for k, r in enumerate(ref.attractions.get(city, ())):
            lines.append(Line(f"see {city}", (k,), f"{entity_name(r['Name'])}, {city}"))
    return lines


def fit(lines: Sequence[Line], max_chars: int) -> tuple[list[Line], int]:
    """Keep the most useful lines within ``max_chars`` (see module docstring); returns (kept, dropped count)."""
    groups: dict[str, list[Line]] = {}
    for ln in lines:
        groups.setdefault(ln.group, []).append(ln)
    for g in groups.values():
        g.sort(key=lambda ln: ln.rank)
    order = [g[i] for i in range(max((len(g) for g in groups.values()), default=0)) for g in groups.values()
             if i < len(g)]
    kept, used = [], 0
    for ln in order:
        if used + len(ln.text) + 1 > max_chars:
            continue
        kept.append(ln)
        used += len(ln.text) + 1
    keep = set(map(id, kept))
    return [ln for ln in lines if id(ln) in keep], len(lines) - len(kept)


def render(lines: Sequence[Line]) -> str:
    """Lines grouped under one heading per group, in first-seen order."""
    out, last = [], None
    first = {g: k for k, g in enumerate(dict.fromkeys(x.group for x in lines))}
    for ln in sorted(lines, key=lambda ln: first[ln.group]):
        if ln.group != last:
            out.append(f"[{ln.group}]")
            last = ln.group
        out.append(ln.text)
    return "\n".join(out)


def cost_floors(q: TravelQuery, ref: Reference, route: Sequence[DayRoute]) -> dict[str, float]:
    """Cheapest constraint-respecting spend per plan field (whole group, dollars).

    transportation: the cheapest allowed mode per move (flights per person,
    self-driving per 5 people, taxi per 4); accommodation: the cheapest allowed
    place per stay, times its nights; breakfast/lunch/dinner: a third each of
    the cheapest ``3 x stay days`` restaurants of each stay city, per person;
    current_city and attraction cost nothing.
    """
    people = q.people
    transport = 0.0
    for r in route:
        if r.origin:
            opts = [float(f["Price"]) * people for f in ref.flights
                    if (f["OriginCityName"], f["DestCityName"]) == (r.origin, r.city)
                    and q.transportation != "no flight"]
            for mode, div in (("self-driving", 5), ("taxi", 4)):
                c = ref.ground.get((mode, r.origin, r.city))
                if c is not None and not (mode == "self-driving" and q.transportation == "no self-driving"):
                    opts.append(c * math.ceil(people / div))
            transport += min(opts, default=0.0)
    stay_cost = 0.0
    for city, n in nights(route).items():
        opts = []
        for row in ref.accommodations.get(city, ()):
            if q.house_rule and _RULE_TEXT[q.house_rule] in str(row.get("house_rules")):
                continue
            if q.room_type and not ROOM_TYPE_OK[q.room_type](row.get("room type")):
                continue
            if float(row.get("minimum nights") or 0) > n:
                continue
            opts.append(float(row["price"]) * math.ceil(people / float(row.get("maximum occupancy") or 1)) * n)
        stay_cost += min(opts, default=0.0)
    meals = 0.0
    stays: dict[str, int] = {}
    for r in route:
        if not r.origin:
            stays[r.city] = stays.get(r.city, 0) + 1
    for city, d in stays.items():
        costs = sorted(float(r["Average Cost"]) for r in ref.restaurants.get(city, ()))
        meals += sum(costs[: 3 * d]) * people
    return {"current_city": 0.0, "transportation": transport, "accommodation": stay_cost, "attraction": 0.0,
            "breakfast": meals / 3, "lunch": meals / 3, "dinner": meals / 3}


def budget_split(budget: float, floors: Sequence[float]) -> tuple[float, ...]:
    """Each agent's share: its floor plus an equal part of the slack (proportional to the floors when
    they exceed the budget; equal parts when every floor is 0).

    ``budget_split(1000, (400, 200)) == (600.0, 400.0)``; ``budget_split(300, (400, 200)) == (200.0, 100.0)``.
    """
    total = sum(floors)
    if total <= budget:
        return tuple(f + (budget - total) / len(floors) for f in floors)
    return tuple(budget * f / total for f in floors) if total else tuple(budget / len(floors) for _ in floors)
