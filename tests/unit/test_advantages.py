import torch

from comarl.objective.advantages import MAX_SCALED, external_baseline, group_relative, no_baseline, scale_by_group_std

# one reward table shared by the estimator tests: 2 groups x 4 samples
R = torch.tensor([[1.0, 2.0, 3.0, 6.0],
                  [0.0, 0.0, 4.0, 4.0]])


def test_group_relative_mean_only():
    # means 3 and 2
    expected = torch.tensor([[-2.0, -1.0, 0.0, 3.0],
                             [-2.0, -2.0, 2.0, 2.0]])
    assert torch.allclose(group_relative(R), expected)


def test_group_relative_with_std():
    # group 0: deviations -2,-1,0,3 -> unbiased var = (4+1+0+9)/3 = 14/3
    # group 1: deviations -2,-2,2,2 -> var = 16/3
    s0, s1 = (14 / 3) ** 0.5, (16 / 3) ** 0.5
    expected = torch.tensor([[-2 / s0, -1 / s0, 0.0, 3 / s0],
                             [-2 / s1, -2 / s1, 2 / s1, 2 / s1]])
    assert torch.allclose(group_relative(R, scale_by_std=True, eps=0.0), expected, atol=1e-6)


def test_identical_returns_give_zero_advantage_even_with_std():
    r = torch.full((1, 4), 0.7)
    assert torch.equal(group_relative(r, scale_by_std=True), torch.zeros(1, 4))


def test_no_baseline_is_identity():
    assert torch.equal(no_baseline(R), R)


# ---------------------------------------------------------------- near-constant groups
NEAR = torch.tensor([[1.0, 1.0, 1.0 + 3e-6]])  # unbiased std = 3e-6 / sqrt(3) = 1.73e-6


def test_near_constant_group_stays_bounded():
    """Returns [1, 1, 1 + 3e-6]: dividing by std + 1e-6 = 2.73e-6 gave REINFORCE ~3.7e5 and ReMax ~1.8e5.

    The spread 1.73e-6 is below max|A| / 100 = 0.01, so the group counts as flat and keeps its
    advantages: REINFORCE [1, 1, 1 + 3e-6], ReMax (b = 0.5) [0.5, 0.5, 0.5 + 3e-6]; bound max(100, max|A|).
    GRPO's centred form is bounded by (K - 1)/sqrt(K) = 1.155: [-1e-6, -1e-6, 2e-6] / 2.73e-6 = [-.37, -.37, .73].
    """
    reinforce = scale_by_group_std(no_baseline(NEAR), NEAR)
    assert torch.allclose(reinforce, NEAR, atol=0, rtol=0)
    remax = scale_by_group_std(external_baseline(NEAR, torch.tensor([0.5])), NEAR)
    assert torch.allclose(remax, torch.tensor([[0.5, 0.5, 0.5 + 3e-6]]))
    grpo = group_relative(torch.tensor([[1.0, 1.0, 1.0 + 3e-6]], dtype=torch.float64), scale_by_std=True)
    expected = torch.tensor([[-1e-6, -1e-6, 2e-6]], dtype=torch.float64) / (3e-6 / 3 ** 0.5 + 1e-6)
    assert torch.allclose(grpo, expected, rtol=1e-4)
    assert grpo.abs().max() < 2 / 3 ** 0.5


def test_std_scaling_threshold_by_hand():
    # [1, 1, 1.05]: std = 0.05/sqrt(3) = 0.028868 > max|A|/100 = 0.0105 -> scaled: 1.05 / (0.028868 + 1e-6) = 36.37
    r = torch.tensor([[1.0, 1.0, 1.05]], dtype=torch.float64)
    s = 0.05 / 3 ** 0.5 + 1e-6
    assert torch.allclose(scale_by_group_std(r, r), r / s)
    # [1, 1, 1.01]: std = 0.005774 <= 0.0101 -> flat, left as it is
    r = torch.tensor([[1.0, 1.0, 1.01]], dtype=torch.float64)
    assert torch.equal(scale_by_group_std(r, r), r)


def test_std_scaled_advantages_are_bounded_for_any_group():
    g = torch.Generator().manual_seed(0)
    for scale in (1e-9, 1e-6, 1e-3, 1.0, 1e3):
        returns = 1.0 + scale * torch.randn(64, 4, generator=g, dtype=torch.float64)
        for adv in (returns, returns - 0.5, returns - returns.max(dim=1, keepdim=True).values):
            out = scale_by_group_std(adv, returns)
            bound = torch.clamp(adv.abs().amax(dim=1, keepdim=True), min=MAX_SCALED)
            assert (out.abs() <= bound * (1 + 1e-9)).all(), scale


def test_token_advantages_broadcast_a_sequence_estimate_over_each_samples_tokens():
    from comarl.objective.advantages import token_advantages

    adv = torch.tensor([[1.0, -1.0], [2.0, 0.5]])  # G=2, K=2: samples 0..3
    lengths = torch.tensor([2, 1, 3, 0])
    expected = torch.tensor([[1.0, 1.0, 0.0],
                             [-1.0, 0.0, 0.0],
                             [2.0, 2.0, 2.0],
                             [0.0, 0.0, 0.0]])
    assert torch.equal(token_advantages(adv, lengths, 3, per_sequence=True), expected)
    # a per-token estimate is kept, cut to the width and zeroed past each length
    per_token = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    assert torch.equal(token_advantages(per_token, lengths, 3, per_sequence=False),
                       torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [4.0, 5.0, 0.0], [0.0, 0.0, 0.0]]))


def test_token_group_baseline_by_hand():
    from comarl.objective.advantages import token_group_baseline

    # one group, returns 1, 2, 6, lengths 1, 2, 3:
    # t=0: all three write, baseline 3 -> -2, -1, 3; t=1: samples 1 and 2, baseline 4 -> -2, 2; t=2: sample 2 alone -> 0
    out = token_group_baseline(torch.tensor([[1.0, 2.0, 6.0]]), torch.tensor([1, 2, 3]))
    assert torch.equal(out, torch.tensor([[-2.0, 0.0, 0.0], [-1.0, -2.0, 0.0], [3.0, 2.0, 0.0]]))
    # equal lengths: every token gets MAGRPO's R - mean R
    same = token_group_baseline(R, torch.full((8,), 2))
    assert torch.equal(same, group_relative(R).reshape(8, 1).expand(8, 2))


def test_std_scaling_of_a_per_token_estimate_uses_its_groups_returns():
    from comarl.objective.advantages import scale_by_group_std_any, token_group_baseline

    lengths = torch.full((8,), 3)
    scaled = scale_by_group_std_any(token_group_baseline(R, lengths), R)
    s0, s1 = (14 / 3) ** 0.5, (16 / 3) ** 0.5
    assert torch.allclose(scaled[:4, 0], group_relative(R)[0] / s0, atol=1e-5)
    assert torch.allclose(scaled[4:, 2], group_relative(R)[1] / s1, atol=1e-5)
