"""Writing reward: word statistics, band scores and each level, with hand-computed numbers."""
import math

import pytest

from comarl.envs.writing import words
from comarl.envs.writing import reward as R
from comarl.envs.writing.reward import Band, RewardConfig

# A small config whose numbers are easy to check by hand.
CFG = RewardConfig(
    min_words=2, max_words=20,
    length_ratio=Band(2, 3, 1, 5), unique_ratio=Band(1.5, 3, 1, 5), overlap=Band(0.1, 0.4, 0, 0.7),
    transition_target=2, stop_words=("the", "a", "and", "is"),
    transitions={"contrast": ("however",), "addition": ("moreover", "as well as")},
)
Y1 = "the cat sleeps daily"  # L=4, content {cat, sleeps, daily}: U=3


def test_tokens_and_lengths():
    assert words.tokens("Don't stop, 2 cats!") == ["don't", "stop", "2", "cats"]
    assert words.length_words("  a  b\nc  ") == 3
    assert words.length_words("   ") == 0
    assert words.content_words("The cat and THE dog", {"the", "and"}) == {"cat", "dog"}


@pytest.mark.parametrize("text,expected", [
    ("", True), ("   \n\t", True), ("ok ok, OK!", True), ("!!! ???", True), ("ok fine", False),
])
def test_is_degenerate(text, expected):
    assert words.is_degenerate(text) is expected


def test_jaccard():
    assert words.jaccard({"a", "b", "c"}, {"b", "c", "d"}) == pytest.approx(2 / 4)
    assert words.jaccard(set(), set()) == 0.0


def test_transition_categories_whole_words_and_phrases():
    t = {"cause": ("so",), "contrast": ("on the other hand",), "addition": ("also",)}
    assert words.transition_categories("We also tried.", t) == {"addition"}          # "so" not inside "also"
    assert words.transition_categories("On the other hand, it works; so we stop.", t) == {"contrast", "cause"}
    assert words.transition_categories("on the other side", t) == set()


@pytest.mark.parametrize("x,expected", [
    (0.5, 0.0), (1.0, 0.0), (1.5, 0.5), (2.0, 1.0), (2.5, 1.0), (3.0, 1.0), (4.0, 0.5), (4.5, 0.25), (5.0, 0.0),
    (6.0, 0.0),
])
def test_band_score_ramps(x, expected):
    assert R.band_score(x, Band(2, 3, 1, 5)) == pytest.approx(expected)


def test_band_score_step_and_open_end():
    step = Band(2, 3, 2, 3)
    assert [R.band_score(x, step) for x in (1.99, 2.0, 3.0, 3.01)] == [0.0, 1.0, 1.0, 0.0]
    open_end = Band(2, math.inf, 1, math.inf)
    assert R.band_score(100.0, open_end) == 1.0
    assert R.band_score(1.25, open_end) == pytest.approx(0.25)


def test_pair_ratios_and_levels_1_to_3():
    assert R.pair_ratios([10, 25, 50]) == [2.5, 2.0]
    assert R.pair_ratios([0, 5]) == [None]
    assert R.level1_window([2, 20], 2, 20) is True
    assert R.level1_window([1, 10], 2, 20) is False
    b = Band(2, 3, 1, 5)
    assert R.pair_band_level([10, 25], b) == 1.0
    assert R.pair_band_level([10, 40], b) == pytest.approx(0.5)
    # three parts: ratios 2.5 -> 1 and 1.6 -> (1.6-1)/(2-1) = 0.6; mean 0.8
    assert R.pair_band_level([4, 10, 16], b) == pytest.approx(0.8)
    assert R.pair_band_level([4, 10, 10], b) == 0.0      # one pair at ratio 1 scores 0: gate fails
    assert R.pair_band_level([0, 10], b) == 0.0          # undefined ratio


def test_level4_style():
    assert R.level4_style(1, [0.375], CFG) == (0.5, 1.0)
    assert R.level4_style(5, [0.55], CFG) == pytest.approx((1.0, 0.5))  # (0.7-0.55)/(0.7-0.4) = 0.5


def test_max_reward_default():
    assert R.max_reward(RewardConfig()) == pytest.approx(3.0)


def test_all_levels_full_marks_except_transitions():
    # L2=10 -> ratio 2.5 (s2=1); content {cat,sleeps,daily,in,sink,however,dogs,bark}: U2=8, 8/3 in band (s3=1);
    # Jaccard 3/8=0.375 (o=1); one category (contrast) of target 2 -> t=0.5.
    y2 = "the cat sleeps daily in a sink however dogs bark"
    value, m = R.score_parts([Y1, y2], CFG)
    assert value == pytest.approx(0.5 + 1.0 + 0.5 + 0.4 * 0.5 + 0.6 * 1.0)  # 2.8
    assert m["level"] == 4 and m["level1"] == m["level2"] == m["level3"] == m["level4"] == 1.0
    assert m["length_ratio"] == pytest.approx(2.5)
    assert m["unique_ratio"] == pytest.approx(8 / 3)
    assert m["overlap"] == pytest.approx(0.375)
    assert m["transition_categories"] == 1.0 and m["degenerate"] == 0.0


def test_ramps_on_levels_2_and_3():
    # L2=16 -> ratio 4 -> s2=0.5; U2=12 -> ratio 4 -> s3=0.5; Jaccard 3/12=0.25 -> o=1; t=0.5
    y2 = "the cat sleeps daily in a sink however dogs bark and birds sing the whole night"
    value, m = R.score_parts([Y1, y2], CFG)
    assert m["length_ratio"] == pytest.approx(4.0) and m["unique_ratio"] == pytest.approx(4.0)
    assert value == pytest.approx(0.5 + 0.5 + 0.25 + 0.2 + 0.6)  # 2.05


def test_level1_stops_when_a_part_is_too_long():
    y2 = " ".join(f"w{i}" for i in range(21))  # 21 words > max_words 20
    value, m = R.score_parts([Y1, y2], CFG)
    assert value == 0.0 and m["level"] == 0 and m["level1"] == 0.0 and m["degenerate"] == 0.0


def test_level2_stops_at_equal_lengths():
    value, m = R.score_parts([Y1, "dogs bark at night"], CFG)  # ratio 1 -> band score 0
    assert value == pytest.approx(0.5) and m["level"] == 1 and m["level2"] == 0.0


def test_level3_stops_when_no_new_words():
    y2 = "the cat sleeps the cat sleeps daily daily cat cat"  # L=10, U=3 -> ratio 1 -> 0
    value, m = R.score_parts([Y1, y2], CFG)
    assert value == pytest.approx(1.5) and m["level"] == 2 and m["level3"] == 0.0


def test_level4_zero_without_overlap_or_transitions():
    y2 = "dogs bark at night and birds sing in trees too"  # L=10, U=9 (ratio 3), Jaccard 0, no transitions
    value, m = R.score_parts([Y1, y2], CFG)
    assert value == pytest.approx(2.0) and m["level"] == 3 and m["level4"] == 0.0


@pytest.mark.parametrize("parts", [
    ["", "the cat sleeps daily in a sink"],
    ["   \n", "the cat sleeps daily in a sink"],
    [Y1, "bark bark bark bark bark bark bark bark"],
    [Y1, "Bark! bark, BARK bark bark bark bark bark"],
])
def test_degenerate_parts_get_the_minimum(parts):
    value, m = R.score_parts(parts, CFG)
    assert value == 0.0 and m["degenerate"] == 1.0 and m["level"] == 0


def test_undefined_ratio_is_reported_as_zero():
    _, m = R.score_parts(["", Y1], CFG)
    assert m["length_ratio"] == 0.0


def test_metrics_have_the_same_keys_every_time():
    a = R.score_parts(["", ""], CFG)[1]
    b = R.score_parts([Y1, "the cat sleeps daily in a sink however dogs bark"], CFG)[1]
    assert set(a) == set(b)


def test_needs_two_parts():
    with pytest.raises(ValueError, match="at least 2 parts"):
        R.score_parts([Y1], CFG)


def test_reward_config_overrides_and_errors():
    cfg = R.reward_config({"length_ratio": {"low": 1.5, "high": 2.5, "zero_below": 1.0, "zero_above": 4.0},
                           "unique_ratio": [0.5, 1.0, 2.0, 3.0], "min_words": 3, "weight_level2": 2}, RewardConfig())
    assert cfg.length_ratio == Band(1.5, 2.5, 1.0, 4.0) and cfg.unique_ratio == Band(1.0, 2.0, 0.5, 3.0)
    assert cfg.min_words == 3 and cfg.weight_level2 == 2.0 and R.max_reward(cfg) == pytest.approx(4.0)
    # a band without ramps is a step
    assert R.reward_config({"overlap": {"low": 0.2, "high": 0.3}}, RewardConfig()).overlap == Band(0.2, 0.3, 0.2, 0.3)
    with pytest.raises(ValueError, match=r"env\.args\.reward: unknown key\(s\) \['bogus'\]"):
        R.reward_config({"bogus": 1}, RewardConfig())
    with pytest.raises(ValueError, match=r"env\.args\.reward\.length_ratio: low 3\.0 > high 2\.0"):
        R.reward_config({"length_ratio": {"low": 3, "high": 2}}, RewardConfig())
    with pytest.raises(ValueError, match=r"env\.args\.reward\.overlap: zero_below 0\.5 > low 0\.1"):
        R.reward_config({"overlap": [0.5, 0.1, 0.4, 0.7]}, RewardConfig())
    with pytest.raises(ValueError, match=r"env\.args\.reward\.length_ratio: unknown key\(s\) \['speed'\]"):
        R.reward_config({"length_ratio": {"low": 1, "high": 2, "speed": 3}}, RewardConfig())
    with pytest.raises(ValueError, match=r"env\.args\.reward\.min_words: 300 > max_words 256"):
        R.reward_config({"min_words": 300}, RewardConfig())
    with pytest.raises(ValueError, match=r"env\.args\.reward\.weight_overlap"):
        R.reward_config({"weight_overlap": -1}, RewardConfig())
    with pytest.raises(ValueError, match=r"env\.args\.reward\.transitions"):
        R.reward_config({"transitions": ["however"]}, RewardConfig())
