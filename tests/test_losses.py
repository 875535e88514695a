import math

import pytest
import torch

from comarl.losses import clipped_policy_loss, token_weights


def test_token_weights_three_normalisations():
    lengths = torch.tensor([2, 4])
    # sequence: 1/(S*len) -> 1/4 on seq 0, 1/8 on seq 1
    w = token_weights(lengths, 4, "sequence", num_sequences=2, num_tokens=6, max_new_tokens=8)
    assert torch.allclose(w, torch.tensor([[0.25, 0.25, 0, 0], [0.125] * 4]))
    # token: 1/T_total = 1/6
    w = token_weights(lengths, 4, "token", num_sequences=2, num_tokens=6, max_new_tokens=8)
    assert torch.allclose(w, torch.tensor([[1 / 6, 1 / 6, 0, 0], [1 / 6] * 4]))
    # constant (Dr. GRPO): 1/(S*max_new_tokens) = 1/16
    w = token_weights(lengths, 4, "constant", num_sequences=2, num_tokens=6, max_new_tokens=8)
    assert torch.allclose(w, torch.tensor([[1 / 16, 1 / 16, 0, 0], [1 / 16] * 4]))


def test_weights_split_over_micro_batches_sum_to_full_batch():
    lengths = torch.tensor([3, 1, 2])
    full = token_weights(lengths, 3, "token", 3, 6, 4)
    parts = torch.cat([token_weights(lengths[:1], 3, "token", 3, 6, 4),
                       token_weights(lengths[1:], 3, "token", 3, 6, 4)])
    assert torch.allclose(full, parts)


def test_grpo_loss_single_agent_by_hand():
    """One agent, one group of K=2 with rewards 1 and 0 -> advantages +0.5, -0.5.

    Sequence-mean normalisation, on-policy: ratio = exp(lp - lp.detach()) = 1, so the per-token loss
    is -A * ratio and its value is sum_t w_t * (-A): seq a (2 tokens, w = 1/(2*2) = 0.25 each, A = +0.5)
    gives -0.25, seq b (1 token, w = 1/(2*1) = 0.5, A = -0.5) gives +0.25 -> loss 0.
    Gradient d loss / d lp_t = -A * w_t: -0.125 on both tokens of a, +0.25 on b's token, 0 on padding.
    """
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    adv = torch.tensor([0.5, -0.5])
    w = token_weights(torch.tensor([2, 1]), 2, "sequence", 2, 3, 2)
    loss, stats = clipped_policy_loss(logp, logp.detach(), adv, w)
    assert loss.item() == pytest.approx(0.0)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.125, -0.125], [0.25, 0.0]]))
    assert stats["ratio_mean"].item() == pytest.approx(1.0)


def test_clipped_ratio_by_hand():
    # token 0: ratio e^{0.5}=1.6487 > 1.2, A=+1 -> clipped term 1.2 is the min -> l = -1.2
    # token 1: ratio e^{-0.5}=0.6065 < 0.8, A=+1 -> min(0.6065, 0.8) = 0.6065 -> l = -0.6065
    # token 2 (seq 1): ratio e^{0.5}, A=-1 -> min(-1.6487, -1.2) = -1.6487 -> l = 1.6487
    logp = torch.tensor([[0.5, -0.5], [0.5, 0.0]])
    old = torch.zeros(2, 2)
    adv = torch.tensor([1.0, -1.0])
    w = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, stats = clipped_policy_loss(logp, old, adv, w, clip_low=0.2, clip_high=0.2)
    expected = -1.2 - math.exp(-0.5) + math.exp(0.5)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert stats["clip_frac"].item() == pytest.approx(1.0)  # all three real tokens outside [0.8, 1.2]


def test_asymmetric_clip_and_sequence_ratio():
    # sequence-level ratio: mean diff over real tokens = (0.1 + 0.3)/2 = 0.2 -> ratio e^0.2 = 1.2214
    # clip_high 0.1 -> 1.1, A = 2 -> min(2.4428, 2.2) = 2.2 -> per token -2.2, weights 0.5 each -> -2.2
    logp = torch.tensor([[0.1, 0.3]])
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.tensor([[0.5, 0.5]]),
                                  clip_low=0.2, clip_high=0.1, ratio_level="sequence")
    assert loss.item() == pytest.approx(-2.2, rel=1e-5)
