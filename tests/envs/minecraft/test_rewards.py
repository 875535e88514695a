"""The StrBuild and HouseBuild rewards, their targets and colour plan, worked by hand on tiny cases."""
import random

import pytest

from comarl.envs.minecraft.commands import Box
from comarl.envs.minecraft.font import GLYPHS, string_rows
from comarl.envs.minecraft.housebuild import (HouseTask, Rect, Threat, draw_threat, layer_rects, resource_limits,
                                              score as house_score, task_from_item, wrong_cells)
from comarl.envs.minecraft.strbuild import StrTask, colour_key, colour_plan, score as str_score

# rows top first: y=1 is "#.", y=0 is "##"
L_TASK = StrTask("t", "x", ("#.", "##"), 0)


def test_string_rows_join_glyphs_with_spacing():
    assert string_rows("LI", 1) == ("#.....#####", "#.......#..", "#.......#..", "#.......#..", "#####.#####")
    assert string_rows("", 2) == ("",) * 5
    assert string_rows(" i ", 0) == GLYPHS["I"]  # stripped, upper-cased
    assert string_rows("I?", 0)[0] == "#####....."  # no glyph: a blank letter


def test_str_task_box_and_targets():
    t = StrTask.of("id", "I", 2, z=3)
    assert t.box == Box((0, 0, 3), (4, 4, 3))
    assert len(t.targets()) == 13 and (2, 2, 3) in t.targets() and (0, 2, 3) not in t.targets()
    assert L_TASK.targets() == [(0, 1, 0), (0, 0, 0), (1, 0, 0)]


def test_str_score_by_hand():
    # covered 2 of 3 targets; 1 extra block on the 1 background cell; pairs: wood-stone (vertical) and
    # stone-obsidian (horizontal), none alike; agent 1's palette lacks white_concrete: one palette missing.
    world = {(0, 1, 0): "stone", (0, 0, 0): "oak_planks", (1, 1, 0): "obsidian", (1, 0, 0): "air"}
    s = str_score(L_TASK, world, [["oak_planks", "stone", "air"], ["obsidian", "white_concrete"]])
    assert (s.covered, s.targets, s.extra, s.pairs, s.same_pairs, s.palettes_missing) == (2, 3, 1, 2, 0, 1)
    assert s.total == pytest.approx(2 * 2 / 3 - 1.5 * 1.0 - 0.0 - 0.25)
    assert s.iou == pytest.approx(2 / 4)


def test_same_texture_neighbours_cost_up_to_one():
    t = StrTask.of("id", "I", 2)
    world = {p: "stone" for p in t.targets()}  # all 12 neighbour pairs of the I are stone-stone
    s = str_score(t, world, [["stone"]])
    assert (s.coverage, s.pairs, s.same_pairs, s.total) == (1.0, 12, 12, 1.0)
    assert str_score(t, {}, [["stone"], ["obsidian"]]).total == -0.5  # nothing built: two palettes missing


def test_colour_keys():
    assert [colour_key(b) for b in ("oak_planks", "birch_planks", "minecraft:stone", "andesite_stone",
                                    "white_concrete", "red_concrete", "obsidian", "Glass", "")] == \
        ["wood", "wood", "stone", "stone", "concrete", "concrete", "obsidian", "glass", ""]


def test_colour_plan_owner_start_and_neighbours():
    plan, owner = colour_plan(L_TASK, [["a", "b"], ["c", "d"]])
    # (0,0): agent 0 from index 0 -> a; (1,0) and (0,1): agent 1 from index 1 -> d
    assert plan == {(0, 0, 0): "a", (1, 0, 0): "d", (0, 1, 0): "d"}
    assert owner == {(0, 0, 0): 0, (1, 0, 0): 1, (0, 1, 0): 1}
    spread, _ = colour_plan(L_TASK, [["a", "b"], ["c", "d"]], spread=True)  # start (x + y) // 2
    assert spread == {(0, 0, 0): "a", (1, 0, 0): "c", (0, 1, 0): "c"}
    row = StrTask("r", "x", ("###",), 0)
    # agent 1 has only "a", next to agent 0's "a": no other choice; agent 0 at (2,0) then avoids "a"
    assert colour_plan(row, [["a", "b"], ["a", "air"]])[0] == {(0, 0, 0): "a", (1, 0, 0): "a", (2, 0, 0): "b"}
    with pytest.raises(ValueError, match="not air"):
        colour_plan(row, [["air"]])


def test_reference_colour_plan_caps_two_agents_at_one_and_a_half():
    t = StrTask.of("id", "ICML", 2)
    blocks = [["oak_planks", "stone", "air"], ["white_concrete", "obsidian", "air"]]
    assert str_score(t, colour_plan(t, blocks)[0], blocks).total == 1.5
    assert str_score(t, colour_plan(t, blocks, spread=True)[0], blocks).total == 2.0


HOUSE = {"task_id": "h", "box": [[0, 0, 0], [1, 1, 1]], "legend": {"S": "stone", "A": "air", "P": "minecraft:planks"},
         "layers": [["SS", "SP"], ["AA", "SA"]]}


def test_house_task_expected_cells():
    t = task_from_item(HOUSE)
    exp = t.expected()
    assert len(exp) == 8 and exp[(1, 0, 1)] == "planks" and exp[(0, 1, 1)] == "stone" and exp[(1, 1, 0)] == "air"
    assert t.blocks() == ["stone", "air", "minecraft:planks"]


def test_house_item_errors_name_the_item():
    with pytest.raises(ValueError, match="'h'.*layers"):
        task_from_item({**HOUSE, "layers": [["SS", "SP"]]})
    with pytest.raises(ValueError, match="not in the legend"):
        task_from_item({**HOUSE, "layers": [["SS", "SX"], ["AA", "SA"]]})
    with pytest.raises(ValueError, match="rows"):
        task_from_item({**HOUSE, "layers": [["SS", "S"], ["AA", "SA"]]})


def test_resource_limits_by_hand():
    t = task_from_item(HOUSE)  # 4 stone, 1 planks
    assert resource_limits(t, 2) == {"planks": 1, "stone": 3}  # ceil(4/2) + 4//4; ceil(1/2) + 1//4
    assert resource_limits(t, 1) == {"planks": 1, "stone": 6}
    with_unused = HouseTask("u", t.box, {**t.legend, "G": "glass"}, t.layers)
    assert resource_limits(with_unused, 2)["glass"] == 0


def test_layer_rectangles_merge_equal_runs_downwards():
    assert layer_rects(["SS", "SP"], HOUSE["legend"], 0, 0) == [
        Rect(0, 0, 1, 0, "stone"), Rect(0, 1, 0, 1, "stone"), Rect(1, 1, 1, 1, "minecraft:planks")]
    assert layer_rects(["SA", "SA"], HOUSE["legend"], 2, 5) == [Rect(2, 5, 2, 6, "stone"), Rect(3, 5, 3, 6, "air")]


def test_house_score_by_hand():
    t = task_from_item(HOUSE)
    world = {(0, 0, 0): "stone", (1, 0, 0): "stone", (0, 0, 1): "stone"}
    s = house_score(t, world)  # 3 of 4 ground cells, 3 of 4 upper cells (air right, the stone missing)
    assert (s.correct, s.cells, s.match) == (6, 8, 0.75)
    assert s.iou == pytest.approx(3 / 5)
    assert [p for p, _ in wrong_cells(t, world, top_first=True)] == [(0, 1, 1), (1, 0, 1)]
    assert [p for p, _ in wrong_cells(t, world, top_first=False)] == [(1, 0, 1), (0, 1, 1)]


def test_spider_penalty():
    assert Threat(5, (1, 3, 2)).penalty() == 0.1
    assert Threat(20, (2, 3)).penalty() == pytest.approx(0.025)
    assert Threat(0, (2,)).penalty() == 0.0 and Threat(5, ()).penalty() == 0.0


def test_attacks_are_drawn_as_the_reference_draws_them():
    assert draw_threat(5, 3, 1, 3, 0).attacks == (2, 2, 1)
    assert draw_threat(5, 3, 3, 1, 7) == draw_threat(5, 3, 1, 3, 7) == Threat(5, (2, 1, 2))
    rng = random.Random(11)
    assert draw_threat(9, 4, 2, 6, 11).attacks == tuple(rng.randint(2, 6) for _ in range(4))
    assert draw_threat(5, -2, 1, 3, 0).attacks == ()
