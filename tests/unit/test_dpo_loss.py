"""Joint DPO and Bradley-Terry losses against numbers worked out by hand."""
import math

import pytest
import torch

from comarl.objective.losses import bradley_terry_loss, joint_dpo_loss, reference_free_dpo_loss


def test_joint_dpo_sums_agents_log_ratios():
    # pair 0, two agents: d_0 = (-1 - -2) - (-3 - -2) = 1 - (-1) = 2; d_1 = (-4 - -4) - (-5 - -6) = 0 - 1 = -1
    # z = beta * (2 + -1) = 0.5 * 1 = 0.5; loss = -log sigmoid(0.5) = log(1 + e^-0.5) = 0.474077
    pc = torch.tensor([[-1.0, -4.0]])
    rc = torch.tensor([[-2.0, -4.0]])
    pr = torch.tensor([[-3.0, -5.0]])
    rr = torch.tensor([[-2.0, -6.0]])
    loss, z = joint_dpo_loss(pc, pr, rc, rr, beta=0.5)
    assert z.tolist() == [0.5]
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.5)), abs=1e-6)
    assert loss.item() == pytest.approx(0.474077, abs=1e-6)


def test_joint_dpo_zero_margin_is_log2_and_gradient_is_half_beta():
    # policy = reference: z = 0, loss = log 2; d loss / d pc = -beta * sigmoid(-z) = -beta / 2 for every agent
    pc = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    loss, z = joint_dpo_loss(pc, torch.tensor([[-1.0, -1.0, -1.0]]), pc.detach(), torch.tensor([[-1.0, -1.0, -1.0]]),
                             0.2)
    assert z.item() == 0.0 and loss.item() == pytest.approx(math.log(2))
    loss.sum().backward()
    assert pc.grad[0].tolist() == pytest.approx([-0.1, -0.1, -0.1])


def test_reference_free_uses_raw_log_probs():
    # z = 1 * ((-1 - -3) + (-2 - -2)) = 2; loss = log(1 + e^-2) = 0.126928
    loss, z = reference_free_dpo_loss(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-3.0, -2.0]]), beta=1.0)
    assert z.item() == 2.0
    assert loss.item() == pytest.approx(0.126928, abs=1e-6)
    # the reference changes the answer: a reference that also prefers y_w by 2 cancels the margin
    loss_ref, z_ref = joint_dpo_loss(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-3.0, -2.0]]),
                                     torch.tensor([[-1.0, -2.0]]), torch.tensor([[-3.0, -2.0]]), beta=1.0)
    assert z_ref.item() == 0.0 and loss_ref.item() == pytest.approx(math.log(2))


def test_bradley_terry():
    # s_w - s_l = [1, -1]: (log(1 + e^-1) + log(1 + e^1)) / 2 = (0.313262 + 1.313262) / 2 = 0.813262
    loss = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    assert loss.item() == pytest.approx(0.813262, abs=1e-6)


def test_bradley_terry_weighted_by_replay_decay():
    # per-pair losses: -log sigmoid(1) = 0.313262, -log sigmoid(0) = log 2 = 0.693147; weights 1 and 3
    loss = bradley_terry_loss(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 3.0]))
    assert float(loss) == pytest.approx((0.313262 + 3 * 0.693147) / 4, abs=1e-5)
