"""GAE, the value loss and explained variance against numbers worked out by hand."""
import pytest
import torch

from comarl.objective.advantages import gae, gae_tree, node_baseline, sample_advantages, whiten, whiten_across
from comarl.objective.losses import explained_variance, value_loss

# one 3-turn branch: r = [1, 0, 2], V = [0.5, 1.0, 1.5], gamma = 0.9
R = torch.tensor([1.0, 0.0, 2.0])
V = torch.tensor([0.5, 1.0, 1.5])


@pytest.mark.parametrize("lam, terminal, expected", [
    # terminal: delta = [1 + .9*1 - .5, 0 + .9*1.5 - 1, 2 - 1.5] = [1.4, 0.35, 0.5]
    (0.0, True, [1.4, 0.35, 0.5]),
    # lambda = 1: G - V with G = [2.62, 1.8, 2]
    (1.0, True, [2.12, 0.8, 0.5]),
    # lambda = .5: A1 = .35 + .45*.5 = .575, A0 = 1.4 + .45*.575 = 1.65875
    (0.5, True, [1.65875, 0.575, 0.5]),
    # truncated, V(next) = 2: delta2 = 2 + .9*2 - 1.5 = 2.3
    (0.0, False, [1.4, 0.35, 2.3]),
    # truncated, lambda = 1: G = [4.078, 3.42, 3.8] (bootstrapped) minus V
    (1.0, False, [3.578, 2.42, 2.3]),
])
def test_gae_three_turn_branch(lam, terminal, expected):
    out = gae(R, V, gamma=0.9, lam=lam, last_value=2.0, terminal=terminal)
    assert out.tolist() == pytest.approx(expected)


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("terminal", [True, False])
def test_tree_of_one_chain_is_the_branch(lam, terminal):
    """A chain of three nodes (J = 1) in the tree form gives the branch's numbers."""
    rewards, values = R.reshape(3, 1, 1).double(), V.reshape(3, 1, 1).double()
    child = torch.tensor([[1], [2], [-1]])
    boot = torch.zeros(3, 1, 1, dtype=torch.float64)
    if not terminal:
        boot[2, 0, 0] = 2.0
    out = gae_tree(rewards, values, child, 0.9, lam, boot)
    assert out.reshape(-1).tolist() == pytest.approx(gae(R, V, 0.9, lam, 2.0, terminal).tolist())


def test_tree_averages_over_the_child_node():
    """Root: 2 joint actions, j=0 continues into a node with 2 terminal joint actions, j=1 ends (a V critic:
    one value per node).

    child: r = [1, 3], V = 1 -> A = [0, 2]; root V = 1, r = [0, 2], gamma = 1:
    lambda = 1: A_root0 = 0 + 1 - 1 + mean(0, 2) = 1 (= mean child return 2 - 1), A_root1 = 2 - 1 = 1;
    lambda = 0: A_root0 = 0 + 1 - 1 = 0.
    """
    rewards = torch.tensor([[[0.0], [2.0]], [[1.0], [3.0]]], dtype=torch.float64)
    values = torch.tensor([[[1.0], [1.0]], [[1.0], [1.0]]], dtype=torch.float64)
    child = torch.tensor([[1, -1], [-1, -1]])
    assert gae_tree(rewards, values, child, 1.0, 1.0).reshape(-1).tolist() == pytest.approx([1, 1, 0, 2])
    assert gae_tree(rewards, values, child, 1.0, 0.0).reshape(-1).tolist() == pytest.approx([0, 1, 0, 2])


def test_lambda_one_is_tree_return_minus_the_node_baseline():
    """With lambda = 1 the tree's GAE equals the rollout's backed-up return minus each node's baseline, the mean
    of its joint actions' values (random tree, values that differ by joint action as a Q critic's do)."""
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(3, 2, 2, generator=g, dtype=torch.float64)
    values = torch.rand(3, 2, 2, generator=g, dtype=torch.float64)
    child = torch.tensor([[1, 2], [-1, -1], [-1, -1]])
    returns = rewards.clone()
    for node in (2, 1, 0):
        for j in range(2):
            c = int(child[node, j])
            if c >= 0:
                returns[node, j] = rewards[node, j] + 0.8 * returns[c].mean(0)
    assert torch.allclose(gae_tree(rewards, values, child, 0.8, 1.0), returns - values.mean(1, keepdim=True))


def test_lambda_one_with_a_cut_branch_is_not_return_minus_value():
    """A branch cut by num_turns adds gamma * V(next prompts): r = [1, 0], V = 1, j=0 cut with V(next) = 2,
    gamma = .5: lambda = 1 gives [1 + .5*2 - 1, 0 - 1] = [1, -1], not the return minus V, [0, -1]."""
    rewards = torch.tensor([[[1.0], [0.0]]], dtype=torch.float64)
    values = torch.ones(1, 2, 1, dtype=torch.float64)
    boot = torch.tensor([[[2.0], [0.0]]], dtype=torch.float64)
    out = gae_tree(rewards, values, torch.tensor([[-1, -1]]), 0.5, 1.0, boot)
    assert out.reshape(-1).tolist() == pytest.approx([1.0, -1.0])


# ---------------------------------------------------------------- a Q critic's baseline (issue #27)
Q_R = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.float64)  # one node, J = 4 terminal joint actions


def test_q_critic_at_its_target_gives_the_v_critic_at_the_mean():
    """A Q critic at its target (Q(h, a_j) = r_j) subtracts the node's mean Q, .4375, not Q(h, a_j) itself:
    A = r - .4375 = [.5625, -.4375, .0625, -.1875], what a V critic at the mean gives (before: all 0)."""
    r = Q_R.reshape(1, 4, 1)
    child = torch.tensor([[-1] * 4])
    expected = [0.5625, -0.4375, 0.0625, -0.1875]
    for lam in (0.0, 0.95):
        assert gae_tree(r, r, child, 0.9, lam).reshape(-1).tolist() == pytest.approx(expected)
        v = torch.full_like(r, 0.4375)
        assert gae_tree(r, v, child, 0.9, lam).reshape(-1).tolist() == pytest.approx(expected)


def test_q_critic_two_turn_tree_by_hand():
    """Root (J = 2) whose joint actions lead to nodes 1 and 2 (J = 2 each, terminal); one column, gamma = .5.

    Q: root [2, 0] -> b = 1; node 1 [1, 3] -> b = 2; node 2 [0, 2] -> b = 1.
    r: root [1, 0]; node 1 [2, 4]; node 2 [1, 0].
    leaves: A = r - b: node 1 [0, 2], node 2 [0, -1].
    root, lambda = 0: [1 + .5*2 - 1, 0 + .5*1 - 1] = [1, -.5];
    root, lambda = 1: [1 + .5*mean(0, 2), -.5 + .5*mean(0, -1)] = [1.5, -.75]
      (= return - b: 1 + .5*mean(2, 4) - 1 = 1.5, 0 + .5*mean(1, 0) - 1 = -.75).
    Targets A + b: leaves [2, 4], [1, 0] (the rewards); root lambda = 0: [2, .5] = r + .5 * b(child).
    (Subtracting each Q(h, a_j) instead gave the leaves [1, 1] and [1, -2].)
    """
    rewards = torch.tensor([[1.0, 0.0], [2.0, 4.0], [1.0, 0.0]], dtype=torch.float64).unsqueeze(-1)
    q = torch.tensor([[2.0, 0.0], [1.0, 3.0], [0.0, 2.0]], dtype=torch.float64).unsqueeze(-1)
    child = torch.tensor([[1, 2], [-1, -1], [-1, -1]])
    td = gae_tree(rewards, q, child, 0.5, 0.0)
    assert td.reshape(-1).tolist() == pytest.approx([1.0, -0.5, 0.0, 2.0, 0.0, -1.0])
    mc = gae_tree(rewards, q, child, 0.5, 1.0)
    assert mc.reshape(-1).tolist() == pytest.approx([1.5, -0.75, 0.0, 2.0, 0.0, -1.0])
    targets = td + node_baseline(q).unsqueeze(1)
    assert targets.reshape(-1).tolist() == pytest.approx([2.0, 0.5, 2.0, 4.0, 1.0, 0.0])


def test_node_baseline_of_independent_q_in_cross_mode_is_the_mean_over_the_agents_samples():
    """Cross mode, N = 2, K = 2: J = 4 joint actions (0,0) (0,1) (1,0) (1,1). Agent 0's Q_0 of its samples is
    [3, 1], so its column reads [3, 3, 1, 1] over the joint actions: b = 2 = mean of [3, 1]; agent 1's Q_1 is
    [0, 4]: [0, 4, 0, 4] -> b = 2."""
    values = torch.tensor([[[3.0, 0.0], [3.0, 4.0], [1.0, 0.0], [1.0, 4.0]]])
    assert node_baseline(values).tolist() == [[2.0, 2.0]]


def test_sample_advantages_leave_the_samples_own_joint_actions_out():
    """One agent, aligned, K = J = 4, single turn (so A_j + b = r_j).

    Q at its target (Q = r): A_k = r_k - mean of the other three r:
    [1 - .75/3, 0 - 1.75/3, .5 - 1.25/3, .25 - 1.5/3] = [.75, -7/12, 1/12, -.25] = 4/3 * (r - .4375).
    A V critic (V = .4375 everywhere): A_k = r_k - .4375, the GAE advantage itself.
    A Q critic that overvalues sample 0 (Q = [5, 0, .5, .25]): sample 0's own advantage does not move,
    1 - (0 + .5 + .25)/3 = .75; the others' baselines rise by 4/3: [.75, -23/12, -15/12, -19/12].
    """
    r = Q_R.reshape(1, 4)
    child, one = torch.tensor([[-1] * 4]), torch.arange(4)
    for values, expected in ((r, [0.75, -7 / 12, 1 / 12, -0.25]),
                             (torch.full_like(r, 0.4375), [0.5625, -0.4375, 0.0625, -0.1875]),
                             (torch.tensor([[5.0, 0.0, 0.5, 0.25]], dtype=torch.float64),
                              [0.75, -23 / 12, -15 / 12, -19 / 12])):
        adv = gae_tree(r.unsqueeze(-1), values.unsqueeze(-1), child, 0.9, 0.95)[..., 0]
        assert sample_advantages(adv, values, one, 4).reshape(-1).tolist() == pytest.approx(expected)


def test_sample_advantages_of_a_central_q_in_cross_mode_by_hand():
    """N = 2, K = 2, cross: joint actions (0,0) (0,1) (1,0) (1,1) with Q = r = [3, 1, 2, 0], b = 1.5.
    Agent 0, sample 0 holds joints 0, 1: mean Q 2, the others (2, 3) 1 -> 1; sample 1: 1 - 2 = -1.
    Agent 1, sample 0 holds joints 0, 2: 2.5 - .5 = 2; sample 1: .5 - 2.5 = -2.
    (The node mean would give [.5, -.5] and [1, -1]: K/(K-1) = 2 times smaller, the same direction.)"""
    q = torch.tensor([[3.0, 1.0, 2.0, 0.0]], dtype=torch.float64)
    joints = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])
    adv = gae_tree(q.unsqueeze(-1), q.unsqueeze(-1), torch.tensor([[-1] * 4]), 1.0, 1.0)[..., 0]
    assert sample_advantages(adv, q, joints[:, 0], 2).tolist() == [[1.0, -1.0]]
    assert sample_advantages(adv, q, joints[:, 1], 2).tolist() == [[2.0, -2.0]]


def test_sample_advantages_at_k1_use_the_node_value():
    """K = 1 (a V critic; Q is refused there): nothing to leave out, A = r - V = [.5], [-.25] for two nodes."""
    r = torch.tensor([[1.0], [0.25]], dtype=torch.float64)
    v = torch.tensor([[0.5], [0.5]], dtype=torch.float64)
    adv = gae_tree(r.unsqueeze(-1), v.unsqueeze(-1), torch.tensor([[-1], [-1]]), 1.0, 1.0)[..., 0]
    assert sample_advantages(adv, v, torch.tensor([0]), 1).tolist() == [[0.5], [-0.25]]


def test_policy_gradient_of_a_q_critic_at_its_target_points_where_the_v_critics_does():
    """The gradient test of issue #27 on a softmax policy over 4 actions (logits 0, pi = 1/4), one sample of each.

    ``grad = 1/4 sum_k A_k (e_k - pi)``; with sum_k A_k = 0 that is A / 4.
    V critic at its target (V = .4375): A = [.5625, -.4375, .0625, -.1875], grad = [.140625, -.109375, .015625,
    -.046875]. Q critic at its target (Q = r), leave-one-out: A = [.75, -7/12, 1/12, -.25] = 4/3 of V's,
    grad = [.1875, -.1458, .0208, -.0625]: cosine 1. Subtracting Q(h, a_k) itself gave A = 0, grad = 0.
    """
    logits = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    child = torch.tensor([[-1] * 4])
    r = Q_R.reshape(1, 4)
    grads = {}
    for name, values in {"v": torch.full_like(r, 0.4375), "q": r}.items():
        adv = gae_tree(r.unsqueeze(-1), values.unsqueeze(-1), child, 1.0, 0.95)[..., 0]
        a = sample_advantages(adv, values, torch.arange(4), 4).reshape(-1)
        logp = torch.log_softmax(logits, 0)  # sample k is action k
        (grad,) = torch.autograd.grad((a * logp).mean(), logits)
        grads[name] = grad
    assert grads["v"].tolist() == pytest.approx([0.140625, -0.109375, 0.015625, -0.046875])
    assert grads["q"].tolist() == pytest.approx([0.1875, -7 / 48, 1 / 48, -0.0625])
    assert float(torch.nn.functional.cosine_similarity(grads["q"], grads["v"], dim=0)) == pytest.approx(1.0)


def test_value_loss_by_hand():
    v, old, t = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 2.0]), torch.tensor([3.0, 0.0])
    assert float(value_loss(v, old, t)) == pytest.approx(0.5 * (4 + 4) / 2)
    # clip .5: V_c = [.5, 2] -> (.5-3)^2 = 6.25 > 4; max = [6.25, 4] -> .5 * 5.125
    assert float(value_loss(v, old, t, clip=0.5)) == pytest.approx(2.5625)


def test_explained_variance_and_whiten():
    assert explained_variance(torch.tensor([1.0, 2, 2]), torch.tensor([1.0, 2, 3])) == pytest.approx(2 / 3)
    assert explained_variance(torch.zeros(2), torch.ones(2)) != explained_variance(torch.zeros(2), torch.ones(2))
    w = whiten(torch.tensor([1.0, 3.0]))
    assert w.tolist() == pytest.approx([-1.0, 1.0])
    assert whiten(torch.tensor([5.0])).tolist() == [5.0]


def _other_rank(partials):
    """A fake all_reduce_sum for one of two ranks: adds the other rank's contributions, in call order."""
    it = iter(partials)
    return lambda value: value + next(it)


def test_whiten_across_ranks_is_whiten_of_the_whole_batch():
    """Rank 0 holds [1, 3], rank 1 [5, 7]: n 4, mean 16 / 4 = 4, population variance (9 + 1 + 1 + 9) / 4 = 5.
    Each rank adds (its count, its sum, its squared deviations from 4): rank 0 (2, 4, 10), rank 1 (2, 12, 10)."""
    s5 = 5 ** 0.5
    r0 = whiten_across(torch.tensor([1.0, 3.0], dtype=torch.float64), _other_rank([2, 12, 10]))
    r1 = whiten_across(torch.tensor([5.0, 7.0], dtype=torch.float64), _other_rank([2, 4, 10]))
    assert r0.tolist() == pytest.approx([-3 / s5, -1 / s5]) and r1.tolist() == pytest.approx([1 / s5, 3 / s5])
    # a rank without samples joins the three sums and gets nothing back
    assert whiten_across(torch.zeros(0, dtype=torch.float64), _other_rank([4, 16, 20])).numel() == 0
    # one process: the same as whiten; under 2 samples in all: unchanged
    x = torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=torch.float64)
    assert whiten_across(x, lambda v: v).tolist() == pytest.approx(whiten(x).tolist())
    assert whiten_across(torch.tensor([5.0]), _other_rank([0])).tolist() == [5.0]


def test_entropy_bonus_by_hand():
    """logp = ln[.5, .25], w = .5 each, coef .1: loss = .1 * .5 * (ln2^2 + 4 ln2^2) = .25 ln2^2;
    d loss / d logp_t = coef * w * logp_t (the surrogate's gradient is -coef * grad H)."""
    from comarl.objective.losses import entropy_bonus

    logp = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_()
    loss = entropy_bonus(logp, torch.full((1, 2), 0.5), 0.1)
    assert float(loss.detach()) == pytest.approx(0.25 * torch.log(torch.tensor(2.0)).item() ** 2)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.05 * -0.693147, 0.05 * -1.386294], abs=1e-5)
