"""The one backward and the one optimiser step every trained model goes through (``compute/stepping.py``)."""
from __future__ import annotations

import math

import pytest
import torch

from comarl.compute.stepping import MicroLoss, micro_batched_backward, optimizer_step


def _linear():
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        m.weight.copy_(torch.tensor([[1.0, 2.0]]))
    return m


def test_micro_batches_sum_to_the_full_batch_gradient():
    m = _linear()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # loss = sum over rows of w.x / 3: gradient (2/3, 2/3)
    done = micro_batched_backward(3, lambda k: MicroLoss(m(x[k:k + 1]).sum() / 3), idle=lambda: None)
    assert done.finite and done.total == pytest.approx((1 + 2 + 3) / 3)
    assert torch.allclose(m.weight.grad, torch.tensor([[2 / 3, 2 / 3]]))


def test_without_sharding_a_non_finite_loss_stops_the_loop():
    m, calls = _linear(), []

    def loss_of(k):
        calls.append(k)
        return MicroLoss(m(torch.ones(1, 2)).sum() * (float("nan") if k == 1 else 1.0))

    done = micro_batched_backward(4, loss_of, idle=lambda: calls.append("idle"))
    assert not done.finite and calls == [0, 1] and done.total == pytest.approx(3.0)


def test_in_lockstep_every_rank_runs_the_most_micro_batches_and_backpropagates_a_zero_stand_in():
    m, idles = _linear(), []
    # this rank has 2 micro-batches, another rank 4: two idle backwards; the second loss is non-finite and its
    # zero stand-in (through the same forward) is backpropagated instead, so no NaN reaches the gradient
    def loss_of(k):
        out = m(torch.ones(1, 2))
        return MicroLoss(out.sum() * (float("inf") if k == 1 else 1.0), zero=out.sum() * 0.0)

    done = micro_batched_backward(2, loss_of, idle=lambda: idles.append(1), lockstep=lambda n: 4)
    assert not done.finite and len(idles) == 2
    assert torch.allclose(m.weight.grad, torch.ones(1, 2))  # only micro-batch 0's gradient


def test_optimizer_step_clips_and_reports_the_norm_before_clipping():
    m = _linear()
    m.weight.grad = torch.tensor([[3.0, 4.0]])  # norm 5
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    norm = optimizer_step(list(m.parameters()), opt, scheduler=sched, max_grad_norm=1.0)
    assert norm == pytest.approx(5.0)
    # clipped to (0.6, 0.8), times the scheduler's lr 0.5
    assert torch.allclose(m.weight.detach(), torch.tensor([[1.0 - 0.3, 2.0 - 0.4]]))
    assert m.weight.grad is None and sched.get_last_lr() == [0.5]


def test_a_non_finite_gradient_or_a_bad_rank_skips_the_step_everywhere():
    m, skips = _linear(), []
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    m.weight.grad = torch.tensor([[math.inf, 0.0]])
    assert optimizer_step(list(m.parameters()), opt, on_skip=lambda: skips.append(1)) is None
    assert torch.equal(m.weight.detach(), torch.tensor([[1.0, 2.0]])) and m.weight.grad is None
    # this rank is fine but another saw a non-finite loss: the summed flag skips it here too
    m.weight.grad = torch.tensor([[1.0, 1.0]])
    assert optimizer_step(list(m.parameters()), opt, on_skip=lambda: skips.append(2),
                          all_reduce_sum=lambda x: x + 1) is None
    assert skips == [1, 2] and torch.equal(m.weight.detach(), torch.tensor([[1.0, 2.0]]))


def test_gradients_are_reduced_before_they_are_measured():
    m = _linear()
    m.weight.grad = torch.tensor([[1.0, 0.0]])
    opt = torch.optim.SGD(m.parameters(), lr=0.0)

    def double() -> None:  # what a sum over two ranks with the same gradient gives
        m.weight.grad.mul_(2)

    assert optimizer_step(list(m.parameters()), opt, reduce_grads=double) == pytest.approx(2.0)
