"""Loss edge cases through the training loop (#13): empty batches, the constant normaliser's count,
clip metrics over passes, dropout and the pass-1 ratio. The pure parts are in test_losses.py,
test_advantages.py and test_kl.py."""
import math

import pytest
import torch

import comarl
from comarl.envs.base import FunctionEnv
from comarl.generation.team import generate_for_agents
from comarl.models.lora import LoraSettings
from comarl.compute.dropout import dropout_disabled
from config_keys import set_keys


def _trainer(lora=None, generator=None, **sections):
    cfg = set_keys(comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                                      run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[],
                                                           log_samples_steps=0),
                                      hardware=comarl.HardwareConfig(micro_batch_size=8)), **sections)
    agent = comarl.AgentConfig(model="tiny", max_new_tokens=5, lr=1e-2, lora=lora,
                               model_kwargs={"hidden_size": 32, "num_layers": 1})
    env = FunctionEnv([lambda it: f"say {it['q']}"], lambda resps, it: len(resps[0]) / 10.0)
    return comarl.Trainer([agent], env, [{"q": "a"}, {"q": "b"}], cfg, generator=generator)


def _truncating(which):
    """A team generator that samples as usual, then flags completions as truncated: ``which(n) -> bool
    mask`` over one call's samples (what a model hitting max_new_tokens reports)."""
    def generator(agents, prompt_ids, k, **kw):
        out = generate_for_agents(agents, prompt_ids, k, **kw)
        for c in out:
            c.truncated = which(len(c.truncated)).tolist()
        return out

    return generator


def test_fully_masked_batch_is_a_clean_skip():
    t = _trainer(loss={"mask_truncated": True}, generator=_truncating(lambda n: torch.ones(n, dtype=torch.bool)))
    before = [p.detach().clone() for p in t.agents[0].model.parameters()]
    with pytest.warns(RuntimeWarning, match=r"agent0 has no completion in the loss \(4 sequences") as rec:
        hist = t.train()
    assert all("\n" not in str(w.message) for w in rec)  # one line
    c = t.state.counters
    assert (c["empty_batch_skips"], c["nonfinite_skips"], c["optimizer_steps"]) == (1, 0, 0)
    assert hist[0]["count/empty_batch_skips"] == 1
    assert not any(isinstance(v, float) and math.isnan(v) for v in hist[0].values())
    assert all(torch.equal(b, p) for b, p in zip(before, t.agents[0].model.parameters()))


@pytest.mark.parametrize("mode, expected", [("constant", 4), ("sequence", 3)])
def test_constant_normaliser_counts_truncated_sequences(mode, expected):
    """4 sequences (2 items x K=2), the first of the chunk truncated: constant divides by all 4, sequence by 3."""
    seen = []
    t = _trainer(loss={"mask_truncated": True, "loss_normalization": mode},
                 generator=_truncating(lambda n: torch.arange(n) == 0))
    real = t.update.weights

    def spy(lengths, width, m, num_sequences, *a):  # the update's token weighting, watched
        seen.append(num_sequences)
        return real(lengths, width, m, num_sequences, *a)

    t.update.weights = spy
    t.train()
    assert seen == [expected]


def test_clip_metrics_are_token_means_averaged_over_passes():
    """2 passes x 2 micro-batches (n1, n2 real tokens). Pass 1 clips nothing; pass 2 clips every token of
    micro-batch 1 low and every token of micro-batch 2 high. Per pass: token means; then the mean of passes:
    low = n1 / (n1 + n2) / 2, high = n2 / (n1 + n2) / 2, region = (0 + 1) / 2."""
    t = _trainer(loss={"num_iterations": 2}, hardware={"micro_batch_size": 2})
    real = t.update.loss_fn
    calls = []

    def fake(*a, **k):  # the update's policy loss, with scripted clip fractions
        loss, st = real(*a, **k)
        n = st["tokens"]
        calls.append(float(n))
        pass2, first_mb = len(calls) > 2, len(calls) % 2 == 1
        low = float(pass2 and first_mb)
        high = float(pass2 and not first_mb)
        return loss, {**st, "clip_low": torch.tensor(low), "clip_high": torch.tensor(high),
                      "clip_region": torch.tensor(low + high)}

    t.update.loss_fn = fake
    m = t.train()[0]
    n1, n2 = calls[0], calls[1]
    assert len(calls) == 4 and calls[2:] == [n1, n2]
    assert m["agent0/clip_ratio/low_mean"] == pytest.approx(n1 / (n1 + n2) / 2)
    assert m["agent0/clip_ratio/high_mean"] == pytest.approx(n2 / (n1 + n2) / 2)
    assert m["agent0/clip_ratio/region_mean"] == pytest.approx(0.5)


@pytest.mark.parametrize("disable", [True, False])
def test_pass_one_ratio_is_one_with_lora_dropout(disable):
    """LoRA dropout 0.3, num_iterations 2, a non-zero adapter (a fresh B = 0 would hide dropout).

    Old log-probs come from the deterministic sampling policy. With disable_dropout (default) the update
    forward is that same policy: pass 1 has logp == old (ratio 1). With it off, pass 1 compares a dropped-out
    forward with the old log-probs and the ratio is not 1: what the default avoids.
    """
    seen = []
    torch.manual_seed(0)
    t = _trainer(lora=LoraSettings(r=4, dropout=0.3), loss={"num_iterations": 2, "disable_dropout": disable})
    real = t.update.loss_fn

    def spy(logp, old_logp, *a, **k):  # the update's policy loss, watched
        seen.append((logp.detach().clone(), old_logp.detach().clone()))
        return real(logp, old_logp, *a, **k)

    t.update.loss_fn = spy
    with torch.no_grad():
        for n, p in t.agents[0].model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.5)
    m = t.train()[0]
    logp, old = seen[0]
    if disable:
        assert torch.allclose(logp, old, atol=1e-5)
        assert m["agent0/clip_ratio/region_mean"] <= 0.5  # pass 1 adds 0 to the mean of two passes
    else:
        assert not torch.allclose(logp, old, atol=1e-3)
    drops = [x for x in t.agents[0].model.shared.peft_model.modules() if isinstance(x, torch.nn.Dropout)]
    assert drops and all(d.training for d in drops)  # restored: the model is back in plain train mode


def test_dropout_disabled_keeps_train_mode_and_restores():
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_dropout = 0.3

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), Attn())
    model.train()
    x = torch.ones(1, 4)
    with dropout_disabled(model):
        assert model.training and not model[1].training and model[2].attention_dropout == 0.0
        assert torch.equal(model[1](x), x)  # the dropout layer is the identity
    assert model[1].training and model[2].attention_dropout == 0.3
    with dropout_disabled(model, enabled=False):
        assert model[1].training and model[2].attention_dropout == 0.3


def test_agents_sharing_weights_are_judged_against_the_policy_that_sampled_them():
    """Two agents train one model (share_weights_with); agent 0 steps first. Agent 1's old log-probs must be the
    sampling policy's, taken before that step (issue #41: they were taken after it, so agent 1's first ratio was
    exactly 1 and its clip range centred on weights that never sampled its tokens), also with one iteration."""
    for iterations in (2, 1):
        cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                                 run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[],
                                                      log_samples_steps=0),
                                 hardware=comarl.HardwareConfig(micro_batch_size=16),
                                 loss=comarl.LossConfig(num_iterations=iterations))
        agents = [comarl.AgentConfig(model="tiny", max_new_tokens=5, lr=0.5, optimizer="sgd",
                                     model_kwargs={"hidden_size": 32, "num_layers": 1}),
                  comarl.AgentConfig(model="tiny", max_new_tokens=5, lr=0.5, optimizer="sgd", share_weights_with=0)]
        env = FunctionEnv([lambda it: f"say {it['q']}", lambda it: f"echo {it['q']}"],
                          lambda resps, it: len(resps[0]) / 10.0 - len(resps[1]) / 20.0)
        t = comarl.Trainer(agents, env, [{"q": "a"}, {"q": "b"}], cfg)
        assert t.agents[0].model is t.agents[1].model
        real, calls = t.update.loss_fn, []

        def spy(logp, old_logp, *a, calls=calls, real=real, **k):
            calls.append((logp.detach().clone(), old_logp.detach().clone()))
            return real(logp, old_logp, *a, **k)

        t.update.loss_fn = spy
        t.train()
        agent0_first, agent1_first = calls[0], calls[iterations]
        assert torch.allclose(agent0_first[0], agent0_first[1])  # nothing stepped before agent 0: ratio 1
        assert not torch.allclose(agent1_first[0], agent1_first[1], atol=1e-4), iterations  # the shared model moved


@pytest.mark.parametrize("coef", [0.0, 0.05])
def test_every_policy_gradient_algorithm_adds_the_entropy_bonus_it_is_given(coef):
    """``train.loss.entropy_coef`` is a term of the policy-gradient loss, not only the actor-critic ones': MAGRPO
    with 0.05 adds it on every micro-batch (with that coefficient), with 0 never."""
    t = _trainer(loss={"entropy_coef": coef})
    calls, real = [], t.update.entropy_bonus

    def watched(logp, weights, c):
        calls.append(c)
        return real(logp, weights, c)

    t.update.entropy_bonus = watched
    t.train()
    assert calls == ([] if coef == 0 else [coef] * len(calls)) and (coef == 0 or calls)
