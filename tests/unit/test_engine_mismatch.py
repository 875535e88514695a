"""The engine's log-probs against the trainer's: the gap metric and truncated importance-sampling weights,
with numbers worked out by hand."""
import math

import pytest
import torch

from comarl.objective.engine_mismatch import GapTotals, logprob_gap, padded, truncated_is_weights

L = math.log


def test_truncated_is_weights_by_hand():
    # ratios pi_trainer / pi_engine: 0.3/0.6 = 0.5, 0.6/0.4 = 1.5, 0.9/0.1 = 9 -> capped at 2; padding -> 1
    trainer = torch.tensor([[L(0.3), L(0.6), L(0.9), -5.0]])
    engine = torch.tensor([[L(0.6), L(0.4), L(0.1), 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w = truncated_is_weights(trainer, engine, 2.0, mask)
    assert torch.allclose(w, torch.tensor([[0.5, 1.5, 2.0, 1.0]]), atol=1e-6)
    # a cap of 1 keeps only the down-weighting (tokens the engine over-sampled)
    assert torch.allclose(truncated_is_weights(trainer, engine, 1.0, mask), torch.tensor([[0.5, 1.0, 1.0, 1.0]]),
                          atol=1e-6)


def test_truncated_is_weights_do_not_overflow_and_carry_no_gradient():
    trainer = torch.tensor([[0.0]], requires_grad=True)
    w = truncated_is_weights(trainer, torch.tensor([[-1e4]]), 3.0, torch.ones(1, 1))  # exp(1e4) would be inf
    assert w.item() == pytest.approx(3.0) and not w.requires_grad
    with pytest.raises(ValueError, match="cap must be > 0"):
        truncated_is_weights(trainer, trainer, 0.0, torch.ones(1, 1))


def test_logprob_gap_over_the_masked_tokens_only():
    trainer = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, 0.0]])
    engine = torch.tensor([[-1.5, -2.0, -9.0], [-0.25, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the 6.0 gap sits on padding
    mx, total, n = logprob_gap(trainer, engine, mask)
    assert (mx, total, n) == (0.5, pytest.approx(1.0), 4)  # |.5| + 0 + |.25| + |.25|
    assert logprob_gap(trainer, engine, torch.zeros(2, 3)) == (0.0, 0.0, 0)


def test_gap_totals_combine_agents_and_stay_silent_without_an_engine():
    assert GapTotals().metrics() == {}
    g = GapTotals()
    g.add((0.5, 1.0, 4))
    g.add((0.25, 0.5, 1), weights=torch.tensor([[2.0, 0.5]]), mask=torch.tensor([[1, 0]]))
    assert g.metrics() == {"gen/logprob_gap_max": 0.5, "gen/logprob_gap_mean": pytest.approx(0.3),
                           "gen/tis_weight_mean": 2.0}


def test_padded_rows():
    assert torch.equal(padded([[1.0, 2.0], [], [3.0, 4.0, 5.0]], 2), torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 4.0]]))
