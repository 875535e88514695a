"""What one turn of a Minecraft game gives back, shared by StrBuild and HouseBuild (``str_game``, ``house_game``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .commands import Pos, Reading


@dataclass(frozen=True)
class Carry:
    """What a persistent world (preset ``default``) takes into the next turn.

    Attributes:
        world: the blocks placed so far.
        used: per agent, the cells filled per block so far (HouseBuild's resource limits; empty for StrBuild).
    """

    world: Mapping[Pos, str]
    used: tuple[Mapping[str, int], ...] = ()


@dataclass(frozen=True)
class Play:
    """One joint action played.

    Attributes:
        reward: the team reward of this turn.
        metrics: named numbers for the logs (``env/<name>``).
        world: the world after the turn.
        readings: each agent's accepted and rejected commands.
        used: per agent, cells filled per block over the episode so far (``Carry.used``; this turn only under a
            resetting world).
        shown: the reward the score feedback quotes (the reference's own computation, which for one HouseBuild
            agent charges the spiders although its reward does not).
    """

    reward: float
    metrics: dict[str, float]
    world: dict[Pos, str]
    readings: tuple[Reading, ...]
    used: tuple[dict[str, int], ...] = ()
    shown: float = 0.0


def reading_metrics(readings: tuple[Reading, ...], limits: bool = False) -> dict[str, float]:
    """Per agent: commands accepted and rejected, and (``limits``) rejected for a resource limit."""
    out: dict[str, float] = {}
    for i, r in enumerate(readings):
        out[f"agent{i}/accepted"] = float(len(r.accepted))
        out[f"agent{i}/rejected"] = float(len(r.rejected))
        if limits:
            out[f"agent{i}/over_limit"] = float(r.over_limit)
    return out
