"""StrBuild: the target of a string, who colours which cell, and the reward of a built world.

The string is drawn in 5 x 5 letters (``font.py``) on a vertical wall: x runs left to right, y bottom to top,
z is fixed. The reward (the reference's ``score_str_builder``) of a world scanned over the target's box:

    score = 2.0 * coverage - 1.5 * extra_ratio - 1.0 * same_colour_ratio - 0.25 * palettes_missing

- ``coverage``: target cells holding any block, over the target cells (colour does not matter here);
- ``extra_ratio``: blocks on the box's other cells, over those cells;
- ``same_colour_ratio``: over the pairs of side-by-side blocks (x or y neighbours), the share of the same
  texture (``colour_key``: oak_planks and *_planks are wood, stone and *_stone are stone...);
- ``palettes_missing``: agents whose whole palette (their allowed blocks but air) does not appear in the world.

So the best world (2.0) covers every letter cell, nothing else, never puts one texture next to itself, and uses
every block of every palette. ``iou`` = covered / (targets + extra) is reported, not rewarded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .commands import AIR, Box, Pos, block_name, is_air
from .font import string_rows
from .world import World, scan


@dataclass(frozen=True)
class StrTask:
    """One StrBuild target.

    Attributes:
        task_id: the item's id.
        text: the string to spell.
        rows: the target grid, top row first (``font.string_rows``).
        z: the wall's z coordinate.
    """

    task_id: str
    text: str
    rows: tuple[str, ...]
    z: int = 0

    @staticmethod
    def of(task_id: str, text: str, spacing: int, z: int = 0) -> "StrTask":
        return StrTask(task_id, str(text), string_rows(text, spacing), int(z))

    @property
    def width(self) -> int:
        return len(self.rows[0]) if self.rows else 0

    @property
    def height(self) -> int:
        return len(self.rows)

    @property
    def box(self) -> Box:
        """The build box: (0, 0, z) to (width - 1, height - 1, z), never smaller than one cell per axis."""
        return Box((0, 0, self.z), (max(0, self.width - 1), max(0, self.height - 1), self.z))

    def targets(self) -> list[Pos]:
        """The cells to fill, in grid order (top row first, left to right)."""
        h = self.height
        return [(x, h - 1 - r, self.z) for r, row in enumerate(self.rows) for x, ch in enumerate(row) if ch == "#"]


_TEXTURES = {"oak_planks": "wood", "oak_wood": "wood", "stone": "stone", "cobblestone": "stone",
             "smooth_stone": "stone", "stone_bricks": "stone", "white_concrete": "concrete", "obsidian": "obsidian"}


def colour_key(block: str) -> str:
    """The texture family of a block, which the same-colour penalty compares.

    ``colour_key("birch_planks") == "wood"``, ``colour_key("andesite_stone") == "stone"``,
    ``colour_key("red_concrete") == "concrete"``; any other block is its own family (lower-cased name).
    """
    s = block_name(str(block or "")).lower()
    if not s or s in _TEXTURES:
        return _TEXTURES.get(s, s)
    if s.endswith(("_planks", "_wood")):
        return "wood"
    if s.endswith(("_stone", "_stone_bricks")):
        return "stone"
    if s.endswith("_concrete"):
        return "concrete"
    return s


def palette(blocks: Sequence[str]) -> list[str]:
    """The colours an agent may use: its allowed blocks without air and blanks (``minecraft:`` dropped)."""
    names = (block_name(str(b or "")).strip() for b in blocks)
    return [b for b in names if b and b not in AIR]


def colour_plan(task: StrTask, palettes: Sequence[Sequence[str]], spread: bool = False
                ) -> tuple[dict[Pos, str], dict[Pos, int]]:
    """The intended block and owner of every target cell (what ``perfect_feedback`` asks each agent to fix).

    Cells are visited bottom row first, left to right. Cell (x, y) belongs to agent ``(x + y) % n``, which tries
    its palette from index ``s % len(palette)`` onwards and takes the first block unlike the already-chosen side
    neighbours (else the start block); ``s = x + y`` (the reference), or with ``spread`` ``s = (x + y) // n``.
    With two agents ``x + y`` has one parity per agent, so the reference's plan gives each agent a single block
    of its two and scores 1.5 (two palettes missing); ``spread`` walks each agent through its whole palette, and
    the plan scores the maximum 2.0.

    Raises:
        ValueError: an agent's palette is empty (it lists only air).
    """
    pals = [palette(p) for p in palettes]
    if not pals or any(not p for p in pals):
        raise ValueError("each agent's blocks need at least one block that is not air")
    n = len(pals)
    expected: dict[Pos, str] = {}
    owner: dict[Pos, int] = {}
    for pos in sorted(task.targets(), key=lambda p: (p[1], p[0], p[2])):
        x, y, z = pos
        agent = (x + y) % n
        pal = pals[agent]
        start = ((x + y) // n if spread else x + y) % len(pal)
        taken = {expected[q] for q in ((x - 1, y, z), (x + 1, y, z), (x, y - 1, z), (x, y + 1, z)) if q in expected}
        order = [pal[(start + k) % len(pal)] for k in range(len(pal))]
        expected[pos] = block_name(next((b for b in order if b not in taken), pal[start]))
        owner[pos] = agent
    return expected, owner


@dataclass(frozen=True)
class StrScore:
    """The reward's parts for one built world (see the module docstring); ``total`` is the reward."""

    targets: int
    covered: int
    extra: int
    pairs: int
    same_pairs: int
    palettes_missing: int
    coverage: float
    extra_ratio: float
    same_colour_ratio: float
    total: float

    @property
    def iou(self) -> float:
        union = self.targets + self.extra
        return self.covered / union if union > 0 else 0.0

    def metrics(self) -> dict[str, float]:
        return {"score": self.total, "iou": self.iou, "coverage": self.coverage, "extra_ratio": self.extra_ratio,
                "same_colour_ratio": self.same_colour_ratio, "palettes_missing": float(self.palettes_missing),
                "perfect": float(self.total >= 2.0)}


def score(task: StrTask, world: World, palettes: Sequence[Sequence[str]]) -> StrScore:
    """The reward of ``world`` for ``task`` (module docstring); ``palettes``: each agent's allowed blocks."""
    seen = scan(world, task.box)
    targets = set(task.targets())
    covered = sum(1 for p in targets if not is_air(seen.get(p, "air")))
    extra = sum(1 for p, b in seen.items() if p not in targets and not is_air(b))
    background = max(0, task.height * task.width - len(targets))
    coverage = covered / len(targets) if targets else 0.0
    extra_ratio = extra / background if background > 0 else 0.0
    colours = {p: colour_key(b) for p, b in seen.items() if not is_air(b)}
    pairs = same = 0
    for (x, y, z), c in colours.items():
        for q in ((x + 1, y, z), (x, y + 1, z)):
            if q in colours:
                pairs += 1
                same += colours[q] == c
    same_ratio = same / pairs if pairs > 0 else 0.0
    present = {b for b in seen.values() if not is_air(b)}
    pals = [palette(p) for p in palettes]
    if any(not p for p in pals):
        raise ValueError("each agent's blocks need at least one block that is not air")
    missing = sum(1 for p in pals if not set(p) <= present)
    total = 2.0 * coverage - 1.5 * extra_ratio - 1.0 * same_ratio - 0.25 * float(missing)
    return StrScore(len(targets), covered, extra, pairs, same, missing, coverage, extra_ratio, same_ratio, total)


def wrong_cells(task: StrTask, world: World, palettes: Sequence[Sequence[str]], spread: bool = False
                ) -> tuple[dict[int, list[Pos]], list[Pos]]:
    """``perfect_feedback``'s data: per agent the target cells it owns whose block is not the planned one
    (``colour_plan``), and the blocks outside the target; both top row first, then left to right."""
    expected, owner = colour_plan(task, palettes, spread)
    seen = scan(world, task.box)
    wrong: dict[int, list[Pos]] = {i: [] for i in range(len(palettes))}
    for pos, block in expected.items():
        if block_name(seen.get(pos, "air")) != block:
            wrong.setdefault(owner.get(pos, 0), []).append(pos)
    extra = [p for p, b in seen.items() if p not in expected and b and b not in AIR]

    def top_first(p: Pos) -> tuple[int, int, int]:
        return (-p[1], p[0], p[2])

    return {i: sorted(v, key=top_first) for i, v in wrong.items()}, sorted(extra, key=top_first)


def positions_top_first(task: StrTask) -> list[Pos]:
    """Every target cell, top row first, then left to right (``position_feedback`` lists them)."""
    return sorted(task.targets(), key=lambda p: (-p[1], p[0], p[2]))


def blocks_of(world: Mapping[Pos, str]) -> int:
    """How many cells of ``world`` hold a block (not air)."""
    return sum(1 for b in world.values() if not is_air(b))
