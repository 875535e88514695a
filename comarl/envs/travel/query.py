"""A TravelPlanner query as structured fields, from the hub's columns or from the query text.

The hub rows (``osunlp/TravelPlanner``) carry ``org, dest, days,
visiting_city_number, date, people_number, budget, local_constraint, level``.
The offline copy in ``shared/data/travelplanner`` holds only the query text, so
:func:`parse_query_text` reads the same fields from the sentence the benchmark
generated them from (its templates are few: "from X to Y", "N-day", "group of
N", "$1,700", "entire rooms", "no flights"...). Destinations and the origin
come from the reference information when it is given (it names every leg).
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

CUISINES = ("Chinese", "American", "Italian", "Mexican", "Indian", "Mediterranean", "French")

US_STATES = (
    "Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado", "Connecticut", "Delaware", "Florida",
    "Georgia", "Hawaii", "Idaho", "Illinois", "Indiana", "Iowa", "Kansas", "Kentucky", "Louisiana", "Maine",
    "Maryland", "Massachusetts", "Michigan", "Minnesota", "Mississippi", "Missouri", "Montana", "Nebraska",
    "Nevada", "New Hampshire", "New Jersey", "New Mexico", "New York", "North Carolina", "North Dakota", "Ohio",
    "Oklahoma", "Oregon", "Pennsylvania", "Rhode Island", "South Carolina", "South Dakota", "Tennessee", "Texas",
    "Utah", "Vermont", "Virginia", "Washington", "West Virginia", "Wisconsin", "Wyoming",
)
_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"), start=1)}
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "single": 1, "a pair": 2}


@dataclass(frozen=True)
class TravelQuery:
    """The structured constraints of one request (the benchmark's field names in comments).

    ``dest`` is a city for 3-day trips and a state for 5- and 7-day trips, as in
    the benchmark. Local constraints are None when the query sets none.
    """

    org: str                      # org
    dest: str                     # dest
    days: int                     # days
    visiting_city_number: int     # visiting_city_number
    dates: tuple[str, ...]        # date, ISO yyyy-mm-dd, one per day
    people: int                   # people_number
    budget: float                 # budget, dollars for the whole group
    house_rule: str | None = None
    room_type: str | None = None
    cuisine: tuple[str, ...] = field(default_factory=tuple)
    transportation: str | None = None
    level: str | None = None

    def local_constraints(self) -> dict[str, Any]:
        """``local_constraint`` in the benchmark's shape (cuisine None when unset)."""
        return {"house rule": self.house_rule, "cuisine": list(self.cuisine) or None,
                "room type": self.room_type, "transportation": self.transportation}

    def describe(self) -> str:
        """One line per constraint, for prompts."""
        lines = [f"origin: {self.org}", f"destination: {self.dest} ({self.visiting_city_number} city/cities)",
                 f"days: {self.days} ({self.dates[0]} to {self.dates[-1]})", f"people: {self.people}",
                 f"budget: ${self.budget:,.0f} for the whole group"]
        if self.house_rule:
            lines.append(f"house rule: accommodation must allow {self.house_rule}")
        if self.room_type:
            lines.append(f"room type: {self.room_type}")
        if self.cuisine:
            lines.append(f"cuisines to include (at least one meal each): {', '.join(self.cuisine)}")
        if self.transportation:
            lines.append(f"transportation: {self.transportation}")
        return "\n".join(lines)


def _count(word: str) -> int | None:
    word = word.lower().strip()
    if word.isdigit():
        return int(word)
    return _WORDS.get(word)


def parse_people(text: str) -> int:
    """Group size from phrases like "group of 8", "for two", "solo", "a pair"."""
    t = text.lower()
    num = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
    for pat in (rf"(?:group|party) of {num}", rf"for {num} (?:people|persons?|individuals|travell?ers)",
                rf"{num} (?:people|persons?|individuals|travell?ers)",
                rf"for {num}\b(?![- ]days?| (?:different|distinct|unique|separate|cities))"):
        m = re.search(pat, t)
        if m and _count(m.group(1)):
            return _count(m.group(1))  # type: ignore[return-value]
    if re.search(r"\bfor two\b|\bfor a pair\b|\ba pair\b|\btwo individuals\b", t):
        return 2
    if re.search(r"\bsolo\b|\balone\b|single[- ]person|\bone person\b|\bsingle traveler\b|\bsolo traveler\b", t):
        return 1
    return 1


def parse_days(text: str) -> int | None:
    t = text.lower()
    m = re.search(r"(\d+|three|five|seven)[- ]days?\b", t)
    if m:
        return _count(m.group(1))
    if "week" in t:
        return 7
    ords = [int(x) for x in re.findall(r"\b(\d{1,2})(?:st|nd|rd|th)\b", t)]
    if len(ords) >= 2 and ords[1] >= ords[0]:
        return ords[1] - ords[0] + 1
    return None


def parse_start_date(text: str) -> dt.date:
    """The first day of the trip: "March 16th", "March 16", "the 8th of March" (the first one written)."""
    t = text.lower()
    months = "|".join(_MONTHS)
    year = re.search(r"\b(20\d\d)\b", t)
    month_day = rf"({months})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b"
    day_month = rf"(\d{{1,2}})(?:st|nd|rd|th)\b[^.?!]*?\b({months})"
    found = [(m.start(), m.group(1), m.group(2)) for m in re.finditer(month_day, t)]
    found += [(m.start(), m.group(2), m.group(1)) for m in re.finditer(day_month, t)]
    if not found:
        raise ValueError(f"no start date in query {text!r}")
    _, month, day = min(found)
    return dt.date(int(year.group(1)) if year else 2022, _MONTHS[month], int(day))


def parse_local_constraints(text: str) -> dict[str, Any]:
    """House rule, room type, cuisines and transportation rule named in the query text."""
    t = text.lower()
    house = None
    for key, pat in (("smoking", r"smok"), ("parties", r"\bparties\b|\bparty\b(?! of)"),
                     ("children under 10", r"children"), ("visitors", r"visitor"), ("pets", r"pet-friendly|\bpets\b")):
        if re.search(pat, t):
            house = key
            break
    room = None
    if re.search(r"not shared room|non-shared room", t):
        room = "not shared room"
    elif re.search(r"entire (?:room|home)", t):
        room = "entire room"
    elif "private room" in t:
        room = "private room"
    elif "shared room" in t:
        room = "shared room"
    cuisines = tuple(c for _, c in sorted((t.find(c.lower()), c) for c in CUISINES if c.lower() in t))
    transport = None
    if re.search(r"self-driv|self driv|drive ourselves|self-drive", t):
        transport = "no self-driving"
    elif re.search(r"flight|flying|fly\b", t):
        transport = "no flight"
    return {"house rule": house, "room type": room, "cuisine": cuisines, "transportation": transport}


def parse_query_text(text: str, org: str | None = None, cities: tuple[str, ...] = ()) -> TravelQuery:
    """Structured fields from the query sentence.

    Args:
        text: the query.
        org: the origin if known (from the reference information), else read
            from "from X"/"departing X"/"starting in X".
        cities: destination cities if known; for a 3-day trip the destination
            is ``cities[0]``; for longer trips it is the state named in the text.
    Raises:
        ValueError: naming what could not be read.
    """
    days = parse_days(text)
    if days is None:
        raise ValueError(f"no trip length in query {text!r}")
    start = parse_start_date(text)
    dates = tuple((start + dt.timedelta(days=i)).isoformat() for i in range(days))
    budget = re.search(r"\$\s?([\d,]+(?:\.\d+)?)", text)
    if budget is None:
        raise ValueError(f"no budget ($...) in query {text!r}")
    if org is None:
        m = re.search(r"(?:from|departing|starting in|beginning in|leaving from|leaving|leave|starts in"
                      r"|originating from|commences in)\s+([A-Z][\w.' -]+?)"
                      r"(?:\s+(?:to|and|for|moving|heading|towards)\b|,|\?|\.)", text)
        if m is None:
            raise ValueError(f"no origin in query {text!r}")
        org = m.group(1).strip()
    nc = {3: 1, 5: 2, 7: 3}.get(days, 1)
    if days <= 3:
        dest = cities[0] if cities else ""
    else:
        rest = text.replace(org, " ")
        found = [(rest.find(s), s) for s in sorted(US_STATES, key=len, reverse=True) if re.search(rf"\b{s}\b", rest)]
        found = [f for f in found if not any(f[1] != g[1] and f[1] in g[1] for g in found)]
        if not found:
            raise ValueError(f"no destination state in {days}-day query {text!r}")
        dest = min(found)[1]
    lc = parse_local_constraints(text)
    return TravelQuery(org=org, dest=dest, days=days, visiting_city_number=nc, dates=dates,
                       people=parse_people(text), budget=float(budget.group(1).replace(",", "")),
                       house_rule=lc["house rule"], room_type=lc["room type"], cuisine=lc["cuisine"],
                       transportation=lc["transportation"])


def query_from_fields(row: Mapping[str, Any]) -> TravelQuery:
    """A query from the hub's structured columns (strings holding Python literals are read)."""
    import ast

    def lit(v):
        return ast.literal_eval(v) if isinstance(v, str) and v[:1] in "[{(" else v

    lc = lit(row.get("local_constraint")) or {}
    dates = lit(row["date"])
    rule = lc.get("house rule")
    return TravelQuery(org=str(row["org"]), dest=str(row["dest"]), days=int(row["days"]),
                       visiting_city_number=int(row["visiting_city_number"]), dates=tuple(dates),
                       people=int(row["people_number"]), budget=float(row["budget"]),
                       house_rule="parties" if rule == "parities" else rule, room_type=lc.get("room type"),
                       cuisine=tuple(lc.get("cuisine") or ()), transportation=lc.get("transportation"),
                       level=row.get("level"))
