"""MARLHF: the joint reward model learns a toy preference above chance; its score drives an on-policy run."""
import random

import numpy as np
import pytest
import torch

import comarl
from comarl.preference import JointRewardModel, RewardModelEnv

GOOD = ["fine", "great", "good", "nice"]
BAD = ["bad", "awful", "poor", "wrong"]


def classifier(seed=0):
    from transformers import Qwen2ForSequenceClassification

    from comarl.models.tiny_model import tiny_model

    lm, tok = tiny_model()
    config = lm.config
    config.num_labels, config.pad_token_id = 1, tok.pad_token_id
    torch.manual_seed(seed)
    return Qwen2ForSequenceClassification(config), tok


def toy_pairs(n, seed):
    """Agent 2 answers with a GOOD word in the chosen joint response and a BAD one in the rejected (agent 1 random)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        first = rng.choice(GOOD + BAD)
        out.append({"prompts": [f"Task {seed}-{i}: open", f"Task {seed}-{i}: reply"],
                    "chosen": [first, rng.choice(GOOD)], "rejected": [first, rng.choice(BAD)]})
    return out


@pytest.mark.parametrize("freeze", [False, True], ids=["trained_backbone", "frozen_backbone"])
def test_reward_model_accuracy_rises_above_chance(freeze):
    model, tok = classifier()
    rm = JointRewardModel(model, tok, freeze_backbone=freeze)
    train, held_out = toy_pairs(48, seed=1), toy_pairs(32, seed=2)
    backbone = [p.detach().clone() for n, p in model.named_parameters() if not n.startswith("score")]
    before = rm.accuracy(held_out)
    losses = rm.fit(train, epochs=4, batch_size=8, lr=3e-3 if not freeze else 3e-2)
    acc = rm.accuracy(held_out)
    assert acc >= 0.8 and acc > before, (before, acc)  # chance 0.5; measured 0.69 untrained -> 1.0 (both variants)
    assert np.mean(losses[-6:]) < np.mean(losses[:6])
    moved = any(not torch.equal(a, p) for a, (n, p) in zip(backbone, [(n, p) for n, p in model.named_parameters()
                                                                       if not n.startswith("score")]))
    assert moved is not freeze


def test_reward_model_refuses_a_multi_label_classifier():
    model, tok = classifier()
    model.config.num_labels = 2
    with pytest.raises(ValueError, match="num_labels=1"):
        JointRewardModel(model, tok)


def test_rl_on_the_reward_models_score_logs_the_envs_own_reward():
    model, tok = classifier()
    rm = JointRewardModel(model, tok)
    env = comarl.FunctionEnv(formatters=[lambda it: f"Open {it['n']}", lambda it: f"Reply {it['n']}"],
                             reward_fn=lambda r, it: 0.25)
    wrapped = RewardModelEnv(env, rm)
    state = wrapped.reset({"n": 1})
    tr = wrapped.step_batch([state], [("good", "fine")])[0]
    with torch.no_grad():
        expected = float(rm.scores([state.prompts], [("good", "fine")])[0])
    assert tr.reward == pytest.approx(expected) and tr.metrics["env_reward"] == 0.25
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[]))
    t = comarl.Trainer([comarl.AgentConfig(model="tiny", max_new_tokens=3, chat_template=False) for _ in range(2)],
                       wrapped, [{"n": i} for i in range(2)], cfg)
    hist = t.train()
    assert hist[0]["env/env_reward"] == 0.25 and hist[0]["reward/mean"] != 0.25


def test_a_non_finite_batch_is_skipped_counted_and_said():
    """The reward model steps through the same optimiser step as agents and critics (compute/stepping.py,
    whose clipping tests/unit/test_stepping.py checks): a batch whose loss is non-finite leaves the weights as
    they were, counts one skip and says so."""
    model, tok = classifier()
    rm = JointRewardModel(model, tok)
    with torch.no_grad():
        model.score.weight.fill_(float("nan"))
    before = [p.detach().clone() for p in rm.parameters()]
    with pytest.warns(RuntimeWarning, match=r"reward model: non-finite loss or gradient in a batch; step skipped "
                                            r"\(skips so far: 2\)"):
        losses = rm.fit(toy_pairs(8, 0), epochs=1, batch_size=4, lr=1e-3, max_grad_norm=1.0)
    assert losses == [] and rm.nonfinite_skips == 2
    assert all(torch.equal(a, b) or (a.isnan().all() and b.isnan().all()) for a, b in zip(before, rm.parameters()))


class Summarising(comarl.FunctionEnv):
    """A FunctionEnv with an evaluation summary and a table, as the benchmark environments have."""

    def summarize(self, records):
        own = [t.metrics["env_reward"] for r in records for t in r.transitions]
        return {"items": len(records), "env_reward": sum(own) / len(own)}

    def render_table(self, summary):
        return f"| items | {summary['items']} |"


def test_evaluate_under_a_reward_model_keeps_the_wrapped_envs_summary():
    """issue #43: the wrapper used to hide ``summarize``, so ``evaluate()`` returned an empty summary."""
    model, tok = classifier()
    env = Summarising(formatters=[lambda it: f"Open {it['n']}", lambda it: f"Reply {it['n']}"],
                      reward_fn=lambda r, it: 0.5)
    wrapped = RewardModelEnv(env, JointRewardModel(model, tok))
    assert wrapped.render_table({"items": 2}) == "| items | 2 |"
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[]))
    t = comarl.Trainer([comarl.AgentConfig(model="tiny", max_new_tokens=3, chat_template=False) for _ in range(2)],
                       wrapped, [{"n": i} for i in range(2)], cfg, eval_dataset=[{"n": i} for i in range(3)])
    out = t.evaluate()
    assert out["summary"] == {"items": 3, "env_reward": 0.5}
