"""The data of every external mode, worked by hand on tiny tasks (the texts are tested in test_env.py)."""
from comarl.envs.minecraft.feedback import (best_subrect, half_target, house_owner_split, house_positions,
                                            modification_cells, rect_share, schedule, wrong_rects)
from comarl.envs.minecraft.housebuild import Rect, task_from_item
from comarl.envs.minecraft.presets import band_layers, paper_layers
from comarl.envs.minecraft.strbuild import StrTask, positions_top_first, wrong_cells

HOUSE = {"task_id": "h", "box": [[0, 0, 0], [1, 1, 1]], "legend": {"S": "stone", "A": "air", "P": "minecraft:planks"},
         "layers": [["SS", "SP"], ["AA", "SA"]]}
SLAB = {"task_id": "s", "box": [[0, 0, 0], [2, 0, 1]], "legend": {"S": "stone"}, "layers": [["SSS", "SSS"]]}


def test_str_perfect_feedback_cells_per_owner_and_extra():
    t = StrTask("t", "x", ("#.", "##"), 0)
    blocks = [["a", "b"], ["c", "d"]]  # plan: (0,0) a by agent 0; (1,0) d and (0,1) d by agent 1
    world = {(0, 0, 0): "a", (1, 0, 0): "c", (1, 1, 0): "b"}
    wrong, extra = wrong_cells(t, world, blocks)
    assert wrong == {0: [], 1: [(0, 1, 0), (1, 0, 0)]}  # top row first
    assert extra == [(1, 1, 0)]
    assert positions_top_first(t) == [(0, 1, 0), (0, 0, 0), (1, 0, 0)]
    assert [half_target(n) for n in (0, 1, 7, 46)] == [0, 1, 3, 23]


def test_house_wrong_cells_go_to_the_agent_allowed_their_block():
    wrong = [((0, 0, 0), "stone"), ((1, 0, 0), "planks"), ((2, 0, 0), "air"), ((3, 0, 0), "air"), ((4, 0, 0), "glass")]
    split = house_owner_split(wrong, [["stone", "air"], ["minecraft:planks", "air"]])
    # stone: only agent 0; planks: only agent 1; air (k=2, 3): both, k % 2; glass (k=4): nobody, so all, k % 2
    assert split == {0: [wrong[0], wrong[2], wrong[4]], 1: [wrong[1], wrong[3]]}
    assert house_owner_split(wrong, [["air"]]) == {0: wrong}


def test_house_positions_and_modification_cells():
    t = task_from_item(HOUSE)
    assert house_positions(t) == [((0, 1, 1), "stone"), ((0, 0, 0), "stone"), ((0, 0, 1), "stone"),
                                  ((1, 0, 0), "stone"), ((1, 0, 1), "planks")]
    cells = modification_cells(t, {}, None)  # nothing built: every block-bearing cell, bottom layer first
    assert [p for p, _ in cells] == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1), (0, 1, 1)]
    assert modification_cells(t, {}, 2) == cells[:2] and modification_cells(t, {}, 0) == cells


def test_wrong_rectangles():
    t = task_from_item(HOUSE)
    assert wrong_rects(t, {}) == [(0, Rect(0, 0, 1, 0, "stone")), (0, Rect(0, 1, 0, 1, "stone")),
                                  (0, Rect(1, 1, 1, 1, "planks")), (1, Rect(0, 1, 0, 1, "stone"))]
    built = {p: b for p, b in t.expected().items() if b != "air"}
    assert wrong_rects(t, built) == []
    built[(1, 1, 0)] = "stone"  # a block where air belongs: the air rectangle around it is shown
    assert wrong_rects(t, built) == [(1, Rect(0, 0, 1, 0, "air"))]


def test_rectangle_split_between_agents():
    rects = [(y, Rect(0, 0, 0, 0, "b")) for y in range(7)]
    assert [y for y, _ in rect_share(rects, 0, 2, lambda a, n, y: paper_layers(a, n, y, 0, 6), None)] == [0, 1, 2]
    assert [y for y, _ in rect_share(rects, 1, 2, lambda a, n, y: paper_layers(a, n, y, 0, 6), 2)] == [2, 3]
    assert [y for y, _ in rect_share(rects, 1, 2, lambda a, n, y: band_layers(a, n, y, 0, 6), None)] == [4, 5, 6]
    assert len(rect_share(rects, 0, 1, lambda a, n, y: False, None)) == 7  # one agent gets every layer
    assert [sum(band_layers(a, 3, y, 0, 6) for a in range(3)) for y in range(7)] == [1] * 7


def test_best_corner_rectangle_for_a_budget():
    assert best_subrect(Rect(0, 0, 3, 2, "b"), 7) == (Rect(0, 0, 2, 1, "b"), 6)  # 3 x 2 beats 4 x 1 and 2 x 3
    assert best_subrect(Rect(1, 1, 4, 3, "b"), 12) == (Rect(1, 1, 4, 3, "b"), 12)
    assert best_subrect(Rect(1, 1, 4, 3, "b"), 0) == (Rect(1, 1, 1, 1, "b"), 0)


def test_resource_schedule_takes_whole_rectangles_then_the_best_part():
    t = task_from_item(HOUSE)
    left, chosen = schedule(t, {"stone": 3, "planks": 1}, {}, ["stone", "planks", "air"])
    # largest first: the 2-cell stone strip, then the 1-cell rectangles in (y, x1, z1) order, while the budget lasts
    assert chosen == [(0, Rect(0, 0, 1, 0, "stone")), (0, Rect(0, 1, 0, 1, "stone")), (0, Rect(1, 1, 1, 1, "planks"))]
    assert left == {"stone": 0, "planks": 0}
    left, chosen = schedule(t, {"stone": 3, "planks": 1}, {"stone": 2, "air": 9}, ["stone"])
    assert chosen == [(0, Rect(0, 1, 0, 1, "stone"))] and left == {"stone": 0, "planks": 1}
    # the whole slab (6 cells) is too dear for 4 stone: its best 2 x 2 corner is suggested, the budget kept
    left, chosen = schedule(task_from_item(SLAB), {"stone": 4}, {}, ["stone"])
    assert chosen == [(0, Rect(0, 0, 1, 1, "stone"))] and left == {"stone": 4}
