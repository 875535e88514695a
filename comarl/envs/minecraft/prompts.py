"""The first-turn prompts of StrBuild and HouseBuild, in our own words.

They carry what the reference's prompts carry (the target, the build box and coordinate directions, each agent's
blocks, the command format and limits; for HouseBuild the spiders and the resource limits) with our wording;
the reference's text is in its ``*/utils/prompting.py``. The system text opens every turn's prompt, as the
reference's later turns have it (its first turn puts it in the chat template's system message).
"""
from __future__ import annotations

from typing import Sequence

from .commands import Box
from .housebuild import HouseTask, Rect, Threat, rects_by_layer
from .strbuild import StrTask

SYSTEM = ("You are a Minecraft building agent. Reply with Minecraft commands only, one per line: "
          "no markdown, no code fences, no explanations.")


def corner(p: Sequence[int]) -> str:
    return f"({p[0]}, {p[1]}, {p[2]})"


def block_lines(blocks: Sequence[str]) -> str:
    return "\n".join(f"- {b}" for b in blocks)


def team_line(agent: int, n: int, what: str) -> str:
    """Who the agent is in a team of ``n`` (empty for one agent)."""
    if n == 1:
        return ""
    line = f"You are agent {agent + 1} of {n} building one {what} together; each of you places part of it."
    if agent > 0:
        line += (f" Your commands run after agent{'s 1-' + str(agent) if agent > 1 else ' 1'}'s, so a block you "
                 f"place replaces theirs in the same cell.")
    return line


def str_prompt(task: StrTask, agent: int, n: int, blocks: Sequence[str], cap: int, show_target: bool,
               persist: bool = False) -> str:
    """Agent ``agent``'s first-turn StrBuild prompt (without the system text)."""
    box = task.box
    lines = [team_line(agent, n, "structure"),
             "Build the target as a wall of blocks with /setblock commands"
             + (", placing your share of its blocks." if n > 1 else ".")]
    if show_target:
        lines += ["Target, top row first ('#' = a block, '.' = air):", *task.rows]
    lines += [f"Build box (inclusive): from {corner(box.lo)} to {corner(box.hi)}.",
              f"Coordinates are absolute: x grows from {box.lo[0]} (left) to {box.hi[0]} (right), y grows from "
              f"{box.lo[1]} (bottom) to {box.hi[1]} (top), z is {box.lo[2]} everywhere.",
              "Blocks you may use:", block_lines([*blocks, "air"] if "air" not in blocks else blocks),
              "Rules:",
              "- One command per line: /setblock <x> <y> <z> <block>; no other command.",
              "- Integer coordinates only (no ~ or ^), every one inside the box."]
    if show_target:
        lines.append("- Place blocks only on '#' cells and leave '.' cells as air.")
    lines += ["- Two blocks sharing a side must not have the same texture.",
              f"- At most {cap} commands."]
    if persist:
        lines.append("- Later turns edit the wall this turn leaves.")
    return "\n".join(ln for ln in lines if ln)


def layer_text(task: HouseTask, include_air: bool) -> str:
    """One line per layer (bottom first): the layer's rectangles with absolute corners."""
    out = []
    for y, rects in sorted(rects_by_layer(task).items()):
        shown = [r for r in rects if include_air or r.block.strip().removeprefix("minecraft:") not in
                 ("air", "cave_air", "void_air")]
        out.append(f"y={y}: " + ("; ".join(_rect(r, y) for r in shown) or "(nothing)"))
    return "\n".join(out)


def _rect(r: Rect, y: int) -> str:
    return f"({r.x1}, {y}, {r.z1})-({r.x2}, {y}, {r.z2}) {r.block}"


def threat_line(t: Threat) -> str:
    attacks = "[" + ", ".join(str(a) for a in t.attacks) + "]"
    return (f"Threat: {len(t.attacks)} spiders are near and you have {t.hp} HP; their attacks are {attacks}, "
            f"{t.damage} damage in all. To kill them, write one line: /kill")


def limits_text(limits: dict[str, int], order: Sequence[str]) -> str:
    """The resource limits in legend order (``order``), or "" without limits."""
    lines = [f"- {b}: {limits[b]}" for b in order if b in limits]
    return ("Resource limits per agent, in cells (air is free):\n" + "\n".join(lines)) if lines else ""


def house_prompt(task: HouseTask, agent: int, n: int, blocks: Sequence[str], cap: int, threat: Threat,
                 limits: str, include_air: bool, persist: bool = False) -> str:
    """Agent ``agent``'s first-turn HouseBuild prompt (without the system text); ``limits``: ``limits_text``."""
    box: Box = task.box
    lines = [team_line(agent, n, "house"),
             "Build the house below with /fill commands" + (", placing your share of it." if n > 1 else "."),
             "Blocks you may use:", block_lines(blocks),
             "The house, one horizontal layer per y (bottom first), as rectangles of one block with absolute "
             "corners (x, y, z):",
             layer_text(task, include_air),
             f"Build box (inclusive): from {corner(box.lo)} to {corner(box.hi)}.",
             threat_line(threat),
             "Rules:",
             "- One command per line: /fill <x1> <y1> <z1> <x2> <y2> <z2> <block> (nothing after the block), or /kill.",
             "- Integer coordinates only (no ~ or ^), both corners inside the box.",
             "- Blocks from the list only.",
             f"- At most {cap} commands."]
    if persist:
        lines.append("- Later turns edit the house this turn leaves.")
    text = "\n".join(ln for ln in lines if ln)
    return text + ("\n\n" + limits if limits else "")


def with_system(system: str, body: str) -> str:
    return f"{system}\n\n{body}" if system else body
