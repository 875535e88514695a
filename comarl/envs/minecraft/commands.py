"""An agent's text as Minecraft commands: the lines, the tokens, and which commands are accepted.

The reading rules are the reference environment's (``OpenMLRL/LLM_Collab_Minecraft``), kept as behaviour so
that a reward computed here equals the reference's on any text (``benchmarks/minecraft_compare.py``):

- A text holding a fenced block (three or more backtick pairs' worth of ```` ``` ````) is reduced to the inside
  of its first block, without a first line that is a single word (the language tag).
- Each non-blank line loses one leading list marker (``-``, ``*``, ``1.``, ``2)``) and its surrounding blanks.
- A command is accepted when it parses (absolute integer coordinates: no ``~`` or ``^``), names an allowed block
  (``minecraft:`` prefixes dropped), lies inside the build box, and fewer than ``max_commands`` commands were
  accepted before it; anything else is rejected with a reason and never raises.

StrBuild agents write ``/setblock x y z block``; HouseBuild agents write ``/fill x1 y1 z1 x2 y2 z2 block`` (no
mode word after the block) and ``/kill ...`` (always accepted, it answers the spiders). HouseBuild may cap the
cells of each block an agent fills (``limits``): a fill that would pass the cap is rejected whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

FENCE = "```"
_LANGUAGE_LINE = re.compile(r"^\s*[a-zA-Z0-9_-]+\s*\n")
_LIST_MARKER = re.compile(r"^\s*(?:[-*]+|\d+[.)])\s*")
AIR = frozenset({"air", "cave_air", "void_air"})

Pos = tuple[int, int, int]


def block_name(token: str) -> str:
    """``token`` without surrounding blanks and one leading ``minecraft:``: ``"minecraft:stone" -> "stone"``."""
    name = (token or "").strip()
    return name[len("minecraft:"):] if name.startswith("minecraft:") else name


def is_air(name: str | None) -> bool:
    """Air of any kind (``air``, ``cave_air``, ``void_air``, with or without ``minecraft:``); None is air."""
    return name is None or block_name(str(name)) in AIR


def _unfenced(text: str) -> str:
    body = (text or "").strip()
    if FENCE not in body:
        return body
    pieces = body.split(FENCE)
    if len(pieces) < 3:  # an opening fence that never closes: the text is read as it is
        return body
    return _LANGUAGE_LINE.sub("", pieces[1].strip()).strip()


def command_lines(text: str) -> list[str]:
    """The candidate command lines of ``text`` (fence and list markers removed, blank lines dropped).

    ``command_lines("```mc\\n1. /setblock 0 0 0 stone\\n\\n- /kill\\n```") == ["/setblock 0 0 0 stone", "/kill"]``.
    """
    out = []
    for line in _unfenced(text).splitlines():
        line = _LIST_MARKER.sub("", line.strip()).strip()
        if line:
            out.append(line)
    return out


def coordinate(token: str) -> int | None:
    """An absolute integer coordinate, or None (relative ``~``/``^`` forms, anything ``int`` refuses)."""
    t = (token or "").strip()
    if not t or t[0] in "~^":
        return None
    try:
        return int(t)
    except ValueError:  # also numbers longer than Python's int-from-text digit limit
        return None


@dataclass(frozen=True)
class Box:
    """An inclusive box of cells, ``lo`` <= ``hi`` on every axis."""

    lo: Pos
    hi: Pos

    @staticmethod
    def spanning(a: Sequence[int], b: Sequence[int]) -> "Box":
        """The box with corners ``a`` and ``b`` in any order."""
        return Box(tuple(min(p, q) for p, q in zip(a, b)), tuple(max(p, q) for p, q in zip(a, b)))  # type: ignore[arg-type]

    def __contains__(self, p: object) -> bool:
        return isinstance(p, tuple) and all(lo <= v <= hi for lo, v, hi in zip(self.lo, p, self.hi))

    @property
    def size(self) -> Pos:
        return (self.hi[0] - self.lo[0] + 1, self.hi[1] - self.lo[1] + 1, self.hi[2] - self.lo[2] + 1)

    @property
    def volume(self) -> int:
        x, y, z = self.size
        return x * y * z

    def cells(self) -> Iterator[Pos]:
        """Every cell, y outermost, then x, then z."""
        for y in range(self.lo[1], self.hi[1] + 1):
            for x in range(self.lo[0], self.hi[0] + 1):
                for z in range(self.lo[2], self.hi[2] + 1):
                    yield (x, y, z)


@dataclass(frozen=True)
class SetBlock:
    pos: Pos
    block: str

    def text(self) -> str:
        x, y, z = self.pos
        return f"/setblock {x} {y} {z} {self.block}"


@dataclass(frozen=True)
class Fill:
    """``/fill`` with its two corners as written (``region`` orders them)."""

    a: Pos
    b: Pos
    block: str

    @property
    def region(self) -> Box:
        return Box.spanning(self.a, self.b)

    def text(self) -> str:
        return f"/fill {self.a[0]} {self.a[1]} {self.a[2]} {self.b[0]} {self.b[1]} {self.b[2]} {self.block}"


@dataclass(frozen=True)
class Kill:
    args: tuple[str, ...] = ()

    def text(self) -> str:
        return " ".join(("/kill",) + self.args)


Command = SetBlock | Fill | Kill


@dataclass(frozen=True)
class Reading:
    """What one agent's text gave: the accepted commands in order, and each rejected line with its reason.

    Attributes:
        accepted: the commands that act, in the order written.
        rejected: ``(line, reason)`` per refused line.
        over_limit: how many of the rejected lines broke a resource cap (HouseBuild ``limits``).
    """

    accepted: tuple[Command, ...]
    rejected: tuple[tuple[str, str], ...]
    over_limit: int = 0

    @property
    def killed(self) -> bool:
        return any(isinstance(c, Kill) for c in self.accepted)

    def texts(self) -> list[str]:
        return [c.text() for c in self.accepted]


def _words(line: str) -> list[str]:
    s = (line or "").strip()
    if s.startswith("/"):
        s = s[1:].lstrip()
    return s.split()


def read_setblocks(lines: Iterable[str], allowed: Iterable[str], box: Box, max_commands: int) -> Reading:
    """StrBuild: accept ``/setblock x y z block`` lines (``air`` is always allowed); see the module docstring."""
    ok = {block_name(b) for b in allowed} | {"air"}
    accepted: list[Command] = []
    rejected: list[tuple[str, str]] = []
    for line in lines:
        if len(accepted) >= max_commands:
            rejected.append((line, f"more than max_commands={max_commands}"))
            continue
        words = _words(line)
        if not words:
            continue
        if words[0].lower() != "setblock":
            rejected.append((line, f"unsupported command {words[0].lower()!r} (only /setblock)"))
            continue
        if len(words) < 5:
            rejected.append((line, "needs /setblock x y z block"))
            continue
        xyz = [coordinate(t) for t in words[1:4]]
        if None in xyz:
            rejected.append((line, "coordinates must be absolute integers (no ~ or ^)"))
            continue
        block = block_name(words[4])
        if block not in ok:
            rejected.append((line, f"block {block!r} is not allowed"))
            continue
        pos = (xyz[0], xyz[1], xyz[2])
        if pos not in box:
            rejected.append((line, "outside the build box"))
            continue
        accepted.append(SetBlock(pos, block))  # type: ignore[arg-type]
    return Reading(tuple(accepted), tuple(rejected))


def read_fills(lines: Iterable[str], allowed: Iterable[str], box: Box, max_commands: int,
               limits: Mapping[str, int] | None = None) -> Reading:
    """HouseBuild: accept ``/fill`` (both corners in the box, no mode word) and ``/kill`` lines.

    ``limits``: block -> most cells this agent may fill with it over the lines read (air is never capped; a
    block without an entry is not capped); a fill passing its cap is rejected whole and counted in
    ``over_limit``.
    """
    ok = {block_name(b) for b in allowed} | {"air"}
    caps = {block_name(str(k)): int(v) for k, v in (limits or {}).items() if int(v) >= 0}
    used: dict[str, int] = {}
    accepted: list[Command] = []
    rejected: list[tuple[str, str]] = []
    over = 0
    for line in lines:
        if len(accepted) >= max_commands:
            rejected.append((line, f"more than max_commands={max_commands}"))
            continue
        words = _words(line)
        if not words:
            continue
        name = words[0].lower()
        if name == "kill":
            accepted.append(Kill(tuple(words[1:])))
            continue
        if name != "fill":
            rejected.append((line, f"unsupported command {name!r} (only /fill and /kill)"))
            continue
        if len(words) < 8:
            rejected.append((line, "needs /fill x1 y1 z1 x2 y2 z2 block"))
            continue
        xyz = [coordinate(t) for t in words[1:7]]
        if None in xyz:
            rejected.append((line, "coordinates must be absolute integers (no ~ or ^)"))
            continue
        block = block_name(words[7])
        if block not in ok:
            rejected.append((line, f"block {block!r} is not allowed"))
            continue
        a, b = (xyz[0], xyz[1], xyz[2]), (xyz[3], xyz[4], xyz[5])
        if a not in box or b not in box:
            rejected.append((line, "a corner is outside the build box"))
            continue
        if len(words) > 8:
            rejected.append((line, "fill modes (replace, keep, ...) are not allowed"))
            continue
        fill = Fill(a, b, block)  # type: ignore[arg-type]
        if caps and block not in AIR and block in caps:
            total = used.get(block, 0) + fill.region.volume
            if total > caps[block]:
                rejected.append((line, f"over the {block} limit: {total} > {caps[block]}"))
                over += 1
                continue
            used[block] = total
        accepted.append(fill)
    return Reading(tuple(accepted), tuple(rejected), over)


def agent_command_caps(total: int, num_agents: int) -> list[int]:
    """``max_commands`` split over the agents: ``total // n`` each (at least 1), the remainder to agent 0.

    ``agent_command_caps(301, 2) == [151, 150]``; ``agent_command_caps(1, 3) == [2, 1, 1]``.
    """
    n = max(1, num_agents)
    per = max(1, total // n)
    caps = [per] * n
    caps[0] += total % n
    return caps


def fill_volumes(commands: Iterable[Command]) -> dict[str, int]:
    """Cells each block fills over ``commands`` (air included), e.g. two ``/fill`` of 3 stone cells -> {stone: 6}."""
    out: dict[str, int] = {}
    for c in commands:
        if isinstance(c, Fill):
            out[c.block] = out.get(c.block, 0) + c.region.volume
    return out
