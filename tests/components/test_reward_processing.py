"""env.reward_scale / env.reward_shift, sibling-mean early termination, and the train/eval overlap refusal."""
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.envs.base import AgentRewards, FunctionEnv
from comarl.envs.loading import check_no_overlap, item_keys
from comarl.envs.reward_processing import ProcessedRewardEnv, process_reward, with_reward_processing
from comarl.experiment import build_env, build_trainer
from comarl.generation import Completions
from comarl.generation.team import scripted
from comarl.rollout import RolloutSettings, collect_rollout, siblings_end

ROOT = Path(__file__).resolve().parents[2]


class FakeAgent:
    def __init__(self, name):
        self.name = name

    def encode_prompts(self, texts):
        return [[len(t)] for t in texts]


@pytest.fixture
def scripted_team():
    """A team generator whose texts are '<agent>-s<k>'."""

    def fake(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        texts = [f"{agent.name}-s{j}" for _ in prompt_ids for j in range(k)]
        return Completions(prompt_ids, [[1, 0] for _ in texts], [False] * len(texts), texts, k)

    return scripted(fake)


def two_turn_env():
    """Turn 0: item 'hi' scores [1, 0] over its 2 joint actions, item 'lo' [0, 0]; turn 1 scores 1 everywhere."""

    def reward(resps, item):
        return 1.0 if item["q"] == "hi" and resps[0].endswith("s0") else 0.0

    def transition(state, resps):
        return ["again", "again"]

    def reward_turn(resps, item):  # the state's prompt tells the turn
        return reward(resps, item)

    env = FunctionEnv([lambda it: it["q"], lambda it: it["q"]], reward_turn, transition, max_turns=2)
    base_step = env.step_batch

    def step_batch(states, responses):  # turn 1 (prompt "again") scores 1.0
        trs = base_step(states, responses)
        return [t if st.prompts[0] != "again" else type(t)(1.0, t.done, t.next_state, t.metrics)
                for st, t in zip(states, trs)]

    env.step_batch = step_batch
    return env


ITEMS = [{"q": "hi"}, {"q": "lo"}]


def test_process_reward_by_hand():
    assert process_reward(2.0, 0.5, -4.0) == -3.0
    assert process_reward(AgentRewards((1.0, 3.0)), 2.0, 1.0) == AgentRewards((3.0, 7.0))
    env = FunctionEnv([lambda it: "p"], lambda r, it: 3.0)
    assert with_reward_processing(env, 1.0, 0.0) is env
    with pytest.raises(ValueError, match="env.reward_scale"):
        ProcessedRewardEnv(env, 0.0, 1.0)


def test_siblings_end_is_strict():
    import torch

    r = torch.tensor([[1.0], [0.0]])
    assert siblings_end(r, 0.4) and not siblings_end(r, 0.5) and not siblings_end(r, None)


def test_sibling_mean_ends_the_whole_node(scripted_team):
    agents = [FakeAgent("a"), FakeAgent("b")]
    s = RolloutSettings(num_generations=2, num_turns=2, early_stop_sibling_mean=0.4, generator=scripted_team)
    out = collect_rollout(agents, two_turn_env(), ITEMS, s)
    # hi: mean(1, 0) = 0.5 > 0.4 -> both branches end, even the one that scored 0; lo: mean 0 -> 2 children
    assert out.agents[0].turns.tolist() == [0, 0, 1, 1]
    # returns: hi [1, 0] (no future); lo r = [0, 0] + V(child) = 1 each
    assert out.agents[0].returns.tolist() == [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    # exactly on the threshold does not end: 2 + 4 children
    on = collect_rollout(agents, two_turn_env(), ITEMS,
                         RolloutSettings(2, num_turns=2, early_stop_sibling_mean=0.5, generator=scripted_team))
    assert on.agents[0].turns.tolist() == [0, 0, 1, 1, 1, 1]
    # early_stop_reward is per branch: hi's branch 0 ends (reward 1), branch 1 goes on
    per = collect_rollout(agents, two_turn_env(), ITEMS,
                          RolloutSettings(2, num_turns=2, early_stop_reward=1.0, generator=scripted_team))
    assert per.agents[0].turns.tolist() == [0, 0, 1, 1, 1]


def test_processing_comes_before_returns_and_termination(scripted_team):
    agents = [FakeAgent("a"), FakeAgent("b")]
    env = ProcessedRewardEnv(two_turn_env(), scale=2.0, shift=-1.0)
    # processed turn 0: hi [1, -1] (mean 0), lo [-1, -1] (mean -1); turn 1: 2 * 1 - 1 = 1.
    # Threshold -0.5 on processed rewards ends hi only (raw means 0.5 and 0 would end both).
    s = RolloutSettings(num_generations=2, num_turns=2, early_stop_sibling_mean=-0.5, generator=scripted_team)
    out = collect_rollout(agents, env, ITEMS, s)
    assert out.agents[0].turns.tolist() == [0, 0, 1, 1]
    # hi: [1, -1]; lo: -1 + V(child) = -1 + 1 = 0
    assert out.agents[0].returns.tolist() == [[1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    assert out.metrics["reward/turn0"] == -0.5 and out.metrics["reward/turn1"] == 1.0
    # raw rewards: turn 0 (1, 0, 0, 0), turn 1 four times 1 -> 5/8
    assert out.metrics["env/reward_raw"] == 5 / 8


def test_env_config_fields(tmp_path):
    cfg = load_config(ROOT / "configs/writing/tldr_smoke.yaml", ["env.reward_shift=-4", "env.reward_scale=0.5"])
    assert (cfg.env.reward_scale, cfg.env.reward_shift) == (0.5, -4.0)
    env = build_env(cfg)
    assert isinstance(env, ProcessedRewardEnv) and env.num_agents == 2
    with pytest.raises(ConfigError, match="env.reward_scale"):
        load_config(ROOT / "configs/writing/tldr_smoke.yaml", ["env.reward_scale=0"])
    with pytest.raises(ConfigError, match="reward_shfit"):
        load_config(ROOT / "configs/writing/tldr_smoke.yaml", ["env.reward_shfit=1"])


def test_item_keys_prefer_ids_then_content():
    assert item_keys([{"task_id": "A/1", "x": 1}], [{"task_id": "A/1", "x": 2}])[0] == "task_id"
    field, tr, ev = item_keys([{"text": "a"}], [{"text": "a", "id": 3}])  # id not on every item -> content
    assert field == "content" and tr != ev
    check_no_overlap([{"text": "a"}], [{"text": "b"}], "train", "eval")
    with pytest.raises(ValueError, match=r"eval overlaps train: 1 of its 2 items.*same task_id: A/1"):
        check_no_overlap([{"task_id": "A/1"}], [{"task_id": "A/1"}, {"task_id": "A/2"}], "train", "eval")


def test_overlapping_eval_set_is_refused(monkeypatch):
    monkeypatch.chdir(ROOT)
    over = ["data.eval.split=test[2:6]"]  # rows 2, 3 are also training rows 2, 3 (train[:4])
    with pytest.raises(ConfigError) as e:
        build_trainer(load_config(ROOT / "configs/writing/tldr_smoke.yaml", over))
    msg = str(e.value)
    assert "data.eval (source fixture:writing/tldr.jsonl, split test[2:6]" in msg
    assert "data.train (source fixture:writing/tldr.jsonl, split train[:4]" in msg
    assert "2 of its 4 items" in msg and "allow_overlap" in msg
    trainer = build_trainer(load_config(ROOT / "configs/writing/tldr_smoke.yaml", over + ["data.allow_overlap=true"]))
    assert len(trainer.eval_items) == 4
