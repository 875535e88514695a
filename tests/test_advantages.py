import torch

from comarl.advantages import group_relative, no_baseline

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
