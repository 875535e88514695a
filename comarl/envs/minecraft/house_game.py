"""HouseBuild as a game: settings, first prompts, one turn played, the follow-ups, the picture's grids."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from . import feedback as F
from .commands import block_name, command_lines, read_fills
from .housebuild import HouseTask, Threat, resource_limits, score, task_from_item
from .play import Carry, Play, reading_metrics
from .prompts import house_prompt, limits_text
from .world import apply, scan


@dataclass(frozen=True)
class HouseSettings:
    """HouseBuild's checked ``env.args`` (``env.build_house``).

    Attributes:
        num_agents: team size.
        blocks: per agent, its allowed blocks (empty: the house's legend, as the reference does without
            ``block_agent*``).
        caps: per agent, its most commands per turn.
        limited: ``limited_resource``: cap each agent's cells per block (``housebuild.resource_limits``).
        threat: the spiders.
        lone_threat: a one-agent team pays the spider penalty too (preset ``default``).
        include_air: the prompt's layers list the air rectangles too.
        lim: ``position_modification`` / ``rect_modification``: most cells / rectangles shown (None: all).
        persist: the world and the resources used carry over between turns.
        rect_layers: ``(agent, n, y, lowest y, highest y) -> bool`` (``presets.Preset.rect_layers``).
        left_after_turn: ``resource_schedule`` shows the resources left after the turn
            (``presets.Preset.left_after_turn``).
    """

    num_agents: int
    blocks: tuple[tuple[str, ...], ...]
    caps: tuple[int, ...]
    limited: bool
    threat: Threat
    lone_threat: bool
    include_air: bool
    lim: int | None
    persist: bool
    rect_layers: Callable[[int, int, int, int, int], bool]
    left_after_turn: bool = False


class HouseGame:
    """Build a house from its layers (``housebuild.py`` has the reward)."""

    modes = F.HOUSE_MODES
    name = "house_build"

    def __init__(self, settings: HouseSettings, mode: str):
        self.s, self.mode = settings, mode
        self.num_agents = settings.num_agents

    def task(self, item: Mapping[str, Any]) -> HouseTask:
        return task_from_item(item)

    def blocks(self, task: HouseTask, agent: int) -> tuple[str, ...]:
        return self.s.blocks[agent] if self.s.blocks[agent] else tuple(task.blocks())

    def limits(self, task: HouseTask) -> dict[str, int] | None:
        return resource_limits(task, self.num_agents) if self.s.limited else None

    def limits_text(self, item: Mapping[str, Any] | HouseTask) -> str:
        """The resource-limit lines of the prompts ("" without limits)."""
        task = item if isinstance(item, HouseTask) else self.task(item)
        lim = self.limits(task)
        return limits_text(lim, [block_name(v) for v in task.legend.values()]) if lim else ""

    def first(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        task = self.task(item)
        text = self.limits_text(task)
        return tuple(house_prompt(task, i, self.num_agents, self.blocks(task, i), self.s.caps[i], self.s.threat,
                                  text, self.s.include_air, self.s.persist) for i in range(self.num_agents))

    def play(self, item: Mapping[str, Any], responses: Sequence[str], carry: Carry | None) -> Play:
        task = self.task(item)
        limits = self.limits(task)
        before = carry.used if carry and carry.used else tuple({} for _ in range(self.num_agents))
        readings = []
        for i, r in enumerate(responses):
            left = {b: v - before[i].get(b, 0) for b, v in limits.items()} if limits is not None else None
            readings.append(read_fills(command_lines(r), self.blocks(task, i), task.box, self.s.caps[i], left))
        world = apply([c for r in readings for c in r.accepted], carry.world if carry else None)
        hs = score(task, world)
        killed = any(r.killed for r in readings)
        penalty = 0.0 if killed else self.s.threat.penalty()
        charged = penalty if (self.num_agents >= 2 or self.s.lone_threat) else 0.0
        now = F.used_this_turn(readings)
        used = tuple({b: before[i].get(b, 0) + now[i].get(b, 0) for b in sorted(set(before[i]) | set(now[i]))}
                     for i in range(self.num_agents))
        metrics = {"score": hs.match - charged, "match": hs.match, "iou": hs.iou, "spiders_killed": float(killed),
                   "spider_penalty": charged, "perfect": float(hs.match >= 1.0 and charged == 0.0),
                   **reading_metrics(tuple(readings), limits is not None)}
        return Play(hs.match - charged, metrics, world, tuple(readings), used, hs.match - penalty)

    def followups(self, item: Mapping[str, Any], view: F.TurnView, played: Play) -> list[str]:
        task = self.task(item)
        if self.mode == "perfect_feedback":
            return F.house_perfect(task, view)
        if self.mode == "position_feedback":
            return F.house_position(task, view)
        if self.mode == "position_modification":
            return F.house_modification(task, view, self.s.lim)
        if self.mode == "rect_modification":
            lo, hi = task.box.lo[1], task.box.hi[1]
            return F.house_rects(task, view, self.s.lim,
                                 lambda a, n, y: self.s.rect_layers(a, n, y, lo, hi))
        if self.mode == "resource_schedule":
            return F.house_schedule(task, view, self.limits(task) or {}, played.used, self.s.left_after_turn)
        return F.house_score(task, view)

    def view_blocks(self, item: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
        task = self.task(item)
        return tuple(self.blocks(task, i) for i in range(self.num_agents))

    def grids(self, item: Mapping[str, Any], world: Mapping) -> tuple[list[list[list[str]]], list[list[list[str]]],
                                                                        list[str]]:
        """(target layers, built layers, labels) for the picture: one grid per y (bottom first), rows = z."""
        task = self.task(item)
        expected = task.expected()
        seen = scan(world, task.box)
        lo, hi = task.box.lo, task.box.hi
        target, built, labels = [], [], []
        for y in range(lo[1], hi[1] + 1):
            target.append([[expected[(x, y, z)] for x in range(lo[0], hi[0] + 1)] for z in range(lo[2], hi[2] + 1)])
            built.append([[block_name(seen[(x, y, z)]) for x in range(lo[0], hi[0] + 1)]
                          for z in range(lo[2], hi[2] + 1)])
            labels.append(f"y={y}")
        return target, built, labels
