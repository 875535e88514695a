"""Pair selection on small reward tables, worked out by hand."""
import random

import pytest
import torch

from comarl.preference import joint_returns, select_pairs, tree_pairs

REWARDS = [0.5, 1.0, 0.0, 1.0]  # candidates 1 and 3 tie, so (1, 3) and (3, 1) are never pairs


def test_reward_gap_orders_by_gap_and_caps():
    # gaps: (1,2)=1, (3,2)=1, (0,2)=.5, (1,0)=.5, (3,0)=.5 ; ties in the gap keep index order
    assert select_pairs(REWARDS, "reward_gap", None) == [(1, 2), (3, 2), (0, 2), (1, 0), (3, 0)]
    assert select_pairs(REWARDS, "reward_gap", 1) == [(1, 2)]
    assert select_pairs(REWARDS, "reward_gap", 3) == [(1, 2), (3, 2), (0, 2)]


def test_all_keeps_every_positive_gap_pair_and_drops_ties():
    assert select_pairs(REWARDS, "all", None) == [(0, 2), (1, 0), (1, 2), (3, 0), (3, 2)]
    with pytest.raises(ValueError, match="max_pairs"):
        select_pairs(REWARDS, "all", 2)


def test_random_is_a_capped_subset_of_positive_pairs():
    got = select_pairs(REWARDS, "random", 2, random.Random(3))
    assert len(got) == 2 and set(got) <= {(0, 2), (1, 0), (1, 2), (3, 0), (3, 2)}
    assert sorted(select_pairs(REWARDS, "random", None, random.Random(3))) == select_pairs(REWARDS, "all", None)


def test_all_equal_rewards_give_no_pairs():
    assert select_pairs([0.3, 0.3, 0.3], "reward_gap", 2) == []
    with pytest.raises(ValueError, match="pair selection"):
        select_pairs(REWARDS, "best_worst", 1)


def test_joint_returns_back_up_children():
    # node 0 (turn 1): joint 0 -> node 1, joint 1 ends. node 1: rewards 1 and 0 -> V = 0.5
    rewards = torch.tensor([[[0.2, 0.2], [0.4, 0.6]], [[1.0, 1.0], [0.0, 0.0]]])
    child = torch.tensor([[1, -1], [-1, -1]])
    ret = joint_returns(rewards, child, gamma=0.5)
    assert ret.flatten().tolist() == pytest.approx([0.2 + 0.25, 0.5, 1.0, 0.0])


def test_tree_pairs_map_joint_actions_to_each_agents_samples():
    # cross mode, K=2, N=2: joints (0,0),(0,1),(1,0),(1,1); node 1's samples start at g*K = 2
    joints = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.2]]).unsqueeze(-1).repeat(1, 1, 2)
    pairs = tree_pairs(rewards, torch.full((2, 4), -1), joints, k=2, gamma=1.0, mode="reward_gap", max_pairs=1)
    assert [(p.group, p.chosen, p.rejected) for p in pairs] == [(0, 1, 0), (1, 2, 0)]
    assert pairs[0].chosen_samples == [0, 1] and pairs[0].rejected_samples == [0, 0]
    assert pairs[1].chosen_samples == [3, 2] and pairs[1].rejected_samples == [2, 2]
    assert pairs[1].gap == pytest.approx(0.5)


def test_replay_weights_by_hand():
    from comarl.preference.pairs import replay_weights

    assert replay_weights(3, "none") == {3: 1.0}
    assert replay_weights(3, "last_k", k=1) == {2: 1.0, 3: 1.0}
    assert replay_weights(1, "last_k", k=4) == {0: 1.0, 1: 1.0}
    assert replay_weights(2, "all") == {0: 1.0, 1: 1.0, 2: 1.0}
    assert replay_weights(2, "decay", decay=0.5) == {0: 0.25, 1: 0.5, 2: 1.0}
