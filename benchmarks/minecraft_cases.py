"""Generated command lists for StrBuild and HouseBuild: gold builds, random builds and adversarial text.

Used by ``benchmarks/minecraft_compare.py`` (comarl's ``paper`` preset against the reference repository's own
reward and feedback code) and by ``tests/envs/minecraft/test_paper_reference.py`` (the same cases against the
numbers recorded from the reference). Every case is built from ``random.Random(seed)``, so a case id always
means the same texts.

A case is one joint action (one text per agent) on one task with one set of ``env.args``. Per task and team
size: gold builds (the target exactly, in several text layouts; with cells dropped, extra, recoloured),
random valid commands, adversarial lines (huge and relative coordinates, unicode digits and blanks, wrong
blocks and commands, fences, list markers, more lines than ``max_commands``) and random unicode garbage.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any

from comarl.envs.minecraft.commands import Box
from comarl.envs.minecraft.data import load_house_items, load_str_items
from comarl.envs.minecraft.housebuild import rects_by_layer, task_from_item
from comarl.envs.minecraft.str_game import DEFAULT_BLOCKS
from comarl.envs.minecraft.strbuild import StrTask, colour_plan

STR_ARGS = {"blocks": [list(b) for b in DEFAULT_BLOCKS], "max_commands": 300, "spacing": 2}
HOUSE_BLOCKS = ["white_concrete", "obsidian", "stone_stairs", "stone_bricks", "planks", "air"]


@dataclass(frozen=True)
class Case:
    """One joint action to score: ``kind`` (str | house), the item, the team size, the texts, the env args."""

    id: str
    kind: str
    item: dict[str, Any]
    n: int
    texts: tuple[str, ...]
    args: dict[str, Any] = field(default_factory=dict)


# ---- text pieces

ODD_LINES = [
    "", "   ", "\t", "/", "//setblock 0 0 0 stone", "/ setblock 0 0 0 stone", "/SETBLOCK 0 0 0 stone",
    "SetBlock 1 1 0 obsidian", "setblock 0 0 0 stone", "/setblock 0 0", "/setblock 0 0 0",
    "/setblock ~1 0 0 stone", "/setblock ^ 0 0 stone", "/setblock 1_0 0 0 stone", "/setblock +1 -0 0 stone",
    "/setblock \u0661 \u0662 0 stone", "/setblock \uff11 0 0 obsidian", "/setblock 0x1 0 0 stone",
    "/setblock 1e3 0 0 stone", "/setblock -1 0 0 stone", "/setblock 99999999999999999999999 0 0 stone",
    "/setblock " + "9" * 5000 + " 0 0 stone", "/setblock 0 0 0 minecraft:stone", "/setblock 0 0 0 Stone",
    "/setblock 0 0 0 minecraft:minecraft:stone", "/setblock 1 1 0 stone replace", "/setblock 0 0 0 diamond_block",
    "/setblock 2 2 0 air", "/setblock 2 2 0 cave_air", "/fill 0 0 0 3 3 0 stone", "/fill 0 0 0 1 1 1 obsidian",
    "/fill 0 0 0 1 0 1 white_concrete replace", "/fill 5 6 6 0 0 0 stone_bricks", "/fill 0 0 0 0 0 0",
    "/fill ~ ~ ~ 1 1 1 planks", "/fill 0 0 0 99 0 0 planks", "/fill -1 0 0 0 0 0 planks",
    "/kill", "/kill @e[type=spider]", "/KILL", "kill spiders now", "/summon spider", "/give @p stone 64",
    "1. /setblock 0 0 0 oak_planks", "2) /setblock 1 0 0 white_concrete", "- /setblock 2 0 0 stone",
    "* - /setblock 3 0 0 obsidian", "-- 4. /setblock 4 0 0 stone", "\u0663. /setblock 0 1 0 stone",
    "\u2028/setblock 0 0 0 stone\u2029", "\x85/setblock 1 0 0 stone", "\x0b/setblock 0 0 0 obsidian\x0c",
    "/setblock\u30000\u30000\u30000\u3000stone", "/setblock\t0\t4\t0\toak_planks", "\x00/setblock 0 0 0 stone",
    "Here are the commands:", "```", "```minecraft", "``` mcfunction", "Sure! I will build it.",
    "/fill 0 4 0 5 4 6 stone_bricks", "/fill 1 1 1 4 3 5 air", "/fill 0 0 1 5 0 5 minecraft:white_concrete",
]


def _garbage(rng: random.Random, length: int) -> str:
    pools = ["abcdefghijklmnopqrstuvwxyz", "0123456789 -~^/", "\u00e9\u4e2d\u0661\uff11\u2028\u00a0\u200b",
             "```\n\t*#.", "\U0001f9f1\U0001f577"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(length))


def _layout(rng: random.Random, lines: list[str]) -> str:
    """The same commands in one of several text layouts the reader must undo."""
    style = rng.randrange(7)
    if style == 0:
        return "\n".join(lines)
    if style == 1:
        return "```\n" + "\n".join(lines) + "\n```"
    if style == 2:
        return "Here you go:\n```mcfunction\n" + "\n".join(lines) + "\n```\nDone."
    if style == 3:
        return "\n".join(f"{i + 1}. {ln}" for i, ln in enumerate(lines))
    if style == 4:
        return "\n".join(f"- {ln.lstrip('/')}" for ln in lines)
    if style == 5:
        return "\r\n".join("  " + ln.replace(" ", "  ") + " " for ln in lines)
    return "\n\n".join(ln.replace("/setblock", "/SETBLOCK").replace("/fill", "/Fill") for ln in lines)


def _mix(rng: random.Random, lines: list[str], odd: int) -> list[str]:
    out = list(lines)
    for _ in range(odd):
        out.insert(rng.randrange(len(out) + 1), rng.choice(ODD_LINES))
    return out


# ---- StrBuild


def _setblocks(cells: list[tuple[tuple[int, int, int], str]]) -> list[str]:
    return [f"/setblock {x} {y} {z} {b}" for (x, y, z), b in cells]


def str_texts(rng: random.Random, task: StrTask, n: int, blocks: list[list[str]]) -> list[tuple[str, tuple[str, ...]]]:
    """(label, texts) joint actions for one StrBuild task and team size."""
    plan, owner = colour_plan(task, blocks[:n])
    mine = [[(p, b) for p, b in sorted(plan.items()) if owner[p] == i] for i in range(n)]
    box: Box = task.box
    cells = list(box.cells())
    out: list[tuple[str, tuple[str, ...]]] = []
    for k in range(4):  # gold in several layouts
        out.append((f"gold{k}", tuple(_layout(rng, _setblocks(m)) for m in mine)))
    out.append(("gold_prefixed", tuple("\n".join(ln.replace(f" {b}", f" minecraft:{b}") for ln, (_, b) in
                                                 zip(_setblocks(m), m)) for m in mine)))
    for k in range(3):  # gold with damage: dropped cells, extra cells, recoloured cells
        texts = []
        for i, m in enumerate(mine):
            kept = [c for c in m if rng.random() > 0.3]
            extra = [(rng.choice(cells), rng.choice(blocks[i])) for _ in range(rng.randrange(6))]
            recol = [(p, rng.choice(blocks[i])) for p, _ in m if rng.random() < 0.2]
            texts.append(_layout(rng, _setblocks(kept + extra + recol)))
        out.append((f"gold_damaged{k}", tuple(texts)))
    for k in range(5):  # random valid builds
        texts = tuple(_layout(rng, _setblocks([(rng.choice(cells), rng.choice(blocks[i]))
                                               for _ in range(rng.randrange(1, 60))])) for i in range(n))
        out.append((f"random{k}", texts))
    for k in range(6):  # adversarial lines mixed into gold or random builds
        texts = tuple(_layout(rng, _mix(rng, _setblocks(
            mine[i] if k % 2 else [(rng.choice(cells), rng.choice(blocks[i])) for _ in range(10)]),
            rng.randrange(3, 20))) for i in range(n))
        out.append((f"adversarial{k}", texts))
    many = tuple("\n".join(_setblocks([(rng.choice(cells), rng.choice(blocks[i])) for _ in range(340)]))
                 for i in range(n))
    out.append(("over_max_commands", many))
    out.append(("empty", tuple("" for _ in range(n))))
    out.append(("blank", tuple(rng.choice([" ", "\n\n", "```\n```", "``````", "```", "\u2028"]) for _ in range(n))))
    for k in range(3):
        out.append((f"garbage{k}", tuple(_garbage(rng, rng.randrange(0, 400)) for _ in range(n))))
    out.append(("odd_only", tuple("\n".join(rng.sample(ODD_LINES, 25)) for _ in range(n))))
    return out


def str_cases(seed: int = 0) -> list[Case]:
    """Every StrBuild case: the 10 tasks x 1 and 2 agents x ~26 joint actions, plus a small command cap."""
    items = load_str_items(None, "train", None)
    rng = random.Random(seed)
    out = []
    for item in items:
        task = StrTask.of(item["task_id"], item["string"], 2)
        for n in (1, 2):
            args = {**STR_ARGS, "blocks": STR_ARGS["blocks"][:n]}
            for label, texts in str_texts(rng, task, n, args["blocks"]):
                out.append(Case(f"str/{item['task_id']}/{n}/{label}", "str", item, n, texts, args))
            label, texts = str_texts(rng, task, n, args["blocks"])[0]
            out.append(Case(f"str/{item['task_id']}/{n}/cap7", "str", item, n, texts, {**args, "max_commands": 7}))
    return out


# ---- HouseBuild


def _fills(rects: list[tuple[int, Any]]) -> list[str]:
    return [f"/fill {r.x1} {y} {r.z1} {r.x2} {y} {r.z2} {r.block}" for y, r in rects]


def house_texts(rng: random.Random, item: dict[str, Any], n: int) -> list[tuple[str, tuple[str, ...]]]:
    task = task_from_item(item)
    rects = [(y, r) for y, rs in sorted(rects_by_layer(task).items()) for r in rs]
    solid = [(y, r) for y, r in rects if r.block != "air"]
    cells = list(task.box.cells())
    blocks = sorted(set(task.legend.values()))

    def split(lines: list[str]) -> list[list[str]]:
        parts: list[list[str]] = [[] for _ in range(n)]
        for k, ln in enumerate(lines):
            parts[k % n if rng.random() < 0.7 else rng.randrange(n)].append(ln)
        return parts

    def rand_fill() -> str:
        a, b = rng.choice(cells), rng.choice(cells)
        if rng.random() < 0.6:  # mostly small boxes
            b = tuple(min(max(v + rng.randrange(-1, 2), lo), hi) for v, lo, hi in zip(a, task.box.lo, task.box.hi))
        return f"/fill {a[0]} {a[1]} {a[2]} {b[0]} {b[1]} {b[2]} {rng.choice(blocks)}"

    out: list[tuple[str, tuple[str, ...]]] = []
    for k in range(3):
        parts = split(_fills(solid))
        if k:
            parts[rng.randrange(n)].append("/kill")
        out.append((f"gold{k}", tuple(_layout(rng, p) for p in parts)))
    out.append(("gold_with_air", tuple(_layout(rng, p + ["/kill"]) for p in split(_fills(rects)))))
    out.append(("gold_one_agent_all", tuple(_layout(rng, _fills(solid) + ["/kill"]) if i == 0 else ""
                                             for i in range(n))))
    for k in range(3):
        parts = split([ln for ln in _fills(solid) if rng.random() > 0.25] +
                      [rand_fill() for _ in range(rng.randrange(5))])
        out.append((f"gold_damaged{k}",
                    tuple(_layout(rng, p + (["/kill"] if rng.random() < 0.5 else [])) for p in parts)))
    for k in range(5):
        out.append((f"random{k}", tuple(_layout(rng, [rand_fill() for _ in range(rng.randrange(1, 40))] +
                                                 (["/kill"] if rng.random() < 0.3 else [])) for _ in range(n))))
    out.append(("big_fills", tuple(_layout(rng, [f"/fill 0 0 0 5 {rng.randrange(7)} 6 {rng.choice(blocks)}"
                                                 for _ in range(4)]) for _ in range(n))))
    for k in range(6):
        base = [ln for ln in _fills(solid)] if k % 2 else [rand_fill() for _ in range(10)]
        out.append((f"adversarial{k}", tuple(_layout(rng, _mix(rng, p, rng.randrange(3, 20))) for p in split(base))))
    out.append(("over_max_commands", tuple("\n".join(rand_fill() for _ in range(320)) for _ in range(n))))
    out.append(("empty", tuple("" for _ in range(n))))
    out.append(("kill_only", tuple("/kill" if i == n - 1 else "" for i in range(n))))
    for k in range(3):
        out.append((f"garbage{k}", tuple(_garbage(rng, rng.randrange(0, 400)) for _ in range(n))))
    out.append(("odd_only", tuple("\n".join(rng.sample(ODD_LINES, 25)) for _ in range(n))))
    return out


HOUSE_SETTINGS = {
    "limited": {"blocks": [HOUSE_BLOCKS, HOUSE_BLOCKS], "max_commands": 600, "limited_resource": True, "hp": 5,
                "spiders": {"num": 3, "atk_low": 1, "atk_high": 3, "seed": 7}, "lim": 20},
    "open": {"max_commands": 600, "limited_resource": False, "hp": 20,
             "spiders": {"num": 2, "atk_low": 4, "atk_high": 9, "seed": 3}},
    "tight": {"blocks": [HOUSE_BLOCKS, HOUSE_BLOCKS], "max_commands": 9, "limited_resource": True, "hp": 0,
              "spiders": {"num": 3, "atk_low": 1, "atk_high": 3, "seed": 1}, "lim": 3},
}


def house_cases(seed: int = 0) -> list[Case]:
    """Every HouseBuild case: the 10 houses x 1 and 2 agents x 3 settings x ~27 joint actions."""
    items = load_house_items(None, "train", None)
    rng = random.Random(seed + 1)
    out = []
    for item in items:
        for n in (1, 2):
            for name, args in HOUSE_SETTINGS.items():
                args = dict(args)
                if "blocks" in args:
                    args["blocks"] = args["blocks"][:n]
                for label, texts in house_texts(rng, item, n):
                    out.append(Case(f"house/{item['task_id']}/{n}/{name}/{label}", "house", item, n, texts, args))
    return out


# ---- comparing prompts by their data lines

_DATA = [re.compile(p) for p in (
    r"^- \(-?\d+, -?\d+, -?\d+\)( = \S+)?$",          # a cell (with its block)
    r"^-? ?\(none\)$",                                 # an empty list
    r"^\(-?\d+ -?\d+ -?\d+ \S+\)$",                    # position_modification's cell
    r"^y=-?\d+: \(-?\d+, -?\d+, -?\d+, -?\d+ \S+\)$",  # a rectangle
    r"^- [a-z0-9_:]+: -?\d+$",                         # a resource line (limits or left)
    r"^- /(fill|kill|setblock)\b.*$",                  # an accepted command
)]
_NUMBERS = {
    "reference": [re.compile(r"Previous reward: (\S+)"), re.compile(r"target size ~ (\d+)"),
                  re.compile(r"Max commands allowed: (\d+)"), re.compile(r"^- Turn: (\d+)$")],
    "comarl": [re.compile(r"Reward of the team's last build: (\S+)"), re.compile(r"\(about (\d+)\)"),
               re.compile(r"^- At most (\d+) commands\.$"), re.compile(r"\(turn (\d+)\):$")],
}


def data_lines(prompt: str, side: str) -> list[str]:
    """The lines of a follow-up prompt that carry data (cells, rectangles, resources, commands, the reward,
    the subset size, the command cap), in order; ``side``: ``reference`` or ``comarl`` (their wordings of the
    numbers differ). Compare prompts written without the first-turn prompt (``original_prompt: false``): the
    two first-turn prompts differ in wording."""
    out = []
    for line in prompt.splitlines():
        if any(p.match(line) for p in _DATA):
            out.append(line.replace("- (none)", "(none)"))
            continue
        for k, p in enumerate(_NUMBERS[side]):
            m = p.search(line)
            if m:
                out.append(f"#{k}={m.group(1)}")
    return out


def digest(lines: list[list[str]]) -> str:
    """A short hash of each agent's data lines (or of a list of such hashes)."""
    return hashlib.sha1("\x1e".join("\x1f".join(x) for x in lines).encode()).hexdigest()[:12]
