"""Replay of earlier rounds' pairs: CoMLRL's sampled rule (replay=decay_sample) by hand-worked probabilities,
next to comarl's weighted decay."""
import random
from collections import Counter

import pytest

from comarl.core.config_io import ConfigError
from comarl.preference import IterativeSettings, PreferenceSettings
from comarl.preference.replay import replay_pool, replay_sample_size, sample_replay, sampled_round_probabilities

SIZES = {0: 5, 1: 0, 2: 3, 3: 4}  # round 3 is the current one; round 1 made no pair


def test_sampled_round_probabilities_by_hand():
    """Rounds holding pairs, newest first: 3, 2, 0, ages 0, 1, 2 (round 1 holds none: not a round of age, as
    CoMLRL writes no shard for it). lambda = .5: (1 - .5) * .5^age = .5, .25, .125, over their sum .875:
    p = 4/7, 2/7, 1/7, whatever the rounds' sizes. (Weighted ``decay`` instead gives each *pair* .5^(3 - r):
    round shares 4 * 1 : 3 * .5 : 5 * .125 = 4 : 1.5 : .625 over 6.125.)"""
    assert sampled_round_probabilities(SIZES, 0.5) == pytest.approx({3: 4 / 7, 2: 2 / 7, 0: 1 / 7})
    assert sampled_round_probabilities(SIZES, 1.0) == pytest.approx({3: 1 / 3, 2: 1 / 3, 0: 1 / 3})
    assert sampled_round_probabilities(SIZES, 0.0) == pytest.approx({3: 1.0, 2: 0.0, 0: 0.0})  # 0^0 = 1
    # the current round made none: round 2 is the newest with pairs (age 0), round 0 age 1
    assert sampled_round_probabilities({0: 2, 1: 0, 2: 6, 3: 0}, 0.5) == pytest.approx({2: 2 / 3, 0: 1 / 3})
    assert sampled_round_probabilities({0: 0}, 0.5) == {}


def test_sample_size_is_the_current_rounds_count_else_the_newest_rounds():
    assert replay_sample_size(3, SIZES, None) == 4
    assert replay_sample_size(3, {0: 2, 1: 0, 2: 6, 3: 0}, None) == 6
    assert replay_sample_size(1, {0: 0, 1: 0}, None) == 0
    assert replay_sample_size(3, SIZES, 10) == 10


def test_sample_replay_draws_by_round_then_without_replacement():
    pairs = {0: ["a0", "a1"], 1: [], 2: ["c0", "c1", "c2"]}
    # lambda = 0: every draw from round 2 (3 pairs); 5 draws = one whole pass and 2 more, no pair three times
    got = Counter(sample_replay(pairs, 5, 0.0, random.Random(0)))
    assert sum(got.values()) == 5 and set(got) == {"c0", "c1", "c2"} and max(got.values()) == 2
    # 2 draws at lambda = 0: two different pairs of round 2
    two = sample_replay(pairs, 2, 0.0, random.Random(1))
    assert len(set(two)) == 2 and all(p.startswith("c") for p in two)
    assert sample_replay(pairs, 0, 0.5, random.Random(0)) == []
    assert sample_replay({0: []}, 3, 0.5, random.Random(0)) == []
    # frequencies follow the probabilities: rounds 0, 1, 2 with 1000, 10, 1000 pairs, lambda = .5 -> 1/7, 2/7, 4/7
    big = {0: [f"r0-{i}" for i in range(1000)], 1: [f"r1-{i}" for i in range(10)], 2: [f"r2-{i}" for i in range(1000)]}
    drawn = Counter(p.split("-")[0] for p in sample_replay(big, 7000, 0.5, random.Random(0)))
    for r, p in (("r0", 1 / 7), ("r1", 2 / 7), ("r2", 4 / 7)):
        assert drawn[r] / 7000 == pytest.approx(p, abs=0.02), drawn


def test_replay_pool_sampled_is_repeatable_and_weighted_is_unchanged():
    pairs = {0: ["a0", "a1"], 1: ["b0"], 2: ["c0", "c1", "c2"]}
    sampled = IterativeSettings(replay="decay_sample", replay_decay=0.5, replay_sample_size=6)
    pool, weights = replay_pool(2, pairs.__getitem__, sampled, seed=0)
    assert len(pool) == 6 and weights == [1.0] * 6
    assert replay_pool(2, pairs.__getitem__, sampled, seed=0) == (pool, weights)  # a resumed round: the same draw
    default = IterativeSettings(replay="decay_sample", replay_decay=0.5)
    assert len(replay_pool(2, pairs.__getitem__, default, seed=0)[0]) == 3  # as many as round 2 made
    pool, weights = replay_pool(2, pairs.__getitem__, IterativeSettings(replay="decay", replay_decay=0.5), seed=0)
    assert pool == ["a0", "a1", "b0", "c0", "c1", "c2"] and weights == [0.25, 0.25, 0.5, 1.0, 1.0, 1.0]


def test_replay_settings_are_checked():
    # CoMLRL's lambda = 0: newest only
    PreferenceSettings(iterative=IterativeSettings(replay="decay_sample", replay_decay=0.0)).validate()
    with pytest.raises(ConfigError, match="replay_decay"):
        PreferenceSettings(iterative=IterativeSettings(replay="decay", replay_decay=0.0)).validate()
    with pytest.raises(ConfigError, match="replay_decay"):
        PreferenceSettings(iterative=IterativeSettings(replay="decay_sample", replay_decay=1.5)).validate()
    with pytest.raises(ConfigError, match="replay_sample_size"):
        PreferenceSettings(iterative=IterativeSettings(replay="decay", replay_sample_size=4)).validate()
    with pytest.raises(ConfigError, match="replay_sample_size"):
        PreferenceSettings(iterative=IterativeSettings(replay="decay_sample", replay_sample_size=0)).validate()
