"""Per-token advantages through the training loop: ``magrpo_token`` (algorithms/token_baseline.py), the
example of docs/algorithms.md's "Add an algorithm"."""
import torch

import comarl
from comarl.objective.advantages import token_group_baseline
from comarl.envs.base import FunctionEnv
from comarl.generation.team import generate_for_agents


def _varied_lengths(agents, prompt_ids, k, **kw):
    """Samples as usual, then sample s keeps its first 2 + s % 3 tokens (an EOS at a varying place), so the
    samples of a group differ in length, as a trained model's do."""
    out = generate_for_agents(agents, prompt_ids, k, **kw)
    for c in out:
        c.ids = [ids[:2 + s % 3] for s, ids in enumerate(c.ids)]
        c.truncated = [False] * len(c.ids)
        c.texts = [" ".join(map(str, ids)) for ids in c.ids]
    return out


def _trainer(algorithm: str):
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=3),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[],
                                                  log_samples_steps=0),
                             hardware=comarl.HardwareConfig(micro_batch_size=4))
    agent = comarl.AgentConfig(model="tiny", max_new_tokens=6, lr=1e-2, model_kwargs={"hidden_size": 32,
                                                                                       "num_layers": 1})
    # the reward is the completion's length in characters: samples of one group differ in length and return
    env = FunctionEnv([lambda it: f"say {it['q']}"], lambda resps, it: len(resps[0]) / 10.0)
    return comarl.Trainer([agent], env, [{"q": "a"}, {"q": "b"}], cfg,
                          generator=_varied_lengths)


def test_the_loss_reads_the_per_token_baseline_of_each_group():
    t = _trainer("magrpo_token")
    outputs, losses = [], []
    step, loss_fn = t.update.step, t.update.loss_fn

    def spy_step(team, batch, n):
        out = step(team, batch, n)
        outputs.append(out)
        return out

    def spy_loss(logp, old_logp, adv, *a, **k):
        losses.append(adv.detach().clone())
        return loss_fn(logp, old_logp, adv, *a, **k)

    t.update.step, t.update.loss_fn = spy_step, spy_loss
    t.train()
    [out] = outputs
    [[estimate]] = out.advantages  # one agent, one rollout chunk: the estimator's [S, T]
    samples = out.rollouts[0].agents[0]
    lengths = torch.tensor([len(c) for c in samples.completion_ids])
    expected = token_group_baseline(samples.returns, lengths)
    assert torch.allclose(estimate, expected.to(estimate.dtype))
    # the loss's micro-batches read exactly those tokens' advantages (zero past each completion)
    got = torch.zeros_like(expected)
    start = 0
    for adv in losses:
        got[start:start + adv.shape[0], :adv.shape[1]] = adv.to(got.dtype)
        start += adv.shape[0]
    assert start == len(lengths) and torch.allclose(got, expected, atol=1e-6)
    assert (lengths != lengths[0]).any(), "the test needs completions of different lengths"


def test_a_sequence_estimator_still_gives_every_token_its_samples_advantage():
    t = _trainer("magrpo")
    losses, outputs = [], []
    step, loss_fn = t.update.step, t.update.loss_fn

    def spy_step(team, batch, n):
        out = step(team, batch, n)
        outputs.append(out)
        return out

    def spy_loss(logp, old_logp, adv, weights, *a, **k):
        losses.append((adv.detach().clone(), weights.detach().clone()))
        return loss_fn(logp, old_logp, adv, weights, *a, **k)

    t.update.step, t.update.loss_fn = spy_step, spy_loss
    t.train()
    [[estimate]] = outputs[0].advantages
    assert estimate.shape == outputs[0].rollouts[0].agents[0].returns.shape  # [G, K]
    flat = estimate.reshape(-1)
    start = 0
    for adv, w in losses:
        for row in range(adv.shape[0]):
            real = w[row] > 0
            assert torch.allclose(adv[row][real], flat[start + row].to(adv.dtype).expand(int(real.sum())))
        start += adv.shape[0]
