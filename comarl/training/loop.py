"""The training loop, written once for every policy-gradient algorithm.

One step: take this rank's share of a global batch of items, roll out the tree
(``gradient_accumulation_steps`` chunks), turn credited returns into advantages
with the algorithm's estimator, then for each agent: token log-probs ->
clipped policy loss with globally normalised token weights -> backward over
micro-batches -> (all-reduce) -> clip -> optimizer and scheduler step.
"""
from __future__ import annotations

import math
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..agents import Agent, AgentConfig, build_agents
from ..algorithms import get_algorithm
from ..config import TrainConfig
from ..config_io import ConfigError, to_dict
from ..envs.base import Environment
from ..logprobs import completion_logprobs
from ..losses import clipped_policy_loss, token_weights
from ..rollout import RolloutSettings, check_tree_size, collect_rollout
from . import checkpoint as ckpt
from . import distributed as dist
from .logging import MetricsLogger, Progress
from .optim import build_optimizer, build_scheduler


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


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    counters: dict[str, int] = field(default_factory=lambda: {
        "nonfinite_skips": 0, "completions": 0, "optimizer_steps": 0})


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
        self.algorithm = get_algorithm(cfg.algorithm)
        cfg.validate(len(agents), self.algorithm.min_generations)
        dist.init_from_env()
        seed_everything(cfg.seed)
        self.agents = list(agents) if all(isinstance(a, Agent) for a in agents) else build_agents(list(agents))
        self.env = env
        if getattr(env, "num_agents", len(self.agents)) != len(self.agents):
            raise ConfigError(f"agents: the environment expects {env.num_agents} agents, {len(self.agents)} given")
        check_tree_size(cfg.joint_mode, cfg.num_generations, len(self.agents), cfg.num_turns,
                        cfg.max_samples_per_item)
        self.train_items = as_items(train_dataset, "train_dataset")
        self.eval_items = as_items(eval_dataset, "eval_dataset")
        if not self.train_items:
            raise ConfigError("data.train: the training set is empty")
        self.global_batch = cfg.batch_size * dist.world_size()
        self.steps_per_epoch = math.ceil(len(self.train_items) / self.global_batch)
        self.total_steps = cfg.max_steps or self.steps_per_epoch * cfg.epochs
        total_opt = self.total_steps * cfg.num_iterations
        self.optimizers = [build_optimizer(a.model, a.config) for a in self.agents]
        self.schedulers = [build_scheduler(o, cfg.lr_scheduler, cfg.warmup_steps, total_opt) for o in self.optimizers]
        self.state = TrainState()
        self.history: list[dict[str, float]] = []
        self.settings = RolloutSettings(
            num_generations=cfg.num_generations, joint_mode=cfg.joint_mode, num_turns=cfg.num_turns,
            discount=cfg.discount, early_stop_reward=cfg.early_stop_reward,
            greedy_baseline=self.algorithm.greedy_baseline, generation_batch_size=cfg.generation_batch_size)
        if cfg.resume:
            self.resume(cfg.resume)

    # ----------------------------------------------------------------- data
    def epoch_order(self, epoch: int) -> list[int]:
        n = len(self.train_items)
        if not self.config.shuffle:
            return list(range(n))
        g = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        return torch.randperm(n, generator=g).tolist()

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
        rollouts = [collect_rollout(self.agents, self.env, c, self.settings) for c in chunks]
        t_roll = time.perf_counter() - t0
        metrics = _mean_dicts([r.metrics for r in rollouts])
        metrics["reward/mean"] = metrics.get("reward/turn0", float("nan"))
        self.state.counters["completions"] += sum(r.num_completions for r in rollouts)
        trained_tokens = 0
        for i, agent in enumerate(self.agents):
            prompts, comps, adv = [], [], []
            for r in rollouts:
                s = r.agents[i]
                s.advantages = self.algorithm.advantage(s, cfg)
                prompts += s.prompt_ids
                comps += s.completion_ids
                adv.append(s.advantages.reshape(-1))
            adv_t = torch.cat(adv) if adv else torch.zeros(0)
            trained_tokens += sum(len(c) for c in comps)
            metrics.update(self._update_agent(i, prompts, comps, adv_t))
        dt = time.perf_counter() - t0
        metrics.update({"time/step_s": dt, "time/rollout_s": t_roll, "time/update_s": dt - t_roll,
                        "tokens_per_s": trained_tokens / max(dt, 1e-9)})
        if rollouts:
            self._last_examples = rollouts[0].examples
        return metrics

    def _update_agent(self, i: int, prompts: list[list[int]], comps: list[list[int]],
                      adv: torch.Tensor) -> dict[str, float]:
        cfg, agent = self.config, self.agents[i]
        model, opt, sched = agent.model, self.optimizers[i], self.schedulers[i]
        pad = agent.tokenizer.pad_token_id
        temp = agent.config.temperature
        lengths = torch.tensor([len(c) for c in comps], dtype=torch.long)
        n_seq = dist.all_reduce_sum(len(comps))
        n_tok = dist.all_reduce_sum(int(lengths.sum()))
        mbs = cfg.micro_batch_size
        spans = [(s, min(s + mbs, len(comps))) for s in range(0, len(comps), mbs)]
        old = None
        if cfg.num_iterations > 1:
            with torch.no_grad():
                old = [completion_logprobs(model, prompts[a:b], comps[a:b], pad, temp)[0] for a, b in spans]
        model.train()
        out: dict[str, float] = {}
        name = agent.name
        for it in range(cfg.num_iterations):
            total, clip_frac, bad = 0.0, 0.0, False
            for m, (a, b) in enumerate(spans):
                logp, _ = completion_logprobs(model, prompts[a:b], comps[a:b], pad, temp)
                w = token_weights(lengths[a:b], logp.shape[1], cfg.loss_normalization, n_seq, n_tok,
                                  agent.config.max_new_tokens).to(logp.device)
                old_lp = old[m] if old is not None else logp.detach()
                loss, st = clipped_policy_loss(logp, old_lp, adv[a:b].to(logp.device, logp.dtype), w,
                                               cfg.clip_low, cfg.clip_high, cfg.ratio_level)
                if not torch.isfinite(loss):
                    bad = True
                    break
                loss.backward()
                total += loss.item()
                clip_frac += st["clip_frac"].item() * (b - a)
            bad = dist.all_reduce_sum(int(bad)) > 0
            grad_norm = float("nan")
            if not bad:
                dist.all_reduce_grads(model)
                params = [p for p in model.parameters() if p.requires_grad]
                if cfg.max_grad_norm > 0:
                    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
                else:
                    grad_norm = float(torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
                bad = not math.isfinite(grad_norm)
            if bad:
                opt.zero_grad(set_to_none=True)
                self.state.counters["nonfinite_skips"] += 1
                warnings.warn(f"step {self.state.step}: non-finite loss or gradient for {name}; update skipped "
                              f"(skips so far: {self.state.counters['nonfinite_skips']})", RuntimeWarning)
                continue
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            self.state.counters["optimizer_steps"] += 1
            out[f"{name}/loss"] = dist.all_reduce_sum(total)
            out[f"{name}/grad_norm"] = grad_norm
            out[f"{name}/clip_frac"] = clip_frac / max(len(comps), 1)
        out[f"{name}/lr"] = sched.get_last_lr()[0]
        out[f"{name}/advantage_abs"] = float(adv.abs().mean()) if len(adv) else 0.0
        return out

    # ----------------------------------------------------------------- loop
    def train(self) -> list[dict[str, float]]:
        """Run until ``max_steps`` / the epochs are done; returns the per-step metrics."""
        cfg = self.config
        main = dist.is_main()
        logger = MetricsLogger(cfg.output_dir, cfg.report_to, enabled=main, wandb_project=cfg.wandb_project,
                               run_config={"train": to_dict(cfg), "agents": [to_dict(a.config) for a in self.agents]})
        bar = Progress(self.total_steps, self.state.step, enabled=main and cfg.progress_bar)
        try:
            while self.state.step < self.total_steps:
                items = self.next_batch()
                metrics = self.training_step(items)
                self.state.step += 1
                step = self.state.step
                metrics = dist.mean_metrics(metrics)
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
                if cfg.output_dir and cfg.save_steps and step % cfg.save_steps == 0:
                    self.save_checkpoint()
            if cfg.output_dir and (not cfg.save_steps or self.state.step % cfg.save_steps):
                self.save_checkpoint()
        finally:
            bar.close()
            logger.close()
        return self.history

    # ----------------------------------------------------------------- eval
    def evaluate(self, items: Sequence[dict] | None = None, num_generations: int | None = None) -> dict[str, Any]:
        """Roll out (no training) on ``items`` (default: the eval set); returns
        ``{"metrics": {...}, "summary": env.summarize(records) or {}}``."""
        from ..evaluation import evaluate_agents

        items = list(items) if items is not None else self.eval_items
        return evaluate_agents(self.agents, self.env, items, num_generations or self.config.eval_num_generations,
                               self.config, shard=True)

    # ----------------------------------------------------------------- files
    def save_checkpoint(self) -> Path | None:
        if not dist.is_main():
            return None
        st = self.state
        return ckpt.save_checkpoint(self.config.output_dir, st.step, self.agents, self.optimizers, self.schedulers,
                                    {"epoch": st.epoch, "batch_in_epoch": st.batch_in_epoch,
                                     "counters": st.counters, "world_size": dist.world_size()},
                                    keep=self.config.save_total_limit)

    def resume(self, where: str) -> None:
        path = ckpt.latest_checkpoint(self.config.output_dir or ".") if where == "latest" else Path(where)
        if path is None:
            raise ConfigError(f"train.resume=latest: no checkpoint in {self.config.output_dir}")
        saved = ckpt.load_checkpoint(path, self.agents, self.optimizers, self.schedulers)
        self.state = TrainState(step=saved["step"], epoch=saved["epoch"], batch_in_epoch=saved["batch_in_epoch"],
                                counters=dict(saved["counters"]))
        if saved.get("world_size", 1) != dist.world_size():
            # a different number of ranks changes the global batch: restart the epoch's data position
            seen = saved["batch_in_epoch"] * saved.get("world_size", 1) * self.config.batch_size
            self.state.batch_in_epoch = seen // self.global_batch

    def save(self, path: str | Path) -> Path:
        """Write each agent's final model (or adapter) and tokenizer to ``path/agent<i>``."""
        path = Path(path)
        if dist.is_main():
            for i, agent in enumerate(self.agents):
                ckpt.save_agent_weights(agent, path / f"agent{i}")
        return path


def _mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for d in dicts for k in d}
    return {k: float(np.mean([d[k] for d in dicts if k in d])) for k in keys}
