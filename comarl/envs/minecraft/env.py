"""The Minecraft environments ``str_build`` and ``house_build`` (docs/minecraft.md).

One class runs both games (``str_game.StrGame``, ``house_game.HouseGame``): ``reset`` writes each agent's first
prompt (the system text, then the game's prompt); ``step_batch`` plays every joint action (each agent's text read
as commands, run in agent order on the world, scored) and, until ``max_turns``, writes the next prompts with the
``mode``'s feedback (``feedback.py``). Under preset ``default`` the world (and the resources used) carries over in
``EnvState.info``; under ``paper`` every turn starts from an empty world, as the reference scores it.

``summarize`` reports the reward, IoU and perfect-build rate per task and, when ``env.args.pictures`` names a
folder, writes every evaluated build as a PNG next to its target there (``<folder>/eval-<NNN>/<task>-<k>.png``,
one folder per evaluation); :meth:`MinecraftEnv.render` gives the same picture for any joint response.
Registers ``str_build`` and ``house_build`` on import.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..base import EnvState, EvalRecord, Transition, scalar_reward
from ..registry import EnvEntry, register_env
from . import feedback as F
from .commands import agent_command_caps
from .data import load_house_items, load_str_items
from .house_game import HouseGame, HouseSettings
from .housebuild import Threat, draw_threat, unique
from .play import Carry
from .presets import Preset, choose
from .prompts import SYSTEM, with_system
from .render import picture
from .str_game import DEFAULT_BLOCKS, StrGame, StrSettings
from .strbuild import palette

COMMON_KEYS = ("preset", "max_turns", "mode", "original_prompt", "previous_response", "system", "blocks",
               "max_commands", "pictures")
STR_KEYS = COMMON_KEYS + ("spacing", "z", "show_target")
HOUSE_KEYS = COMMON_KEYS + ("limited_resource", "hp", "spiders", "include_air", "lim")
SPIDER_KEYS = ("num", "atk_low", "atk_high", "attacks", "seed")


class MinecraftEnv:
    """StrBuild or HouseBuild for ``num_agents`` agents (module docstring). Built by :func:`build_str` and
    :func:`build_house`.

    Args:
        game: the game (its settings checked).
        preset: the preset record (``presets.py``).
        max_turns: turns per episode.
        mode: the ``external.mode`` that writes later turns' prompts.
        original_prompt: later prompts repeat the first-turn prompt.
        previous_response: later prompts show each agent its last reply.
        system: the text opening every prompt.
        pictures: folder for the evaluation pictures (None: none written).
    """

    def __init__(self, game: StrGame | HouseGame, preset: Preset, max_turns: int, mode: str, original_prompt: bool,
                 previous_response: bool, system: str, pictures: str | None):
        self.game, self.preset, self.max_turns, self.mode = game, preset, max_turns, mode
        self.num_agents = game.num_agents
        self.original, self.previous, self.system = original_prompt, previous_response, system
        self.pictures = pictures
        self.persist = preset.world == "persist"

    # ---- episodes
    def reset(self, item: Mapping[str, Any]) -> EnvState:
        first = self.game.first(item)
        return EnvState(item=item, prompts=tuple(with_system(self.system, p) for p in first),
                        info={"first": first})

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        if len(states) != len(responses):
            raise ValueError(f"step_batch got {len(states)} states and {len(responses)} joint responses")
        out = []
        for state, resp in zip(states, responses):
            if len(resp) != self.num_agents:
                raise ValueError(f"{self.game.name}: joint action has {len(resp)} responses, environment has "
                                 f"{self.num_agents} agents")
            carry = state.info.get("carry") if self.persist else None
            played = self.game.play(state.item, tuple(resp), carry)
            if state.turn + 1 >= self.max_turns:
                out.append(Transition(played.reward, True, None, played.metrics))
                continue
            first = state.info.get("first") or self.game.first(state.item)
            view = F.TurnView(
                number=state.turn + 2, system=self.system, first=tuple(first), responses=tuple(resp),
                readings=played.readings, world=played.world, reward=played.shown, original=self.original,
                previous=self.previous, persist=self.persist, caps=self.game.s.caps,
                blocks=self.game.view_blocks(state.item), limits_text=self.game.limits_text(state.item))
            prompts = self.game.followups(state.item, view, played)
            info = {"first": first, "carry": Carry(played.world, played.used)}
            out.append(Transition(played.reward, False, state.advanced(resp, prompts, info), played.metrics))
        return out

    # ---- evaluation
    def render(self, item: Mapping[str, Any], responses: Sequence[str], title: str | None = None) -> bytes:
        """PNG bytes of the first-turn build of ``responses`` (one text per agent) next to ``item``'s target."""
        played = self.game.play(item, tuple(responses), None)
        target, built, labels = self.game.grids(item, played.world)
        name = title if title is not None else f"{item.get('task_id', '')}  reward {played.reward:.3f}"
        return picture(target, built, labels, name)

    def summarize(self, records: Sequence[EvalRecord]) -> dict[str, Any]:
        """Over the evaluated first-turn joint responses: ``samples``, ``items``, ``reward_mean``, ``iou_mean``,
        ``perfect_rate`` (the best reward reached: 2.0 for StrBuild, 1.0 for HouseBuild), ``per_task``
        ({task: reward_mean, best, iou_mean}) and, with ``env.args.pictures``, ``pictures`` (the PNG paths)."""
        flat = [(r, k, t) for r in records for k, t in enumerate(r.transitions)]
        if not flat:
            return {"samples": 0}
        rewards = [scalar_reward(t.reward, self.game.name) for _, _, t in flat]
        per_task: dict[str, dict[str, float]] = {}
        for r in records:
            rs = [scalar_reward(t.reward, self.game.name) for t in r.transitions]
            if rs:
                per_task[str(r.item.get("task_id", ""))] = {
                    "reward_mean": sum(rs) / len(rs), "best": max(rs),
                    "iou_mean": sum(t.metrics.get("iou", 0.0) for t in r.transitions) / len(rs)}
        n = len(flat)
        out: dict[str, Any] = {
            "samples": n, "items": len(records), "num_agents": self.num_agents, "preset": self.preset.name,
            "reward_mean": sum(rewards) / n, "iou_mean": sum(t.metrics.get("iou", 0.0) for _, _, t in flat) / n,
            "perfect_rate": sum(t.metrics.get("perfect", 0.0) for _, _, t in flat) / n, "per_task": per_task}
        if self.pictures:
            out["pictures"] = self.write_pictures(records)
        return out

    def write_pictures(self, records: Sequence[EvalRecord]) -> list[str]:
        """Every evaluated first-turn build as ``<pictures>/eval-<NNN>/<task>-<k>.png`` (a new folder each call;
        under torchrun every rank summarises its own items, into a folder of its own)."""
        root = Path(str(self.pictures))
        root.mkdir(parents=True, exist_ok=True)
        taken = [int(p.name[5:]) for p in root.glob("eval-*") if p.name[5:].isdigit()]
        number = max(taken, default=0) + 1
        while True:  # mkdir is atomic: two processes never share a folder
            folder = root / f"eval-{number:03d}"
            try:
                folder.mkdir()
                break
            except FileExistsError:
                number += 1
        paths = []
        for r in records:
            tid = str(r.item.get("task_id", "item")).replace(os.sep, "_") or "item"
            for k, (resp, t) in enumerate(zip(r.responses, r.transitions)):
                reward = scalar_reward(t.reward, self.game.name)
                png = self.render(r.item, resp, f"{tid} sample {k}: reward {reward:.3f}")
                path = folder / f"{tid}-{k}.png"
                path.write_bytes(png)
                paths.append(str(path))
        return paths

    def render_table(self, summary: Mapping[str, Any]) -> str:
        """``summarize`` output as plain text."""
        if not summary.get("samples"):
            return f"{self.game.name}: no samples"
        lines = [f"{self.game.name} (preset {summary['preset']}): {summary['samples']} samples over "
                 f"{summary['items']} items",
                 f"reward mean {summary['reward_mean']:.3f}  IoU mean {summary['iou_mean']:.3f}  "
                 f"perfect {100 * summary['perfect_rate']:.1f}%",
                 f"{'task':<20}{'reward':>9}{'best':>9}{'IoU':>8}"]
        for tid, row in summary["per_task"].items():
            lines.append(f"{tid:<20}{row['reward_mean']:>9.3f}{row['best']:>9.3f}{row['iou_mean']:>8.3f}")
        if summary.get("pictures"):
            lines.append(f"pictures: {os.path.dirname(summary['pictures'][0])}")
        return "\n".join(lines)


# ---- building from env.args


def _flag(args: Mapping[str, Any], key: str, default: bool) -> bool:
    v = args.get(key, default)
    if not isinstance(v, bool):
        raise ValueError(f"env.args.{key}: expected true or false, got {v!r}")
    return v


def _int(args: Mapping[str, Any], key: str, default: int | None, low: int | None = None) -> int | None:
    v = args.get(key, default)
    if v is None and default is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or (low is not None and v < low):
        raise ValueError(f"env.args.{key}: expected an integer{f' >= {low}' if low is not None else ''}, got {v!r}")
    return v


def _blocks(value: Any, n: int, default: Sequence[Sequence[str]] | None) -> tuple[tuple[str, ...], ...]:
    """``env.args.blocks``: one list of block names per agent (None: ``default`` or empty lists)."""
    if value is None:
        if default is None:
            return tuple(() for _ in range(n))
        if n > len(default):
            raise ValueError(f"env.args.blocks: give one list of blocks per agent for {n} agents "
                             f"(the reference defines blocks for {len(default)})")
        return tuple(tuple(b) for b in default[:n])
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != n:
        raise ValueError(f"env.args.blocks: expected {n} lists of block names (one per agent), got {value!r}")
    out = []
    for i, bl in enumerate(value):
        if isinstance(bl, str):
            bl = [bl]
        if not isinstance(bl, Sequence) or not all(isinstance(b, str) for b in bl):
            raise ValueError(f"env.args.blocks[{i}]: expected a list of block names, got {bl!r}")
        out.append(tuple(b.strip() for b in bl if b.strip()))
    return tuple(out)


def _common(args: Mapping[str, Any], keys: Sequence[str], name: str, num_agents: int) -> tuple[Preset, dict]:
    unknown = sorted(set(args) - set(keys))
    if unknown:
        raise ValueError(f"env.args: unknown key(s) {unknown} for {name}; known: {', '.join(keys)}")
    preset = choose(args.get("preset", "default"))
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
        raise ValueError(f"{name}: num_agents must be a positive integer, got {num_agents!r}")
    if preset.max_agents is not None and num_agents > preset.max_agents:
        raise ValueError(f"env.args.preset: {preset.name} ({name} as the reference runs it) takes 1 or "
                         f"{preset.max_agents} agents, got {num_agents}; use preset default for larger teams")
    system = args.get("system", SYSTEM)
    if not isinstance(system, str):
        raise ValueError(f"env.args.system: expected a string (\"\" for none), got {system!r}")
    pictures = args.get("pictures")
    if pictures is not None and not isinstance(pictures, (str, os.PathLike)):
        raise ValueError(f"env.args.pictures: expected a folder path or null, got {pictures!r}")
    common = {"preset": preset, "max_turns": _int(args, "max_turns", 1, 1),
              "original_prompt": _flag(args, "original_prompt", True),
              "previous_response": _flag(args, "previous_response", False), "system": system,
              "pictures": str(pictures) if pictures is not None else None}
    return preset, common


def _mode(args: Mapping[str, Any], modes: Sequence[str], name: str) -> str:
    mode = args.get("mode", "perfect_feedback")
    if mode not in modes:
        raise ValueError(f"env.args.mode: {name} has the external modes {', '.join(modes)}; got {mode!r}")
    return mode


def build_str(num_agents: int = 2, **args: Any) -> MinecraftEnv:
    """The StrBuild environment. ``env.args`` (all optional):

    ``preset`` (``default`` | ``paper``), ``mode`` (``perfect_feedback`` | ``position_feedback`` |
    ``score_feedback``), ``original_prompt`` (true), ``previous_response`` (false), ``system`` (the text opening
    every prompt), ``blocks`` (one list per agent; default the reference's ``[oak_planks, stone, air]`` and
    ``[white_concrete, obsidian, air]``), ``max_commands`` (600, split over the agents per turn), ``spacing``
    (2 empty columns between letters, the reference configs' value), ``z`` (0), ``show_target`` (the preset's:
    default true, paper false, as its configs' ``provide_graph``), ``pictures`` (a folder, or null).

    Raises:
        ValueError: naming the bad key.
    """
    preset, common = _common(args, STR_KEYS, "str_build", num_agents)
    mode = _mode(args, F.STR_MODES, "str_build")
    blocks = _blocks(args.get("blocks"), num_agents, DEFAULT_BLOCKS)
    for i, bl in enumerate(blocks):
        if not palette(bl):
            raise ValueError(f"env.args.blocks[{i}]: agent {i} needs at least one block that is not air")
    caps = tuple(agent_command_caps(_int(args, "max_commands", 600, 1) or 600, num_agents))
    settings = StrSettings(blocks, caps, _int(args, "spacing", 2, 0) or 0, _int(args, "z", 0) or 0,
                           _flag(args, "show_target", preset.show_target), preset.world == "persist",
                           preset.spread_colours)
    return MinecraftEnv(StrGame(settings, mode), mode=mode, **common)


def _threat(args: Mapping[str, Any]) -> Threat:
    hp = _int(args, "hp", 20)
    spiders = args.get("spiders") or {}
    if not isinstance(spiders, Mapping):
        raise ValueError(f"env.args.spiders: expected a mapping with {', '.join(SPIDER_KEYS)}, got {spiders!r}")
    unknown = sorted(set(spiders) - set(SPIDER_KEYS))
    if unknown:
        raise ValueError(f"env.args.spiders: unknown key(s) {unknown}; known: {', '.join(SPIDER_KEYS)}")
    if spiders.get("attacks") is not None:
        attacks = spiders["attacks"]
        if isinstance(attacks, (str, bytes)) or not isinstance(attacks, Sequence) or not all(
                isinstance(a, int) and not isinstance(a, bool) for a in attacks):
            raise ValueError(f"env.args.spiders.attacks: expected a list of integers, got {attacks!r}")
        return Threat(hp or 0, tuple(attacks))
    values = {k: spiders.get(k, d) for k, d in (("num", 0), ("atk_low", 0), ("seed", 0))}
    values["atk_high"] = spiders.get("atk_high", values["atk_low"])
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"env.args.spiders.{k}: expected an integer, got {v!r}")
    return draw_threat(hp or 0, max(0, values["num"]), values["atk_low"], values["atk_high"], values["seed"])


def build_house(num_agents: int = 2, **args: Any) -> MinecraftEnv:
    """The HouseBuild environment. ``env.args`` (all optional), beyond StrBuild's ``preset``, ``mode`` (also
    ``position_modification`` | ``rect_modification`` | ``resource_schedule``), ``original_prompt``,
    ``previous_response``, ``system``, ``max_commands`` (600) and ``pictures``:

    ``blocks`` (one list per agent; default the house's legend), ``limited_resource`` (false; required by
    ``resource_schedule``), ``hp`` (20), ``spiders`` (``num`` 0, ``atk_low``, ``atk_high``: each spider's attack
    drawn from ``random.Random(seed)`` as the reference draws it once per run, ``seed`` 0; or ``attacks``: the
    list itself), ``include_air`` (false: the prompt's layers leave out air rectangles), ``lim`` (null: the
    modification modes show every cell / rectangle).

    Raises:
        ValueError: naming the bad key.
    """
    preset, common = _common(args, HOUSE_KEYS, "house_build", num_agents)
    mode = _mode(args, F.HOUSE_MODES, "house_build")
    limited = _flag(args, "limited_resource", False)
    if mode == "resource_schedule" and not limited:
        raise ValueError("env.args.mode: resource_schedule needs env.args.limited_resource: true "
                         "(it schedules the limited resources)")
    blocks = tuple(tuple(unique(bl)) for bl in _blocks(args.get("blocks"), num_agents, None))
    caps = tuple(agent_command_caps(_int(args, "max_commands", 600, 1) or 600, num_agents))
    settings = HouseSettings(num_agents, blocks, caps, limited, _threat(args), preset.lone_agent_threat,
                             _flag(args, "include_air", False), _int(args, "lim", None, 0),
                             preset.world == "persist", preset.rect_layers, preset.left_after_turn)
    return MinecraftEnv(HouseGame(settings, mode), mode=mode, **common)


register_env("str_build", EnvEntry(build_str, load_str_items, "Minecraft StrBuild: agents spell a string in "
                                                              "blocks with /setblock (10 strings shipped)"))
register_env("house_build", EnvEntry(build_house, load_house_items, "Minecraft HouseBuild: agents build a house "
                                                                    "from its layers under resource limits and "
                                                                    "spider attacks (10 houses shipped)"))
