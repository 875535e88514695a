"""Preset ``paper`` of TL;DR and arXiv: equal to the reference rewards (fixtures) and hand-worked quirks.

The fixtures hold inputs and the reference's outputs only; they were produced by
running ``OpenMLRL/LLM_Collab_Writing`` ``rewards/{tldr,arxiv}_rewards.py`` outside
this project (docs/reproduction.md says how).
"""
import json
from pathlib import Path

import pytest

from comarl.envs.base import EnvState
from comarl.envs.registry import get_env
from comarl.envs.writing import paper_reward as P

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "paper"


@pytest.mark.parametrize("name,cfg", [("tldr", P.TLDR), ("arxiv", P.ARXIV)])
def test_paper_reward_equals_reference_fixtures(name, cfg):
    doc = json.loads((FIXTURES / f"writing_{name}.json").read_text())
    cases = doc["cases"]
    assert len(cases) >= 250
    levels = set()
    for i, c in enumerate(cases):
        got, m = P.score_pair(c["completion1"], c["completion2"], cfg)
        assert abs(got - c["reward"]) <= 1e-9, f"{name} case {i}: ours {got}, reference {c['reward']}"
        levels.add(m["level"])
    assert levels == {0.0, 1.0, 2.0, 4.0}  # every gate both passed and failed somewhere


@pytest.mark.parametrize("name", ["tldr", "arxiv"])
def test_paper_preset_env_scores_like_the_reference(name):
    env = get_env(name).build(2, preset="paper")
    cases = json.loads((FIXTURES / f"writing_{name}.json").read_text())["cases"][:40]
    states = [EnvState(item={"text": "x"}, prompts=("a", "b"))] * len(cases)
    trs = env.step_batch(states, [(c["completion1"], c["completion2"]) for c in cases])
    assert [round(t.reward, 12) for t in trs] == [round(c["reward"], 12) for c in cases]
    assert env.max_reward == 3.0 and len({frozenset(t.metrics) for t in trs}) == 1


def words(n, prefix="w"):
    return " ".join(f"{prefix}{i}" for i in range(n))


def test_tldr_hand_worked():
    # y1: 8 one-letter words, 15 chars + 5 spaces = 20; y2: z0..z15 = 10*2 + 6*3 + 15 spaces = 53, + 23 spaces = 76
    y1 = "a b c d e f g h" + " " * 5
    y2 = words(16, "z") + " " * 23
    assert len(y1) == 20 and len(y2) == 76 and len(y2) / len(y1) == 3.8
    # level 2: 1 - (3.8 - 3.2) / 1.8 = 2/3; level 3: 16 unique / 8 unique = 2.0 -> 0.5
    # level 4: no transition phrase in y2; Jaccard: y1 without stop words {b..h} ("a" is one), y2 {z0..z15} -> 0
    r, m = P.score_pair(y1, y2, P.TLDR)
    assert m["level"] == 4 and m["transition_categories"] == 0 and m["overlap"] == 0
    assert r == pytest.approx(0.5 + (1 - 0.6 / 1.8) + 0.5 + 0.0, abs=1e-12)


def test_quirks():
    # level 1 counts whitespace words; no degenerate check: 8 repeated words pass level 1
    assert P.score_pair("ok " * 8, "ok " * 8, P.TLDR)[0] == 0.5  # passes level 1; char ratio 1.0 < 1.1 stops
    # a ratio exactly on the outer edge scores 0 and still goes on to level 3
    y1 = words(8) + " " * (100 - len(words(8)))
    y2 = words(8, "v") + " " * (110 - len(words(8, "v")))
    r, m = P.score_pair(y1, y2, P.TLDR)
    assert m["length_ratio"] == 1.1 and m["level"] == 2 and r == 0.5  # unique ratio 1.0 < 1.3 stops
    # transitions are substrings: "as" inside "was" (time); "also" (elaboration) holds "so" (cause_effect)
    assert P.transition_categories("it wasn't") == 1 and P.transition_categories("also") == 2
    assert P.transition_categories("Alsо") == 0  # Cyrillic o: no match
    assert P.transition_score(0) == 0 and P.transition_score(1) == 0.4
    assert P.transition_score(3) == pytest.approx(0.5) and P.transition_score(12) == pytest.approx(0.95)
    # Jaccard of two texts with only stop words is 1.0 (both sets empty); underscores and digits are words
    assert P.jaccard("the and", "of a") == 1.0 and P.word_set("x_y 2024 The", False) == {"x_y", "2024", "the"}


def test_arxiv_checks_transitions_in_the_joined_text():
    # "for exa" + "mple ..." joined without a space contains "for example" (examples) -- the arXiv reward finds it
    assert P.transition_categories("q " + "for exa" + "mple r") == 1
    assert P.transition_categories("mple r") == 0


def test_ramp_edges():
    band = P.Ramp(0.8, 1.3, 1.6, 2.0)
    assert band and P.ramp_score(0.8, band) == 0.0 and P.ramp_score(1.05, band) == pytest.approx(0.5)
    assert P.ramp_score(1.8, band) == pytest.approx(0.5) and P.ramp_score(2.0, band) == 0.0
    assert P.ramp_score(0.79, band) is None and P.ramp_score(2.01, band) is None
    assert P.ramp_score(1e9, P.TLDR.unique_band) == 1.0


def test_paper_preset_args_are_checked():
    entry = get_env("tldr")
    with pytest.raises(ValueError, match="env.args.preset"):
        entry.build(2, preset="papr")
    with pytest.raises(ValueError, match="exactly 2 agents"):
        entry.build(1, preset="paper")
    with pytest.raises(ValueError, match="env.args.reward"):
        entry.build(2, preset="paper", reward={"min_words": 2})
    env = entry.build(2, preset="paper", prompts=["A {text}", "B {text}"])
    assert env.reset({"text": "post"}).prompts == ("A post", "B post")
    default = get_env("arxiv").build(2, preset="paper").reset({"text": "ABS"}).prompts
    assert all("ABS" in p for p in default) and "background" in default[0] and "methodology" in default[1]
