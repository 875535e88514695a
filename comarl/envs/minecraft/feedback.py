"""The next turn's prompts: every ``external.mode`` of the reference, as data and as text.

Each mode has a data function (what the reference's follow-up shows: cell lists, rectangles, resources, the
last reward; ``benchmarks/minecraft_compare.py`` checks these against the reference) and a text function that
writes it into each agent's prompt, in our words, after the system text and around the first-turn prompt
(``original_prompt``) and the agent's last reply (``previous_response``), where the reference puts them.

StrBuild: ``perfect_feedback`` (per agent, its cells whose block is missing or of the wrong texture by the
colour plan; the last agent also gets the blocks to clear), ``position_feedback`` (every letter cell; pick about
half), ``score_feedback`` (the last reward). HouseBuild: the same three (cells with their intended block) and
``position_modification`` (the wrong cells, bottom first, at most ``lim``), ``rect_modification`` (the layer
rectangles holding a wrong cell, split between the agents by layer, at most ``lim`` each) and
``resource_schedule`` (each agent's resources left and the largest rectangles they still pay for).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from . import housebuild as H
from . import strbuild as S
from .commands import AIR, Pos, Reading, fill_volumes
from .housebuild import HouseTask, Rect
from .strbuild import StrTask
from .world import World

STR_MODES = ("perfect_feedback", "position_feedback", "score_feedback")
HOUSE_MODES = STR_MODES + ("position_modification", "rect_modification", "resource_schedule")


@dataclass(frozen=True)
class TurnView:
    """What a follow-up prompt may show about the turn just played.

    Attributes:
        number: the coming turn, 1-based (the reference's ``Turn:`` line).
        system: the system text that opens every prompt ("" for none).
        first: each agent's first-turn prompt (without the system text).
        responses: each agent's reply this turn.
        readings: each agent's accepted and rejected commands this turn.
        world: the world after this turn (what the reward scanned).
        reward: the reward the score feedback quotes.
        original: ``original_prompt``: repeat the first-turn prompt.
        previous: ``previous_response``: show the agent its reply.
        persist: the world carries over to the next turn (preset ``default``).
        caps: each agent's command cap per turn.
        blocks: each agent's allowed blocks as configured (air included where listed).
        limits_text: HouseBuild's resource-limit lines ("" without limits).
    """

    number: int
    system: str
    first: tuple[str, ...]
    responses: tuple[str, ...]
    readings: tuple[Reading, ...]
    world: World
    reward: float
    original: bool
    previous: bool
    persist: bool
    caps: tuple[int, ...]
    blocks: tuple[tuple[str, ...], ...]
    limits_text: str = ""

    @property
    def n(self) -> int:
        return len(self.responses)


def _cells(points: Sequence[Pos]) -> str:
    return "\n".join(f"- ({x}, {y}, {z})" for x, y, z in points) or "- (none)"


def _cells_with(points: Sequence[tuple[Pos, str]]) -> str:
    return "\n".join(f"- ({x}, {y}, {z}) = {b}" for (x, y, z), b in points) or "- (none)"


def _rects(rects: Sequence[tuple[int, Rect]]) -> str:
    return "\n".join(f"y={y}: ({r.x1}, {r.z1}, {r.x2}, {r.z2} {r.block})" for y, r in rects) or "(none)"


def _wrap(view: TurnView, agent: int, parts: list[str], original_first: bool = False,
          previous_label: str = "Your previous commands:") -> str:
    """``parts`` between the system text, the first-turn prompt (before or after them) and the last reply."""
    out = [view.system, ""] if view.system else []
    if view.limits_text and not view.original:  # the limits would otherwise be lost with the first prompt
        out += [view.limits_text, ""]
    if view.original and original_first and view.first[agent]:
        out += [view.first[agent], ""]
    out += parts
    if view.original and not original_first and view.first[agent]:
        out += ["", view.first[agent]]
    prev = view.responses[agent].strip()
    if view.previous and prev:
        out += ["", previous_label, prev]
    return "\n".join(out).strip()


def _world_line(view: TurnView) -> list[str]:
    return ["- Your commands edit the build as this turn left it."] if view.persist else []


# ---- StrBuild


def str_perfect(task: StrTask, view: TurnView, spread: bool = False) -> list[str]:
    wrong, extra = S.wrong_cells(task, view.world, view.blocks, spread)
    out = []
    for i in range(view.n):
        parts = [f"Feedback (turn {view.number}):", "- Coordinates are absolute (x, y, z); reply with /setblock "
                 "commands only.", "- Fix only the cells listed.", *_world_line(view), "",
                 "Cells where your block is missing or has the wrong texture:", _cells(wrong.get(i, []))]
        if i == view.n - 1:
            parts += ["", "Blocks to remove (set to air):", _cells(extra)]
        out.append(_wrap(view, i, parts))
    return out


def half_target(total: int) -> int:
    """About half of ``total`` cells, at least 1 when there are any: ``half_target(7) == 3``."""
    return max(1, total // 2) if total else 0


def str_position(task: StrTask, view: TurnView) -> list[str]:
    cells = S.positions_top_first(task)
    out = []
    for i in range(view.n):
        parts = [f"Position feedback (turn {view.number}):",
                 "- Coordinates are absolute (x, y, z); reply with /setblock commands only.",
                 f"- Choose about half of the letter cells (about {half_target(len(cells))}), no two of yours "
                 f"sharing a side.", f"- At most {view.caps[i]} commands.", *_world_line(view), "",
                 "The letter cells:", _cells(cells), "", "Blocks you may use:",
                 "\n".join(f"- {b}" for b in view.blocks[i]) or "- (see the task)", "",
                 "Format: /setblock <x> <y> <z> <block>"]
        out.append(_wrap(view, i, parts))
    return out


def score_parts(view: TurnView, extra: Sequence[str] = ()) -> list[str]:
    return [f"Score feedback (turn {view.number}):", f"- Reward of the team's last build: {view.reward:.4f}",
            *extra, *_world_line(view)]


def str_score(task: StrTask, view: TurnView) -> list[str]:
    return [_wrap(view, i, score_parts(view)) for i in range(view.n)]


# ---- HouseBuild: the data


def house_owner_split(wrong: Sequence[tuple[Pos, str]], blocks: Sequence[Sequence[str]]) -> dict[int, list]:
    """``perfect_feedback``: who fixes each wrong cell. The only agent allowed its block, else the k-th wrong
    cell goes to agent ``k % len(candidates)`` of the agents allowed it (all agents when none is)."""
    n = len(blocks)
    allowed = [{S.block_name(b) for b in bl} for bl in blocks]
    out: dict[int, list] = {i: [] for i in range(n)}
    for k, (pos, block) in enumerate(wrong):
        cands = [i for i in range(n) if block in allowed[i]] or list(range(n))
        out[cands[0] if len(cands) == 1 else cands[k % len(cands)]].append((pos, block))
    return out


def house_positions(task: HouseTask) -> list[tuple[Pos, str]]:
    """Every cell meant to hold a block (not air), top layer first, then x, then z."""
    cells = [(p, b) for p, b in task.expected().items() if b not in AIR]
    return sorted(cells, key=lambda c: (-c[0][1], c[0][0], c[0][2]))


def modification_cells(task: HouseTask, world: World, lim: int | None) -> list[tuple[Pos, str]]:
    """``position_modification``: the wrong cells bottom layer first, the first ``lim`` of them (all if not > 0)."""
    wrong = H.wrong_cells(task, world, top_first=False)
    return wrong[:lim] if lim is not None and lim > 0 else wrong


def wrong_rects(task: HouseTask, world: World) -> list[tuple[int, Rect]]:
    """``rect_modification``: the layer rectangles (``housebuild.layer_rects``) holding a wrong cell, sorted
    by (y, x1, z1, x2, z2, block)."""
    by_y = H.rects_by_layer(task)
    found: dict[tuple[int, int, int, int, int, str], tuple[int, Rect]] = {}
    for (x, y, z), block in H.wrong_cells(task, world, top_first=True):
        for r in by_y.get(y, []):
            if S.block_name(r.block) == block and r.holds(x, z):
                found[(y, r.x1, r.z1, r.x2, r.z2, block)] = (y, Rect(r.x1, r.z1, r.x2, r.z2, block))
                break
    return [found[k] for k in sorted(found)]


def best_subrect(r: Rect, budget: int) -> tuple[Rect, int]:
    """The largest rectangle of ``r``'s corner (x1, z1) that ``budget`` cells pay for, and its area.

    Widths are tried from the full width down; each takes as many rows as the budget allows. A 4 x 3
    rectangle with 7 cells left gives a 3 x 2 rectangle (area 6): ``best_subrect(Rect(0, 0, 3, 2, "b"), 7)``.
    """
    width, depth = r.x2 - r.x1 + 1, r.z2 - r.z1 + 1
    best = (0, 0, 0)
    for w in range(width, 0, -1):
        d = min(depth, budget // w)
        if w * d > best[0]:
            best = (w * d, w, d)
        if best[0] == budget:
            break
    area, w, d = best
    if area <= 0:
        return Rect(r.x1, r.z1, r.x1, r.z1, r.block), 0
    return Rect(r.x1, r.z1, r.x1 + w - 1, r.z1 + d - 1, r.block), area


def schedule(task: HouseTask, limits: Mapping[str, int], used: Mapping[str, int], blocks: Sequence[str],
             left_after_turn: bool = False) -> tuple[dict[str, int], list[tuple[int, Rect]]]:
    """``resource_schedule`` for one agent: (resources left, rectangles to build next).

    The house's non-air rectangles of the agent's blocks, largest first (then by y, x1, z1, x2, z2, block), are
    taken whole while the block's budget pays for them; then the one rectangle whose best corner part
    (:func:`best_subrect`) is largest is added. The resources left are those after the whole rectangles (the
    reference prints them so), or with ``left_after_turn`` those before any suggestion.
    """
    allowed = {S.block_name(b) for b in blocks}
    left = {b: int(v) - int(used.get(b, 0)) for b, v in limits.items()}
    after_turn = dict(left)
    rects = [(y, r, S.block_name(r.block)) for y, rs in H.rects_by_layer(task).items() for r in rs
             if S.block_name(r.block) not in AIR]
    cands = sorted(((y, Rect(r.x1, r.z1, r.x2, r.z2, b)) for y, r, b in rects if b in allowed and left.get(b, 0) > 0),
                   key=lambda c: (-c[1].area, c[0], c[1].x1, c[1].z1, c[1].x2, c[1].z2, c[1].block))
    chosen: list[tuple[int, Rect]] = []
    for y, r in cands:
        if left.get(r.block, 0) >= r.area:
            chosen.append((y, r))
            left[r.block] -= r.area
    whole = set(chosen)
    best: tuple[int, Rect] | None = None
    best_area = 0
    for y, r in cands:
        budget = left.get(r.block, 0)
        if (y, r) in whole or budget <= 0 or r.area <= 0:
            continue
        part, area = best_subrect(r, budget)
        if area > best_area:
            best, best_area = (y, part), area
    if best is not None and best_area > 0:
        chosen.append(best)
    return (after_turn if left_after_turn else left), chosen


def rect_share(rects: Sequence[tuple[int, Rect]], agent: int, n: int, split: Callable[[int, int, int], bool],
               lim: int | None) -> list[tuple[int, Rect]]:
    """Agent ``agent``'s rectangles: those of its layers (``split(agent, n, y)``), the first ``lim`` (if > 0)."""
    mine = [(y, r) for y, r in rects if n == 1 or split(agent, n, y)]
    return mine[:lim] if lim is not None and lim > 0 else mine


# ---- HouseBuild: the text


def house_perfect(task: HouseTask, view: TurnView) -> list[str]:
    wrong = house_owner_split(H.wrong_cells(task, view.world, top_first=True), view.blocks)
    out = []
    for i in range(view.n):
        parts = [f"Feedback (turn {view.number}):",
                 "- Coordinates are absolute (x, y, z); reply with /fill commands only.",
                 "- Fix only the cells listed; one cell is /fill x y z x y z block.", *_world_line(view), "",
                 "Cells to set:", _cells_with(wrong.get(i, []))]
        if i == view.n - 1:  # every cell of the box has an intended block, so nothing is ever extra
            parts += ["", "Blocks to remove (set to air):", _cells([])]
        out.append(_wrap(view, i, parts))
    return out


def house_position(task: HouseTask, view: TurnView) -> list[str]:
    cells = house_positions(task)
    out = []
    for i in range(view.n):
        parts = [f"Position feedback (turn {view.number}):",
                 "- Coordinates are absolute (x, y, z); reply with /fill commands only.",
                 f"- Choose about half of the cells (about {half_target(len(cells))}); one cell is "
                 f"/fill x y z x y z block.", f"- At most {view.caps[i]} commands.", *_world_line(view), "",
                 "The house's cells:", _cells_with(cells), "", "Blocks you may use:",
                 "\n".join(f"- {b}" for b in view.blocks[i]) or "- (see the task)", "",
                 "Format: /fill <x> <y> <z> <x> <y> <z> <block>"]
        out.append(_wrap(replace(view, limits_text=""), i, parts))  # the reference repeats no limits here
    return out


def house_score(task: HouseTask, view: TurnView) -> list[str]:
    view = replace(view, limits_text="")
    return [_wrap(view, i, score_parts(view, ["- Reply with commands only."])) for i in range(view.n)]


def house_modification(task: HouseTask, view: TurnView, lim: int | None) -> list[str]:
    cells = modification_cells(task, view.world, lim)
    text = "\n".join(f"({x} {y} {z} {b})" for (x, y, z), b in cells) or "(none)"
    parts = ["Reply with commands only.", *_world_line(view), "", "Suggested fixes (x y z block):", text]
    return [_wrap(view, i, parts, original_first=True) for i in range(view.n)]


def house_rects(task: HouseTask, view: TurnView, lim: int | None, split: Callable[[int, int, int], bool]) -> list[str]:
    rects = wrong_rects(task, view.world)
    world = ("Reminder: your commands edit the house as this turn left it." if view.persist else
             "Reminder: every turn starts from an empty (all-air) world.")
    out = []
    for i in range(view.n):
        parts = ["Reply with commands only.", "", world, "Your accepted commands last turn:",
                 "\n".join(f"- {c}" for c in view.readings[i].texts()) or "- (none)", "",
                 "Rectangles to fix (y: x1, z1, x2, z2 block):", _rects(rect_share(rects, i, view.n, split, lim))]
        out.append(_wrap(view, i, parts, original_first=True, previous_label="Your previous reply:"))
    return out


def house_schedule(task: HouseTask, view: TurnView, limits: Mapping[str, int],
                   used: Sequence[Mapping[str, int]], left_after_turn: bool = False) -> list[str]:
    out = []
    order = [S.block_name(v) for v in task.legend.values()]
    for i in range(view.n):
        left, chosen = schedule(task, limits, used[i], view.blocks[i], left_after_turn)
        rest = "\n".join(f"- {b}: {max(0, left.get(b, 0))}" for b in order if b not in AIR and b in limits)
        parts = ["Reply with commands only.", *_world_line(view), "", "Your accepted commands last turn:",
                 "\n".join(f"- {c}" for c in view.readings[i].texts()) or "- (none)", "",
                 "Resources left (air is free):", rest or "(none)", "",
                 "Rectangles to build next, largest first (y: x1, z1, x2, z2 block):", _rects(chosen)]
        out.append(_wrap(view, i, parts, original_first=True, previous_label="Your previous reply:"))
    return out


def used_this_turn(readings: Sequence[Reading]) -> list[dict[str, int]]:
    """Cells each agent filled per block this turn (air included)."""
    return [fill_volumes(r.accepted) for r in readings]
