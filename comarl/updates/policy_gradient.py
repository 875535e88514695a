"""The policy-gradient update, written once for every on-policy algorithm: advantages from an estimator or a critic.

One step: roll out this rank's items (``rollout_step.roll_out``, ``gradient_accumulation_steps`` chunks),
turn credited returns into advantages with the algorithm's ``advantage(samples, config)`` (a critic, when
the algorithm has one, prepares GAE advantages first and the estimator reads them), then for each agent:
token log-probs -> clipped policy loss with globally normalised token weights -> backward over
micro-batches -> ``Team.optimizer_step`` (all-reduce, clip, optimizer and scheduler step).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from .. import checkpoint as ckpt
from ..compute import distributed as dist
from ..compute.dropout import dropout_disabled
from ..compute.micro_batches import micro_batch_spans
from ..compute.precision import autocast, backward
from ..compute.sharding import idle_backward, lockstep_count
from ..engine_mismatch import GapTotals, logprob_gap, padded, truncated_is_weights
from ..logprobs import completion_logprobs, forced_mask
from ..losses import clipped_policy_loss, entropy_bonus, kl_estimate, kl_penalty, sequence_kl, token_weights
from ..steps import PromptBatch, StepOutput
from ..types import joined_engine_logprobs, joined_samples
from .rollout_step import roll_out, rollout_step_metrics


@dataclass
class LossBatch:
    """One agent's samples of a training step, cut into micro-batch spans; counts are global (all ranks).

    Attributes:
        prompts, comps: [S] prompt and completion ids.
        lengths: [S] tokens of each completion in the loss (0: out of it).
        spans: micro-batches as (start, end) over the samples; a group is never split.
        n_seq, n_tok: sequences and tokens in the loss over every rank.
        n_all: sequences including those out of the loss (truncated under mask_truncated): the constant
            normaliser.
        forced: None, or per completion token True where a schema forced it (structured generation).
        engine: None, or per completion token the log-prob the generator's engine sampled it with (vLLM): for
            the gap metric and ``train.loss.tis_cap``.
    """

    prompts: list[list[int]]
    comps: list[list[int]]
    lengths: torch.Tensor
    spans: list[tuple[int, int]]
    n_seq: float
    n_tok: float
    n_all: float
    forced: list[list[bool]] | None = None
    engine: list[list[float]] | None = None


def group_sizes(samples: list, n: int) -> list[int]:
    """Samples per group, in order, over the rollout chunks (one group per tree node); [n] if unknown."""
    sizes = [int(s.returns.shape[-1]) for s in samples for _ in range(int(s.returns.shape[0]))]
    return sizes if sum(sizes) == n else [n]


class PolicyGradient:
    """Advantages -> clipped policy loss for every agent.

    Args:
        config: the run's ``TrainConfig`` (loss, rollout and KL settings).
        advantage: ``(AgentSamples, config) -> [G, K]`` advantages (the algorithm's estimator).
        settings: the ``RolloutSettings`` of the step's rollout.
        critic: a ``comarl.critics.Critic`` (IAC, MAAC), or None: it prepares values and GAE advantages
            after the rollout and takes its own optimizer step before each of an agent's passes.
        loss: ``(logp, old_logp, adv, weights, clip_low, clip_high, ratio_level) -> (loss, stats)``, the
            per-micro-batch policy loss (``losses.clipped_policy_loss``).
        weights: the token weights of the loss normalisation (``losses.token_weights``).
    """

    def __init__(self, config, advantage: Callable, settings, critic=None, loss: Callable = clipped_policy_loss,
                 weights: Callable = token_weights):
        self.config, self.advantage, self.settings, self.critic = config, advantage, settings, critic
        self.loss, self.weights = loss, weights

    # ----------------------------------------------------------------- step
    def step(self, team, batch: PromptBatch, step: int) -> StepOutput:
        cfg = self.config
        t0 = time.perf_counter()
        rollouts, values, t_roll = roll_out(team, batch.env, batch.items, self.settings,
                                            cfg.run.gradient_accumulation_steps, self.critic)
        metrics, counts = rollout_step_metrics(rollouts, values)
        team.count("completions", sum(r.num_completions for r in rollouts))
        trained_tokens, gaps = 0, GapTotals()
        for i in range(len(team.agents)):
            samples = [r.agents[i] for r in rollouts]
            trained_tokens += sum(len(c) for s in samples for c in s.completion_ids)
            metrics.update(self.update_agent(team, i, samples, step, gaps))
        metrics.update(gaps.metrics())  # the engine's log-probs against the trainer's (generator vllm)
        dt = time.perf_counter() - t0
        metrics.update({"time/step_s": dt, "time/rollout_s": t_roll, "time/update_s": dt - t_roll,
                        "tokens_per_s": trained_tokens / max(dt, 1e-9)})
        return StepOutput(metrics, float(len(batch.items)), counts, rollouts[0].examples if rollouts else [])

    def update_agent(self, team, i: int, samples: list, step: int, gaps: GapTotals | None = None) -> dict[str, float]:
        """Advantages, then ``num_iterations`` optimizer steps for agent ``i`` on its samples of every rollout chunk.

        Old log-probs (the sampling policy's) are computed once, before the
        first update, whenever a later pass or the KL-in-reward needs them;
        reference log-probs once, when ``kl_beta`` > 0. Sampling, old and
        reference log-probs run without dropout, and so does the update unless
        ``train.loss.disable_dropout`` is false, so pass one has ratio 1 exactly. A
        batch with no token in the loss (every completion truncated under
        ``mask_truncated``) skips the update (``count/empty_batch_skips``). Samples from an engine (vLLM)
        add their log-prob gap to ``gaps`` and, with ``train.loss.tis_cap``, weigh the loss (``engine_mismatch``).
        """
        cfg, agent = self.config, team.agents[i]
        model = agent.model
        prompts, comps, forced = joined_samples(samples)
        # tokens in the loss per sequence: all of it, or (structured generation) the sampled ones only
        lengths = torch.tensor([len(c) for c in comps] if forced is None else
                               [len(c) - sum(f) for c, f in zip(comps, forced)], dtype=torch.long)
        if cfg.loss.mask_truncated and samples:  # truncated completions leave the loss and its normalisation
            lengths = lengths * (~torch.cat([s.truncated for s in samples])).long()
        spans = micro_batch_spans(group_sizes(samples, len(comps)), cfg.hardware.micro_batch_size,
                                  cfg.hardware.share_prefix)
        batch = LossBatch(prompts, comps, lengths, spans,
                          n_seq=dist.all_reduce_sum(int((lengths > 0).sum())),
                          n_tok=dist.all_reduce_sum(int(lengths.sum())), n_all=dist.all_reduce_sum(len(comps)),
                          forced=forced, engine=joined_engine_logprobs(samples))
        if batch.n_seq == 0 or batch.n_tok == 0:  # the counts are global: every rank skips together
            return self._skip_empty_batch(team, i, batch, step)
        ref = team.references[i]
        kl_in_reward = ref is not None and cfg.loss.kl_mode == "reward"
        old = None
        with team.gathered([model] + ([ref.model] if getattr(ref, "model", None) is not None else [])):
            with autocast(cfg.hardware.mixed_precision, agent.device):
                ref_out = [ref.logprobs(prompts[a:b], comps[a:b]) for a, b in batch.spans] if ref is not None else []
            if forced is not None:  # the KL counts sampled tokens only, like the loss
                ref_out = [(r, m * (1 - forced_mask(forced[a:b], m.shape[1])).to(m))
                           for (r, m), (a, b) in zip(ref_out, batch.spans)]
            if cfg.loss.num_iterations > 1 or kl_in_reward:
                model.eval()  # the sampling policy: no dropout (as in generate and the reference)
                with torch.no_grad(), autocast(cfg.hardware.mixed_precision, agent.device):
                    old = [completion_logprobs(model, prompts[a:b], comps[a:b], agent.tokenizer.pad_token_id,
                                               agent.config.temperature, cfg.hardware.share_prefix)[0]
                           for a, b in batch.spans]
        model.train()
        if kl_in_reward:  # R <- R - beta * sum_t kl_t, before the advantages
            assert old is not None  # computed above whenever kl_in_reward
            seq_kl = torch.cat([sequence_kl(o, r, mask.to(o.dtype), cfg.loss.kl_estimator).cpu()
                                for o, (r, mask) in zip(old, ref_out)])
            start = 0
            for s in samples:
                part = seq_kl[start:start + s.num_samples].reshape(s.returns.shape)
                s.returns = s.returns - cfg.loss.kl_beta * part.to(s.returns.dtype)
                start += s.num_samples
        for s in samples:
            s.advantages = self.advantage(s, cfg)
        adv = torch.cat([s.advantages.reshape(-1) for s in samples]) if samples else torch.zeros(0)
        out: dict[str, float] = {}
        name = agent.name
        ref_lp = [lp for lp, _ in ref_out]
        clip_passes: list[dict[str, float]] = []
        for it in range(cfg.loss.num_iterations):
            with dropout_disabled(model, cfg.loss.disable_dropout):
                if self.critic is not None:  # first, so a value head's backbone gradients join this agent's step
                    out.update(self.critic.update(i, it))
                    if self.critic.last_skipped:
                        self._count_critic_skip(team, i, step)
                total, clip, kl, bad = self.backward_pass(team, i, batch, adv, old, ref_lp, first=it == 0,
                                                          gaps=gaps)
            if it == 0 and ref is not None:
                out[f"{name}/kl"] = kl
            grad_norm = team.optimizer_step(i, bad, step)
            if grad_norm is None:
                continue
            out[f"{name}/loss"] = dist.all_reduce_sum(total)
            out[f"{name}/grad_norm"] = grad_norm
            clip_passes.append(clip)
        for key in ("low", "high", "region"):  # mean over the passes that stepped (TRL's clip_ratio/*_mean)
            if clip_passes:
                out[f"{name}/clip_ratio/{key}_mean"] = sum(c[key] for c in clip_passes) / len(clip_passes)
        out[f"{name}/lr"] = team.lr(i)
        out[f"{name}/advantage_abs"] = float(adv.abs().mean()) if len(adv) else 0.0
        return out

    def backward_pass(self, team, i: int, batch: LossBatch, adv: torch.Tensor, old, ref_lp, first: bool,
                      gaps: GapTotals | None = None):
        """Loss and backward over the micro-batches of agent ``i``; on the first pass, the engine's log-prob gap
        (``batch.engine``) goes to ``gaps``.

        Returns (summed loss, fractions of this rank's real tokens clipped ``{low, high, region}``,
        mean KL to the reference over real tokens (first pass), whether a loss was non-finite).
        """
        cfg, agent = self.config, team.agents[i]
        model, pad, temp = agent.model, agent.tokenizer.pad_token_id, agent.config.temperature
        total, kl_sum, kl_tokens = 0.0, 0.0, 0
        clip_sums, clip_tokens = {"low": 0.0, "high": 0.0, "region": 0.0}, 0.0
        n_norm = batch.n_all if cfg.loss.loss_normalization == "constant" else batch.n_seq  # docs/algorithms.md
        bad = False
        sharded = team.sharding is not None
        # sharded: every rank must run the same forwards (FSDP collectives), and whether a micro-batch shares its
        # prompts depends on that rank's items, so the sharded update encodes every copy (docs/shared_prefix.md)
        share = cfg.hardware.share_prefix and not sharded
        for m in range(lockstep_count(len(batch.spans)) if sharded else len(batch.spans)):
            if m >= len(batch.spans) or bad:  # sharded: this rank is out of items (or already non-finite)
                idle_backward(model, pad)
                continue
            a, b = batch.spans[m]
            forced = {"forced": batch.forced[a:b]} if batch.forced is not None else {}  # structured generation
            with autocast(cfg.hardware.mixed_precision, agent.device):  # train.hardware.mixed_precision (precision.py)
                logp, cmask = completion_logprobs(model, batch.prompts[a:b], batch.comps[a:b], pad, temp,
                                                  share, **forced)
            in_loss = {"mask": cmask.cpu() * (batch.lengths[a:b] > 0).unsqueeze(1)} if forced else {}
            w = self.weights(batch.lengths[a:b], logp.shape[1], cfg.loss.loss_normalization, n_norm, batch.n_tok,
                              agent.config.max_new_tokens, **in_loss).to(logp.device)
            old_lp = old[m] if old is not None else logp.detach()
            if batch.engine is not None:  # sampled by an engine (vLLM): its log-probs against the trainer's
                engine_lp, seen = padded(batch.engine[a:b], logp.shape[1]).to(logp.device), cmask.to(logp.device)
                tis = truncated_is_weights(old_lp, engine_lp, cfg.loss.tis_cap, seen) if cfg.loss.tis_cap else None
                if tis is not None:
                    w = w * tis
                if first and gaps is not None:  # the weights that sampled: this pass's log-probs are the old ones
                    gaps.add(logprob_gap(logp, engine_lp, seen), tis, seen)
            loss, st = self.loss(logp, old_lp, adv[a:b].to(logp.device, logp.dtype), w,
                                           cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.ratio_level)
            if ref_lp:
                if first:  # metric: KL of the policy that sampled, over real tokens
                    kl_sum += float((kl_estimate(logp.detach(), ref_lp[m], cfg.loss.kl_estimator) * cmask).sum())
                    kl_tokens += int(cmask.sum())
                if cfg.loss.kl_mode == "loss":
                    loss = loss + kl_penalty(logp, ref_lp[m], w, cfg.loss.kl_beta, cfg.loss.kl_estimator)
            if self.critic is not None and cfg.loss.entropy_coef > 0:  # actor-critic entropy bonus
                loss = loss + entropy_bonus(logp, w, cfg.loss.entropy_coef)
            if not torch.isfinite(loss):
                if not sharded:
                    return total, {}, kl_sum / max(kl_tokens, 1), True
                bad = True  # sharded: the other ranks' collectives still need this forward's backward
                loss.backward()  # non-finite gradients, dropped with the step on every rank
                continue
            backward(loss, team.scalers.get(id(model)))  # loss.backward(), fp16: loss-scaled
            total += loss.item()
            n = float(st["tokens"])
            for key in clip_sums:
                clip_sums[key] += float(st[f"clip_{key}"]) * n
            clip_tokens += n
        clip = {k: v / max(clip_tokens, 1.0) for k, v in clip_sums.items()}
        return total, ({} if bad else clip), kl_sum / max(kl_tokens, 1), bad

    @staticmethod
    def _skip_empty_batch(team, i: int, batch: LossBatch, step: int) -> dict[str, float]:
        """No token of agent ``i`` is in the loss on any rank: no update, its own counter, one line. An agent that
        wrote nothing at all (a team graph's router chose others everywhere) is skipped without either."""
        if batch.n_all == 0:
            return {f"{team.agents[i].name}/lr": team.lr(i)}
        n = team.count("empty_batch_skips")
        warnings.warn(f"step {step}: {team.agents[i].name} has no completion in the loss "
                      f"({int(batch.n_all)} sequences, all truncated under mask_truncated or empty); update skipped "
                      f"(empty-batch skips so far: {n})", RuntimeWarning, stacklevel=2)
        return {f"{team.agents[i].name}/lr": team.lr(i)}

    @staticmethod
    def _count_critic_skip(team, i: int, step: int) -> None:
        """The critic's step (agent ``i``'s column) was skipped on every rank: its own counter, one line."""
        n = team.count("critic_nonfinite_skips")
        warnings.warn(f"step {step}: non-finite value loss for {team.agents[i].name}'s critic; critic "
                      f"update skipped (critic skips so far: {n})", RuntimeWarning, stacklevel=2)

    # ----------------------------------------------------------------- checkpoints
    def checkpoint_parts(self, team, step: int) -> tuple[dict, dict]:
        """The critic: per column ``critic<c>/dcp`` (backbone, head, optimiser) when sharded, else ``critic.pt``."""
        if self.critic is None:
            return {}, {}
        if team.sharding is not None:
            return self.critic.checkpoint_modules(), {}
        return {}, {"critic.pt": self.critic.state_dict()}

    def restore(self, path, team) -> None:
        """The critic of a checkpoint: ``critic<c>/dcp`` per column (written sharded; DCP reshards it to this
        run, sharded or whole) or ``critic.pt``."""
        if self.critic is None:
            return
        written = sorted(p.name for p in path.glob("critic*") if (p / "dcp").is_dir())
        if not written:
            self.critic.load_state_dict(ckpt.load_extra(path, "critic.pt"))
            return
        modules = self.critic.checkpoint_modules()
        if written != sorted(modules):
            raise ValueError(f"train.run.resume: {path} holds critics {written}, this run has {sorted(modules)} "
                             f"(iac vs maac?)")
        for name, (module, optimizer) in modules.items():
            ckpt.load_sharded_module(path / name, module, optimizer)


__all__ = ["LossBatch", "PolicyGradient", "group_sizes"]
