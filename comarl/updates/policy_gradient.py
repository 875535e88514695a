"""The policy-gradient update, written once for every on-policy algorithm: advantages from an estimator or a critic.

One step: roll out this rank's items (``rollout_step.roll_out``, ``gradient_accumulation_steps`` chunks; a batch
the generation worker sampled ahead, ``train.rollout.max_staleness``, comes rolled out: ``updates/overlap.py``),
turn credited returns into advantages with the algorithm's ``advantage(view, loss)`` (a critic, when the
algorithm has one, prepares GAE advantages first and the estimator reads them from the view), then for each
agent: per-token advantages ``[S, T]`` (a per-sequence estimate broadcast over each sample's tokens) -> token
log-probs -> clipped policy loss with globally normalised token weights -> backward over micro-batches
(``compute.stepping.micro_batched_backward``) -> ``Team.optimizer_step`` (all-reduce, clip, optimizer and
scheduler step). The rollout's samples are read, never written: the KL-in-reward adjusts a copy of the
returns, and the advantages go out in ``StepOutput.advantages``.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from ..compute import distributed as dist
from ..compute.dropout import dropout_disabled
from ..compute.micro_batches import micro_batch_spans
from ..compute.precision import autocast
from ..compute.sharding import idle_backward, lockstep_count
from ..compute.stepping import MicroLoss, micro_batched_backward
from ..core.config_io import ConfigError
from ..core.steps import PromptBatch, StepOutput
from ..core.types import AgentView, joined_engine_logprobs, joined_samples
from ..objective.advantages import token_advantages
from ..objective.engine_mismatch import GapTotals, logprob_gap, padded, truncated_is_weights
from ..objective.logprobs import completion_logprobs, forced_mask
from ..objective.losses import clipped_policy_loss, entropy_bonus, kl_estimate, kl_penalty, sequence_kl, token_weights
from ..runs import checkpoint as ckpt
from .rollout_step import roll_out, rollout_step_metrics, step_times

if TYPE_CHECKING:
    from ..core.seams import TeamView


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
    """Samples per group, in order, over the rollout chunks (one group per tree node; program runs: one per item,
    its runs' calls); [n] if unknown."""
    sizes = []
    for s in samples:
        g, k = (int(d) for d in s.returns.shape) if s.returns.dim() == 2 else (0, 0)
        if s.run_index is not None and k:
            sizes += torch.bincount(s.run_index // k, minlength=g).tolist()
        else:
            sizes += [k] * g
    return sizes if sum(sizes) == n else [n]


class PolicyGradient:
    """Advantages -> clipped policy loss for every agent.

    Args:
        loss: ``train.loss`` (clipping, normalisation, KL, iterations, the entropy bonus).
        hardware: ``train.hardware`` (micro-batches, shared prefixes, mixed precision).
        accumulation_steps: ``train.run.gradient_accumulation_steps``: rollout chunks per step.
        advantage: ``(AgentView, loss) -> [G, K] or [S, T]`` advantages (the algorithm's estimator).
        settings: the ``RolloutSettings`` of the step's rollout.
        critic: a ``comarl.critics.Critic`` (IAC, MAAC), or None: it prepares values and GAE advantages
            after the rollout and takes its own optimizer step before each of an agent's passes.
        loss_fn: ``(logp, old_logp, adv [S, T], weights, clip_low, clip_high, ratio_level) -> (loss, stats)``,
            the per-micro-batch policy loss (``losses.clipped_policy_loss``).
        weights: the token weights of the loss normalisation (``losses.token_weights``).
        entropy_coef: the entropy bonus's coefficient (``train.loss.entropy_coef``; 0: no bonus).
        algorithm: the algorithm's name, for error messages.
    """

    def __init__(self, loss, hardware, accumulation_steps: int, advantage: Callable, settings, critic=None,
                 loss_fn: Callable = clipped_policy_loss, weights: Callable = token_weights,
                 entropy_coef: float = 0.0, algorithm: str = ""):
        self.loss, self.hardware, self.accumulation_steps = loss, hardware, accumulation_steps
        self.advantage, self.settings, self.critic = advantage, settings, critic
        self.loss_fn, self.weights, self.entropy_coef, self.algorithm = loss_fn, weights, entropy_coef, algorithm
        # the other terms of the loss, on the plain token weights (the truncated IS ratio weighs the policy term
        # only, as TRL's does: the KL and the entropy are of the current policy, not importance-corrected)
        self.kl_penalty, self.entropy_bonus = kl_penalty, entropy_bonus

    # ----------------------------------------------------------------- step
    def step(self, team: "TeamView", batch: PromptBatch, step: int) -> StepOutput:
        t0 = time.perf_counter()
        if batch.rolled is not None:  # sampled ahead by the generation worker (train.rollout.max_staleness)
            rollouts, prepared, t_roll = batch.rolled.rollouts, None, 0.0
        else:
            rollouts, prepared, t_roll = roll_out(team, batch.env, batch.items, self.settings,
                                                  self.accumulation_steps, self.critic)
        metrics, counts = rollout_step_metrics(rollouts, prepared.metrics if prepared is not None else {})
        team.count("completions", sum(r.num_completions for r in rollouts))
        trained_tokens, gaps = 0, GapTotals()
        samples = [[r.agents[i] for r in rollouts] for i in range(len(team.agents))]
        batches = [self.loss_batch(s) for s in samples]  # (global counts: a collective per agent)
        # the old log-probs, where they cannot be taken at an agent's own update: samples of an older policy (the
        # behaviour policy's, as sampled); agents that train one model object (share_weights_with): the sampling
        # policy's log-probs of each, before the first of them steps, or a later one's ratio and clip range would
        # centre on weights that did not sample
        shared, behaviour = shared_weights(team.agents), {}
        for i in range(len(team.agents)):
            if batches[i].n_seq and batches[i].n_tok:
                sampled = self.sampled_logprobs(samples[i], batches[i], team.agents[i].device)
                if sampled is not None or i in shared:
                    behaviour[i] = sampled if sampled is not None else self.behaviour_logprobs(team, i, batches[i])
        advantages = []
        for i in range(len(team.agents)):
            trained_tokens += sum(len(c) for s in samples[i] for c in s.completion_ids)
            critic_adv = prepared.advantages[i] if prepared is not None else None
            out, adv = self.update_agent(team, i, samples[i], step, gaps, critic_adv, batches[i], behaviour.get(i))
            metrics.update(out)
            advantages.append(adv)
        metrics.update(gaps.metrics())  # the engine's log-probs against the trainer's (generator vllm)
        dt = time.perf_counter() - t0
        metrics.update(step_times(dt, t_roll, batch))
        metrics["tokens_per_s"] = trained_tokens / max(metrics["time/step_s"], 1e-9)
        return StepOutput(metrics, float(len(batch.items)), counts, rollouts[0].examples if rollouts else [],
                          rollouts=rollouts, advantages=advantages,
                          values=prepared.values if prepared is not None else [])

    def views(self, samples: list, lengths: torch.Tensor, returns: list[torch.Tensor],
              critic_adv: list[torch.Tensor] | None) -> list[AgentView]:
        """One read-only :class:`AgentView` per rollout chunk of one agent (``lengths``: [S] completion positions
        in the loss over every chunk)."""
        out, start = [], 0
        for c, s in enumerate(samples):
            n = s.num_samples
            out.append(AgentView(returns=returns[c], turns=s.turns, lengths=lengths[start:start + n],
                                 baseline=s.baseline, critic_advantages=critic_adv[c] if critic_adv else None,
                                 run_index=s.run_index))
            start += n
        return out

    def loss_batch(self, samples: list) -> LossBatch:
        """One agent's samples of every rollout chunk as the loss reads them, with global counts (a collective)."""
        loss_cfg, hw = self.loss, self.hardware
        prompts, comps, forced = joined_samples(samples)
        # tokens in the loss per sequence: all of it, or (structured generation) the sampled ones only
        lengths = torch.tensor([len(c) for c in comps] if forced is None else
                               [len(c) - sum(f) for c, f in zip(comps, forced)], dtype=torch.long)
        if loss_cfg.mask_truncated and samples:  # truncated completions leave the loss and its normalisation
            lengths = lengths * (~torch.cat([s.truncated for s in samples])).long()
        spans = micro_batch_spans(group_sizes(samples, len(comps)), hw.micro_batch_size, hw.share_prefix)
        return LossBatch(prompts, comps, lengths, spans,
                         n_seq=dist.all_reduce_sum(int((lengths > 0).sum())),
                         n_tok=dist.all_reduce_sum(int(lengths.sum())), n_all=dist.all_reduce_sum(len(comps)),
                         forced=forced, engine=joined_engine_logprobs(samples))

    def sampled_logprobs(self, samples: list, batch: LossBatch, device) -> list[torch.Tensor] | None:
        """The old log-probs of samples an older policy drew (``train.rollout.max_staleness``): the behaviour
        policy's, which came with them, per micro-batch span, so the clipped ratio is taken against the policy that
        sampled. None for on-policy samples, and under ``train.loss.tis_cap``, where the old log-probs stay the
        trainer's and the truncated ratio to the sampler weighs the policy term (docs/overlap.md)."""
        if self.loss.tis_cap is not None or batch.engine is None or not samples \
                or any(s.policy_version is None for s in samples):
            return None
        engine = batch.engine
        return [padded(engine[a:b], max((len(c) for c in batch.comps[a:b]), default=0)).to(device)
                for a, b in batch.spans]

    def behaviour_logprobs(self, team: "TeamView", i: int, batch: LossBatch) -> list[torch.Tensor]:
        """Agent ``i``'s token log-probs of its samples under its current weights (the sampling policy's, before
        any optimiser step of the step), per micro-batch span; no dropout, no gradient."""
        agent, hw = team.agents[i], self.hardware
        model = agent.model
        with team.gathered([model]):
            model.eval()  # the sampling policy: no dropout (as in generate and the reference)
            with torch.no_grad(), autocast(hw.mixed_precision, agent.device):
                old = [completion_logprobs(model, batch.prompts[a:b], batch.comps[a:b], agent.tokenizer.pad_token_id,
                                           agent.config.temperature, hw.share_prefix)[0] for a, b in batch.spans]
        model.train()
        return old

    def update_agent(self, team: "TeamView", i: int, samples: list, step: int, gaps: GapTotals | None = None,
                     critic_adv: list[torch.Tensor] | None = None, batch: LossBatch | None = None,
                     behaviour: list[torch.Tensor] | None = None) -> tuple[dict[str, float], list[torch.Tensor]]:
        """Advantages, then ``num_iterations`` optimizer steps for agent ``i`` on its samples of every rollout chunk.

        Old log-probs (the sampling policy's) are computed once, before the
        first update, whenever a later pass or the KL-in-reward needs them;
        reference log-probs once, when ``kl_beta`` > 0. Sampling, old and
        reference log-probs run without dropout, and so does the update unless
        ``train.loss.disable_dropout`` is false, so pass one has ratio 1 exactly. A
        batch with no token in the loss (every completion truncated under
        ``mask_truncated``) skips the update (``count/empty_batch_skips``). Samples from an engine (vLLM)
        add their log-prob gap to ``gaps`` and, with ``train.loss.tis_cap``, weigh the loss (``engine_mismatch``).
        ``critic_adv``: per rollout chunk, the critic's advantages (``Critic.prepare``), or None. ``batch``: the
        samples as :meth:`loss_batch` gives them (None: built here); ``behaviour``: the old log-probs when they
        cannot be taken here: the sampling policy's taken before any agent of the step stepped (an agent sharing
        its weights with another), or those that came with samples of an older policy (:meth:`sampled_logprobs`)
        (None: taken here, when needed).

        Returns (metrics, per rollout chunk the estimator's advantages: [G, K], or [S, T] for a per-token one).
        """
        loss_cfg, hw, agent = self.loss, self.hardware, team.agents[i]
        model = agent.model
        batch = batch if batch is not None else self.loss_batch(samples)
        prompts, comps, forced, lengths = batch.prompts, batch.comps, batch.forced, batch.lengths
        if batch.n_seq == 0 or batch.n_tok == 0:  # the counts are global: every rank skips together
            return self._skip_empty_batch(team, i, batch, step), []
        ref = team.references[i]
        kl_in_reward = ref is not None and loss_cfg.kl_mode == "reward"
        old = behaviour
        with team.gathered([model] + ([ref.model] if getattr(ref, "model", None) is not None else [])):
            with autocast(hw.mixed_precision, agent.device):
                ref_out = [ref.logprobs(prompts[a:b], comps[a:b]) for a, b in batch.spans] if ref is not None else []
            if forced is not None:  # the KL counts sampled tokens only, like the loss
                ref_out = [(r, m * (1 - forced_mask(forced[a:b], m.shape[1])).to(m))
                           for (r, m), (a, b) in zip(ref_out, batch.spans)]
        if old is None and (loss_cfg.num_iterations > 1 or kl_in_reward):
            old = self.behaviour_logprobs(team, i, batch)
        model.train()
        returns = [s.returns for s in samples]
        if kl_in_reward:  # R - beta * sum_t kl_t, before the advantages (a copy: the samples stay as rolled out)
            assert old is not None  # computed above whenever kl_in_reward
            seq_kl = torch.cat([sequence_kl(o, r, mask.to(o.dtype), loss_cfg.kl_estimator).cpu()
                                for o, (r, mask) in zip(old, ref_out)])
            returns, start = [], 0
            for s in samples:
                part = seq_kl[start:start + s.num_samples]
                if s.run_index is not None:  # program runs: a run's return pays for all its calls' KL
                    part = torch.zeros(s.returns.numel(), dtype=part.dtype).index_add_(0, s.run_index, part)
                returns.append(s.returns - loss_cfg.kl_beta * part.reshape(s.returns.shape).to(s.returns.dtype))
                start += s.num_samples
        # positions the advantages cover: the whole completion of a sample in the loss (a schema's forced tokens
        # among them take theirs and weigh 0 in the loss), none of one out of it
        positions = torch.tensor([len(c) for c in comps], dtype=torch.long) * (lengths > 0).long()
        views = self.views(samples, positions, returns, critic_adv)
        estimates = [self.advantage(v, loss_cfg) for v in views]
        if any(v.run_index is not None and e.shape != v.returns.shape for e, v in zip(estimates, views)):
            raise ConfigError(f"train.algorithm: {self.algorithm} gives per-token advantages, which compare a group's "
                              f"samples position by position; a program run's calls form no such group: use an "
                              f"estimator with one advantage per run (magrpo, marloo, mareinforce)")
        width = max((len(c) for c in comps), default=0)
        adv = torch.cat([token_advantages(e, v.lengths, width, e.shape == v.returns.shape, v.run_index)
                         for e, v in zip(estimates, views)]) if views else torch.zeros(0, width)
        out: dict[str, float] = {}
        name = agent.name
        ref_lp = [lp for lp, _ in ref_out]
        clip_passes: list[dict[str, float]] = []
        for it in range(loss_cfg.num_iterations):
            with dropout_disabled(model, loss_cfg.disable_dropout):
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
        out[f"{name}/advantage_abs"] = advantage_abs(estimates, views)
        return out, estimates

    def backward_pass(self, team: "TeamView", i: int, batch: LossBatch, adv: torch.Tensor, old, ref_lp, first: bool,
                      gaps: GapTotals | None = None):
        """Loss and backward over the micro-batches of agent ``i`` (``compute.stepping.micro_batched_backward``);
        ``adv`` [S, T] per-token advantages; on the first pass, the engine's log-prob gap (``batch.engine``)
        goes to ``gaps``.

        Returns (summed loss, fractions of this rank's real tokens clipped ``{low, high, region}``,
        mean KL to the reference over real tokens (first pass), whether a loss was non-finite).
        """
        lc, hw, agent = self.loss, self.hardware, team.agents[i]
        model, pad, temp = agent.model, agent.tokenizer.pad_token_id, agent.config.temperature
        kl_sum, kl_tokens = 0.0, 0
        clip_sums, clip_tokens = {"low": 0.0, "high": 0.0, "region": 0.0}, 0.0
        n_norm = batch.n_all if lc.loss_normalization == "constant" else batch.n_seq  # docs/algorithms.md
        sharded = team.sharding is not None
        # sharded: every rank must run the same forwards (FSDP collectives), and whether a micro-batch shares its
        # prompts depends on that rank's items, so the sharded update encodes every copy (docs/shared_prefix.md)
        share = hw.share_prefix and not sharded

        def loss_of(m: int) -> MicroLoss:
            nonlocal kl_sum, kl_tokens, clip_tokens
            a, b = batch.spans[m]
            forced = {"forced": batch.forced[a:b]} if batch.forced is not None else {}  # structured generation
            with autocast(hw.mixed_precision, agent.device):  # train.hardware.mixed_precision (precision.py)
                logp, cmask = completion_logprobs(model, batch.prompts[a:b], batch.comps[a:b], pad, temp,
                                                  share, **forced)
            in_loss = {"mask": cmask.cpu() * (batch.lengths[a:b] > 0).unsqueeze(1)} if forced else {}
            w = self.weights(batch.lengths[a:b], logp.shape[1], lc.loss_normalization, n_norm, batch.n_tok,
                             agent.config.max_new_tokens, **in_loss).to(logp.device)
            old_lp = old[m] if old is not None else logp.detach()
            w_policy = w  # the policy term's weights: times the truncated IS ratio (the KL and entropy terms: not)
            if batch.engine is not None:  # sampled by an engine (vLLM): its log-probs against the trainer's
                engine_lp, seen = padded(batch.engine[a:b], logp.shape[1]).to(logp.device), cmask.to(logp.device)
                tis = truncated_is_weights(old_lp, engine_lp, lc.tis_cap, seen) if lc.tis_cap else None
                if tis is not None:
                    w_policy = w * tis
                if first and gaps is not None:  # the weights that sampled: this pass's log-probs are the old ones
                    gaps.add(logprob_gap(logp, engine_lp, seen), tis, seen)
            loss, st = self.loss_fn(logp, old_lp, adv[a:b, :logp.shape[1]].to(logp.device, logp.dtype), w_policy,
                                    lc.clip_low, lc.clip_high, lc.ratio_level)
            if ref_lp:
                if first:  # metric: KL of the policy that sampled, over real tokens
                    kl_sum += float((kl_estimate(logp.detach(), ref_lp[m], lc.kl_estimator) * cmask).sum())
                    kl_tokens += int(cmask.sum())
                if lc.kl_mode == "loss":
                    loss = loss + self.kl_penalty(logp, ref_lp[m], w, lc.kl_beta, lc.kl_estimator)
            if self.entropy_coef > 0:  # entropy bonus
                loss = loss + self.entropy_bonus(logp, w, self.entropy_coef)
            if torch.isfinite(loss):
                n = float(st["tokens"])
                for key in clip_sums:
                    clip_sums[key] += float(st[f"clip_{key}"]) * n
                clip_tokens += n
            return MicroLoss(loss)

        done = micro_batched_backward(len(batch.spans), loss_of, idle=lambda: idle_backward(model, pad),
                                      lockstep=lockstep_count if sharded else None,
                                      scaler=team.scalers.get(id(model)))
        clip = {k: v / max(clip_tokens, 1.0) for k, v in clip_sums.items()}
        return done.total, (clip if done.finite else {}), kl_sum / max(kl_tokens, 1), not done.finite

    @staticmethod
    def _skip_empty_batch(team: "TeamView", i: int, batch: LossBatch, step: int) -> dict[str, float]:
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
    def _count_critic_skip(team: "TeamView", i: int, step: int) -> None:
        """The critic's step (agent ``i``'s column) was skipped on every rank: its own counter, one line."""
        n = team.count("critic_nonfinite_skips")
        warnings.warn(f"step {step}: non-finite value loss for {team.agents[i].name}'s critic; critic "
                      f"update skipped (critic skips so far: {n})", RuntimeWarning, stacklevel=2)

    # ----------------------------------------------------------------- checkpoints
    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        """The critic: per column ``critic<c>/dcp`` (backbone, head, optimiser) when sharded, else ``critic.pt``."""
        if self.critic is None:
            return {}, {}
        if team.sharding is not None:
            return self.critic.checkpoint_modules(), {}
        return {}, {"critic.pt": self.critic.state_dict()}

    def restore(self, path, team: "TeamView") -> None:
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


def shared_weights(agents: list) -> list[int]:
    """Agents that train one model object together (``share_weights_with``); LoRA agents each have their own."""
    return [i for i, a in enumerate(agents) if sum(b.model is a.model for b in agents) > 1]


def advantage_abs(estimates: list[torch.Tensor], views: list[AgentView]) -> float:
    """Mean |A| over samples (a per-token estimate: over each sample's tokens in the loss first)."""
    per_sample = []
    for e, v in zip(estimates, views):
        if e.shape == v.returns.shape:
            per_sample.append(e.reshape(-1).abs().to(torch.float64))
        else:
            alive = (torch.arange(e.shape[1]).unsqueeze(0) < v.lengths.unsqueeze(1)).to(torch.float64)
            per_sample.append((e.abs().to(torch.float64) * alive).sum(1) / alive.sum(1).clamp(min=1))
    flat = torch.cat(per_sample) if per_sample else torch.zeros(0)
    return float(flat.mean()) if len(flat) else 0.0


__all__ = ["LossBatch", "PolicyGradient", "advantage_abs", "group_sizes", "shared_weights"]
