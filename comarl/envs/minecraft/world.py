"""The block world the commands build: a pure-Python stand-in for the Minecraft server.

A world maps a cell to the block last placed there (air placements included); a cell never touched is air.
Commands apply in order, so a later command overwrites an earlier one (the second agent's commands come after
the first agent's: it can overwrite them). ``/kill`` places nothing. Mineflayer only renders in the reference;
its rewards come from this simulation too.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from .commands import Box, Command, Fill, Pos, SetBlock, block_name

World = Mapping[Pos, str]


def apply(commands: Iterable[Command], start: World | None = None) -> dict[Pos, str]:
    """The world after ``commands`` run on ``start`` (default: an empty world); ``start`` is not changed.

    ``apply([SetBlock((0, 0, 0), "stone"), SetBlock((0, 0, 0), "air")]) == {(0, 0, 0): "air"}``.
    """
    world = dict(start or {})
    for c in commands:
        if isinstance(c, SetBlock):
            world[c.pos] = block_name(c.block)
        elif isinstance(c, Fill):
            name = block_name(c.block)
            for cell in c.region.cells():
                world[cell] = name
    return world


def scan(world: World, box: Box) -> dict[Pos, str]:
    """Every cell of ``box`` with its block (``air`` where nothing was placed): what the reference's scan reads."""
    return {cell: world.get(cell, "air") for cell in box.cells()}
