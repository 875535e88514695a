"""The str_build and house_build environments: arguments, presets, turns and their prompts, summary, pictures, data."""
import json

import pytest

import comarl.envs.minecraft  # noqa: F401  (registers the environments)
from comarl.envs.base import EvalRecord
from comarl.envs.minecraft import build_house, build_str
from comarl.envs.minecraft.data import load_house_items, load_str_items
from comarl.envs.minecraft.prompts import SYSTEM
from comarl.envs.registry import get_env

STR_ITEMS = load_str_items(None, "train", None)
HOUSES = load_house_items(None, "train", None)
HOUSE_ARGS = {"limited_resource": True, "hp": 5, "spiders": {"num": 3, "atk_low": 1, "atk_high": 3}}
I_ITEM = STR_ITEMS[0]  # "I": 5 x 5, 13 cells


def play(env, item, *turns):
    """Transitions of one branch through ``turns`` (each a joint response)."""
    state, out = env.reset(item), []
    for resp in turns:
        tr = env.step_batch([state], [resp])[0]
        out.append(tr)
        state = tr.next_state
    return out


def setblocks(cells, block):
    return "\n".join(f"/setblock {x} {y} {z} {block}" for x, y, z in cells)


# ---- data


def test_package_data_and_the_reference_splits():
    assert [it["string"] for it in STR_ITEMS] == ["I", "C", "M", "L", "MC", "CM", "LI", "LLM", "ICML", "CLIM"]
    assert [it["task_id"] for it in load_str_items(None, "train[8:]", None)] == ["str_build_0009", "str_build_0010"]
    assert len(load_str_items(None, "[:8]", None)) == 8  # the reference's split syntax
    assert len(HOUSES) == 10 and HOUSES[0]["task_id"] == "house_build_0002"
    assert [it["task_id"] for it in load_house_items(None, "train[8:]", 1)] == ["house_build_0108"]
    assert get_env("str_build").load_items(None, "train[:2]", None) == STR_ITEMS[:2]


def test_local_sources_csv_and_the_reference_house_form(tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text('string,difficulty\n"AB",2\n"",1\n"z",x\n', encoding="utf-8")
    assert load_str_items(str(csv), "train", None) == [
        {"task_id": "str_build_0001", "string": "AB", "difficulty": 2},
        {"task_id": "str_build_0003", "string": "z", "difficulty": 0}]  # ids count skipped rows, as the reference's
    ref_form = [{"task_id": "r1", "inventory": {"S": "stone", "A": "air"},
                 "target_spec": {"layers": [{"y": 1, "rows": ["AS"]}, {"y": 0, "rows": ["SS"]}]}}]
    path = tmp_path / "houses.json"
    path.write_text(json.dumps(ref_form))
    item = load_house_items(str(path), "train", None)[0]
    assert item["box"] == [[0, 0, 0], [1, 1, 0]] and item["layers"] == [["SS"], ["AS"]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "b", "box": [[0, 0, 0], [1, 0, 0]], "legend": {"S": "stone"},
                               "layers": [["SX"]]}) + "\n")
    with pytest.raises(Exception, match="line 1.*not in the legend"):
        load_house_items(str(bad), "train", None)
    with pytest.raises(FileNotFoundError, match="no hub"):
        load_str_items("nowhere/strings.jsonl", "train", None)


# ---- arguments


@pytest.mark.parametrize("build, args, n, match", [
    (build_str, {"colour": 1}, 2, "unknown key"),
    (build_str, {"preset": "reference"}, 2, "preset"),
    (build_str, {"preset": "paper"}, 3, "1 or 2 agents"),
    (build_str, {}, 3, "one list of blocks per agent"),
    (build_str, {"blocks": [["air"], ["stone"]]}, 2, r"blocks\[0\].*not air"),
    (build_str, {"blocks": [["stone"]]}, 2, "expected 2 lists"),
    (build_str, {"mode": "rect_modification"}, 2, "external modes"),
    (build_str, {"max_commands": 0}, 2, "max_commands"),
    (build_str, {"show_target": "yes"}, 2, "true or false"),
    (build_house, {"mode": "resource_schedule"}, 2, "limited_resource"),
    (build_house, {"spiders": {"n": 3}}, 2, "spiders: unknown"),
    (build_house, {"spiders": {"attacks": "3"}}, 2, "attacks"),
    (build_house, {"lim": -1}, 2, "lim"),
    (build_house, {"pictures": 3}, 2, "pictures"),
])
def test_bad_arguments_name_the_key(build, args, n, match):
    with pytest.raises(ValueError, match=match):
        build(n, **args)


def test_three_agents_under_the_default_preset():
    env = build_str(3, blocks=[["stone"], ["obsidian"], ["oak_planks"]])
    assert len(env.reset(I_ITEM).prompts) == 3 and env.game.s.caps == (200, 200, 200)
    house = build_house(3, mode="rect_modification")
    assert house.num_agents == 3


# ---- first prompts


def test_first_prompts():
    env = build_str(2, max_commands=300)
    p0, p1 = env.reset(I_ITEM).prompts
    assert p0.startswith(SYSTEM) and "agent 1 of 2" in p0 and "agent 2 of 2" in p1 and "after agent 1" in p1
    assert "#####" in p0 and "- oak_planks" in p0 and "- white_concrete" in p1 and "At most 150 commands" in p0
    paper = build_str(2, preset="paper", system="")
    q0 = paper.reset(I_ITEM).prompts[0]
    assert "#####" not in q0 and not q0.startswith(SYSTEM)  # the reference configs hide the target
    assert "#####" in build_str(2, preset="paper", show_target=True).reset(I_ITEM).prompts[0]
    h = build_house(2, **HOUSE_ARGS).reset(HOUSES[0]).prompts[0]
    assert "y=0: (0, 0, 1)-(5, 0, 5) white_concrete" in h and "air" not in h.split("y=1:")[1].split("\n")[0]
    assert "3 spiders" in h and "[2, 2, 1]" in h and "/kill" in h and "- white_concrete: 51" in h


# ---- turns


def test_paper_scores_each_turn_on_its_own_commands_default_keeps_the_wall():
    cells = [(0, 4, 0), (1, 4, 0)]
    first = (setblocks(cells[:1], "oak_planks"), setblocks(cells[1:], "obsidian"))
    paper = play(build_str(2, preset="paper", max_turns=2), I_ITEM, first, ("", ""))
    default = play(build_str(2, max_turns=2), I_ITEM, first, ("", ""))
    assert paper[0].reward == default[0].reward == pytest.approx(2 * 2 / 13 - 0.5)  # 2 agents miss a block each
    assert paper[1].reward == -0.5  # an empty world again
    assert default[1].reward == default[0].reward  # the wall stayed
    assert paper[1].done and default[1].done and paper[1].next_state is None


def test_branches_do_not_share_their_world():
    env = build_str(1, max_turns=2)
    state = env.reset(I_ITEM)
    a, b = env.step_batch([state, state], [(setblocks([(0, 4, 0)], "stone"),), ("",)])
    assert a.next_state.info["carry"].world == {(0, 4, 0): "stone"} and b.next_state.info["carry"].world == {}
    assert state.info == {"first": state.info["first"]}


def test_follow_up_prompts_per_mode():
    text = (setblocks([(0, 4, 0)], "stone"), setblocks([(2, 2, 0), (1, 1, 0)], "obsidian"))
    env = build_str(2, preset="paper", max_turns=3, mode="perfect_feedback", previous_response=True)
    tr = play(env, I_ITEM, text)[0]
    p0, p1 = tr.next_state.prompts
    assert p0.startswith(SYSTEM) and "Feedback (turn 2)" in p0
    # agent 0 owns the cells with x + y even: (0,4) has the wrong texture (its plan: oak_planks), (2,4) is missing,
    # (2,2) holds agent 1's obsidian; (1,4) is agent 1's; (1,1) is outside the letter: only the last agent clears it
    assert all(f"- ({c}, 0)" in p0 for c in ("0, 4", "2, 4", "2, 2")) and "- (1, 4, 0)" not in p0
    assert "- (1, 4, 0)" in p1 and "- (1, 1, 0)" not in p0
    assert "Blocks to remove" not in p0 and "Blocks to remove (set to air):\n- (1, 1, 0)" in p1
    assert p0.index("Feedback") < p0.index("Build the target") < p0.index("Your previous commands:\n/setblock 0 4 0")
    assert tr.next_state.turn == 1 and tr.next_state.history[0][0][1] == text[0]
    tr2 = env.step_batch([tr.next_state], [("", "")])[0]
    assert "Feedback (turn 3)" in tr2.next_state.prompts[0]
    assert "Your previous commands" not in tr2.next_state.prompts[0]  # an empty reply is not shown
    pos = play(build_str(2, max_turns=2, mode="position_feedback", original_prompt=False), I_ITEM, text)[0]
    q = pos.next_state.prompts[0]
    assert "(about 6)" in q and q.count("\n- (") == 13 and "Build the target" not in q
    assert "edit the build as this turn left it" in q  # the default preset's persistent world
    score = play(build_str(2, max_turns=2, mode="score_feedback"), I_ITEM, text)[0]
    assert f"{score.reward:.4f}" in score.next_state.prompts[1]


def test_house_modes_and_the_spiders():
    house = HOUSES[0]
    kill = ("/fill 0 0 1 5 0 5 white_concrete\n/kill", "")
    no_kill = ("/fill 0 0 1 5 0 5 white_concrete", "")
    paper = build_house(2, preset="paper", max_turns=2, mode="score_feedback", **HOUSE_ARGS)
    killed, unanswered = play(paper, house, kill)[0], play(paper, house, no_kill)[0]
    assert killed.metrics["match"] == unanswered.metrics["match"]
    assert killed.reward - unanswered.reward == pytest.approx(0.1)  # 5 damage on 5 hp
    lone = {p: play(build_house(1, preset=p, max_turns=2, mode="score_feedback", **HOUSE_ARGS), house,
                    no_kill[:1])[0] for p in ("paper", "default")}
    assert lone["paper"].reward == lone["paper"].metrics["match"]  # the reference never charges one agent...
    assert lone["default"].reward == pytest.approx(lone["paper"].reward - 0.1)
    shown = f"{lone['paper'].reward - 0.1:.4f}"  # ...but its score feedback quotes the charged reward
    assert shown in lone["paper"].next_state.prompts[0]
    for mode in ("perfect_feedback", "position_feedback", "position_modification", "rect_modification",
                 "resource_schedule"):
        env = build_house(2, max_turns=2, mode=mode, lim=4, original_prompt=False, **HOUSE_ARGS)
        p = play(env, house, kill)[0].next_state.prompts
        assert all(x.startswith(SYSTEM) for x in p), mode
        if mode != "position_feedback":
            assert "Resource limits per agent" in p[0], mode  # the limits stay when the first prompt goes
    rect = play(build_house(2, max_turns=2, mode="rect_modification", lim=2, **HOUSE_ARGS), house, kill)[0]
    assert rect.next_state.prompts[0].split("Rectangles to fix")[1].count("\ny=") == 2
    assert "- /fill 0 0 1 5 0 5 white_concrete\n- /kill" in rect.next_state.prompts[0]


def test_resources_count_per_episode_under_default_and_per_turn_under_paper():
    house = HOUSES[0]  # white_concrete: 51 per agent of 2
    big = ("/fill 0 1 1 5 1 5 white_concrete\n/fill 0 2 1 5 2 5 white_concrete", "")  # 30 + 30 cells
    half = ("/fill 0 1 1 5 1 5 white_concrete", "")
    for preset, second in (("paper", 1.0), ("default", 0.0)):
        env = build_house(2, preset=preset, max_turns=2, mode="resource_schedule", **HOUSE_ARGS)
        t1, t2 = play(env, house, big, half)
        assert t1.metrics["agent0/accepted"] == 1.0 and t1.metrics["agent0/over_limit"] == 1.0
        assert t2.metrics["agent0/accepted"] == second, preset  # default: 30 used, 30 more passes 51
    sched = play(build_house(2, max_turns=2, mode="resource_schedule", **HOUSE_ARGS), house, half)[0]
    assert "- white_concrete: 21" in sched.next_state.prompts[0]  # 51 - 30 left after the turn
    paper = play(build_house(2, preset="paper", max_turns=2, mode="resource_schedule", **HOUSE_ARGS), house, half)[0]
    left = paper.next_state.prompts[0].split("Resources left")[1]
    assert "- white_concrete: 21" not in left  # the reference prints what its suggestions would leave


def test_joint_action_size_is_checked():
    env = build_str(2)
    with pytest.raises(ValueError, match="1 responses, environment has 2"):
        env.step_batch([env.reset(I_ITEM)], [("x",)])
    with pytest.raises(ValueError, match="1 states and 2"):
        env.step_batch([env.reset(I_ITEM)], [("a", "b"), ("c", "d")])


# ---- evaluation


def test_summary_table_and_pictures(tmp_path):
    env = build_str(2, pictures=str(tmp_path / "pics"))
    gold = (setblocks([(x, 4, 0) for x in (0, 2, 4)] + [(2, 2, 0), (0, 0, 0), (2, 0, 0), (4, 0, 0)], "stone"), "")
    records = []
    for item in STR_ITEMS[:2]:
        resp = [gold, ("", "")]
        records.append(EvalRecord(item, resp, env.step_batch([env.reset(item)] * 2, resp)))
    s = env.summarize(records)
    assert s["samples"] == 4 and s["items"] == 2 and s["preset"] == "default"
    assert s["per_task"]["str_build_0001"]["best"] > s["per_task"]["str_build_0001"]["reward_mean"]
    assert len(s["pictures"]) == 4 and all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in s["pictures"])
    assert s["pictures"][0].endswith("eval-001/str_build_0001-0.png")
    assert env.summarize(records)["pictures"][0].endswith("eval-002/str_build_0001-0.png")  # never overwritten
    table = env.render_table(s)
    assert "str_build_0001" in table and "perfect" in table and "pics" in table
    assert env.summarize([]) == {"samples": 0} and "no samples" in env.render_table({"samples": 0})
    png = build_house(2, **HOUSE_ARGS).render(HOUSES[0], ("/fill 0 0 0 5 0 6 obsidian", "/kill"))
    assert png[:4] == b"\x89PNG" and len(png) < 200_000
