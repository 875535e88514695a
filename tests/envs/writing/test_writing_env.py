"""Writing environments: building from env.args, prompts, single-agent split, step_batch, summarize."""
import json

import pytest

from comarl.envs.base import EvalRecord
from comarl.envs.registry import get_env
from comarl.envs.writing import arxiv, tldr
from comarl.envs.writing.env import split_marker

Y1 = "the cat sleeps daily"
Y2_FULL = "the cat sleeps daily in a sink however dogs bark"       # 2.8 under SMALL (see test_writing_reward)
Y2_SAME_LEN = "dogs bark at night"                                 # ratio 1: level 1, 0.5
Y2_NO_NEW = "the cat sleeps the cat sleeps daily daily cat cat"    # unique ratio 1: level 2, 1.5
# TL;DR defaults for the ratio bands, with a small window, stop list and transition list.
SMALL = {"min_words": 2, "max_words": 20, "stop_words": ["the", "a", "and", "is"], "transition_target": 2,
         "transitions": {"contrast": ["however"], "addition": ["moreover"]}, "overlap": [0, 0.1, 0.4, 0.7]}
ITEM = {"prompt": "SUBREDDIT: r/cats\nTITLE: t\nPOST: p\nTL;DR:", "completion": "the cat sleeps daily",
        "text": "SUBREDDIT: r/cats\nTITLE: t\nPOST: p"}


def test_registered_names():
    assert get_env("tldr").build is tldr.build and get_env("arxiv").load_items is arxiv.load_items


def test_tldr_prompts_fill_the_post():
    env = tldr.build(2)
    state = env.reset(ITEM)
    assert env.num_agents == 2 and env.roles == ("concise", "detailed") and len(state.prompts) == 2
    assert all(ITEM["text"] in p and "{text}" not in p for p in state.prompts)
    assert state.prompts[0].endswith("Concise summary:") and state.prompts[1].endswith("Detailed summary:")
    assert env.max_reward == pytest.approx(3.0)


def test_custom_prompts():
    env = tldr.build(2, prompts=["A {text}", "B {text}!"])
    assert env.reset(ITEM).prompts == ("A " + ITEM["text"], "B " + ITEM["text"] + "!")


@pytest.mark.parametrize("n,args,match", [
    (3, {}, r"tldr: 3 agents not supported"),
    (4, {}, r"arxiv"),
    (0, {}, r"num_agents must be a positive integer"),
    (2, {"temperature": 1}, r"env\.args: unknown key\(s\) \['temperature'\]"),
    (2, {"prompts": ["only one {text}"]}, r"env\.args\.prompts: expected a list of 2"),
    (2, {"prompts": ["{text}", "no placeholder"]}, r"env\.args\.prompts\[1\]"),
    (1, {"prompts": ["{text}"]}, r"env\.args\.prompts: one agent uses env\.args\.single_prompt"),
    (1, {"single_prompt": "no placeholder"}, r"env\.args\.single_prompt"),
    (2, {"marker": "  "}, r"env\.args\.marker"),
    (2, {"reward": {"length_ratio": {"low": 3, "high": 2}}}, r"env\.args\.reward\.length_ratio: low 3\.0 > high 2\.0"),
])
def test_bad_args_name_the_key(n, args, match):
    build = arxiv.build if match == "arxiv" else tldr.build
    with pytest.raises(ValueError, match=match):
        build(n, **args)


def test_arxiv_two_and_three_roles():
    item = arxiv.normalize(0, {"abstract_text": ["We do X.", "It works."]}, "mem")
    env2, env3 = arxiv.build(2), arxiv.build(3)
    assert env2.roles == ("background", "method") and env3.roles == ("background", "method", "implications")
    p3 = env3.reset(item).prompts
    assert len(p3) == 3 and all("Abstract: We do X. It works." in p for p in p3)
    assert "not repeat" in p3[1] and "not repeat" in env2.reset(item).prompts[1]
    assert env2.reward_cfg.min_words == 128 and env2.reward_cfg.max_words == 256


def test_step_batch_scores_each_joint_action():
    env = tldr.build(2, reward=SMALL)
    s = env.reset(ITEM)
    trs = env.step_batch([s, s, s], [(Y1, Y2_FULL), (Y1, Y2_SAME_LEN), (Y1, Y2_NO_NEW)])
    assert [t.reward for t in trs] == pytest.approx([2.8, 0.5, 1.5])
    assert all(t.done and t.next_state is None for t in trs)
    assert [t.metrics["level"] for t in trs] == [4, 1, 2]
    assert trs[0].metrics["length_ratio"] == pytest.approx(2.5)
    with pytest.raises(ValueError, match="joint action has 1 responses"):
        env.step_batch([s], [(Y1,)])


def test_split_marker():
    assert split_marker("a b\n---\nc d", "\n---\n", 2) == (["a b", "c d"], True)
    assert split_marker("a b --- c --- d", "---", 2) == (["a b", "c --- d"], True)
    assert split_marker("no marker here", "---", 2) == (["no marker here", ""], False)
    assert split_marker("a --- b", "---", 3) == (["a", "b", ""], False)


def test_single_agent_baseline_splits_at_the_marker():
    env = tldr.build(1, reward=SMALL)
    (prompt,) = env.reset(ITEM).prompts
    assert "---" in prompt and "{marker}" not in prompt and ITEM["text"] in prompt
    s = env.reset(ITEM)
    ok, missing = env.step_batch([s, s], [(f"{Y1}\n---\n{Y2_FULL}",), (f"{Y1} {Y2_FULL}",)])
    assert ok.reward == pytest.approx(2.8) and ok.metrics["marker_found"] == 1.0
    assert missing.reward == 0.0 and missing.metrics["marker_found"] == 0.0 and missing.metrics["degenerate"] == 1.0


def test_single_agent_custom_marker():
    env = tldr.build(1, marker="###", single_prompt="Text: {text} (sep {marker})", reward=SMALL)
    assert env.reset(ITEM).prompts == (f"Text: {ITEM['text']} (sep ###)",)
    (t,) = env.step_batch([env.reset(ITEM)], [(f"{Y1} ### {Y2_FULL}",)])
    assert t.reward == pytest.approx(2.8)


def test_summarize_levels_ratios_and_rouge():
    env = tldr.build(2, reward=SMALL)
    s_a, s_b = env.reset(ITEM), env.reset({**ITEM, "completion": ""})
    resp_a = [(Y1, Y2_FULL), (Y1, Y2_SAME_LEN)]
    resp_b = [(Y1, Y2_NO_NEW), ("", "the cat")]
    records = [EvalRecord(ITEM, resp_a, env.step_batch([s_a] * 2, resp_a)),
               EvalRecord(s_b.item, resp_b, env.step_batch([s_b] * 2, resp_b))]
    out = env.summarize(records)
    json.dumps(out)  # JSON-able
    assert out["items"] == 2 and out["samples"] == 4 and out["roles"] == ["concise", "detailed"]
    # rewards 2.8, 0.5, 1.5, 0 ; levels 4, 1, 2, 0
    assert out["reward"]["mean"] == pytest.approx(1.2) and out["reward"]["max_possible"] == pytest.approx(3.0)
    lv = out["levels"]
    assert (lv["level1"], lv["level2"], lv["level3"], lv["level4"]) == (0.75, 0.5, 0.25, 0.25)
    assert lv["mean_level"] == pytest.approx(1.75) and lv["degenerate"] == 0.25
    # ratios 2.5, 1.0, 2.5 (the empty first part has none); sorted [1, 2.5, 2.5]
    lr = out["length_ratio"]
    assert lr["n"] == 3 and lr["mean"] == pytest.approx(2.0)
    assert (lr["q10"], lr["q25"], lr["q50"], lr["q75"], lr["q90"]) == pytest.approx((1.3, 1.75, 2.5, 2.5, 2.5))
    # ROUGE only for item A (reference "the cat sleeps daily"), 2 samples
    rg = out["rouge"]
    assert rg["n"] == 2
    assert rg["concise"] == pytest.approx({"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0})
    # detailed: Y2_FULL F1 = 2*(4/10)*1/(4/10+1) = 4/7 (rouge1, rougeL), bigrams 2*(3/9)/(4/3) = 1/2; Y2_SAME_LEN 0
    assert rg["detailed"] == pytest.approx({"rouge1": 2 / 7, "rouge2": 0.25, "rougeL": 2 / 7})
    # joint: 14 tokens -> 2*(4/14)/(18/14) = 4/9 ; 8 tokens -> 2/3 ; mean 5/9
    assert rg["joint"]["rouge1"] == pytest.approx(5 / 9)


def test_summarize_without_references_or_samples():
    env = arxiv.build(2)
    item = arxiv.normalize(0, {"abstract_text": "We do X."}, "mem")
    s = env.reset(item)
    out = env.summarize([EvalRecord(item, [("a b", "c d")], env.step_batch([s], [("a b", "c d")]))])
    assert "rouge" not in out and out["levels"]["level1"] == 0.0 and out["length_ratio"]["mean"] == 1.0
    empty = env.summarize([])
    assert empty["samples"] == 0 and empty["reward"]["mean"] is None and empty["length_ratio"]["n"] == 0
    json.dumps(empty)


def test_reset_needs_a_loaded_item():
    with pytest.raises(KeyError, match="no 'text' field"):
        tldr.build(2).reset({"prompt": "POST: x\nTL;DR:"})
