import math

import pytest
import torch

from comarl.objective.losses import clipped_policy_loss, token_weights


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
    # all three real tokens lie outside [0.8, 1.2], but only token 0's clip binds (ratio high with A > 0)
    assert stats["clip_high"].item() == pytest.approx(1 / 3)
    assert stats["clip_low"].item() == 0.0 and stats["clip_region"].item() == pytest.approx(1 / 3)


def test_clip_metrics_count_only_the_clips_that_bind():
    """Four real tokens and one pad, band [0.8, 1.2].

    seq 0, A = +1: ratio e^0.5 = 1.65 -> high clip binds; ratio e^-0.5 = 0.61 -> outside, but min picks
    the unclipped term (no clip). seq 1, A = -1: ratio 0.61 -> low clip binds (-0.8 < -0.61 is not the min:
    min(-0.61, -0.8) = -0.8, the clipped one); ratio 1.65 -> outside, min(-1.65, -1.2) = -1.65 unclipped.
    The pad token (weight 0) is outside the band with A = -1 and a low ratio but is not counted.
    low = 1/4, high = 1/4, region = 1/2; mean ratio = (2 * 1.6487 + 2 * 0.6065) / 4 = 1.1276.
    """
    logp = torch.tensor([[0.5, -0.5, 0.0], [-0.5, 0.5, -0.5]])
    w = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    _, stats = clipped_policy_loss(logp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), w, 0.2, 0.2)
    assert stats["clip_low"].item() == pytest.approx(0.25)
    assert stats["clip_high"].item() == pytest.approx(0.25)
    assert stats["clip_region"].item() == pytest.approx(0.5)
    assert stats["ratio_mean"].item() == pytest.approx((2 * math.exp(0.5) + 2 * math.exp(-0.5)) / 4, rel=1e-6)
    assert stats["tokens"].item() == 4


def test_fully_masked_batch_gives_zero_weights_not_nan():
    # every completion out of the loss (mask_truncated, all truncated): S_total = 0, T_total = 0
    for mode in ("sequence", "token", "constant"):
        w = token_weights(torch.tensor([0, 0]), 3, mode, 0, 0, 3)
        assert torch.equal(w, torch.zeros(2, 3)), mode
    # the loss over such a batch is 0 with a zero gradient, not NaN
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, stats = clipped_policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]),
                                      token_weights(torch.tensor([0, 0]), 3, "sequence", 0, 0, 3))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logp.grad, torch.zeros(2, 3)) and stats["tokens"].item() == 0


def test_constant_normaliser_counts_truncated_sequences():
    """Dr. GRPO with mask_truncated: 3 sequences, the middle one truncated (length 0 in the loss).

    The constant is S_all * max_new_tokens = 3 * 3 = 9 (TRL's dr_grpo divides by all), so each real
    token weighs 1/9, not 1/(2 * 3) = 1/6; the sequence mean stays over the 2 sequences in the loss.
    """
    lengths = torch.tensor([2, 0, 3])
    w = token_weights(lengths, 3, "constant", num_sequences=3, num_tokens=5, max_new_tokens=3)
    assert torch.allclose(w, torch.tensor([[1 / 9, 1 / 9, 0], [0, 0, 0], [1 / 9] * 3]))
    w = token_weights(lengths, 3, "sequence", num_sequences=2, num_tokens=5, max_new_tokens=3)
    assert torch.allclose(w, torch.tensor([[1 / 4, 1 / 4, 0], [0, 0, 0], [1 / 6] * 3]))


def test_asymmetric_clip_and_sequence_ratio():
    # sequence-level ratio: mean diff over real tokens = (0.1 + 0.3)/2 = 0.2 -> ratio e^0.2 = 1.2214
    # clip_high 0.1 -> 1.1, A = 2 -> min(2.4428, 2.2) = 2.2 -> per token -2.2, weights 0.5 each -> -2.2
    logp = torch.tensor([[0.1, 0.3]])
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.tensor([[0.5, 0.5]]),
                                  clip_low=0.2, clip_high=0.1, ratio_level="sequence")
    assert loss.item() == pytest.approx(-2.2, rel=1e-5)
