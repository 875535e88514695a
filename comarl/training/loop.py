"""The training loop, written once for every policy-gradient algorithm.

One step: take this rank's share of a global batch of items, roll out the tree
(``gradient_accumulation_steps`` chunks), turn credited returns into advantages
with the algorithm's estimator, then for each agent: token log-probs ->
clipped policy loss with globally normalised token weights -> backward over
micro-batches -> (all-reduce) -> clip -> optimizer and scheduler step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..agents import Agent, AgentConfig, build_agents
from ..algorithms.base import loop_algorithms
from ..config import TrainConfig
from ..config_io import ConfigError, to_dict
from ..critics import build_critic, shard_critic
from ..envs.base import Environment, rollout_modules
from ..logprobs import completion_logprobs, forced_mask
from ..losses import clipped_policy_loss, entropy_bonus, kl_estimate, kl_penalty, sequence_kl, token_weights
from ..reference import build_reference
from ..rollout import RolloutSettings, check_tree_size, collect_rollout, join_rollout, rollout_metrics
from ..runtime import check_mixed_precision
from ..types import joined_samples
from .. import checkpoint as ckpt
from ..compute import distributed as dist
from ..compute.dropout import dropout_disabled
from .. import run_dir
from .interrupt import DeferredInterrupt, TrainingInterrupted
from .dpo import dpo_update
from .rounds import Rounds, offline_pairs, offline_step
from .logging import MetricsLogger, Progress
from ..compute.micro_batches import micro_batch_spans
from .optim import build_optimizer, build_scheduler, rebuild_scheduler
from ..compute.placement import agent_device_names, check_shared_devices, place_references
from ..compute.precision import autocast, backward, setup_memory_savers
from ..compute.sharding import (AgentAtATime, built_on_rank0, full_state_dict, idle_backward, lockstep_count, shard_agents,
                       to_float)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def as_items(dataset: Any, what: str) -> list[dict]:
    """A Hugging Face Dataset or a sequence of dicts -> list of dicts."""
    if dataset is None:
        return []
    items = [dict(row) for row in dataset]
    for i, row in enumerate(items[:1]):
        if not isinstance(row, dict):
            raise TypeError(f"{what}[{i}] must be a mapping (dict), got {type(row).__name__}")
    return items


def check_items(env: Environment, items: list[dict], what: str) -> None:
    """Build every item's first prompts once, so a bad row fails before training, named by its index."""
    for i, item in enumerate(items):
        try:
            state = env.reset(item)
        except Exception as e:
            raise ConfigError(f"{what}[{i}]: the environment cannot build prompts for this row "
                              f"({type(e).__name__}: {e}); row keys: {sorted(item)}") from e
        if len(state.prompts) != env.num_agents:
            raise ConfigError(f"{what}[{i}]: env.reset gave {len(state.prompts)} prompts for {env.num_agents} agents")


@dataclass
class _Batch:
    """One agent's samples of a training step, cut into micro-batch spans; counts are global (all ranks)."""

    prompts: list[list[int]]
    comps: list[list[int]]
    lengths: torch.Tensor
    spans: list[tuple[int, int]]
    n_seq: float
    n_tok: float
    n_all: float
    """Sequences including those out of the loss (truncated under mask_truncated): the constant normaliser."""
    forced: list[list[bool]] | None = None
    """Per completion token, True where a schema forced it (structured generation): out of the loss."""


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    counters: dict[str, int] = field(default_factory=lambda: {
        "nonfinite_skips": 0, "empty_batch_skips": 0, "completions": 0, "optimizer_steps": 0})


class Trainer:
    """Train a team of agents on an environment.

    Args:
        agents: one entry per agent: an :class:`AgentConfig`, a hub id / local
            path string, an already built :class:`Agent`, or a model object
            (then give ``AgentConfig(model=obj, tokenizer=tok)``).
        env: the task (``comarl.FunctionEnv`` or a registered environment).
        train_dataset: list of dicts or a Hugging Face ``Dataset``.
        config: :class:`TrainConfig`.
        eval_dataset: optional items for :meth:`evaluate`.
    """

    def __init__(self, agents: Sequence[Agent | AgentConfig | str], env: Environment, train_dataset: Any,
                 config: TrainConfig | None = None, eval_dataset: Any = None):
        self.config = cfg = config or TrainConfig()
        # marlhf_iter: rounds (outer) around an on-policy algorithm, which every step runs
        self.algorithm, outer = loop_algorithms(cfg.algorithm, cfg.preference.rl_algorithm)
        cfg.validate(len(agents), max(self.algorithm.min_generations, outer.min_generations if outer else 1))
        rounds_kind = "rm" if outer is not None else "dpo" if self.algorithm.update == "dpo_rounds" else None
        check_tree_size(cfg.joint_mode, cfg.num_generations, len(agents), cfg.num_turns, cfg.max_samples_per_item)
        if self.algorithm.critic:  # before any model loads: a Q critic's baseline needs K >= 2 (critics/settings.py)
            cfg.critic.validate(num_generations=cfg.num_generations)
        if cfg.output_dir and int(os.environ.get("RANK", "0")) == 0:  # before data and models: fails at once
            run_dir.prepare_output_dir(cfg.output_dir, cfg.resume, cfg.overwrite)
        self.run_id = run_dir.new_run_id()  # a resumed run takes its checkpoint's id (resume)
        self._resumed_from: str | None = None
        # data first: a bad row fails in a second, before any model is loaded
        self.train_items = as_items(train_dataset, "train_dataset")
        self.eval_items = as_items(eval_dataset, "eval_dataset")
        if not self.train_items:
            raise ConfigError("data.train: the training set is empty")
        check_items(env, self.train_items, "train_dataset")
        check_items(env, self.eval_items, "eval_dataset")
        dist.init_from_env(cfg.dist_backend)
        # sharded: rank 0 builds the models on the CPU, the other ranks on `meta`, and every module is sharded
        # with rank 0's weights (Sharding.add), so no rank holds an agent whole on its device
        self._rank0_build = cfg.sharding == "fsdp" and dist.is_distributed()
        seed_everything(cfg.seed)  # the same model init on every rank ...
        self.agents = self._place_agents(agents)
        if not self._rank0_build:
            for m in {id(a.model): a.model for a in self.agents}.values():
                dist.broadcast_parameters(m)  # ... made certain: rank 0's trainable weights everywhere
        self.critic = build_critic(self.algorithm.critic, cfg.critic, self.agents, cfg.discount, cfg.micro_batch_size,
                                   cfg.max_grad_norm) if self.algorithm.critic else None  # iac, maac
        for m in self.critic.modules() if self.critic is not None and not self._rank0_build else []:
            dist.broadcast_parameters(m)
        if self.critic is not None and cfg.kl_beta > 0 and cfg.kl_mode == "reward":
            raise ConfigError(f"train.kl_mode: {cfg.algorithm} takes the KL in the loss (kl_mode=loss); the critic's "
                              f"GAE is computed before the KL-in-reward would change the rewards")
        check_mixed_precision(cfg.mixed_precision, [a.config.device if self._rank0_build else str(a.device)
                                                    for a in self.agents])  # rank-0 build: not there yet
        self.scalers = setup_memory_savers(self.agents, cfg)
        if dist.world_size() > 1:  # ... but a different sampling stream per rank
            seed_everything(dist.sampling_seed(cfg.seed, dist.rank()))
        self.env = env
        if getattr(env, "num_agents", len(self.agents)) != len(self.agents):
            raise ConfigError(f"agents: the environment expects {env.num_agents} agents, {len(self.agents)} given")
        self.global_batch = cfg.batch_size * dist.world_size()
        # madpo_offline walks a pairs file, not the prompts: its epochs, schedule and position count pairs
        self.offline_pairs = offline_pairs(cfg.preference) if self.algorithm.update == "dpo_offline" else None
        n_data = len(self.offline_pairs) if self.offline_pairs is not None else len(self.train_items)
        self.steps_per_epoch = math.ceil(n_data / self.global_batch)
        if rounds_kind:  # iterative preference training: steps are counted in rounds (training/rounds.py)
            self.total_steps = cfg.max_steps or cfg.preference.rounds * cfg.preference.steps_per_round
        else:
            self.total_steps = cfg.max_steps or self.steps_per_epoch * cfg.epochs
        total_opt = self.total_steps * cfg.num_iterations
        if self.algorithm.update != "policy_gradient" and cfg.kl_beta > 0:
            raise ConfigError(f"train.kl_beta: {cfg.algorithm} keeps to its reference through the DPO loss; "
                              f"set train.preference.beta instead (kl_beta must be 0)")
        needs_ref = cfg.kl_beta > 0 or (self.algorithm.update != "policy_gradient" and not cfg.preference.reference_free)
        self.references = self._build_references() if needs_ref else [None] * len(self.agents)
        self.references = place_references(self.references, cfg.reference_device, self.agents)
        # FSDP2: references are copied whole first, then agents and references sharded, then optimisers built
        self.sharding = shard_agents(self.agents, self.references, cfg)
        if self.sharding is not None and self.critic is not None:  # on the same mesh; its optimisers rebuilt
            shard_critic(self.critic, self.sharding)
        self.optimizers = [build_optimizer(a.model, a.config, f"agents.{i}") for i, a in enumerate(self.agents)]
        self.schedulers = [build_scheduler(o, cfg.lr_scheduler, cfg.warmup_steps, total_opt) for o in self.optimizers]
        self.state = TrainState()
        self.history: list[dict[str, float]] = []
        self._order: tuple[int, list[int]] | None = None  # (epoch, item order), see epoch_order
        self.settings = RolloutSettings.from_train_config(cfg, greedy_baseline=self.algorithm.greedy_baseline,
                                                          lockstep=self._lockstep())
        self.rounds = Rounds(self, rounds_kind) if rounds_kind else None  # madpo_iter, marlhf_iter
        if cfg.resume:
            self.resume(cfg.resume)

    def _place_agents(self, agents: Sequence) -> list[Agent]:
        """Build agents on their devices (``train.agent_devices`` over ``agents.<i>.device``), or move built ones."""
        cfg = self.config
        if all(isinstance(a, Agent) for a in agents):
            built = list(agents)
            if cfg.agent_devices is not None:
                devices = agent_device_names([a.config for a in built], cfg.agent_devices)
                owner: dict[int, int] = {}
                for i, (a, d) in enumerate(zip(built, devices)):
                    j = owner.setdefault(id(a.model), i)
                    if devices[j] != d:
                        raise ConfigError(f"train.agent_devices: agents {j} and {i} share one model object but are "
                                          f"placed on {devices[j]} and {d}")
                    a.model.to(d)
                    a.config = dataclasses.replace(a.config, device=d)
            return built
        configs = [a if isinstance(a, AgentConfig) else AgentConfig(model=a) for a in agents]
        devices = agent_device_names(configs, cfg.agent_devices)
        check_shared_devices(configs, devices)
        placed = [dataclasses.replace(c, device=d) for c, d in zip(configs, devices)]
        return built_on_rank0(build_agents, placed) if self._rank0_build else build_agents(placed)

    # ----------------------------------------------------------------- data
    def epoch_order(self, epoch: int) -> list[int]:
        """Item order of ``epoch``: a permutation seeded by (seed, epoch), so a resumed run sees the same order.

        Computed once per epoch, not once per step."""
        if self._order is not None and self._order[0] == epoch:
            return self._order[1]
        n = len(self.train_items)
        if self.config.shuffle:
            g = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        self._order = (epoch, order)
        return order

    def next_batch(self) -> list[dict]:
        """This rank's items of the next global batch (advances the data position)."""
        st = self.state
        if st.batch_in_epoch >= self.steps_per_epoch:
            st.epoch += 1
            st.batch_in_epoch = 0
        order = self.epoch_order(st.epoch)
        idx = order[st.batch_in_epoch * self.global_batch:(st.batch_in_epoch + 1) * self.global_batch]
        st.batch_in_epoch += 1
        return [self.train_items[i] for i in dist.shard(idx)]

    # ----------------------------------------------------------------- step
    def training_step(self, items: list[dict]) -> dict[str, float]:
        cfg = self.config
        t0 = time.perf_counter()
        n_chunks = cfg.gradient_accumulation_steps
        size = math.ceil(len(items) / n_chunks) if items else 0
        chunks = [items[i:i + size] for i in range(0, len(items), size)] if size else []
        lockstep = self.settings.lockstep  # one agent gathered at a time: ranks with fewer chunks join the rest
        n_rollouts = lockstep.max(len(chunks)) if lockstep is not None else len(chunks)  # (a collective: first)
        # sharded agents: gathered for the rollout (compute/sharding.py); value heads on the agents' models value
        # in the same block, a separate critic in its own (whole agents and whole critic never together)
        critic = self.critic
        heads_now = critic is not None and critic.on_agents and lockstep is None
        with self._whole(rollout=True, also=critic.modules() if heads_now else []):
            rollouts = [collect_rollout(self.agents, self.env, c, self.settings) for c in chunks]
            for _ in range(n_rollouts - len(chunks)):
                join_rollout(self.agents, self.settings)
            t_roll = time.perf_counter() - t0
            values = critic.prepare(rollouts, dist.all_reduce_sum) if heads_now else {}  # values, GAE (critics/)
        if critic is not None and not heads_now:  # one value model gathered at a time (a head: with its agent)
            values = critic.prepare(rollouts, dist.all_reduce_sum,
                                    scope=lambda c: self._whole(critic.column_modules(c)))
        metrics, self._metric_counts = rollout_metrics(rollouts)  # per-node metrics weighted by their nodes
        metrics["reward/mean"] = metrics.get("reward/turn0", float("nan"))
        metrics.update(values)
        self.state.counters["completions"] += sum(r.num_completions for r in rollouts)
        trained_tokens = 0
        for i in range(len(self.agents)):
            samples = [r.agents[i] for r in rollouts]
            trained_tokens += sum(len(c) for s in samples for c in s.completion_ids)
            if self.algorithm.update == "policy_gradient":
                metrics.update(self._update_agent(i, samples))
        if self.algorithm.update == "dpo":  # MADPO: pairs of joint actions, one step per agent (training/dpo.py)
            metrics.update(dpo_update(self, rollouts))
        dt = time.perf_counter() - t0
        metrics.update({"time/step_s": dt, "time/rollout_s": t_roll, "time/update_s": dt - t_roll,
                        "tokens_per_s": trained_tokens / max(dt, 1e-9)})
        if rollouts:
            self._last_examples = rollouts[0].examples
        return metrics

    def _whole(self, models=None, rollout: bool = False, also=()):
        """Context in which sharded ``models`` (default: every agent's and the environment's rollout modules,
        e.g. a reward model, plus ``also``) are whole on every rank; a no-op without sharding
        (compute/sharding.py). ``rollout``: around a rollout, where ``train.fsdp_gather: agent`` gathers one
        agent per generate call instead (``AgentAtATime``); the environment's modules stay gathered for the
        whole rollout."""
        if self.sharding is None:
            return contextlib.nullcontext()
        if models is None:
            one_at_a_time = rollout and self.settings.lockstep is not None
            models = ([] if one_at_a_time else [a.model for a in self.agents]) + rollout_modules(self.env)
            models += list(also)
        return self.sharding.gathered(models)

    def _lockstep(self):
        """``RolloutSettings.lockstep``: an ``AgentAtATime`` under ``sharding: fsdp`` with ``fsdp_gather: agent``."""
        if self.sharding is None or self.config.fsdp_gather != "agent":
            return None
        return AgentAtATime(self.sharding)

    def _build_references(self) -> list:
        """Frozen starting policy per agent (one per distinct model object), for the KL term."""
        by_model: dict[int, Any] = {}
        for a in self.agents:
            if id(a.model) not in by_model:
                by_model[id(a.model)] = build_reference(a, self.config.share_prefix)
        return [by_model[id(a.model)] for a in self.agents]

    def _update_agent(self, i: int, samples: list) -> dict[str, float]:
        """Advantages, then ``num_iterations`` optimizer steps for agent ``i`` on its samples of every rollout chunk.

        Old log-probs (the sampling policy's) are computed once, before the
        first update, whenever a later pass or the KL-in-reward needs them;
        reference log-probs once, when ``kl_beta`` > 0. Sampling, old and
        reference log-probs run without dropout, and so does the update unless
        ``train.disable_dropout`` is false, so pass one has ratio 1 exactly. A
        batch with no token in the loss (every completion truncated under
        ``mask_truncated``) skips the update (``count/empty_batch_skips``).
        """
        cfg, agent = self.config, self.agents[i]
        model = agent.model
        prompts, comps, forced = joined_samples(samples)
        # tokens in the loss per sequence: all of it, or (structured generation) the sampled ones only
        lengths = torch.tensor([len(c) for c in comps] if forced is None else
                               [len(c) - sum(f) for c, f in zip(comps, forced)], dtype=torch.long)
        if cfg.mask_truncated and samples:  # truncated completions leave the loss and its normalisation
            lengths = lengths * (~torch.cat([s.truncated for s in samples])).long()
        batch = _Batch(prompts, comps, lengths, micro_batch_spans(_group_sizes(samples, len(comps)),
                                                                  cfg.micro_batch_size, cfg.share_prefix),
                       n_seq=dist.all_reduce_sum(int((lengths > 0).sum())),
                       n_tok=dist.all_reduce_sum(int(lengths.sum())), n_all=dist.all_reduce_sum(len(comps)),
                       forced=forced)
        if batch.n_seq == 0 or batch.n_tok == 0:  # the counts are global: every rank skips together
            return self._skip_empty_batch(i, batch)
        ref = self.references[i]
        kl_in_reward = ref is not None and cfg.kl_mode == "reward"
        old = None
        with self._whole([model] + ([ref.model] if getattr(ref, "model", None) is not None else [])):
            with autocast(cfg.mixed_precision, agent.device):
                ref_out = [ref.logprobs(prompts[a:b], comps[a:b]) for a, b in batch.spans] if ref is not None else []
            if forced is not None:  # the KL counts sampled tokens only, like the loss
                ref_out = [(r, m * (1 - forced_mask(forced[a:b], m.shape[1])).to(m))
                           for (r, m), (a, b) in zip(ref_out, batch.spans)]
            if cfg.num_iterations > 1 or kl_in_reward:
                model.eval()  # the sampling policy: no dropout (as in generate and the reference)
                with torch.no_grad(), autocast(cfg.mixed_precision, agent.device):
                    old = [completion_logprobs(model, prompts[a:b], comps[a:b], agent.tokenizer.pad_token_id,
                                               agent.config.temperature, cfg.share_prefix)[0]
                           for a, b in batch.spans]
        model.train()
        if kl_in_reward:  # R <- R - beta * sum_t kl_t, before the advantages
            seq_kl = torch.cat([sequence_kl(o, r, mask.to(o.dtype), cfg.kl_estimator).cpu()
                                for o, (r, mask) in zip(old, ref_out)])
            start = 0
            for s in samples:
                part = seq_kl[start:start + s.num_samples].reshape(s.returns.shape)
                s.returns = s.returns - cfg.kl_beta * part.to(s.returns.dtype)
                start += s.num_samples
        for s in samples:
            s.advantages = self.algorithm.advantage(s, cfg)
        adv = torch.cat([s.advantages.reshape(-1) for s in samples]) if samples else torch.zeros(0)
        out: dict[str, float] = {}
        name = agent.name
        ref_lp = [lp for lp, _ in ref_out]
        clip_passes: list[dict[str, float]] = []
        for it in range(cfg.num_iterations):
            with dropout_disabled(model, cfg.disable_dropout):
                if self.critic is not None:  # first, so a value head's backbone gradients join this agent's step
                    out.update(self.critic.update(i, it, dist.all_reduce_sum, dist.all_reduce_grads,
                                                  dist.all_reduce_max))
                    if self.critic.last_skipped:
                        self._count_critic_skip(i)
                total, clip, kl, bad = self._backward_pass(i, batch, adv, old, ref_lp, first=it == 0)
            if it == 0 and ref is not None:
                out[f"{name}/kl"] = kl
            grad_norm = self._optimizer_step(i, bad)
            if grad_norm is None:
                continue
            out[f"{name}/loss"] = dist.all_reduce_sum(total)
            out[f"{name}/grad_norm"] = grad_norm
            clip_passes.append(clip)
        for key in ("low", "high", "region"):  # mean over the passes that stepped (TRL's clip_ratio/*_mean)
            if clip_passes:
                out[f"{name}/clip_ratio/{key}_mean"] = sum(c[key] for c in clip_passes) / len(clip_passes)
        out[f"{name}/lr"] = self.schedulers[i].get_last_lr()[0]
        out[f"{name}/advantage_abs"] = float(adv.abs().mean()) if len(adv) else 0.0
        return out

    def _backward_pass(self, i: int, batch: "_Batch", adv: torch.Tensor, old, ref_lp, first: bool):
        """Loss and backward over the micro-batches of agent ``i``.

        Returns (summed loss, fractions of this rank's real tokens clipped ``{low, high, region}``,
        mean KL to the reference over real tokens (first pass), whether a loss was non-finite).
        """
        cfg, agent = self.config, self.agents[i]
        model, pad, temp = agent.model, agent.tokenizer.pad_token_id, agent.config.temperature
        total, kl_sum, kl_tokens = 0.0, 0.0, 0
        clip_sums, clip_tokens = {"low": 0.0, "high": 0.0, "region": 0.0}, 0.0
        n_norm = batch.n_all if cfg.loss_normalization == "constant" else batch.n_seq  # docs/algorithms.md
        bad = False
        # sharded: every rank must run the same forwards (FSDP collectives), and whether a micro-batch shares its
        # prompts depends on that rank's items, so the sharded update encodes every copy (docs/shared_prefix.md)
        share = cfg.share_prefix and self.sharding is None
        for m in range(lockstep_count(len(batch.spans)) if self.sharding is not None else len(batch.spans)):
            if m >= len(batch.spans) or bad:  # sharded: this rank is out of items (or already non-finite)
                idle_backward(model, pad)
                continue
            a, b = batch.spans[m]
            forced = {"forced": batch.forced[a:b]} if batch.forced is not None else {}  # structured generation
            with autocast(cfg.mixed_precision, agent.device):  # train.mixed_precision (precision.py)
                logp, cmask = completion_logprobs(model, batch.prompts[a:b], batch.comps[a:b], pad, temp,
                                                  share, **forced)
            in_loss = {"mask": cmask.cpu() * (batch.lengths[a:b] > 0).unsqueeze(1)} if forced else {}
            w = token_weights(batch.lengths[a:b], logp.shape[1], cfg.loss_normalization, n_norm, batch.n_tok,
                              agent.config.max_new_tokens, **in_loss).to(logp.device)
            old_lp = old[m] if old is not None else logp.detach()
            loss, st = clipped_policy_loss(logp, old_lp, adv[a:b].to(logp.device, logp.dtype), w,
                                           cfg.clip_low, cfg.clip_high, cfg.ratio_level)
            if ref_lp:
                if first:  # metric: KL of the policy that sampled, over real tokens
                    kl_sum += float((kl_estimate(logp.detach(), ref_lp[m], cfg.kl_estimator) * cmask).sum())
                    kl_tokens += int(cmask.sum())
                if cfg.kl_mode == "loss":
                    loss = loss + kl_penalty(logp, ref_lp[m], w, cfg.kl_beta, cfg.kl_estimator)
            if self.critic is not None and cfg.critic.entropy_coef > 0:  # actor-critic entropy bonus
                loss = loss + entropy_bonus(logp, w, cfg.critic.entropy_coef)
            if not torch.isfinite(loss):
                if self.sharding is None:
                    return total, {}, kl_sum / max(kl_tokens, 1), True
                bad = True  # sharded: the other ranks' collectives still need this forward's backward
                loss.backward()  # non-finite gradients, dropped with the step on every rank
                continue
            backward(loss, self.scalers.get(id(model)))  # loss.backward(), fp16: loss-scaled
            total += loss.item()
            n = float(st["tokens"])
            for key in clip_sums:
                clip_sums[key] += float(st[f"clip_{key}"]) * n
            clip_tokens += n
        clip = {k: v / max(clip_tokens, 1.0) for k, v in clip_sums.items()}
        return total, ({} if bad else clip), kl_sum / max(kl_tokens, 1), bad

    def _skip_empty_batch(self, i: int, batch: "_Batch") -> dict[str, float]:
        """No token of agent ``i`` is in the loss on any rank: no update, its own counter, one line."""
        counters = self.state.counters
        counters["empty_batch_skips"] = counters.get("empty_batch_skips", 0) + 1
        warnings.warn(f"step {self.state.step}: {self.agents[i].name} has no completion in the loss "
                      f"({int(batch.n_all)} sequences, all truncated under mask_truncated or empty); update skipped "
                      f"(empty-batch skips so far: {counters['empty_batch_skips']})", RuntimeWarning)
        return {f"{self.agents[i].name}/lr": self.schedulers[i].get_last_lr()[0]}

    def _count_critic_skip(self, i: int) -> None:
        """The critic's step (agent ``i``'s column) was skipped on every rank: its own counter, one line."""
        counters = self.state.counters
        counters["critic_nonfinite_skips"] = counters.get("critic_nonfinite_skips", 0) + 1
        warnings.warn(f"step {self.state.step}: non-finite value loss for {self.agents[i].name}'s critic; critic "
                      f"update skipped (critic skips so far: {counters['critic_nonfinite_skips']})", RuntimeWarning)

    def _optimizer_step(self, i: int, bad: bool) -> float | None:
        """All-reduce, clip and step agent ``i``; None (update skipped with a warning) on non-finite values."""
        cfg, model = self.config, self.agents[i].model
        opt, sched = self.optimizers[i], self.schedulers[i]
        bad = dist.all_reduce_sum(int(bad)) > 0  # every rank skips together
        params = [p for p in model.parameters() if p.requires_grad]
        scaler = self.scalers.get(id(model))
        if scaler is not None and scaler.sharded:  # fp16 under FSDP2: gradients / S here (collective)
            scaler.unscale_sharded(params, judge=not bad)
        grad_norm = float("nan")
        if not bad:
            if self.sharding is None:  # FSDP2 has reduce-scattered (summed) the gradients in backward already
                dist.all_reduce_grads(model)
            if cfg.max_grad_norm > 0:  # sharded gradients: a DTensor norm over all shards
                grad_norm = to_float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
            else:
                grad_norm = to_float(torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))
            bad = not math.isfinite(grad_norm)
        if bad:
            opt.zero_grad(set_to_none=True)
            self.state.counters["nonfinite_skips"] += 1
            warnings.warn(f"step {self.state.step}: non-finite loss or gradient for {self.agents[i].name}; update "
                          f"skipped (skips so far: {self.state.counters['nonfinite_skips']})", RuntimeWarning)
            return None
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        self.state.counters["optimizer_steps"] += 1
        return grad_norm

    # ----------------------------------------------------------------- loop
    def train(self) -> list[dict[str, float]]:
        """Run until ``max_steps`` / the epochs are done; returns the per-step metrics."""
        cfg = self.config
        main = dist.is_main()
        if main and cfg.output_dir:
            run_dir.write_marker(cfg.output_dir, self.run_id, self._resumed_from)
        logger = MetricsLogger(cfg.output_dir, cfg.report_to, enabled=main, wandb_project=cfg.wandb_project,
                               run_config={"train": to_dict(cfg), "agents": [to_dict(a.config) for a in self.agents]})
        bar = Progress(self.total_steps, self.state.step, enabled=main and cfg.progress_bar)
        stop = DeferredInterrupt(cfg.save_on_interrupt and bool(cfg.output_dir)).start()
        saved_at = None
        try:
            while self.state.step < self.total_steps:
                done = self.state.counters["completions"]
                metrics, n_items, counts = self._one_step()
                if dist.is_distributed():  # count completions over all ranks (the other counters agree already)
                    self.state.counters["completions"] = done + int(dist.all_reduce_sum(
                        self.state.counters["completions"] - done))
                self.state.step += 1
                step = self.state.step
                metrics = dist.reduce_metrics(metrics, weight=n_items, sum_keys=("tokens_per_s",), key_weights=counts)
                metrics.update(_peak_memory_gb(self.agents))
                metrics.update({f"count/{k}": v for k, v in self.state.counters.items()})
                metrics["epoch"] = self.state.epoch
                if cfg.eval_steps and self.eval_items and step % cfg.eval_steps == 0:
                    metrics.update({f"eval/{k}": v for k, v in self.evaluate()["metrics"].items()})
                self.history.append(metrics)
                if step % cfg.logging_steps == 0 or step == self.total_steps:
                    logger.log(step, metrics)
                if cfg.log_samples_steps and (step == 1 or step % cfg.log_samples_steps == 0):
                    logger.log_samples(step, getattr(self, "_last_examples", []))
                bar.update(metrics)
                round_end = self.rounds is not None and self.rounds.ends_round(step)
                if cfg.output_dir and ((cfg.save_steps and step % cfg.save_steps == 0) or round_end):
                    path, saved_at = self.save_checkpoint(), step
                    if round_end:  # rounds.json: the rounds finished so far
                        self.rounds.round_done(path)
                if stop.requested_on_all_ranks():  # train.save_on_interrupt: checkpoint at a step boundary
                    if saved_at != step:
                        self.save_checkpoint()
                    raise KeyboardInterrupt
            if cfg.output_dir and saved_at != self.state.step:
                self.save_checkpoint()
        except KeyboardInterrupt:
            raise self._interrupted() from None
        finally:
            stop.stop()
            bar.close()
            logger.close()
        return self.history

    def _one_step(self) -> tuple[dict[str, float], int, dict[str, float]]:
        """One training step -> (metrics, their weight across ranks: the items trained on, the observation
        counts of per-node metrics, which weigh those instead).

        Iterative preference training first readies the round the step belongs to; a madpo_iter step is
        DPO on the round's pool, a marlhf_iter step the on-policy algorithm's ordinary step."""
        if self.algorithm.update == "dpo_offline":  # madpo_offline: DPO on a pairs file, no sampling
            return offline_step(self), 1, {}
        rounds = self.rounds
        if rounds is not None:
            rounds.begin_step()
            if self.algorithm.update == "dpo_rounds":
                return rounds.dpo_step(), 1, {}
            if rounds.skips_step():  # marlhf_iter before the first pair: no reward model yet
                return {**rounds.metrics, "rm/skipped_step": 1.0}, 1, {}
        items = self.next_batch()
        self._metric_counts = {}
        metrics = self.training_step(items)
        if rounds is not None:
            metrics.update(rounds.metrics)
        return metrics, len(items), self._metric_counts

    def _interrupted(self) -> TrainingInterrupted:
        """The exception a Ctrl-C ends training with: step reached and newest checkpoint of this run."""
        out = self.config.output_dir
        last = ckpt.latest_checkpoint(out, self.run_id) if out else None
        return TrainingInterrupted(self.state.step, self.total_steps, last)

    # ----------------------------------------------------------------- eval
    def evaluate(self, items: Sequence[dict] | None = None, num_generations: int | None = None) -> dict[str, Any]:
        """Roll out (no training) on ``items`` (default: the eval set); returns
        ``{"metrics": {...}, "summary": env.summarize(records) or {}}``."""
        from ..evaluation import evaluate_agents

        items = list(items) if items is not None else self.eval_items
        with self._whole(rollout=True):
            return evaluate_agents(self.agents, self.env, items, num_generations or self.config.eval_num_generations,
                                   self.config, shard=True, lockstep=self.settings.lockstep)

    # ----------------------------------------------------------------- files
    def save_checkpoint(self) -> Path | None:
        st = self.state
        state = {"epoch": st.epoch, "batch_in_epoch": st.batch_in_epoch, "counters": st.counters,
                 "world_size": dist.world_size(), "global_batch": self.global_batch, "run_id": self.run_id}
        modules, extra = self._checkpoint_extras()
        if self.sharding is not None:  # every rank writes its shards
            path = ckpt.save_sharded_checkpoint(self.config.output_dir, st.step, self.agents, self.optimizers,
                                                self.schedulers, state, keep=self.config.save_total_limit,
                                                modules=modules, extra=extra,
                                                checksums=self.config.checkpoint_checksums)
            return path if dist.is_main() else None
        if not dist.is_main():
            return None
        return ckpt.save_checkpoint(self.config.output_dir, st.step, self.agents, self.optimizers, self.schedulers,
                                    state, keep=self.config.save_total_limit, extra=extra or None,
                                    checksums=self.config.checkpoint_checksums)

    def _checkpoint_extras(self) -> tuple[dict, dict]:
        """What a checkpoint holds beyond the agents: ``({name: (module, optimizer)}`` written with DCP (sharded
        runs), ``{file: object}`` written with ``torch.save``): the critic, the rounds' reward model / reference."""
        modules: dict = {}
        extra: dict = {}
        if self.critic is not None:  # sharded: per column critic<c>/dcp (backbone, head, optimiser); else critic.pt
            if self.sharding is not None:
                modules.update(self.critic.checkpoint_modules())
            else:
                extra["critic.pt"] = self.critic.state_dict()
        if self.rounds is not None:  # the reward model / reference a resume inside a round needs
            extra.update(self.rounds.checkpoint_extra())
            modules.update(self.rounds.checkpoint_modules())
        return modules, extra

    def resume(self, where: str) -> None:
        out = self.config.output_dir or "."
        path = ckpt.resume_checkpoint(where, out, run_dir.read_run_id(out))  # verified; latest: newest that verifies
        saved = ckpt.load_checkpoint(path, self.agents, self.optimizers, self.schedulers, checksums=False)
        if self.critic is not None:
            self._load_critic(path)
        self.run_id = saved.get("run_id") or self.run_id  # checkpoints older than run ids: a new id
        self._resumed_from = str(path)
        self.state = TrainState(step=saved["step"], epoch=saved["epoch"], batch_in_epoch=saved["batch_in_epoch"],
                                counters=dict(saved["counters"]))
        cfg = self.config
        # checkpoints before global_batch was saved: the per-rank batch is assumed unchanged
        saved_global = saved.get("global_batch", saved.get("world_size", 1) * cfg.batch_size)
        if saved_global != self.global_batch:
            # another global batch (ranks x batch_size): same item order; continue after the items already seen
            self.state.batch_in_epoch = min(self.steps_per_epoch, dist.resume_position(
                saved["batch_in_epoch"], saved_global, self.global_batch))
            if not cfg.max_steps and self.rounds is None:  # run the rest of the epochs in the new batch size
                self.total_steps = self.state.step + dist.steps_left(
                    self.state.epoch, self.state.batch_in_epoch, self.steps_per_epoch, cfg.epochs)
                total_opt = self.total_steps * cfg.num_iterations
                self.schedulers = [rebuild_scheduler(o, sch, cfg.lr_scheduler, cfg.warmup_steps, total_opt)
                                   for o, sch in zip(self.optimizers, self.schedulers)]
        if dist.world_size() > 1:  # the checkpoint holds rank 0's RNG: give each rank its own stream again
            seed_everything(dist.sampling_seed(cfg.seed, dist.rank(), self.state.step))
        if dist.is_main():
            if cfg.output_dir:  # rows the interrupted run logged after this checkpoint
                run_dir.truncate_logs(cfg.output_dir, self.state.step)
            print(f"resumed from {path.name} (step {self.state.step} of {self.total_steps})", flush=True)

    def _load_critic(self, path: Path) -> None:
        """The critic of a checkpoint: ``critic<c>/dcp`` per column (written sharded; DCP reshards it to this
        run, sharded or whole) or ``critic.pt``."""
        written = sorted(p.name for p in path.glob("critic*") if (p / "dcp").is_dir())
        if not written:
            self.critic.load_state_dict(ckpt.load_extra(path, "critic.pt"))
            return
        modules = self.critic.checkpoint_modules()
        if written != sorted(modules):
            raise ValueError(f"train.resume: {path} holds critics {written}, this run has {sorted(modules)} "
                             f"(iac vs maac?)")
        for name, (module, optimizer) in modules.items():
            ckpt.load_sharded_module(path / name, module, optimizer)

    def save(self, path: str | Path) -> Path:
        """Write each agent's final model (or adapter) and tokenizer to ``path/agent<i>``.

        Sharded agents are gathered one tensor at a time onto rank 0, which writes
        plain Hugging Face folders (every rank must call this then).
        """
        path = Path(path)
        for i, agent in enumerate(self.agents):
            full = full_state_dict(agent.model, keep=dist.is_main()) if self.sharding is not None else None
            if dist.is_main():
                ckpt.save_agent_weights(agent, path / f"agent{i}", state_dict=full)
        return path


def _group_sizes(samples: list, n: int) -> list[int]:
    """Samples per group, in order, over the rollout chunks (one group per tree node); [n] if unknown."""
    sizes = [int(s.returns.shape[-1]) for s in samples for _ in range(int(s.returns.shape[0]))]
    return sizes if sum(sizes) == n else [n]


def _peak_memory_gb(agents) -> dict[str, float]:
    """Peak CUDA memory (GB) of each GPU the agents use, since the start (empty without CUDA)."""
    devs = sorted({a.device for a in agents if a.device.type == "cuda"}, key=str)
    return {f"memory/peak_gb_{d.type}{d.index}": torch.cuda.max_memory_allocated(d) / 2 ** 30 for d in devs}
