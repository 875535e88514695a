"""StrBuild as a game: settings, first prompts, one turn played, the follow-ups, the picture's grids."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import feedback as F
from .commands import block_name, command_lines, read_setblocks
from .play import Carry, Play, reading_metrics
from .prompts import str_prompt
from .strbuild import StrTask, colour_plan, score
from .world import apply, scan

# the reference configs' blocks (task.block_agent1 / block_agent2)
DEFAULT_BLOCKS = (("oak_planks", "stone", "air"), ("white_concrete", "obsidian", "air"))


@dataclass(frozen=True)
class StrSettings:
    """StrBuild's checked ``env.args`` (``env.build_str``).

    Attributes:
        blocks: per agent, its allowed blocks as configured (air is allowed whether listed or not).
        caps: per agent, its most commands per turn (``max_commands`` split).
        spacing: empty columns between letters.
        z: the wall's z coordinate.
        show_target: the first prompt shows the target grid.
        persist: the world carries over between turns.
        spread: the colour plan uses every block of every palette (``strbuild.colour_plan``).
    """

    blocks: tuple[tuple[str, ...], ...]
    caps: tuple[int, ...]
    spacing: int
    z: int
    show_target: bool
    persist: bool
    spread: bool = False


class StrGame:
    """Spell a string in blocks (``strbuild.py`` has the reward)."""

    modes = F.STR_MODES
    name = "str_build"

    def __init__(self, settings: StrSettings, mode: str):
        self.s, self.mode = settings, mode
        self.num_agents = len(settings.blocks)

    def task(self, item: Mapping[str, Any]) -> StrTask:
        if "string" not in item:
            raise KeyError(f"str_build: item lacks 'string' (fields: {sorted(item)}); build items with the "
                           f"environment's load_items")
        return StrTask.of(str(item.get("task_id") or ""), str(item["string"]), self.s.spacing, self.s.z)

    def first(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        task = self.task(item)
        return tuple(str_prompt(task, i, self.num_agents, self.s.blocks[i], self.s.caps[i], self.s.show_target,
                                self.s.persist) for i in range(self.num_agents))

    def play(self, item: Mapping[str, Any], responses: Sequence[str], carry: Carry | None) -> Play:
        task = self.task(item)
        readings = tuple(read_setblocks(command_lines(r), self.s.blocks[i], task.box, self.s.caps[i])
                         for i, r in enumerate(responses))
        world = apply([c for r in readings for c in r.accepted], carry.world if carry else None)
        sc = score(task, world, self.s.blocks)
        return Play(sc.total, {**sc.metrics(), **reading_metrics(readings)}, world, readings, (), sc.total)

    def followups(self, item: Mapping[str, Any], view: F.TurnView, played: Play) -> list[str]:
        task = self.task(item)
        if self.mode == "perfect_feedback":
            return F.str_perfect(task, view, self.s.spread)
        if self.mode == "position_feedback":
            return F.str_position(task, view)
        return F.str_score(task, view)

    def view_blocks(self, item: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
        return self.s.blocks

    def limits_text(self, item: Mapping[str, Any]) -> str:
        return ""  # StrBuild has no resource limits

    def grids(self, item: Mapping[str, Any], world: Mapping) -> tuple[list[list[list[str]]], list[list[list[str]]],
                                                                        list[str]]:
        """(target layers, built layers, layer labels) for the picture: one wall, top row first; the target
        in its colour plan's blocks."""
        task = self.task(item)
        plan, _ = colour_plan(task, self.s.blocks, self.s.spread)
        seen = scan(world, task.box)
        rows = range(task.height - 1, -1, -1)
        xs = range(task.box.lo[0], task.box.hi[0] + 1)
        target = [[plan.get((x, y, task.z), "air") for x in xs] for y in rows]
        built = [[block_name(seen.get((x, y, task.z), "air")) for x in xs] for y in rows]
        return [target], [built], [f"z={task.z}"]
