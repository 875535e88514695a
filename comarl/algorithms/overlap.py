"""Which algorithms train on samples of an older policy (``train.rollout.max_staleness`` >= 1, docs/overlap.md):
checked with the config, before any model is built.

Sound with lag, and run:

- the policy-gradient estimators (MAGRPO, MAREINFORCE, MARLOO, MAReMax and -groupmax, the token baseline, an
  estimator of ``train.estimator``): the clipped ratio is taken against the policy that sampled (its log-probs
  travel with the samples), or against the trainer's weights with the truncated importance weight to the
  sampler (``train.loss.tis_cap``). A baseline computed from the same batch (group mean, leave-one-out, group
  max) is a function of the batch, as on-policy. MAReMax's greedy return is decoded by the sampling policy:
  still independent of the action it is subtracted from, so it stays a baseline (it tracks the sampler, one
  step behind);
- online MADPO: DPO fits preference pairs from any policy (the loss has no sampling ratio), so older samples
  only shift which pairs it sees.

Refused, with the reason:

- IAC, MAAC: the critic values each batch right after its rollout (its values and GAE enter the advantages);
  ahead of the trainer that would read a critic while the trainer updates it, and GAE over an older policy's
  samples needs an off-policy value correction (V-trace, Retrace) that comarl does not have;
- madpo_iter, marlhf_iter, madpo_offline: their steps come from rounds that sample their own pools, or from a
  pairs file; there is no prompt batch to sample ahead;
- a record whose update is not the policy gradient or online DPO (it rolls out in its own way).
"""
from __future__ import annotations

import os

from ..core.config_io import ConfigError
from .base import policy_gradient, prompt_batches


def check_lag(cfg, algorithm) -> None:
    """Refuse, with one line, what cannot train with ``train.rollout.max_staleness`` >= 1 (module docstring)."""
    from .madpo import online_update

    k = cfg.rollout.max_staleness
    if not k:
        return
    step = algorithm.step_algorithm(cfg)
    why = None
    if algorithm.source is not prompt_batches or step.source is not prompt_batches:
        why = ("takes its steps from rounds that sample their own pools, or from a pairs file: there is no prompt "
               "batch to sample ahead")
    elif step.critic is not None:
        why = (f"trains a critic ({step.critic}) that values each batch right after its rollout; ahead of the "
               f"trainer it would read the critic while it is updated, and GAE on an older policy's samples needs "
               f"an off-policy value correction (V-trace) that comarl does not have")
    elif step.update is not policy_gradient and step.update is not online_update:
        why = "rolls out inside its own update, which a generation worker cannot run ahead of"
    if why is not None:
        raise ConfigError(f"train.rollout.max_staleness: {cfg.algorithm} {why}; set it to 0 (docs/overlap.md)")
    if cfg.hardware.sharding == "fsdp":
        raise ConfigError("train.hardware.sharding: fsdp gathers the agents around each rollout, a collective the "
                          "trainer's thread must join; train.rollout.max_staleness >= 1 needs whole models (sharding: "
                          "none)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("train.rollout.max_staleness: the generation worker runs in one process for now; under "
                          "torchrun set it to 0")


__all__ = ["check_lag"]
