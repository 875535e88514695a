"""The Minecraft presets, chosen here and nowhere else (``env.args.preset``).

``paper`` is the reference repository's behaviour (``OpenMLRL/LLM_Collab_Minecraft``), reward for reward: every
turn is scored on a world built from nothing by that turn's commands alone, resource limits count per turn,
one or two agents, a lone HouseBuild agent is never charged for the spiders, StrBuild hides the target on the
first turn (its configs set ``provide_graph: false``) and ``rect_modification`` gives agent 1 the layers y <= 2
and agent 2 the layers y >= 2.

``default`` is comarl's: the same rewards, but the world *persists* across turns (a later turn's commands edit
what the team built so far, so the feedback's "fix only these cells" means what it says; under ``paper`` an
agent following it loses every block it does not repeat), resource limits count over the whole episode, any
number of agents, the spiders charge any team, StrBuild shows the target, its colour plan (the textures
``perfect_feedback`` asks for) uses every block of every palette (the reference's plan gives each of two agents
one block of its two, so a team following it scores at most 1.5 of 2.0), ``rect_modification`` splits the
layers into one even band per agent, and ``resource_schedule`` shows the resources really left.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

WORLDS = ("reset", "persist")


def paper_layers(agent: int, n: int, y: int, lo: int, hi: int) -> bool:
    """The reference's split of ``rect_modification``: agent 0 the layers y <= 2, any other agent y >= 2."""
    return y <= 2 if agent == 0 else y >= 2


def band_layers(agent: int, n: int, y: int, lo: int, hi: int) -> bool:
    """Layers ``lo..hi`` cut into ``n`` even bands bottom up, band ``agent`` (7 layers, 2 agents: 0-3 and 4-6)."""
    return (y - lo) * n // (hi - lo + 1) == agent


@dataclass(frozen=True)
class Preset:
    """One preset (module docstring).

    Attributes:
        name: ``env.args.preset``.
        world: ``reset`` (each turn scored on its own commands) or ``persist`` (the world carries over).
        max_agents: the largest team (None: any).
        show_target: StrBuild's default for ``env.args.show_target``.
        lone_agent_threat: a one-agent HouseBuild team pays the spider penalty too.
        rect_layers: ``(agent, n, y, lowest y, highest y) -> bool``: the layers whose rectangles
            ``rect_modification`` gives an agent.
        spread_colours: StrBuild's colour plan walks each agent through its whole palette
            (``strbuild.colour_plan``), so the build ``perfect_feedback`` asks for scores the maximum.
        left_after_turn: ``resource_schedule`` shows the resources left after the turn (the reference shows
            what would be left after its own suggestions, under the heading "after previous turn").
    """

    name: str
    world: str
    max_agents: int | None
    show_target: bool
    lone_agent_threat: bool
    rect_layers: Callable[[int, int, int, int, int], bool]
    spread_colours: bool
    left_after_turn: bool


PRESETS: Mapping[str, Preset] = {
    "default": Preset("default", "persist", None, True, True, band_layers, True, True),
    "paper": Preset("paper", "reset", 2, False, False, paper_layers, False, False),
}


def choose(name: object) -> Preset:
    """The preset ``name`` names; anything else is an error naming ``env.args.preset``."""
    preset = PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        raise ValueError(f"env.args.preset: must be one of {', '.join(PRESETS)}, got {name!r}")
    return preset
