"""Policy-gradient losses: pure functions on token log-probs.

Shapes: S sequences, T completion tokens (padded). ``mask [S, T]`` is 1 on real
completion tokens (the EOS included, padding after it excluded).

The normalisation is expressed as per-token *weights* computed once over the
whole batch (all micro-batches, all ranks), so that summing
``loss_tokens * weights`` over micro-batches gives exactly the full-batch loss
whatever the micro-batch size.
"""
from __future__ import annotations

import torch

NORMALISATIONS = ("sequence", "token", "constant")


def token_weights(lengths: torch.Tensor, width: int, mode: str, num_sequences: int, num_tokens: int,
                  max_new_tokens: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Weight of every token in the batch loss.

    Args:
        lengths: [S] real completion lengths of these sequences (0 = the sequence is out of the loss,
            e.g. truncated under ``mask_truncated``).
        width: T, padded width of the returned tensor.
        mode: ``sequence``: mean over each sequence's tokens, then mean over the
            S_total sequences (GRPO), w = 1 / (S_total * len_s);
            ``token``: one mean over all T_total real tokens (DAPO), w = 1 / T_total;
            ``constant``: sum over tokens divided by S_total * max_new_tokens
            (Dr. GRPO), w = 1 / (S_total * max_new_tokens).
        num_sequences: S_total over the whole batch (every micro-batch and rank). The loop
            passes the sequences in the loss for ``sequence`` and *all* sequences for
            ``constant`` (a constant normaliser, as TRL's ``dr_grpo``; docs/algorithms.md).
        num_tokens: T_total real tokens over the whole batch.
        max_new_tokens: the constant of the ``constant`` mode.
        mask: optional [S, T] 0/1, the tokens in the loss when they are not the first ``lengths[s]``
            (structured generation: forced tokens are out); then ``lengths`` must be its row sums.
    Returns:
        [S, T] weights, zero on padding; all zero (never NaN) when the batch has no
        token in the loss (``num_sequences`` or ``num_tokens`` is 0).
    """
    if mask is None:
        mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    else:
        mask = mask.float()
    if mode not in NORMALISATIONS:
        raise ValueError(f"loss normalisation must be one of {NORMALISATIONS}, got {mode!r}")
    if num_sequences <= 0 or num_tokens <= 0:  # fully masked batch: nothing to weight
        return torch.zeros_like(mask)
    if mode == "sequence":
        w = 1.0 / (num_sequences * lengths.clamp(min=1).float())
        return mask * w.unsqueeze(1)
    if mode == "token":
        return mask / num_tokens
    return mask / (num_sequences * max_new_tokens)


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        weights: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.2,
                        ratio_level: str = "token") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-style clipped surrogate, summed with ``weights``.

    ``ratio = exp(logp - old_logp)`` per token (``ratio_level="token"``), or one
    ratio per sequence ``exp(mean_t (logp - old_logp))`` broadcast over its tokens
    (``"sequence"``, as in GSPO). Per token::

        l_t = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)

    and the loss is ``sum_{s,t} weights[s,t] * l[s,t]``. With ``old_logp =
    logp.detach()`` (one pass on fresh samples) the ratio is 1 and the gradient
    is the plain policy gradient ``-A * grad logp``.

    Clip statistics (as TRL logs them), fractions of the real tokens (``weights > 0``)
    where the clip actually binds, i.e. where ``min`` picks the clipped term and the
    token's gradient is zero:

        clip_low    = mean[ratio < 1 - clip_low  and A < 0]
        clip_high   = mean[ratio > 1 + clip_high and A > 0]
        clip_region = clip_low + clip_high

    (a token outside the band whose advantage pushes it back inside is not clipped).

    Args:
        logp, old_logp, weights: [S, T]; advantages: [S, T] per token (the loop's shape), or [S] (one per
            sequence, broadcast over its tokens).
    Returns:
        (scalar loss, stats: ``clip_low``, ``clip_high``, ``clip_region``, ``ratio_mean``
        over real tokens, and ``tokens``, their count).
    """
    mask = (weights > 0).float()
    diff = logp - old_logp
    if ratio_level == "sequence":
        seq = (diff * mask).sum(1) / mask.sum(1).clamp(min=1)
        diff = seq.unsqueeze(1).expand_as(logp)
    elif ratio_level != "token":
        raise ValueError(f"ratio_level must be 'token' or 'sequence', got {ratio_level!r}")
    ratio = torch.exp(diff)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = (per_token * weights).sum()
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        low = ((ratio < 1 - clip_low) & (adv < 0)).float() * mask
        high = ((ratio > 1 + clip_high) & (adv > 0)).float() * mask
        stats = {"clip_low": low.sum() / n, "clip_high": high.sum() / n, "clip_region": (low + high).sum() / n,
                 "ratio_mean": (ratio * mask).sum() / n, "tokens": mask.sum()}
    return loss, stats


KL_ESTIMATORS = ("k1", "k3")


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' log-probs.

    With ``d = ref_logp - logp`` (tokens sampled from pi)::

        k1 = -d = logp - ref_logp          (unbiased, can be negative)
        k3 = exp(d) - d - 1                (unbiased, always >= 0; Schulman's k3)

    Both have expectation KL(pi || pi_ref) under pi. Shapes: [S, T] -> [S, T]
    (padding positions are whatever the inputs hold; weight them out).

    As a *loss term* (gradient through ``logp``, tokens sampled from pi) they
    differ (docs/algorithms.md, "What the KL term estimates")::

        grad k1 = grad logp                      E_pi[.] = 0: regularises nothing
        grad k3 = (1 - pi_ref / pi) grad logp    E_pi[.] = grad KL(pi_ref || pi)

    so ``kl_mode: loss`` takes k3 only (it follows the gradient of the reverse
    KL, as TRL's GRPO loss does); k1 is for ``kl_mode: reward`` and metrics.
    """
    d = ref_logp - logp
    if kind == "k1":
        return -d
    if kind == "k3":
        return torch.exp(d) - d - 1
    raise ValueError(f"train.loss.kl_estimator must be one of {list(KL_ESTIMATORS)}, got {kind!r}")


def sequence_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Summed per-token KL estimate of each sequence: ``sum_t mask * kl_t`` -> [S].

    Used to subtract ``beta * KL`` from a sample's return (KL "in the reward").
    """
    return (kl_estimate(logp, ref_logp, kind) * mask).sum(dim=1)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, weights: torch.Tensor, beta: float,
               kind: str = "k3") -> torch.Tensor:
    """KL "in the loss": ``beta * sum_{s,t} weights[s,t] * kl_t`` (same weights as the policy loss).

    Gradient flows through ``logp`` only. With k3 its expected gradient is
    ``beta * grad KL(pi_ref || pi)`` (see :func:`kl_estimate`); k1's is zero,
    which ``TrainConfig.validate`` refuses. Shapes: [S, T] -> scalar.
    """
    return beta * (kl_estimate(logp, ref_logp.detach(), kind) * weights).sum()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor,
               clip: float | None = None) -> torch.Tensor:
    """Critic regression loss ``0.5 * mean (V - target)^2`` (PPO's value loss).

    With ``clip`` the prediction may move at most ``clip`` away from the
    rollout-time value: ``V_c = old + clamp(V - old, -clip, clip)`` and the loss
    is ``0.5 * mean max((V - t)^2, (V_c - t)^2)``.
    Shapes: values, old_values, targets [U] (U critic inputs) -> scalar.
    """
    sq = (values - targets) ** 2
    if clip is not None and clip > 0:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        sq = torch.maximum(sq, (clipped - targets) ** 2)
    return 0.5 * sq.mean()


def explained_variance(predicted: torch.Tensor, targets: torch.Tensor) -> float:
    """``1 - Var(target - V) / Var(target)``: 1 is a perfect critic, 0 no better than a constant.
    NaN when the targets do not vary. Shapes: [U], [U] -> float."""
    var = float(targets.var(unbiased=False)) if targets.numel() else 0.0
    if var == 0.0:
        return float("nan")
    return 1.0 - float((targets - predicted).var(unbiased=False)) / var


def entropy_bonus(logp: torch.Tensor, weights: torch.Tensor, coef: float) -> torch.Tensor:
    """Entropy bonus from the sampled tokens' log-probs, as a loss term (minimising it raises the entropy).

    ``H = -E[log pi]`` and ``grad H = -E[log pi * grad log pi]``, so the
    surrogate ``-coef * sum_{s,t} w * (-log pi).detach() * log pi`` has the
    gradient ``-coef * grad H`` per token (no full-vocabulary softmax needed;
    the effect of a token on later tokens' entropy is ignored).
    Shapes: logp, weights [S, T] -> scalar.
    """
    return coef * (weights * logp.detach() * logp).sum()


def joint_dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                   ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO on joint responses (MADPO): one preference over the whole team's answer.

    With ``d_i = (log pi_i(y_w) - log ref_i(y_w)) - (log pi_i(y_l) - log ref_i(y_l))`` (agent i's
    summed sequence log-probs of its part of the chosen joint response y_w and the rejected y_l)::

        z = beta * sum_i d_i          loss_p = -log sigmoid(z)

    Shapes: the four inputs [P pairs, N agents] -> (loss [P], z [P], the reward margin).
    """
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)).sum(dim=1)
    return -torch.nn.functional.logsigmoid(z), z


def reference_free_dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                            beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`joint_dpo_loss` with the reference log-probs set to 0:
    ``z = beta * sum_i (log pi_i(y_w) - log pi_i(y_l))``.

    No reference model is needed; nothing anchors the policy to where it started. Shapes as there."""
    zero = torch.zeros_like(policy_chosen)
    return joint_dpo_loss(policy_chosen, policy_rejected, zero, zero, beta)


def bradley_terry_loss(score_chosen: torch.Tensor, score_rejected: torch.Tensor,
                       weights: torch.Tensor | None = None) -> torch.Tensor:
    """Reward-model loss on preference pairs: ``mean_p -log sigmoid(s_w - s_l)``. Shapes: [P], [P] -> scalar.

    ``weights`` [P] (replayed rounds' decay): ``sum_p w_p * loss_p / sum_p w_p`` instead of the mean."""
    losses = -torch.nn.functional.logsigmoid(score_chosen - score_rejected)
    if weights is None:
        return losses.mean()
    weights = weights.to(losses.device, losses.dtype)
    return (losses * weights).sum() / weights.sum()
