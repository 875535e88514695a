"""TravelPlanner's constraint checks on one plan, with the reference information as the sandbox.

A plan is the benchmark's format: a list of day dicts with ``days,
current_city, transportation, breakfast, attraction, lunch, dinner,
accommodation``; ``"-"`` means nothing; entities are written ``"Name, City"``;
attractions are ``"A, City;B, City;"``; a travel day's city is ``"from A to B"``.

Each check returns ``(passed, reason)``; ``passed`` is None when a hard
constraint does not apply to the query. The definitions follow
``osunlp/TravelPlanner`` ``evaluation/commonsense_constraint.py`` and
``hard_constraint.py``, with these deliberate departures (docs/travel.md):
the sandbox is the query's reference information, not the whole database; a
city is valid when the reference has a section for it (the benchmark reads a
city/state list that is not shipped offline); "within current city" checks the
city *name* on stay days (the original iterates over the characters of the
string, which almost always passes); a cuisine check skips only the meal
eaten in the origin city (the original skips the rest of the day). Delivery
follows ``eval.py`` (any non-empty plan is checked) unless the comarl-only
``comarl_strict`` rule is asked for (:func:`delivered`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .query import TravelQuery
from .reference import Reference

FIELDS = ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")
MEALS = ("breakfast", "lunch", "dinner")
COMMONSENSE = ("within_sandbox", "complete_information", "within_current_city", "reasonable_city_route",
               "diverse_restaurants", "diverse_attractions", "non_conflicting_transportation",
               "valid_accommodation")
HARD = ("budget", "room_rule", "room_type", "cuisine", "transportation")

Check = tuple[bool | None, str | None]
Plan = Sequence[Mapping[str, Any]]


def empty(value: Any) -> bool:
    return value is None or str(value).strip() in ("", "-")


def from_to(text: str) -> tuple[str | None, str | None]:
    """``"from A to B, ..." -> ("A", "B")`` (B ends at a comma or whitespace-delimited end)."""
    m = re.search(r"from\s+(.+?)\s+to\s+([^,]+)(?=[,\s]|$)", text)
    return (m.group(1), m.group(2)) if m else (None, None)


def before_paren(s: str) -> str:
    """The text before a ``(...)`` group: ``"Bemidji(Minnesota)" -> "Bemidji"``. The benchmark's
    ``re.search(r"^(.*?)\\([^)]*\\)", s)``, read without backtracking (it was quadratic on ``((((``): the
    first ``(`` of the first line, when a ``)`` follows it anywhere."""
    first_line = s.split("\n", 1)[0]
    i = first_line.find("(")
    return s[:i] if i >= 0 and s.find(")", i) >= 0 else s


def name_city(value: str) -> tuple[str, str]:
    """``"Coco Bambu, Rockford" -> ("Coco Bambu", "Rockford")``; the city is after the last comma.

    The benchmark's ``re.search(r"(.*?),\\s*([^,]+)(\\(\\w[\\w\\s]*\\))?$", value)``, read without
    backtracking (it was cubic on long values with many commas): the match needs the last comma followed
    by at least one character; the name runs from the start of that comma's line, the city is the rest."""
    comma = value.rfind(",")
    if comma < 0 or comma == len(value) - 1:
        return "-", "-"
    name = value[value.rfind("\n", 0, comma) + 1:comma]
    return name.strip(), before_paren(value[comma + 1:].strip()).strip()


def attractions(value: str) -> list[str]:
    """``"A, X;B, X;" -> ["A, X", "B, X"]`` (the text after the last ``;`` is ignored, as in the benchmark)."""
    return str(value).split(";")[:-1]


def day_cities(day: Mapping[str, Any]) -> list[str]:
    cc = str(day.get("current_city", ""))
    if "from" in cc:
        a, b = from_to(cc)
        return [before_paren(a or ""), before_paren(b or "")]
    return [before_paren(cc)]


def transport_mode(text: str) -> str | None:
    t = text.lower()
    return "Taxi" if "taxi" in t else "Self-driving" if "self-driving" in t else "Flight" if "flight" in t else None


def days_of(q: TravelQuery, plan: Plan) -> list[Mapping[str, Any]]:
    return [d if isinstance(d, Mapping) else {} for d in list(plan)[: q.days]]


# -- commonsense ------------------------------------------------------------------------------------------
def reasonable_city_route(q: TravelQuery, plan: Plan, ref: Reference) -> Check:
    cities: list[str] = []
    for i, day in enumerate(days_of(q, plan)):
        cc = str(day.get("current_city", ""))
        if "from" in cc:
            a, b = (before_paren(x or "") for x in from_to(cc))
            if i == 0 and a != q.org:
                return False, f"the first day's city should be {q.org}"
            cities += [a, b]
        else:
            cities.append(before_paren(cc))
    if not cities or cities[0] != cities[-1]:
        return False, "the trip should be a closed circle"
    if not valid_city_sequence(cities):
        return False, "the city sequence is invalid"
    known = set(ref.cities)
    for i, c in enumerate(cities):
        if i not in (0, len(cities) - 1) and c not in known:
            return False, f"{c} is not a valid city{' in ' + q.dest if q.days > 3 else ''}"
    return True, None


def valid_city_sequence(cities: Sequence[str]) -> bool:
    """At least 3 entries; every middle city appears in one consecutive run of length >= 2."""
    if len(cities) < 3:
        return False
    seen: set[str] = set()
    i = 0
    while i < len(cities):
        c = cities[i]
        if c in seen and i not in (0, len(cities) - 1):
            return False
        n = 0
        while i < len(cities) and cities[i] == c:
            n += 1
            i += 1
        if n == 1 and 0 < i - 1 < len(cities) - 1:
            return False
        seen.add(c)
    return True


def diverse_restaurants(q: TravelQuery, plan: Plan) -> Check:
    seen: set[Any] = set()
    for i, day in enumerate(days_of(q, plan)):
        for meal in MEALS:
            v = day.get(meal)
            if not empty(v):
                if v in seen:
                    return False, f"the {meal} restaurant of day {i + 1} is repeated"
                seen.add(v)
    return True, None


def diverse_attractions(q: TravelQuery, plan: Plan) -> Check:
    seen: set[str] = set()
    for i, day in enumerate(days_of(q, plan)):
        if not empty(day.get("attraction")):
            for a in attractions(day["attraction"]):
                if a in seen:
                    return False, f"the attraction {a!r} of day {i + 1} is repeated"
                seen.add(a)
    return True, None


def non_conflicting_transportation(q: TravelQuery, plan: Plan) -> Check:
    days = days_of(q, plan)
    if not days or empty(days[0].get("transportation")):
        return False, "the transportation of day 1 should not be empty"
    modes = {transport_mode(str(d["transportation"])) for d in days if not empty(d.get("transportation"))}
    if "Self-driving" in modes and ({"Flight", "Taxi"} & modes):
        return False, "self-driving is mixed with flights or taxis"
    return True, None


def within_current_city(q: TravelQuery, plan: Plan) -> Check:
    for i, day in enumerate(days_of(q, plan)):
        cities = day_cities(day)
        if not empty(day.get("transportation")):
            if not all(c in str(day["transportation"]) for c in cities):
                return False, f"the transportation of day {i + 1} does not connect its cities"
        for meal in MEALS:
            if not empty(day.get(meal)) and not any(c in str(day[meal]) for c in cities):
                return False, f"the {meal} of day {i + 1} is not in the day's city"
        if not empty(day.get("attraction")):
            for a in attractions(day["attraction"]):
                if not any(c in a for c in cities):
                    return False, f"the attraction {a!r} of day {i + 1} is not in the day's city"
        if not empty(day.get("accommodation")) and cities[-1] not in str(day["accommodation"]):
            return False, f"the accommodation of day {i + 1} is not in the city of the night"
    return True, None


def within_sandbox(q: TravelQuery, plan: Plan, ref: Reference) -> Check:
    """Every flight, route, restaurant, attraction and accommodation exists in the reference."""
    for i, day in enumerate(days_of(q, plan)):
        why = invented_in_day(day, ref)
        if why:
            return False, f"day {i + 1}: {why[0]}"
    return True, None


def transport_leg(day: Mapping[str, Any]) -> tuple[str, str | None, str | None] | None:
    """The day's transportation text with its origin and destination (from the text, else from
    ``current_city``), as the benchmark reads them; None when the day has no transportation."""
    tr = day.get("transportation")
    if empty(tr):
        return None
    tr = str(tr)
    a, b = from_to(tr)
    if a is None or b is None:
        a, b = from_to(str(day.get("current_city", "")))
    return tr, a, b


def invented_in_day(day: Mapping[str, Any], ref: Reference) -> list[str]:
    """Descriptions of the day's values that the reference does not hold (empty list: all grounded)."""
    bad = []
    leg = transport_leg(day)
    if leg is not None:
        tr, a, b = leg
        a, b = before_paren(a or "-"), before_paren(b or "-")
        if "flight number" in tr.lower():
            num = tr.split("Flight Number: ")[1].split(",")[0] if "Flight Number: " in tr else ""
            if ref.flight(num, a, b) is None:
                bad.append(f"flight {num!r} from {a} to {b} is not in the reference")
        elif "self-driving" in tr.lower() or "taxi" in tr.lower():
            mode = "self-driving" if "self-driving" in tr.lower() else "taxi"
            if ref.ground.get((mode, a, b)) is None:
                bad.append(f"{mode} from {a} to {b} is not in the reference")
    for meal in MEALS:
        v = day.get(meal)
        if not empty(v) and ref.restaurant(*name_city(str(v))) is None:
            bad.append(f"{meal} {v!r} is not in the reference")
    if not empty(day.get("attraction")):
        for a in attractions(day["attraction"]):
            if ref.attraction(*name_city(a)) is None:
                bad.append(f"attraction {a!r} is not in the reference")
    v = day.get("accommodation")
    if not empty(v) and ref.accommodation(*name_city(str(v))) is None:
        bad.append(f"accommodation {v!r} is not in the reference")
    return bad


def valid_accommodation(q: TravelQuery, plan: Plan, ref: Reference) -> Check:
    """Each run of consecutive nights in one place is at least its minimum nights."""
    values = [day.get("accommodation") for day in days_of(q, plan)]
    if any(v is None for v in values):
        return False, "no accommodation information"
    runs: list[list[Any]] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    for v, n in runs:
        if empty(v):
            continue
        name, city = name_city(str(v))
        row = ref.accommodation(name, city)
        if ref.accommodation_matches(name, city) == 1 and row and n < float(row.get("minimum nights") or 0):
            return False, f"{v!r} needs {int(row['minimum nights'])} nights, the plan has {n}"
    return True, None


def complete_information(q: TravelQuery, plan: Plan) -> Check:
    days = days_of(q, plan)
    unfilled = "You don't need to fill in the information for this or later days."
    filled_days = [d for d in days if d and d.get("current_city") != unfilled]
    if len(filled_days) != q.days:
        return False, f"the plan should have {q.days} days"
    visited: set[str] = set()
    for i, day in enumerate(days):
        cc = str(day.get("current_city", ""))
        if "from" in cc:
            a, b = (before_paren(x or "") for x in from_to(cc))
            if i == 0 and a != q.org:
                return False, f"the first day's city should be {q.org}"
            visited |= {a, b}
        else:
            visited.add(before_paren(cc))
    visited.discard(q.org)
    if len(visited) != q.visiting_city_number:
        return False, f"the plan should visit {q.visiting_city_number} city/cities, it visits {len(visited)}"
    filled = 0
    for i, day in enumerate(days):
        for f in ("transportation", "breakfast", "lunch", "dinner", "attraction", "accommodation"):
            if f not in day:
                return False, f"no {f} field on day {i + 1}"
        cc = str(day.get("current_city", ""))
        if ("from " in cc or "to " in cc) and empty(day["transportation"]):
            return False, f"day {i + 1} is a travel day without transportation"
        if "from " not in cc and " to " not in cc and empty(day["attraction"]):
            return False, f"day {i + 1} has no attraction"
        if i != q.days - 1 and empty(day["accommodation"]):
            return False, f"day {i + 1} has no accommodation"
        if "from " not in cc and any(empty(day[m]) for m in MEALS):
            return False, f"day {i + 1} misses a meal"
        filled += sum(1 for v in day.values() if v and v != "-")
    if filled / (6 * q.days) < 0.5:
        return False, "more than half of the information is absent"
    return True, None


# -- hard -----------------------------------------------------------------------------------------------
def ground_cost(ref: Reference, mode: str, a: str, b: str) -> float:
    """Cost of one self-driving or taxi leg ``a -> b``, read as the benchmark's
    ``GoogleDistanceMatrix.run_for_evaluation`` does: each city cut before its ``(State)``
    (``"Bemidji(Minnesota)" -> "Bemidji"``), then an exact match; 0 when the reference has no
    such leg or no cost for it (the benchmark adds None there and stops with a TypeError)."""
    return ref.ground.get((mode, before_paren(a), before_paren(b))) or 0.0


def total_cost(q: TravelQuery, plan: Plan, ref: Reference) -> float:
    """The plan's cost for the whole group, as the benchmark sums it (unknown entities cost 0)."""
    cost = 0.0
    for day in days_of(q, plan):
        leg = transport_leg(day)
        if leg is not None:
            tr, a, b = leg
            if a is not None and b is not None:
                if "flight number" in tr.lower() and "Flight Number: " in tr:
                    num = tr.split("Flight Number: ")[1].split(",")[0]
                    row = next((f for f in ref.flights if f["Flight Number"] == num), None)
                    if row:
                        cost += float(row["Price"]) * q.people
                elif "self-driving" in tr.lower():
                    cost += ground_cost(ref, "self-driving", a, b) * math.ceil(q.people / 5)
                elif "taxi" in tr.lower():
                    cost += ground_cost(ref, "taxi", a, b) * math.ceil(q.people / 4)
        for meal in MEALS:
            if not empty(day.get(meal)):
                row = ref.restaurant(*name_city(str(day[meal])))
                if row:
                    cost += float(row["Average Cost"]) * q.people
        if not empty(day.get("accommodation")):
            row = ref.accommodation(*name_city(str(day["accommodation"])))
            if row:
                cost += float(row["price"]) * math.ceil(q.people / float(row["maximum occupancy"]))
    return cost


def _accommodation_rows(q: TravelQuery, plan: Plan, ref: Reference):
    for day in days_of(q, plan):
        if not empty(day.get("accommodation")):
            row = ref.accommodation(*name_city(str(day["accommodation"])))
            if row:
                yield row


def room_rule(q: TravelQuery, plan: Plan, ref: Reference) -> Check:
    if q.house_rule is None:
        return None, None
    forbidden = {"smoking": "No smoking", "parties": "No parties", "children under 10": "No children under 10",
                 "visitors": "No visitors", "pets": "No pets"}[q.house_rule]
    for row in _accommodation_rows(q, plan, ref):
        if forbidden in str(row.get("house_rules", "")):
            return False, f"{row['NAME']!r} does not allow {q.house_rule}"
    return True, None


ROOM_TYPE_OK = {"not shared room": lambda t: t != "Shared room", "shared room": lambda t: t == "Shared room",
                "private room": lambda t: t == "Private room", "entire room": lambda t: t == "Entire home/apt"}


def room_type(q: TravelQuery, plan: Plan, ref: Reference) -> Check:
    if q.room_type is None:
        return None, None
    for row in _accommodation_rows(q, plan, ref):
        if not ROOM_TYPE_OK[q.room_type](row.get("room type")):
            return False, f"{row['NAME']!r} is a {row.get('room type')}, the query wants {q.room_type}"
    return True, None


def cuisine(q: TravelQuery, plan: Plan, ref: Reference) -> Check:
    if not q.cuisine:
        return None, None
    found: set[str] = set()
    for day in days_of(q, plan):
        for meal in MEALS:
            if empty(day.get(meal)):
                continue
            name, city = name_city(str(day[meal]))
            if city == q.org:
                continue
            row = ref.restaurant(name, city)
            if row:
                found |= {c for c in q.cuisine if c in str(row.get("Cuisines", ""))}
    missing = [c for c in q.cuisine if c not in found]
    return (False, f"no {missing[0]} restaurant") if missing else (True, None)


def transportation(q: TravelQuery, plan: Plan) -> Check:
    if q.transportation is None:
        return None, None
    banned = "Flight" if q.transportation == "no flight" else "Self-driving"
    for i, day in enumerate(days_of(q, plan)):
        if not empty(day.get("transportation")) and banned in str(day["transportation"]):
            return False, f"day {i + 1} uses {banned.lower()} ({q.transportation})"
    return True, None


DELIVERY = ("benchmark", "comarl_strict")


def delivered(plan: Plan, rule: str = "benchmark") -> bool:
    """Whether a plan counts as delivered.

    ``benchmark``: any non-empty list of days, as ``eval.py`` decides (``if tested_plan['plan']``);
    a plan of nothing but ``"-"`` is delivered and checked like any other. ``comarl_strict`` (not
    the benchmark's): some day must hold some value besides its day number.
    """
    if rule not in DELIVERY:
        raise ValueError(f"delivery rule must be one of {DELIVERY}, got {rule!r}")
    if rule == "benchmark":
        return len(plan) > 0
    return any(isinstance(d, Mapping) and any(k != "days" and not empty(v) for k, v in d.items()) for d in plan)


@dataclass(frozen=True)
class Verdict:
    """All checks on one plan. ``hard`` is None when the plan is incomplete or leaves
    the sandbox (the benchmark does not run the hard checks then)."""

    commonsense: dict[str, Check]
    hard: dict[str, Check] | None
    cost: float

    @property
    def commonsense_pass(self) -> bool:
        return all(v is not False for v, _ in self.commonsense.values())

    @property
    def hard_pass(self) -> bool:
        return self.hard is not None and all(v is not False for v, _ in self.hard.values())

    @property
    def final_pass(self) -> bool:
        return self.commonsense_pass and self.hard_pass

    def failures(self) -> list[str]:
        out = [f"{k}: {why}" for k, (v, why) in self.commonsense.items() if v is False]
        out += [f"{k}: {why}" for k, (v, why) in (self.hard or {}).items() if v is False]
        return out


def evaluate_plan(q: TravelQuery, plan: Plan, ref: Reference, delivery: str = "benchmark") -> Verdict:
    """Run every commonsense and hard check on ``plan`` (see the module docstring).

    A plan that is not delivered (:func:`delivered` under the rule ``delivery``) passes no check.
    Under the benchmark's rule only an empty list is not delivered; a plan of all ``"-"`` is
    checked and passes 5 of the 8 commonsense checks, as in ``eval.py``."""
    if not delivered(plan, delivery):
        return Verdict({k: (False, "no plan delivered") for k in COMMONSENSE}, None, 0.0)
    cs = {"within_sandbox": within_sandbox(q, plan, ref), "complete_information": complete_information(q, plan),
          "within_current_city": within_current_city(q, plan),
          "reasonable_city_route": reasonable_city_route(q, plan, ref),
          "diverse_restaurants": diverse_restaurants(q, plan), "diverse_attractions": diverse_attractions(q, plan),
          "non_conflicting_transportation": non_conflicting_transportation(q, plan),
          "valid_accommodation": valid_accommodation(q, plan, ref)}
    cost = total_cost(q, plan, ref)
    hard = None
    if cs["complete_information"][0] and cs["within_sandbox"][0]:
        hard = {"budget": (cost <= q.budget, None if cost <= q.budget else f"cost {cost:.0f} > budget {q.budget:.0f}"),
                "room_rule": room_rule(q, plan, ref), "room_type": room_type(q, plan, ref),
                "cuisine": cuisine(q, plan, ref), "transportation": transportation(q, plan)}
    return Verdict(cs, hard, cost)
