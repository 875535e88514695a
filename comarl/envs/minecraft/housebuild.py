"""HouseBuild: a house given as horizontal layers, its resource limits, its rectangles, and the reward.

A task is a box and one layer of rows per y (row index = z offset, column = x offset), each character a key
of the legend (``C -> white_concrete``, ``A -> air``...). Every cell of the box has an intended block, air
included. The reward (the reference's ``score_house_builder``) is the share of the box's cells holding their
intended block; a team of two that does not answer the spiders (no accepted ``/kill``) loses
``0.1 * min(1, damage / hp)``. ``iou`` over the non-air cells is reported, not rewarded.

Resources (``limited_resource``): agent i may fill at most ``ceil(c / n) + c // (2n)`` cells of a block the
house needs ``c`` of (0 for a legend block the house does not use); air is free.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .commands import AIR, Box, Pos, block_name, is_air
from .world import World, scan


@dataclass(frozen=True)
class HouseTask:
    """One HouseBuild target.

    Attributes:
        task_id: the item's id.
        box: the build box.
        legend: character -> block, in the data's order (``A -> air`` is usual).
        layers: y -> rows (row r is z = box.lo z + r; column c is x = box.lo x + c), one for every y of the box.
    """

    task_id: str
    box: Box
    legend: Mapping[str, str]
    layers: Mapping[int, tuple[str, ...]]

    def expected(self) -> dict[Pos, str]:
        """Every cell of the box with its intended block (names without ``minecraft:``)."""
        names = {k: block_name(v) for k, v in self.legend.items()}
        out: dict[Pos, str] = {}
        lo = self.box.lo
        for y in range(self.box.lo[1], self.box.hi[1] + 1):
            for r, row in enumerate(self.layers[y]):
                for c, ch in enumerate(row):
                    out[(lo[0] + c, y, lo[2] + r)] = names[ch]
        return out

    def blocks(self) -> list[str]:
        """The legend's blocks without repeats, in legend order (the default allowed blocks)."""
        return unique(self.legend.values())


def unique(values: Sequence[str] | Any) -> list[str]:
    """Non-blank names, first occurrence kept, stripped: ``unique(["a", " b", "a", ""]) == ["a", "b"]``."""
    seen: list[str] = []
    for v in values:
        s = str(v).strip()
        if s and s not in seen:
            seen.append(s)
    return seen


def task_from_item(item: Mapping[str, Any]) -> HouseTask:
    """The :class:`HouseTask` of an item built by ``data.load_house_items`` (``box``, ``legend``, ``layers``).

    Raises:
        ValueError: naming the item and what is inconsistent (a layer missing for a y of the box, a row of the
            wrong width, a character not in the legend).
    """
    tid = str(item.get("task_id") or "")
    try:
        lo, hi = item["box"]
        box = Box.spanning([int(v) for v in lo], [int(v) for v in hi])
        legend = {str(k): str(v) for k, v in dict(item["legend"]).items()}
        layers = {box.lo[1] + i: tuple(str(r) for r in rows) for i, rows in enumerate(item["layers"])}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"house item {tid!r}: needs box [[x, y, z], [x, y, z]], legend and layers ({e})") from None
    width, height, depth = box.size
    if len(layers) != height:
        raise ValueError(f"house item {tid!r}: {len(layers)} layers for a box {height} high")
    for y, rows in layers.items():
        if len(rows) != depth or any(len(r) != width for r in rows):
            raise ValueError(f"house item {tid!r}: layer y={y} is not {depth} rows of {width} characters")
        bad = sorted({ch for r in rows for ch in r if ch not in legend})
        if bad:
            raise ValueError(f"house item {tid!r}: layer y={y} uses {bad}, not in the legend {sorted(legend)}")
    return HouseTask(tid, box, legend, layers)


def resource_limits(task: HouseTask, num_agents: int) -> dict[str, int]:
    """Per agent, the most cells of each (non-air) legend block it may fill: ``ceil(c / n) + c // (2n)``.

    A house needing 68 white_concrete gives each of 2 agents ``34 + 17 = 51``.
    """
    n = max(1, num_agents)
    counts: dict[str, int] = {}
    for b in task.expected().values():
        counts[b] = counts.get(b, 0) + 1
    names = set(counts) | {block_name(v) for v in task.legend.values()}
    return {b: -(-counts.get(b, 0) // n) + counts.get(b, 0) // (2 * n) for b in sorted(names) if b not in AIR}


@dataclass(frozen=True)
class Rect:
    """A rectangle of one block in one layer: x1..x2, z1..z2 inclusive (``block`` as the legend writes it)."""

    x1: int
    z1: int
    x2: int
    z2: int
    block: str

    @property
    def area(self) -> int:
        return (self.x2 - self.x1 + 1) * (self.z2 - self.z1 + 1)

    def holds(self, x: int, z: int) -> bool:
        return self.x1 <= x <= self.x2 and self.z1 <= z <= self.z2


def layer_rects(rows: Sequence[str], legend: Mapping[str, str], x0: int, z0: int) -> list[Rect]:
    """The rectangles a layer is drawn with (the prompt's layer text and the rectangle feedback use them).

    Each row is cut into maximal runs of one character; a run with the same x range and block as a run of the
    row above extends that run's rectangle downwards, else it starts a new one. Sorted by (z1, x1).
    ``layer_rects(["AB", "AB"], {"A": "air", "B": "stone"}, 0, 0) == [Rect(0, 0, 0, 1, "air"),
    Rect(1, 0, 1, 1, "stone")]``.
    """
    done: list[Rect] = []
    open_: dict[tuple[int, int, str], Rect] = {}
    for r, row in enumerate(rows):
        runs, start = [], 0
        for x in range(1, len(row) + 1):
            if x == len(row) or row[x] != row[start]:
                runs.append((start, x - 1, legend[row[start]]))
                start = x
        still: dict[tuple[int, int, str], Rect] = {}
        for x1, x2, block in runs:
            above = open_.pop((x1, x2, block), None)
            still[(x1, x2, block)] = Rect(x0 + x1, above.z1 if above else z0 + r, x0 + x2, z0 + r, block)
        done += open_.values()
        open_ = still
    done += open_.values()
    return sorted(done, key=lambda q: (q.z1, q.x1))


def rects_by_layer(task: HouseTask) -> dict[int, list[Rect]]:
    return {y: layer_rects(rows, task.legend, task.box.lo[0], task.box.lo[2]) for y, rows in task.layers.items()}


@dataclass(frozen=True)
class HouseScore:
    """``match``: cells holding their intended block over all cells (the reward before the spiders)."""

    correct: int
    cells: int
    match: float
    iou: float


def score(task: HouseTask, world: World) -> HouseScore:
    expected = task.expected()
    seen = scan(world, task.box)
    correct = sum(1 for p, b in expected.items() if seen.get(p, "air") == b)
    want = {p for p, b in expected.items() if not is_air(b)}
    have = {p for p, b in seen.items() if not is_air(b)}
    union = len(want | have)
    iou = len(want & have) / union if union > 0 else 0.0
    return HouseScore(correct, len(expected), correct / len(expected) if expected else 0.0, iou)


@dataclass(frozen=True)
class Threat:
    """The spiders of a run: the player's hp and each spider's attack.

    The reference draws the attacks once per run (``random.Random(seed).randint(low, high)`` per spider) and
    shows them in every prompt; a team that accepts no ``/kill`` loses :meth:`penalty`.
    """

    hp: int
    attacks: tuple[int, ...]

    @property
    def damage(self) -> int:
        return sum(self.attacks)

    def penalty(self) -> float:
        """``0.1 * min(1, damage / hp)``, 0 without spiders or hp: 3 spiders hitting 1, 3, 2 on 5 hp -> 0.1."""
        if self.damage > 0 and self.hp > 0:
            return min(1.0, float(self.damage) / float(self.hp)) * 0.1
        return 0.0


def draw_threat(hp: int, num: int, low: int, high: int, seed: int) -> Threat:
    """The spiders' attacks for a run, as the reference draws them: ``num`` draws of ``randint(low, high)``
    from ``random.Random(seed)`` (``low`` and ``high`` swapped when reversed)."""
    low, high = min(low, high), max(low, high)
    rng = random.Random(int(seed))
    return Threat(int(hp), tuple(rng.randint(low, high) for _ in range(max(0, int(num)))))


def wrong_cells(task: HouseTask, world: World, top_first: bool) -> list[tuple[Pos, str]]:
    """The cells not holding their intended block, with that block; top layer first (``perfect_feedback``) or
    bottom layer first (``position_modification``), then by x, then z."""
    seen = scan(world, task.box)
    wrong = [(p, b) for p, b in task.expected().items() if block_name(seen.get(p, "air")) != b]
    sign = -1 if top_first else 1
    return sorted(wrong, key=lambda w: (sign * w[0][1], w[0][0], w[0][2]))
