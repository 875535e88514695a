import pytest
import torch

from comarl.envs.base import AgentRewards, FunctionEnv
from comarl.generation import Completions
from comarl.generation.team import scripted
from comarl.rollout import (RolloutSettings, check_tree_size, collect_rollout, credit_returns, joint_actions,
                            samples_per_item)


def test_joint_actions_aligned_and_cross():
    assert joint_actions("aligned", 3, 2).tolist() == [[0, 0], [1, 1], [2, 2]]
    assert joint_actions("cross", 2, 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert joint_actions("cross", 3, 3).shape == (27, 3)


def test_cross_credit_by_hand():
    # K=2, N=2; joint returns for (a0,b0)=1, (a0,b1)=3, (a1,b0)=5, (a1,b1)=7 (team reward, same for both agents)
    joints = joint_actions("cross", 2, 2)
    g = torch.tensor([1.0, 3.0, 5.0, 7.0]).unsqueeze(1).repeat(1, 2)
    credit = credit_returns(g, joints, 2)
    # agent 0 sample 0 is in (0,0),(0,1): mean(1,3)=2; sample 1: mean(5,7)=6
    # agent 1 sample 0 is in (0,0),(1,0): mean(1,5)=3; sample 1: mean(3,7)=5
    assert credit.tolist() == [[2.0, 6.0], [3.0, 5.0]]


def test_aligned_credit_is_the_joint_return():
    joints = joint_actions("aligned", 3, 2)
    g = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # per-agent returns
    assert credit_returns(g, joints, 3).tolist() == [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]


def test_tree_size_limit_refused_before_generation():
    assert samples_per_item("aligned", 4, 2, 2) == 2 * 4 * (1 + 4)
    assert samples_per_item("cross", 4, 2, 2) == 2 * 4 * (1 + 16)
    with pytest.raises(ValueError, match="max_samples_per_item"):
        check_tree_size("cross", 4, 3, 3, limit=1000)


class FakeAgent:
    """Stands in for an Agent: prompts are 'encoded' as their text length; texts are scripted."""

    def __init__(self, name):
        self.name = name
        self.seen_prompts = []

    def encode_prompts(self, texts):
        self.seen_prompts.append(list(texts))
        return [[len(t)] for t in texts]


@pytest.fixture
def scripted_generate():
    """A team generator whose texts are '<agent>-t<turn>-s<k>'; the turn is counted per agent call."""
    calls = {}

    def fake(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        turn = calls.get(agent.name, 0)
        calls[agent.name] = turn + 1
        texts = [f"{agent.name}-t{turn}-s{j}" for _ in prompt_ids for j in range(k)]
        ids = [[1, 2, 0] for _ in texts]
        return Completions(prompt_ids, ids, [False] * len(texts), texts, k)

    return scripted(fake)


def test_multi_turn_reaches_turn_2_with_transition_prompts(scripted_generate):
    agents = [FakeAgent("a"), FakeAgent("b")]

    def reward(resps, item):
        return float(resps[0].endswith("s1"))  # 1 when agent a used sample 1

    def transition(state, resps):
        return [f"turn2 for {i}: you wrote {r}" for i, r in enumerate(resps)]

    env = FunctionEnv([lambda it: "A:" + it["q"], lambda it: "B:" + it["q"]], reward, transition, max_turns=2)
    s = RolloutSettings(num_generations=2, joint_mode="aligned", num_turns=2, discount=0.5, generator=scripted_generate)
    out = collect_rollout(agents, env, [{"q": "x"}], s)
    # turn 1 prompts, then one call with the 2 branch prompts of turn 2
    assert agents[0].seen_prompts == [["A:x"], ["turn2 for 0: you wrote a-t0-s0", "turn2 for 0: you wrote a-t0-s1"]]
    assert agents[1].seen_prompts[1] == ["turn2 for 1: you wrote b-t0-s0", "turn2 for 1: you wrote b-t0-s1"]
    # groups: root + 2 children -> 3 groups of K=2 per agent
    a = out.agents[0]
    assert a.returns.shape == (3, 2) and a.turns.tolist() == [0, 1, 1]
    # children: reward 1 for sample 1 of agent a -> child returns [0, 1], V(child) = 0.5
    # root: r = [0, 1]; G = r + 0.5 * 0.5 = [0.25, 1.25]
    assert a.returns[0].tolist() == [0.25, 1.25]
    assert a.returns[1].tolist() == [0.0, 1.0] and a.returns[2].tolist() == [0.0, 1.0]
    assert out.metrics["reward/turn1"] == 0.5


def test_discount_zero_ignores_future_and_early_stop(scripted_generate):
    agents = [FakeAgent("a")]
    env = FunctionEnv([lambda it: "q"], lambda r, it: 1.0 if r[0].endswith("s0") else 0.0,
                      lambda st, r: ["again"], max_turns=3)
    s = RolloutSettings(num_generations=2, num_turns=3, discount=0.0, early_stop_reward=1.0,
                        generator=scripted_generate)
    out = collect_rollout(agents, env, [{}], s)
    # sample 0 scores 1 -> its branch stops; sample 1 continues: nodes per turn 1, 1, 1
    assert out.agents[0].turns.tolist() == [0, 1, 2]
    assert out.agents[0].returns[0].tolist() == [1.0, 0.0]


def test_cross_mode_rollout_credits_per_agent(scripted_generate):
    agents = [FakeAgent("a"), FakeAgent("b")]
    table = {("a-t0-s0", "b-t0-s0"): 1.0, ("a-t0-s0", "b-t0-s1"): 3.0,
             ("a-t0-s1", "b-t0-s0"): 5.0, ("a-t0-s1", "b-t0-s1"): 7.0}
    env = FunctionEnv([lambda it: "p", lambda it: "p"], lambda r, it: table[tuple(r)])
    out = collect_rollout(agents, env, [{}],
                          RolloutSettings(num_generations=2, joint_mode="cross", generator=scripted_generate))
    assert out.agents[0].returns.tolist() == [[2.0, 6.0]]
    assert out.agents[1].returns.tolist() == [[3.0, 5.0]]


def test_per_agent_rewards_are_explicit(scripted_generate):
    agents = [FakeAgent("a"), FakeAgent("b")]
    env = FunctionEnv([lambda it: "p", lambda it: "p"], lambda r, it: AgentRewards((1.0, -1.0)))
    out = collect_rollout(agents, env, [{}], RolloutSettings(num_generations=2, generator=scripted_generate))
    assert out.agents[0].returns.tolist() == [[1.0, 1.0]]
    assert out.agents[1].returns.tolist() == [[-1.0, -1.0]]
    bad = FunctionEnv([lambda it: "p", lambda it: "p"], lambda r, it: AgentRewards((1.0,)))
    with pytest.raises(ValueError, match="AgentRewards has 1 values for 2 agents"):
        collect_rollout(agents, bad, [{}], RolloutSettings(num_generations=2, generator=scripted_generate))


def test_reward_fn_errors_name_the_item_and_turn():
    env = FunctionEnv([lambda it: "p"], lambda r, it: 1 / 0)
    with pytest.raises(RuntimeError, match=r"reward_fn failed at turn 0 on item \{'q': 'x'\}: ZeroDivisionError"):
        env.step_batch([env.reset({"q": "x"})], [("a",)])
    bad_type = FunctionEnv([lambda it: "p"], lambda r, it: "high")
    with pytest.raises(RuntimeError, match="ValueError"):
        bad_type.step_batch([bad_type.reset({"q": "x"})], [("a",)])
