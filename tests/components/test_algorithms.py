"""MAREINFORCE, MARLOO, MAReMax (+ group max): hand-computed advantages, greedy baseline, multi-pass ratio, e2e runs."""
import math
from types import SimpleNamespace

import pytest
import torch

import comarl
from comarl.algorithms import get_algorithm
from comarl.envs.base import FunctionEnv
from comarl.generation import Completions
from comarl.generation.team import scripted
from comarl.objective.losses import clipped_policy_loss
from comarl.rollout import RolloutSettings, collect_rollout
from config_keys import set_keys

# the reward table of tests/unit/test_advantages.py: 2 groups x 4 samples
R = torch.tensor([[1.0, 2.0, 3.0, 6.0],
                  [0.0, 0.0, 4.0, 4.0]])
S0, S1 = (14 / 3) ** 0.5, (16 / 3) ** 0.5  # unbiased group stds


def _adv(name, returns=R, baseline=None, scale=False):
    samples = SimpleNamespace(returns=returns, baseline=baseline)
    return get_algorithm(name).advantage(samples, SimpleNamespace(scale_advantages=scale))


def test_reinforce_is_the_return():
    assert torch.equal(_adv("mareinforce"), R)
    # std option: R / std per group
    expected = torch.tensor([[1 / S0, 2 / S0, 3 / S0, 6 / S0], [0.0, 0.0, 4 / S1, 4 / S1]])
    assert torch.allclose(_adv("mareinforce", scale=True), expected, atol=1e-5)


def test_rloo_leave_one_out_by_hand():
    # group 0: sum 12 -> others' means 11/3, 10/3, 9/3, 6/3; group 1: sum 8 -> 8/3, 8/3, 4/3, 4/3
    expected = torch.tensor([[1 - 11 / 3, 2 - 10 / 3, 0.0, 6 - 2.0],
                             [-8 / 3, -8 / 3, 4 - 4 / 3, 4 - 4 / 3]])
    assert torch.allclose(_adv("marloo"), expected, atol=1e-6)
    # = K/(K-1) * MAGRPO's advantage
    assert torch.allclose(_adv("marloo"), 4 / 3 * _adv("magrpo"), atol=1e-6)
    with pytest.raises(ValueError, match="K >= 2"):
        _adv("marloo", returns=torch.ones(2, 1))


def test_remax_greedy_baseline_by_hand():
    b = torch.tensor([2.0, 1.0])  # greedy returns of the two groups
    assert torch.equal(_adv("maremax", baseline=b), torch.tensor([[-1.0, 0.0, 1.0, 4.0], [-1.0, -1.0, 3.0, 3.0]]))
    scaled = _adv("maremax", baseline=b, scale=True)
    assert torch.allclose(scaled[0], torch.tensor([-1.0, 0.0, 1.0, 4.0]) / S0, atol=1e-5)
    with pytest.raises(ValueError, match="greedy baseline"):
        _adv("maremax")


def test_group_max_baseline_by_hand():
    assert torch.equal(_adv("maremax_groupmax"), torch.tensor([[-5.0, -4.0, -3.0, 0.0], [-4.0, -4.0, 0.0, 0.0]]))


def test_std_scaling_leaves_flat_groups_and_k1_alone():
    flat = torch.tensor([[2.0, 2.0, 2.0]])
    assert torch.equal(_adv("mareinforce", returns=flat, scale=True), flat)  # not 2 / 1e-6
    assert torch.equal(_adv("maremax", returns=flat, baseline=torch.tensor([1.0]), scale=True), torch.ones(1, 3))
    one = torch.tensor([[3.0], [5.0]])
    assert torch.equal(_adv("maremax", returns=one, baseline=torch.tensor([1.0, 1.0]), scale=True),
                       torch.tensor([[2.0], [4.0]]))


def test_registry_knows_every_name():
    for name in ("mareinforce", "reinforce", "marloo", "rloo", "maremax", "remax", "maremax_groupmax"):
        alg = get_algorithm(name)
        assert alg.greedy_baseline == (name in ("maremax", "remax"))
    assert get_algorithm("marloo").min_generations == 2 and get_algorithm("maremax").min_generations == 1


def test_two_passes_second_is_clipped_by_hand():
    """num_iterations = 2 on one token, A = +1, weight 1, SGD lr 0.3 on theta = logp.

    Pass 1: old = theta0 = -1 -> ratio 1, loss -1, d loss/d theta = -1 -> theta1 = -0.7.
    Pass 2 keeps old = -1 (from *before* pass 1): ratio e^0.3 = 1.3499 > 1.2 -> the clipped
    term 1.2 is the min, loss -1.2 and zero gradient, so theta stays at -0.7.
    """
    theta = torch.tensor([[-1.0]], requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.3)
    old = theta.detach().clone()
    losses = []
    for _ in range(2):
        loss, _ = clipped_policy_loss(theta, old, torch.tensor([1.0]), torch.ones(1, 1))
        opt.zero_grad()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    assert losses == pytest.approx([-1.0, -1.2])
    assert theta.item() == pytest.approx(-0.7)


# ---------------------------------------------------------------- greedy baseline in the rollout
class _Agent:
    def __init__(self, name):
        self.name = name

    def encode_prompts(self, texts):
        return [[len(t)] for t in texts]


def test_greedy_baseline_runs_greedy_chains_to_the_end():
    """2 turns, gamma 0.5. Greedy replies "G" score 1 at turn 0 and 2 at turn 1; samples score 0.

    Root: greedy chain return 1 + 0.5 * 2 = 2; sampled returns 0. Each of the K=2 children (turn 1)
    starts its own chain: return 2. Turn 1 runs 3 chains (root's + 2 children's) in one greedy call per agent.
    """
    calls = []

    def fake(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        calls.append((agent.name, len(prompt_ids), k, greedy))
        texts = ["G" if greedy else f"s{j}" for _ in prompt_ids for j in range(k)]
        return Completions(prompt_ids, [[1, 0]] * len(texts), [False] * len(texts), texts, k)

    env = FunctionEnv([lambda it: "p", lambda it: "p"],
                      lambda r, it: (1.0 if it.get("_t", 0) == 0 else 2.0) if r[0] == "G" else 0.0,
                      lambda st, r: ["again", "again"], max_turns=2)
    real_step = env.step_batch

    def step_batch(states, responses):  # tell the reward which turn it is
        return real_step([s.__class__(**{**s.__dict__, "item": {"_t": s.turn}}) for s in states], responses)

    env.step_batch = step_batch
    out = collect_rollout([_Agent("a"), _Agent("b")], env, [{}],
                          RolloutSettings(num_generations=2, num_turns=2, discount=0.5, greedy_baseline=True,
                                          generator=scripted(fake)))
    a = out.agents[0]
    assert a.turns.tolist() == [0, 1, 1]
    assert a.baseline.tolist() == [2.0, 2.0, 2.0]
    assert a.returns.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    greedy = [c for c in calls if c[3]]
    assert greedy == [("a", 1, 1, True), ("b", 1, 1, True), ("a", 3, 1, True), ("b", 3, 1, True)]
    assert all(not c[3] and c[2] == 2 for c in calls if not c[3])


# ---------------------------------------------------------------- end to end
def _tiny_trainer(algorithm, n_agents=2, **sections):
    cfg = set_keys(comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=2),
                                      run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[],
                                                           log_samples_steps=0),
                                      hardware=comarl.HardwareConfig(micro_batch_size=8)), **sections)
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6, lr=1e-3) for _ in range(n_agents)]
    env = FunctionEnv([(lambda it, i=i: f"agent {i}: {it['q']}") for i in range(n_agents)],
                      lambda resps, it: sum(len(r) for r in resps) / 10.0)
    return comarl.Trainer(agents, env, [{"q": "a"}, {"q": "b"}, {"q": "c"}], cfg)


@pytest.mark.parametrize("algorithm", ["mareinforce", "marloo", "maremax", "maremax_groupmax"])
def test_each_algorithm_trains_two_steps(algorithm):
    t = _tiny_trainer(algorithm)
    before = [p.detach().clone() for p in t.agents[0].model.parameters()]
    gen_calls = []
    real = t.agents[0].model.generate

    def spy(*a, **k):  # (sampling?, sequences per prompt): rows x num_return_sequences / distinct prompts
        rows = k["input_ids"]
        distinct = len(set(map(tuple, rows.tolist())))
        gen_calls.append((k["do_sample"], rows.shape[0] * k["num_return_sequences"] // distinct))
        return real(*a, **k)

    t.agents[0].model.generate = spy
    hist = t.train()
    assert len(hist) == 2 and all(math.isfinite(m["agent0/loss"]) for m in hist)
    assert any(not torch.equal(b, p) for b, p in zip(before, t.agents[0].model.parameters()))
    if algorithm == "maremax":  # one greedy call (sampling off, 1 sequence) and one sampled call (K=2) per step
        assert gen_calls == [(False, 1), (True, 2)] * 2
    else:
        assert gen_calls == [(True, 2)] * 2


def test_num_iterations_uses_old_logprobs_from_before_the_first_update():
    seen = []
    t = _tiny_trainer("marloo", n_agents=1, loss={"num_iterations": 3, "clip_low": 0.5, "clip_high": 0.5},
                      run={"max_steps": 1})
    real = t.update.loss_fn

    def spy(logp, old_logp, *a, **k):  # the update's policy loss, watched
        seen.append((logp.detach().clone(), old_logp.detach().clone()))
        return real(logp, old_logp, *a, **k)

    t.update.loss_fn = spy
    t.train()
    assert len(seen) == 3  # one micro-batch, three passes
    old0 = seen[0][1]
    assert all(torch.equal(o, old0) for _, o in seen)  # the same old log-probs in every pass
    assert torch.allclose(seen[0][0], old0, atol=1e-5)  # pass 1: ratio 1 (old = the sampling policy)
    assert not torch.allclose(seen[2][0], old0, atol=1e-4)  # pass 3 sees an updated policy against the old one
