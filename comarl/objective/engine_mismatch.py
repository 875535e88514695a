"""The sampling engine's log-probs against the trainer's: the gap metric and truncated importance sampling.

A vLLM engine samples from its own copy of the weights with its own kernels (``docs/vllm.md``), so the policy
that drew a token and the policy the loss differentiates differ by rounding (fp32: ~1e-5), by precision
(a bf16 engine: up to ~0.5) or, when a push was missed, by a whole optimiser step. ``logprob_gap`` measures
it (``gen/logprob_gap_max``, ``gen/logprob_gap_mean``); ``truncated_is_weights`` corrects for it as TRL's and
verl's "TIS" do: each token's loss weighed by ``min(pi_trainer / pi_engine, cap)``.

Notation: B sequences, T completion positions (right-padded), ``mask`` 1 on the tokens compared / weighed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch


def padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """Per-sequence lists of per-token values -> [B, width] float32, 0 after each row's end."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for b, row in enumerate(rows):
        n = min(len(row), width)
        if n:
            out[b, :n] = torch.tensor(list(row[:n]), dtype=torch.float32)
    return out


def logprob_gap(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, int]:
    """``|trainer_logp - engine_logp|`` over the masked tokens -> (max, sum, count); (0, 0, 0) when none.

    Args:
        trainer_logp: [B, T] the trainer's log-probs of the sampled tokens (at the sampling temperature).
        engine_logp: [B, T] the engine's log-probs of the same tokens.
        mask: [B, T] 1 where a token is compared (real completion tokens a schema did not force).
    """
    keep = mask.bool()
    gap = (trainer_logp.detach().float() - engine_logp.to(trainer_logp.device).float()).abs()[keep]
    if gap.numel() == 0:
        return 0.0, 0.0, 0
    return float(gap.max()), float(gap.sum()), int(gap.numel())


def truncated_is_weights(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, cap: float,
                         mask: torch.Tensor) -> torch.Tensor:
    """Truncated importance-sampling weights ``min(exp(trainer_logp - engine_logp), cap)`` -> [B, T].

    ``trainer_logp`` [B, T]: the trainer's log-probs of the sampled tokens under the weights that sampled them
    (the loss's "old" log-probs, no gradient); ``engine_logp`` [B, T]: the engine's; ``mask`` [B, T]: 1 on the
    weighed tokens, where the result is the truncated ratio; elsewhere it is 1 (the loss weights are 0 there).
    Computed as ``exp(min(d, log cap))`` so a large ``d`` cannot overflow.
    """
    if not cap > 0:
        raise ValueError(f"truncated_is_weights: cap must be > 0, got {cap}")
    d = trainer_logp.detach().float() - engine_logp.to(trainer_logp.device).float()
    w = torch.exp(d.clamp(max=math.log(cap)))
    return torch.where(mask.to(w.device).bool(), w, torch.ones_like(w))


@dataclass
class GapTotals:
    """A step's gap over every agent and micro-batch: ``add`` each (max, sum, count) of :func:`logprob_gap` (and
    the TIS weights' sum), ``metrics`` at the end (none when nothing came from an engine)."""

    max: float = 0.0
    sum: float = 0.0
    count: int = 0
    weight_sum: float = 0.0
    weighed: int = 0

    def add(self, gap: tuple[float, float, int], weights: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        mx, sm, n = gap
        self.max, self.sum, self.count = max(self.max, mx), self.sum + sm, self.count + n
        if weights is not None and mask is not None:
            self.weight_sum += float((weights * mask.to(weights)).sum())
            self.weighed += int(mask.sum())

    def metrics(self) -> dict[str, float]:
        if not self.count:
            return {}
        out = {"gen/logprob_gap_max": self.max, "gen/logprob_gap_mean": self.sum / self.count}
        if self.weighed:
            out["gen/tis_weight_mean"] = self.weight_sum / self.weighed
        return out


__all__ = ["GapTotals", "logprob_gap", "padded", "truncated_is_weights"]
