"""Reading an agent's text as commands, and running the commands on the block world."""
from comarl.envs.minecraft.commands import (Box, Fill, Kill, SetBlock, agent_command_caps, block_name, command_lines,
                                            coordinate, fill_volumes, is_air, read_fills, read_setblocks)
from comarl.envs.minecraft.world import apply, scan


def test_lines_lose_the_fence_its_language_tag_list_markers_and_blanks():
    text = "Sure:\n```mcfunction\n1. /setblock 0 0 0 stone\n\n- /kill\n  2) fill 0 0 0 1 1 1 air  \n```\nbye"
    assert command_lines(text) == ["/setblock 0 0 0 stone", "/kill", "fill 0 0 0 1 1 1 air"]


def test_only_the_first_fenced_block_counts_and_an_unclosed_fence_is_text():
    assert command_lines("a ```x\n/setblock 0 0 0 stone``` b ```/kill```") == ["/setblock 0 0 0 stone"]
    assert command_lines("```\n/setblock 1 2 3 stone") == ["```", "/setblock 1 2 3 stone"]
    # the reference drops any single-word first line inside the fence, tag or not
    assert command_lines("```\nsetblock\n/kill\n```") == ["/kill"]
    assert command_lines("") == [] and command_lines("  \n\n") == []


def test_one_list_marker_is_removed_per_line():
    assert command_lines("* - /setblock 1 0 0 stone\n-- 4. /kill") == ["- /setblock 1 0 0 stone", "4. /kill"]


def test_coordinates_are_what_int_reads_except_relative_forms():
    assert [coordinate(t) for t in ("12", "-3", "+4", "1_0", "\u0661", "\uff19")] == [12, -3, 4, 10, 1, 9]
    assert [coordinate(t) for t in ("~1", "^", "~", "0x1", "1e3", "1.0", "", "9" * 5000)] == [None] * 8


def test_block_names_drop_one_minecraft_prefix():
    assert block_name(" minecraft:stone ") == "stone"
    assert block_name("minecraft:minecraft:stone") == "minecraft:stone"
    assert is_air("minecraft:cave_air") and is_air(None) and not is_air("stone")


def test_setblock_acceptance_and_reasons():
    box = Box((0, 0, 0), (2, 2, 0))
    lines = ["/setblock 0 0 0 stone", "setblock 1 1 0 minecraft:stone extra", "/setblock 3 0 0 stone",
             "/setblock 0 0 0 obsidian", "/setblock ~ 0 0 stone", "/fill 0 0 0 1 1 0 stone", "/setblock 0 0",
             "/SETBLOCK 2 2 0 air", "/setblock 1 0 0 stone"]
    r = read_setblocks(lines, ["stone"], box, max_commands=3)
    assert r.accepted == (SetBlock((0, 0, 0), "stone"), SetBlock((1, 1, 0), "stone"), SetBlock((2, 2, 0), "air"))
    reasons = dict(r.rejected)
    assert "outside" in reasons["/setblock 3 0 0 stone"]
    assert "not allowed" in reasons["/setblock 0 0 0 obsidian"]
    assert "absolute" in reasons["/setblock ~ 0 0 stone"]
    assert "unsupported" in reasons["/fill 0 0 0 1 1 0 stone"]
    assert "needs" in reasons["/setblock 0 0"]
    assert "max_commands=3" in reasons["/setblock 1 0 0 stone"]
    assert r.texts() == ["/setblock 0 0 0 stone", "/setblock 1 1 0 stone", "/setblock 2 2 0 air"]


def test_fill_kill_modes_and_resource_limits():
    box = Box((0, 0, 0), (1, 1, 1))
    lines = ["/fill 0 0 0 1 1 0 stone", "/fill 0 0 1 0 0 1 stone", "/fill 1 1 1 1 1 1 stone",
             "/fill 0 0 0 1 1 1 planks", "/fill 1 1 1 0 0 0 air", "/kill @e", "/fill 0 0 0 1 1 1 stone replace",
             "/fill 0 0 0 2 0 0 stone"]
    r = read_fills(lines, ["stone", "planks"], box, max_commands=10, limits={"stone": 5})
    assert r.accepted == (Fill((0, 0, 0), (1, 1, 0), "stone"), Fill((0, 0, 1), (0, 0, 1), "stone"),
                          Fill((0, 0, 0), (1, 1, 1), "planks"), Fill((1, 1, 1), (0, 0, 0), "air"), Kill(("@e",)))
    assert r.over_limit == 1 and r.killed
    reasons = dict(r.rejected)
    assert "5" in reasons["/fill 1 1 1 1 1 1 stone"]  # 4 + 1 used, one more passes the cap of 5
    assert "modes" in reasons["/fill 0 0 0 1 1 1 stone replace"]
    assert "outside" in reasons["/fill 0 0 0 2 0 0 stone"]
    assert r.texts()[-1] == "/kill @e" and r.texts()[3] == "/fill 1 1 1 0 0 0 air"
    assert fill_volumes(r.accepted) == {"stone": 5, "planks": 8, "air": 8}


def test_a_zero_limit_refuses_the_block_and_no_limits_refuse_nothing():
    box = Box((0, 0, 0), (1, 0, 0))
    assert read_fills(["/fill 0 0 0 0 0 0 stone"], ["stone"], box, 5, {"stone": 0}).accepted == ()
    assert len(read_fills(["/fill 0 0 0 1 0 0 stone"] * 3, ["stone"], box, 5, None).accepted) == 3


def test_command_caps_split_with_the_remainder_to_agent_0():
    assert agent_command_caps(301, 2) == [151, 150]
    assert agent_command_caps(1, 3) == [2, 1, 1]
    assert agent_command_caps(600, 1) == [600]


def test_commands_run_in_order_and_fill_their_box():
    world = apply([SetBlock((0, 0, 0), "stone"), Fill((1, 0, 0), (0, 0, 1), "planks"), SetBlock((0, 0, 1), "air")])
    assert world == {(0, 0, 0): "planks", (1, 0, 0): "planks", (0, 0, 1): "air", (1, 0, 1): "planks"}
    start = {(5, 5, 5): "stone"}
    assert apply([Kill()], start) == start and apply([Kill()], start) is not start
    assert scan(world, Box((0, 0, 0), (1, 0, 1)))[(0, 0, 1)] == "air"
    assert list(Box((0, 0, 0), (1, 1, 0)).cells()) == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
