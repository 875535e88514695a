"""Held-out score of the demo: mean ± standard error by hand, disjoint splits, determinism, untouched RNG."""
import math

import pytest
import torch

from comarl.models.agents import AgentConfig, build_agents
from comarl.demo import demo_items, reward_window
from comarl.envs import demo_writing
from comarl.envs.registry import get_env
from comarl.generation import generate
from comarl.runs.heldout import HeldOutScore, heldout_score, mean_and_stderr, paired_gain


def test_mean_and_stderr_by_hand():
    # mean 0.5; deviations -0.3, -0.1, 0.4; sum of squares 0.26; sample variance 0.13; s.e. sqrt(0.13 / 3)
    mean, se = mean_and_stderr([0.2, 0.4, 0.9])
    assert mean == pytest.approx(0.5)
    assert se == pytest.approx(math.sqrt(0.13 / 3)) and se == pytest.approx(0.2082, abs=1e-4)
    assert mean_and_stderr([0.7]) == (pytest.approx(0.7), 0.0)
    with pytest.raises(ValueError, match="no values"):
        mean_and_stderr([])
    s = HeldOutScore(per_item=(0.2, 0.4, 0.9), samples=1, greedy=True)
    assert str(s) == "0.500 ± 0.208 (mean ± s.e. over 3 posts, greedy)"
    assert s.to_json()["stderr"] == pytest.approx(0.2082, abs=1e-4)


def test_paired_gain_by_hand():
    # differences 0.3, 0.1, 0.1: mean 1/6; deviations 2/15, -1/15, -1/15; variance (6/225) / 2 = 1/75; s.e. 1/15
    before = HeldOutScore(per_item=(0.2, 0.4, 0.9), samples=1, greedy=True)
    after = HeldOutScore(per_item=(0.5, 0.5, 1.0), samples=1, greedy=True)
    assert paired_gain(before, after) == (pytest.approx(1 / 6), pytest.approx(1 / 15))
    with pytest.raises(ValueError, match="3 items before, 2 after"):
        paired_gain(before, HeldOutScore(per_item=(0.5, 0.5), samples=1, greedy=True))


def test_reward_window_matches_the_plot_and_summary():
    # a tenth of the run, at least a third of it up to 10 steps
    assert [reward_window(n) for n in (1, 3, 10, 12, 30, 60, 300)] == [1, 1, 3, 4, 10, 10, 30]


@pytest.mark.parametrize("task", ["writing", "tldr"])
def test_demo_heldout_posts_are_never_trained_on(task):
    train, heldout = demo_items(task)
    key = "text" if task == "writing" else "prompt"
    assert len(heldout) >= 8 and len(train) >= 16
    assert not {it[key] for it in train} & {it[key] for it in heldout}


def test_a_heldout_post_in_the_training_set_is_refused(monkeypatch):
    monkeypatch.setattr(demo_writing, "HELDOUT_POSTS", demo_writing.HELDOUT_POSTS + demo_writing.DEMO_POSTS[3:4])
    with pytest.raises(AssertionError, match="1 held-out post"):
        demo_items("writing")
    with pytest.raises(ValueError, match="split must be 'train' or 'heldout'"):
        demo_writing.load_items(None, "test", None)


@pytest.fixture(scope="module")
def team():
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=12, temperature=1.0, model_kwargs={"seed": s})
                           for s in (0, 1)])
    return agents, get_env("demo_writing").build(2), demo_writing.load_items(None, "heldout", 6)


def test_greedy_score_is_the_env_reward_of_each_agents_greedy_text(team):
    agents, env, items = team
    score = heldout_score(agents, env, items)
    assert score.greedy and score.samples == 1 and len(score.per_item) == 6
    for item, got in zip(items, score.per_item):
        state = env.reset(item)
        texts = [generate(a, a.encode_prompts([state.prompts[i]]), 1, greedy=True).texts[0]
                 for i, a in enumerate(agents)]
        assert got == pytest.approx(env.step_batch([state], [tuple(texts)])[0].reward)


def test_sampled_score_repeats_under_its_seed_and_leaves_the_callers_rng_alone(team):
    agents, env, items = team
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = heldout_score(agents, env, items, samples=3, greedy=False, seed=7)
    assert torch.equal(torch.rand(3), expected_next)  # the training run's random stream is untouched
    b = heldout_score(agents, env, items, samples=3, greedy=False, seed=7)
    assert a.per_item == b.per_item and a.samples == 3 and not a.greedy
    c = heldout_score(agents, env, items, samples=3, greedy=False, seed=8)
    assert c.per_item != a.per_item  # another seed draws other samples (random tiny models vary a lot)
    with pytest.raises(ValueError, match="no held-out items"):
        heldout_score(agents, env, [])
