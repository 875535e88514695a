"""The reference information of one query (its sandbox): what exists and what it costs.

Two input shapes give the same :class:`Reference`:
- the offline copy (``train_ref_info.jsonl``): ``{"Restaurants in X": [row, ...],
  "Self-driving from A to B": "self-driving, from A to B, ..., cost: 93", ...}``;
- the hub column ``reference_information``: a list of ``{"Description", "Content"}``
  whose content is a fixed-width table (pandas ``to_string``), read by
  :func:`table_rows`.

Lookups follow the benchmark's matching rule: an entity named ``"Name, City"``
matches the first row whose name *contains* ``Name`` and whose city equals ``City``.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

_SECTION = re.compile(r"^(Attractions|Restaurants|Accommodations) in (.+)$")
_FLIGHT = re.compile(r"^Flight from (.+) to (.+) on (\d{4}-\d{2}-\d{2})$")
_GROUND = re.compile(r"^(Self-driving|Taxi) from (.+) to (.+)$")
_COST = re.compile(r"cost:\s*([\d.,]+)")
_MULTIWORD = {"Flight Number", "Average Cost", "Aggregate Rating", "room type", "minimum nights",
              "maximum occupancy", "review rate number"}
_PARTIAL = {w.rsplit(" ", 1)[0] for w in _MULTIWORD} | {"review"}
_NUMERIC = {"Latitude", "Longitude", "Average Cost", "Aggregate Rating", "price", "minimum nights",
            "maximum occupancy", "review rate number", "Price", "Distance"}


@dataclass(frozen=True)
class Leg:
    """One move between cities, in the order the reference lists them; ``date`` may be None."""

    origin: str
    dest: str
    date: str | None


@dataclass
class Reference:
    """Parsed sandbox. Rows keep the benchmark's column names.

    Attributes:
        restaurants / attractions / accommodations: city -> rows, in file order.
        flights: rows with ``Flight Number, Price, DepTime, ArrTime, FlightDate,
            OriginCityName, DestCityName``.
        ground: ``(mode, origin, dest) -> cost`` with mode ``"self-driving"`` or
            ``"taxi"``; cost None when the reference says there is no valid route.
        ground_text: the same keys -> the reference's description line.
        legs: the trip's moves in order (origin -> city 1 -> ... -> origin).
    """

    restaurants: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    attractions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    accommodations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    flights: list[dict[str, Any]] = field(default_factory=list)
    ground: dict[tuple[str, str, str], float | None] = field(default_factory=dict)
    ground_text: dict[tuple[str, str, str], str] = field(default_factory=dict)
    legs: list[Leg] = field(default_factory=list)

    @property
    def cities(self) -> list[str]:
        """Destination cities with their own sections, in file order."""
        seen: dict[str, None] = {}
        for d in (self.attractions, self.restaurants, self.accommodations):
            for c in d:
                seen.setdefault(c, None)
        return list(seen)

    @property
    def origin(self) -> str | None:
        return self.legs[0].origin if self.legs else None

    # -- benchmark matching
    def _find(self, table: dict[str, list[dict[str, Any]]], key: str, name: str, city: str) -> dict[str, Any] | None:
        for row in table.get(city, ()):
            if name in str(row.get(key, "")):
                return row
        return None

    def restaurant(self, name: str, city: str) -> dict[str, Any] | None:
        return self._find(self.restaurants, "Name", name, city)

    def attraction(self, name: str, city: str) -> dict[str, Any] | None:
        return self._find(self.attractions, "Name", name, city)

    def accommodation(self, name: str, city: str) -> dict[str, Any] | None:
        return self._find(self.accommodations, "NAME", name, city)

    def accommodation_matches(self, name: str, city: str) -> int:
        return sum(name in str(r.get("NAME", "")) for r in self.accommodations.get(city, ()))

    def flight(self, number: str, origin: str, dest: str) -> dict[str, Any] | None:
        for row in self.flights:
            if row["Flight Number"] == number and row["OriginCityName"] == origin and row["DestCityName"] == dest:
                return row
        return None


def _num(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return v
    return v


def table_rows(text: str) -> list[dict[str, Any]]:
    """Rows of a right-aligned fixed-width table (pandas ``DataFrame.to_string(index=False)``).

    Column ``j`` spans from the end of header ``j-1`` to the end of header ``j``
    (every cell and header is right-aligned to the column's end).
    """
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines:
        return []
    header = lines[0]
    names: list[str] = []
    ends: list[int] = []
    for m in re.finditer(r"\S+", header):
        if names and f"{names[-1]} {m.group(0)}" in _MULTIWORD or names and names[-1] in _PARTIAL and \
                any(w.startswith(f"{names[-1]} {m.group(0)}") for w in _MULTIWORD):
            names[-1] = f"{names[-1]} {m.group(0)}"
            ends[-1] = m.end()
        else:
            names.append(m.group(0))
            ends.append(m.end())
    rows, table = [], []
    for ln in lines[1:]:
        cells, start = [], 0
        for end in ends:
            cells.append(ln[start:end].strip())
            start = end
        table.append(cells)
    # an unnamed row index (restaurants, accommodations) shares the first column's span: "39   Coco Bambu"
    if table and all(re.match(r"^\d+\s+\S", c[0]) for c in table):
        for c in table:
            c[0] = re.sub(r"^\d+\s+", "", c[0])
    for cells in table:
        rows.append({n: (_num(c) if n in _NUMERIC else c) for n, c in zip(names, cells)})
    return rows


def _from_descriptions(entries: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The hub's ``[{"Description", "Content"}]`` as the offline dict shape."""
    out: dict[str, Any] = {}
    for e in entries:
        desc, content = str(e["Description"]).strip(), str(e["Content"])
        if _GROUND.match(desc) or "\n" not in content.strip():  # a route line, or "There is no ..." / "No valid ..."
            out[desc] = [] if _SECTION.match(desc) else content.strip()
        else:
            out[desc] = table_rows(content)
    return out


def parse_reference(raw: Any) -> Reference:
    """A :class:`Reference` from either input shape (a string is read as a Python literal).

    Raises:
        ValueError: a section that is neither a city table, a flight list nor a ground route.
    """
    if isinstance(raw, str):
        raw = ast.literal_eval(raw)
    if isinstance(raw, list):
        raw = _from_descriptions(raw)
    ref = Reference()
    for key, value in raw.items():
        key = key.strip()
        if m := _SECTION.match(key):
            kind, city = m.groups()
            rows = [dict(r) for r in value] if isinstance(value, list) else []
            getattr(ref, kind.lower())[city] = rows
        elif m := _FLIGHT.match(key):
            origin, dest, date = m.groups()
            ref.legs.append(Leg(origin, dest, date))
            if isinstance(value, list):
                ref.flights.extend(dict(r) for r in value)
        elif m := _GROUND.match(key):
            mode, origin, dest = m.groups()
            k = (mode.lower(), origin, dest)
            cost = _COST.search(value) if isinstance(value, str) else None
            ref.ground[k] = float(cost.group(1).replace(",", "")) if cost else None
            ref.ground_text[k] = str(value).strip()
            if not any(leg.origin == origin and leg.dest == dest for leg in ref.legs):
                ref.legs.append(Leg(origin, dest, None))
        else:
            raise ValueError(f"reference information: unknown section {key!r}")
    return ref
