"""Advantage estimators: pure functions on a group of returns.

A *group* is one node's K samples of one agent (one item at turn 1, one branch
later). The sequence estimators map credited returns ``R [G, K]`` to advantages
``A [G, K]`` and never mix groups. The loss reads advantages per token, ``[S, T]``
(S = G*K samples, T completion tokens): :func:`token_advantages` broadcasts a
sequence estimate over each sample's tokens, and a per-token estimator
(:func:`token_group_baseline`) returns ``[S, T]`` itself.
"""
from __future__ import annotations

import torch

EPS = 1e-6
MAX_SCALED = 100.0
"""Bound on a std-scaled advantage of any group (see :func:`scale_by_group_std`)."""


def group_relative(returns: torch.Tensor, scale_by_std: bool = False, eps: float = EPS) -> torch.Tensor:
    """MAGRPO / GRPO: ``A = R - mean_k R`` (divided by ``std_k R + eps`` when ``scale_by_std``).

    The std is the unbiased sample std over the K samples of the group. Scaled
    advantages are bounded for any group, near-constant ones included:
    ``|R_k - mean R| <= (K - 1) / sqrt(K) * std``, so ``|A_k| < (K - 1) / sqrt(K)``.
    Shape: [G, K] -> [G, K].
    """
    centred = returns - returns.mean(dim=1, keepdim=True)
    if scale_by_std:
        centred = centred / (returns.std(dim=1, keepdim=True, unbiased=True) + eps)
    return centred


def no_baseline(returns: torch.Tensor) -> torch.Tensor:
    """REINFORCE: ``A = R``. Shape: [G, K] -> [G, K]."""
    return returns.clone()


def scale_by_group_std(advantages: torch.Tensor, returns: torch.Tensor, eps: float = EPS,
                       max_scaled: float = MAX_SCALED) -> torch.Tensor:
    """Divide each group's advantages by ``std_k R + eps`` (unbiased std of its K returns).

    A group counts as *flat* and is left unscaled when its spread is too small
    to carry scale information next to its own advantages::

        std_k R <= max(eps, max_k |A_k| / max_scaled)

    so every scaled advantage satisfies ``|A_k| / std < max_scaled``, and a flat
    group keeps its advantages as they are: ``|out| <= max(max_scaled, max_k |A_k|)``
    for any group. Why relative: an uncentred advantage (REINFORCE's ``A = R``, a
    greedy baseline far from the group) over a near-constant group, e.g. returns
    [1, 1, 1 + 3e-6], would otherwise be divided by ~2.7e-6 (about 3.7e5); an
    absolute threshold cannot tell that group from one with a real spread of
    rewards on a 1e-6 scale. Centred estimators never reach the threshold:
    ``|R_k - b| <= sqrt(2K) * std`` for the group mean, leave-one-out and group
    max, so they are untouched for K < max_scaled^2 / 2 (5000). A group of K = 1
    is also left unscaled. Shapes: advantages, returns [G, K] -> [G, K].
    """
    if returns.shape[1] < 2:
        return advantages
    std = returns.std(dim=1, keepdim=True, unbiased=True)
    scale = advantages.abs().amax(dim=1, keepdim=True)
    flat = std <= torch.clamp(scale / max_scaled, min=eps)
    return advantages / torch.where(flat, torch.ones_like(std), std + eps)


def scale_by_group_std_any(advantages: torch.Tensor, returns: torch.Tensor, eps: float = EPS,
                           max_scaled: float = MAX_SCALED) -> torch.Tensor:
    """:func:`scale_by_group_std` for a sequence estimate ``[G, K]`` or a per-token one ``[S, T]`` (S = G*K:
    each group's K rows of tokens share its scale). Shapes: advantages [G, K] or [S, T], returns [G, K] -> same."""
    if advantages.shape == returns.shape:
        return scale_by_group_std(advantages, returns, eps, max_scaled)
    g = returns.shape[0]
    return scale_by_group_std(advantages.reshape(g, -1), returns, eps, max_scaled).reshape(advantages.shape)


def token_advantages(advantages: torch.Tensor, lengths: torch.Tensor, width: int, per_sequence: bool,
                     run_index: torch.Tensor | None = None) -> torch.Tensor:
    """An estimator's advantages as the loss reads them: one per completion token.

    ``per_sequence``: ``advantages`` is a sequence estimate ``[G, K]`` (the shape of the returns), and each of
    sample s's first ``lengths[s]`` tokens gets ``A[s]`` (sample s = g*K + k), or, with ``run_index`` (program
    runs: sample s is a call of run ``run_index[s]``), ``A.flatten()[run_index[s]]``: every call of a run gets
    the run's estimate, and a run without a call of this agent gives none. Otherwise it is a per-token
    estimate ``[S, T']``, kept, cut or zero-padded to ``width`` (not with ``run_index``: a per-token estimate
    compares the samples of a group position by position, and a run's calls are no such group). Tokens past a
    sample's length get 0 (their loss weight is 0 anyway).
    Shapes: advantages [G, K] or [S, T'], lengths [S], run_index [S] -> [S, width].
    """
    s = int(lengths.shape[0])
    alive = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(advantages.dtype)
    if run_index is not None:
        if not per_sequence:
            raise ValueError(f"a per-token estimate {tuple(advantages.shape)} cannot be given to program runs' calls "
                             f"(run_index): give one estimate per run, [G, K]")
        if run_index.shape != (s,) or (s and (int(run_index.min()) < 0 or int(run_index.max()) >= advantages.numel())):
            raise ValueError(f"run_index {tuple(run_index.shape)} must give each of {s} samples a run in "
                             f"0..{advantages.numel() - 1}")
        return advantages.reshape(-1)[run_index].reshape(s, 1) * alive
    if per_sequence:
        if advantages.numel() != s:
            raise ValueError(f"a sequence estimate of shape {tuple(advantages.shape)} does not fit {s} samples")
        return advantages.reshape(s, 1) * alive
    if advantages.dim() != 2 or advantages.shape[0] != s:
        raise ValueError(f"a per-token estimate must be [S={s}, T], got {tuple(advantages.shape)}")
    out = torch.zeros(s, width, dtype=advantages.dtype)
    t = min(width, advantages.shape[1])
    out[:, :t] = advantages[:, :t]
    return out * alive


def token_group_baseline(returns: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-token group baseline: token t of sample s is baselined by the mean return of the samples of its
    group that still write at position t::

        A[s, t] = R_s - mean{ R_j : j in s's group, lengths[j] > t }      (t < lengths[s]; else 0)

    At t = 0 this is MAGRPO's ``R - mean_k R``; later tokens are compared only with the samples that got
    that far, so a long sample is not credited for outlasting short ones. Shapes: returns [G, K],
    lengths [S] (S = G*K) -> [S, T] with T = max(lengths).
    """
    g, k = returns.shape
    width = int(lengths.max()) if len(lengths) else 0
    alive = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(returns.dtype).reshape(g, k, width)
    r = returns.unsqueeze(-1)  # [G, K, 1]
    count = alive.sum(1, keepdim=True)  # [G, 1, T]
    base = (r * alive).sum(1, keepdim=True) / count.clamp(min=1)
    return ((r - base) * alive).reshape(g * k, width)


def leave_one_out(returns: torch.Tensor) -> torch.Tensor:
    """RLOO: ``A_k = R_k - mean_{j != k} R_j = K/(K-1) * (R_k - mean_j R_j)``.

    Needs K >= 2. Shape: [G, K] -> [G, K].
    """
    k = returns.shape[1]
    if k < 2:
        raise ValueError(f"leave-one-out baseline needs K >= 2 samples per group, got K={k}")
    others = (returns.sum(dim=1, keepdim=True) - returns) / (k - 1)
    return returns - others


def external_baseline(returns: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
    """ReMax: ``A_k = R_k - b`` with one baseline per group (the greedy joint response's return).

    Shapes: returns [G, K], baseline [G] -> [G, K].
    """
    if baseline.shape != returns.shape[:1]:
        raise ValueError(f"baseline must have shape [G]={tuple(returns.shape[:1])}, got {tuple(baseline.shape)}")
    return returns - baseline.to(returns.dtype).unsqueeze(1)


def group_max(returns: torch.Tensor) -> torch.Tensor:
    """Group-max baseline: ``A_k = R_k - max_j R_j`` (<= 0; the best sample of a group gets 0).

    A cheap stand-in for ReMax's greedy baseline (greedy decoding tends to the
    mode, often the group's best) that needs no extra generation.
    Shape: [G, K] -> [G, K].
    """
    return returns - returns.max(dim=1, keepdim=True).values


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float, last_value: float = 0.0,
        terminal: bool = True) -> torch.Tensor:
    """Generalised advantage estimation (Schulman et al., 2016) over one branch of T turns.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V_T = 0`` when the branch
    ended in a terminal state and ``V_T = last_value`` (the critic's value of
    the next state) when it was truncated; ``A_t = delta_t + gamma * lam * A_{t+1}``.
    lam = 0 is one-step TD, lam = 1 is the discounted return minus V_t.
    Shapes: rewards, values [T] -> [T].
    """
    out = torch.zeros_like(rewards, dtype=torch.float64)
    nxt_v = 0.0 if terminal else float(last_value)
    running = 0.0
    for t in reversed(range(len(rewards))):
        delta = float(rewards[t]) + gamma * nxt_v - float(values[t])
        running = delta + gamma * lam * running
        out[t] = running
        nxt_v = float(values[t])
    return out


def node_baseline(values: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """The value of every node: ``b[g] = mean_j values[g, j]`` over its J joint actions.

    A V critic gives every joint action of a node the same value, so ``b`` is
    V(h). A Q critic gives each its own ``Q(h, a_j)``; their mean over the
    node's J sampled joint actions is the sample estimate of
    ``V(h) = E_a Q(h, a)`` under the policy that sampled them. :func:`gae_tree`
    uses ``b`` as the node's value (in its own TD terms and as its parent's
    continuation); the actor's baseline of a sample leaves the joint actions
    holding that sample out (:func:`sample_advantages`).

    Which values are averaged: IAC's per-agent ``Q_i(h_i, a_i)`` repeats each of
    agent i's K samples equally often among the J joint actions (once aligned,
    K^(N-1) times cross), so ``b`` is the mean over its K samples; MAAC's
    central ``Q(h, a)`` is averaged over the J joint actions.
    ``valid`` [G, J]: the joint actions that exist (nodes of a team graph have different widths); the mean
    is over those. Shape: [G, J, C] -> [G, C].
    """
    if valid is None:
        return values.to(torch.float64).mean(1)
    w = valid.to(torch.float64).unsqueeze(-1)
    return (values.to(torch.float64) * w).sum(1) / w.sum(1).clamp(min=1)


def gae_tree(rewards: torch.Tensor, values: torch.Tensor, child: torch.Tensor, gamma: float, lam: float,
             bootstrap: torch.Tensor | None = None, discount: torch.Tensor | None = None,
             valid: torch.Tensor | None = None, valued: torch.Tensor | None = None) -> torch.Tensor:
    """GAE over every branch of a rollout tree (``gae`` on each root-to-leaf path, shared prefixes averaged).

    Every node is valued by its action-independent baseline ``b = mean_j v``
    (:func:`node_baseline`: V(h) for a V critic, the mean of Q over the node's
    J sampled joint actions for a Q critic), and the continuation of joint
    action j is the mean over its child's joint actions, as the tree's returns
    are (``G_j = r_j + gamma * mean_j' G_child,j'``)::

        delta_j = r_j + gamma * V_next,j - b,       V_next,j = b[child_j]  (0 if ended,
                                                               bootstrap_j if truncated)
        A_j     = delta_j + gamma * lam * mean_j' A[child_j, j']   (0 past the end)

    ``A_j + b`` is joint action j's lambda-return, the regression target of
    ``v_j`` (of V(h) averaged over j; of ``Q(h, a_j)`` as it is). With lam = 1,
    ``A_j`` is the tree return minus ``b``, with ``gamma^t * bootstrap`` added
    where a branch was cut; with lam = 0 it is ``r_j + gamma * V_next,j - b``.
    Children come after their parents in group order.

    Team graphs (``comarl/core/stages.py``) add three optional arguments:

    - ``discount`` [G, J]: each edge's discount in place of gamma (1 into a later stage of the same turn);
    - ``valid`` [G, J]: the joint actions that exist (nodes differ in width); means run over those;
    - ``valued`` [G, C]: column c values node g. At a node a column does not value (an independent critic's
      agent does not act there, so the node is part of its environment) the column's baseline is the
      backed-up ``b = mean_j (r_j + d_j * V_next,j)`` and an edge into such a node is not cut by lambda
      (``lam`` = 1 on it), so a column's advantage is GAE over the nodes where it acts, with the rewards and
      next values averaged over what the other agents did in between.

    Shapes: rewards, values, bootstrap [G, J, C] (C columns: agents, or 1 for a
    team critic); child [G, J] (-1 where the branch ended) -> [G, J, C].
    """
    adv = torch.zeros_like(rewards, dtype=torch.float64)
    base = node_baseline(values, valid)  # [G, C]
    boot = torch.zeros_like(adv) if bootstrap is None else bootstrap.to(torch.float64)
    width = valid.sum(1).tolist() if valid is not None else [rewards.shape[1]] * rewards.shape[0]
    for g in reversed(range(rewards.shape[0])):
        steps = []
        for j in range(width[g]):
            c = int(child[g, j])
            d = float(discount[g, j]) if discount is not None else gamma
            if c >= 0:
                nxt, cont = base[c], adv[c, :width[c]].mean(0) if valid is not None else adv[c].mean(0)
                cut = torch.where(valued[c], lam, 1.0).to(torch.float64) if valued is not None else lam
            else:
                nxt, cont, cut = boot[g, j], torch.zeros_like(boot[g, j]), lam
            steps.append((d, nxt, cont, cut))
        if valued is not None and not bool(valued[g].all()):  # pass-through columns: the backed-up value
            backed = torch.stack([rewards[g, j] + d * nxt for j, (d, nxt, _, _) in enumerate(steps)]).mean(0)
            base[g] = torch.where(valued[g], base[g], backed)
        for j, (d, nxt, cont, cut) in enumerate(steps):
            adv[g, j] = rewards[g, j] + d * nxt - base[g] + d * cut * cont
    return adv


def sample_advantages(adv: torch.Tensor, values: torch.Tensor, sample_of: torch.Tensor, k: int) -> torch.Tensor:
    """One agent's advantage of each of its K samples at every node, against a baseline its sample cannot move.

    ``adv`` and ``values`` are the agent's column of :func:`gae_tree`'s advantages and of the critic's values;
    ``sample_of[j]`` is the agent's sample in joint action j. With ``G_j = A_j + b`` (joint action j's
    lambda-return; ``b`` = :func:`node_baseline`)::

        A_k = mean_{j holds k} G_j  -  mean_{j does not hold k} v_j

    The baseline leaves out every joint action that holds sample k (leave-one-out, as RLOO does with
    returns), so it does not depend on the action it is subtracted from, whatever the critic's errors.
    A V critic (every ``v_j = V(h)``): ``A_k = mean_{j holds k} A_j``, the plain GAE credit. A Q critic:
    subtracting ``Q(h, a_j)`` itself would leave Q's own TD error (no expected signal once Q fits), and the
    node mean ``b`` would still hold the sample's own Q with weight 1/K (a bias of ``-1/K grad E[Q]`` while
    Q is wrong). At Q's target in a single turn, ``A_k = K/(K-1) (mean_{j holds k} Q_j - b)``: the V
    critic's advantage times K/(K-1) (cross mode: the mean over a sample's joint actions of COMA's
    counterfactual baseline ``mean_k' Q(h, (k', a_-i))`` is ``b`` too). K = 1: no joint action is left
    out; ``b`` is used (V(h); a Q critic is refused at K = 1, ``critics.settings``).
    ``sample_of`` may also be [G, J], one row per node (a team graph's nodes differ), with -1 for a joint
    action past the node's width: those are out of every mean.
    Shapes: adv, values [G, J]; sample_of [J] or [G, J] (in 0..K-1, or -1) -> [G, K].
    """
    if sample_of.dim() == 2:
        return _sample_advantages_per_node(adv, values, sample_of, k)
    onehot = (sample_of.unsqueeze(1) == torch.arange(k)).to(torch.float64)  # [J, K]
    adv, values = adv.to(torch.float64), values.to(torch.float64)
    base = values.mean(1, keepdim=True)  # [G, 1]
    held, rest = onehot.sum(0), (1 - onehot).sum(0)  # [K]
    credit = (adv + base) @ onehot / held.clamp(min=1)
    others = torch.where(rest > 0, values @ (1 - onehot) / rest.clamp(min=1), base)
    return torch.where(held > 0, credit - others, torch.zeros_like(credit))


def _sample_advantages_per_node(adv: torch.Tensor, values: torch.Tensor, sample_of: torch.Tensor,
                                k: int) -> torch.Tensor:
    """:func:`sample_advantages` with a row of ``sample_of`` per node ([G, J], -1: no such joint action)."""
    valid = (sample_of >= 0).to(torch.float64)  # [G, J]
    onehot = (sample_of.unsqueeze(-1) == torch.arange(k)).to(torch.float64)  # [G, J, K]
    others_hot = valid.unsqueeze(-1) - onehot
    adv, values = adv.to(torch.float64) * valid, values.to(torch.float64) * valid
    base = values.sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp(min=1)  # [G, 1]
    held, rest = onehot.sum(1), others_hot.sum(1)  # [G, K]
    credit = torch.einsum("gj,gjk->gk", adv + base * valid, onehot) / held.clamp(min=1)
    others = torch.where(rest > 0, torch.einsum("gj,gjk->gk", values, others_hot) / rest.clamp(min=1), base)
    return torch.where(held > 0, credit - others, torch.zeros_like(credit))


def whiten(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """``(x - mean) / std`` over all entries (population std); returned unchanged with fewer than 2 entries.
    Shape: any -> same."""
    if x.numel() < 2:
        return x
    return (x - x.mean()) / x.std(unbiased=False).clamp(min=eps)


def whiten_across(x: torch.Tensor, all_reduce_sum, eps: float = EPS) -> torch.Tensor:
    """:func:`whiten` over the union of every rank's ``x`` (data parallelism: each rank holds part of the batch),
    so 2 ranks whiten exactly as one process over the whole batch.

    ``all_reduce_sum``: number -> its sum over ranks (the identity in one
    process). Collective: every rank calls it, an empty ``x`` included.
    Two passes (mean, then the sum of squared deviations), as :func:`whiten`.
    Shape: any -> same.
    """
    n = all_reduce_sum(x.numel())
    if n < 2:
        return x
    mean = all_reduce_sum(float(x.to(torch.float64).sum())) / n
    var = all_reduce_sum(float(((x.to(torch.float64) - mean) ** 2).sum())) / n
    return (x - mean) / max(var ** 0.5, eps)
