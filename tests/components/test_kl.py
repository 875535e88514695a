"""KL to the reference policy: estimators against a direct computation, reference construction, trainer wiring."""
import math

import pytest
import torch

import comarl
from comarl.models.agents import build_agents
from comarl.envs.base import FunctionEnv
from comarl.objective.logprobs import completion_logprobs
from comarl.models.lora import LoraSettings
from comarl.objective.losses import kl_estimate, kl_penalty, sequence_kl

# pi = (1/2, 1/4, 1/4), pi_ref = (1/4, 1/2, 1/4): KL(pi || pi_ref) = 1/2 ln 2 - 1/4 ln 2 = 1/4 ln 2
P = torch.tensor([0.5, 0.25, 0.25])
Q = torch.tensor([0.25, 0.5, 0.25])


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_estimators_are_unbiased_on_a_tiny_distribution(kind):
    per_token = kl_estimate(P.log().unsqueeze(0), Q.log().unsqueeze(0), kind)[0]
    expectation = (P * per_token).sum()  # E_{x ~ pi}[k(x)], exact over the 3 outcomes
    direct = (P * (P / Q).log()).sum()
    assert direct.item() == pytest.approx(0.25 * math.log(2), rel=1e-6)
    assert expectation.item() == pytest.approx(direct.item(), rel=1e-5)


def test_k1_and_k3_per_token_by_hand():
    lp, ref = P.log().unsqueeze(0), Q.log().unsqueeze(0)
    # token 0: d = ln(q/p) = -ln 2 -> k1 = ln 2, k3 = 1/2 + ln 2 - 1
    # token 1: d = +ln 2 -> k1 = -ln 2 (negative), k3 = 2 - ln 2 - 1; token 2: d = 0 -> both 0
    ln2 = math.log(2)
    assert torch.allclose(kl_estimate(lp, ref, "k1"), torch.tensor([[ln2, -ln2, 0.0]]), atol=1e-6)
    assert torch.allclose(kl_estimate(lp, ref, "k3"), torch.tensor([[ln2 - 0.5, 1 - ln2, 0.0]]), atol=1e-6)
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_estimate(lp, ref, "k2")


def test_sequence_kl_and_penalty_gradient_by_hand():
    lp = P.log().unsqueeze(0).clone().requires_grad_(True)
    ref = Q.log().unsqueeze(0)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert sequence_kl(lp.detach(), ref, mask, "k1").item() == pytest.approx(0.0, abs=1e-6)  # ln2 - ln2
    # penalty = beta * sum w * k3; d k3 / d logp = 1 - exp(d): token 0 -> 1 - 1/2, token 1 -> 1 - 2
    w = torch.tensor([[0.5, 0.5, 0.0]])
    pen = kl_penalty(lp, ref, w, beta=0.1, kind="k3")
    assert pen.item() == pytest.approx(0.1 * 0.5 * (math.log(2) - 0.5 + 1 - math.log(2)), rel=1e-5)
    pen.backward()
    assert torch.allclose(lp.grad, torch.tensor([[0.1 * 0.5 * 0.5, 0.1 * 0.5 * -1.0, 0.0]]), atol=1e-6)


def _expected_penalty_gradient(kind):
    """E_{a ~ pi}[grad_z kl(a)] exactly over the 3 outcomes, pi = softmax(z) = P; weights P play the sampling."""
    z = P.log().clone().requires_grad_(True)
    logp = torch.log_softmax(z, dim=0).unsqueeze(0)
    kl_penalty(logp, Q.log().unsqueeze(0), P.unsqueeze(0), beta=1.0, kind=kind).backward()
    return z.grad


def test_k3_in_the_loss_follows_the_gradient_of_the_reverse_kl():
    """grad_z KL(pi_ref || pi) = pi - pi_ref = (1/4, -1/4, 0) for a softmax policy.

    k3's per-token gradient is (1 - q/p) grad logp, so E_pi = sum_a (p_a - q_a)(e_a - p) = p - q.
    The forward KL(pi || pi_ref) has gradient p_j (ln(p_j/q_j) - KL) = ln2 * (3/8, -5/16, -1/16)
    = (0.2599, -0.2166, -0.0433): k3 in the loss does not follow that one (docs/algorithms.md).
    """
    g = _expected_penalty_gradient("k3")
    assert torch.allclose(g, torch.tensor([0.25, -0.25, 0.0]), atol=1e-6)
    forward = math.log(2) * torch.tensor([3 / 8, -5 / 16, -1 / 16])
    z = P.log().clone().requires_grad_(True)
    pi = torch.softmax(z, 0)
    (pi * (pi / Q).log()).sum().backward()
    assert torch.allclose(z.grad, forward, atol=1e-6)  # the hand numbers of the forward KL's gradient
    assert not torch.allclose(g, forward, atol=1e-2)


def test_k1_in_the_loss_has_zero_expected_gradient_and_is_refused():
    # grad k1 = grad logp, and E_pi[grad logp] = sum_a p_a (e_a - p) = 0
    assert torch.allclose(_expected_penalty_gradient("k1"), torch.zeros(3), atol=1e-7)
    with pytest.raises(comarl.ConfigError, match=r"train.loss.kl_estimator: k1 as a loss term .* k3.* kl_mode: reward"):
        comarl.TrainConfig(loss=comarl.LossConfig(kl_beta=0.1, kl_estimator="k1", kl_mode="loss")).validate(1)
    comarl.TrainConfig(loss=comarl.LossConfig(kl_beta=0.1, kl_estimator="k1", kl_mode="reward")).validate(1)
    comarl.TrainConfig(loss=comarl.LossConfig(kl_beta=0.1, kl_estimator="k3", kl_mode="loss")).validate(1)
    comarl.TrainConfig(loss=comarl.LossConfig(kl_beta=0.0, kl_estimator="k1", kl_mode="loss")).validate(1)  # no KL


def _kl_trainer(beta, mode="loss", lora=False, steps=2):
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=steps, progress_bar=False, report_to=[],
                                                  log_samples_steps=0),
                             loss=comarl.LossConfig(kl_beta=beta, kl_mode=mode))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6, lr=1e-2, lora=LoraSettings(r=4) if lora else None)]
    env = FunctionEnv([lambda it: f"say {it['q']}"], lambda resps, it: len(resps[0]) / 10.0)
    return comarl.Trainer(agents, env, [{"q": "a"}, {"q": "b"}], cfg)


def test_no_reference_without_beta():
    assert _kl_trainer(0.0).references == [None]


@pytest.mark.parametrize("mode", ["loss", "reward"])
def test_full_model_reference_is_a_frozen_start_copy(mode):
    t = _kl_trainer(0.05, mode)
    ref = t.references[0]
    assert ref.model is not t.agents[0].model and not any(p.requires_grad for p in ref.model.parameters())
    start = {k: v.clone() for k, v in t.agents[0].model.state_dict().items()}
    hist = t.train()
    assert hist[0]["agent0/kl"] == pytest.approx(0.0, abs=1e-5)  # step 1 samples from the reference itself
    assert hist[1]["agent0/kl"] > 0  # lr 1e-2: the policy has moved
    for k, v in ref.model.state_dict().items():
        assert torch.equal(v, start[k]), k


def test_lora_reference_is_the_base_with_the_adapter_off():
    t = _kl_trainer(0.05, lora=True, steps=1)
    t.train()
    agent = t.agents[0]
    fresh, = build_agents(["tiny"])  # the same seeded base
    prompts, comps = [[5, 6, 7]], [[8, 9, 0]]
    ref_lp, _ = t.references[0].logprobs(prompts, comps)
    base_lp, _ = completion_logprobs(fresh.model, prompts, comps, 0)
    with torch.no_grad():
        pol_lp, _ = completion_logprobs(agent.model, prompts, comps, 0)
    assert torch.allclose(ref_lp, base_lp, atol=1e-5)
    assert not torch.allclose(pol_lp, base_lp, atol=1e-5)  # the adapter is back on afterwards
    assert t.references[0].model is None  # no copy


def test_kl_in_reward_lowers_the_returns_the_estimator_sees():
    """The estimator's view holds the returns minus beta * KL; the rollout's own samples keep the env's reward."""
    t = _kl_trainer(0.5, mode="reward", steps=2)
    t.config.loss.kl_estimator = "k3"  # >= 0 per token, so the penalty can only lower a return
    seen, untouched = [], []
    real = t.update.views

    def views(samples, lengths, returns, critic_adv):  # the update's views, watched
        raw = torch.cat([torch.tensor([len(x) / 10.0 for x in s.texts]) for s in samples])
        untouched.append(torch.allclose(raw, torch.cat([s.returns.reshape(-1) for s in samples]).float()))
        out = real(samples, lengths, returns, critic_adv)
        seen.append(raw - torch.cat([v.returns.reshape(-1) for v in out]))  # = beta * sequence KL
        return out

    t.update.views = views
    t.train()
    assert torch.allclose(seen[0], torch.zeros_like(seen[0]), atol=1e-5)  # step 1: policy == reference
    assert (seen[1] > 0).all()  # step 2: every sample pays beta * KL > 0
    assert untouched == [True, True]  # the samples themselves still hold the environment's reward
