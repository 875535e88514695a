"""The training loop: a short scheduler over a Team, a StepSource and an Update.

::

    while step < total:
        batch = source.next(step, team)           # prompt batches | a pairs file | a round's pool
        out = update.step(team, batch, step)      # policy gradient (estimator or critic) | joint DPO
        log / evaluate / checkpoint(team, source, update) / interrupt

What each algorithm does differently lives in its record (``comarl/algorithms/``): the update, the source,
the critic, the checks. The loop knows none of the families. Building is ``training/build.py``.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

from ..algorithms.base import get_algorithm
from ..compute import distributed as dist
from ..compute.watchdog import Watchdog
from ..config import TrainConfig, from_config, python_wording
from ..core.config_io import ConfigError, UserError, to_dict
from ..core.steps import PromptBatch, SkipStep, StepOutput
from ..envs.base import Environment
from ..envs.error_policy import error_policy_of, with_error_policy
from ..generation.helpers import Helpers
from ..models.agents import Agent, AgentConfig
from ..runs import run_dir
from ..runs.evaluation import evaluate_agents
from . import run_files
from .build import as_items, build_run, check_items, check_run
from .interrupt import DeferredInterrupt, TrainingInterrupted
from .logging import MetricsLogger, Progress
from .sample_records import tree_records
from .skips import SkipStreak


@contextmanager
def user_terms(config: TrainConfig):
    """Errors (and a Ctrl-C's summary) raised inside, reworded for a Python user (``TrainConfig(resume=
    "latest")`` for ``train.run.resume=latest``) unless ``config`` came from a config file or overrides, whose
    users write dotted keys (``config.from_config``)."""
    try:
        yield
    except (UserError, TrainingInterrupted) as e:
        if not from_config(config) and e.args and isinstance(e.args[0], str):
            e.args = (python_wording(e.args[0]),) + e.args[1:]
        raise


class TrainState:
    """Where a run is: steps done, the data position (the source's cursor) and the counters (the team's)."""

    def __init__(self, cursor, counters: dict[str, int]):
        self.step, self.cursor, self.counters = 0, cursor, counters

    @property
    def epoch(self) -> int:
        return self.cursor.epoch

    @property
    def batch_in_epoch(self) -> int:
        return self.cursor.batch_in_epoch


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
        generator: the team generator rollouts use (``comarl.generation.team`` contract; e.g. a scripted
            one in a test); None: the config's ``train.hardware.generator`` (Hugging Face ``generate``, or vLLM engines,
            closed by :meth:`close`). One with a ``sync(agents)`` method gets the trained weights after every
            optimiser step that changed them, after a resume, and before the first rollout.
        helpers: the run's helper models (``comarl.generation.helpers.Helpers``; a config's ``helpers:``, built by
            ``experiment.build_helpers``): the Team holds and places them, the rounds take their comparator from
            them, their counters are logged as ``helpers/<name>/...``; closed by :meth:`close`.
    """

    def __init__(self, agents: Sequence[Agent | AgentConfig | str], env: Environment, train_dataset: Any,
                 config: TrainConfig | None = None, eval_dataset: Any = None, generator: Callable | None = None,
                 helpers: Helpers | None = None):
        self.config = cfg = config or TrainConfig()
        with user_terms(cfg):  # a TrainConfig built in Python hears about its arguments, not config keys
            self.algorithm = get_algorithm(cfg.algorithm)
            policy = error_policy_of(env)  # env.on_error (experiment.build_env); else raise, named
            if policy is None:
                env = policy = with_error_policy(env, "raise")
            self.error_policy = policy
            helpers = helpers if helpers is not None else Helpers()
            check_run(cfg, self.algorithm, agents, env, generator, helpers)  # every config check, before data, models
            if cfg.run.output_dir and dist.launch_rank() == 0:
                run_dir.prepare_output_dir(cfg.run.output_dir, cfg.run.resume, cfg.run.overwrite)
            self.run_id = run_dir.new_run_id()  # a resumed run takes its checkpoint's id (resume)
            self.resumed_from: str | None = None  # the checkpoint this run resumed from
            # data first: a bad row fails in a second, before any model is loaded
            self.train_items = as_items(train_dataset, "train_dataset")
            self.eval_items = as_items(eval_dataset, "eval_dataset")
            if not self.train_items:
                raise ConfigError("data.train: the training set is empty")
            check_items(env, self.train_items, "train_dataset")
            check_items(env, self.eval_items, "eval_dataset")
            self.error_policy.name_items(self.train_items, "train_dataset")
            self.error_policy.name_items(self.eval_items, "eval_dataset")
            dist.init_from_env(cfg.hardware.dist_backend)
            run = build_run(agents, env, self.train_items, cfg, self.algorithm, generator, helpers)
            self.team, self.update, self.source, self.critic = run.team, run.update, run.source, run.critic
            self.generator = run.generator
            self.total_steps = self.source.total_steps
            self.state = TrainState(self.source.cursor, self.team.counters)
            if self.error_policy.on_error == "zero":
                self.team.counters.setdefault("env_errors", 0)
            self.history: list[dict[str, float]] = []
            self._last_examples: list[dict] = []
            self._last_step: tuple[Any, StepOutput] | None = None  # (batch, output) of the last step: trees.jsonl
            self._watchdog: Watchdog | None = None  # train.run.step_timeout_s: set while train() runs
            if cfg.run.resume:
                self.resume(cfg.run.resume)  # (pushes the loaded weights)
            elif generator is not None:  # built by the caller, maybe before the agents were placed or broadcast
                self.team.sync_generator(everything=True)

    # the team's and the source's members, as a user reads them
    agents = property(lambda self: self.team.agents)
    references = property(lambda self: self.team.references)
    optimizers = property(lambda self: self.team.optimizers)
    schedulers = property(lambda self: self.team.schedulers)
    scalers = property(lambda self: self.team.scalers)
    sharding = property(lambda self: self.team.sharding)
    helpers = property(lambda self: self.team.helpers)
    env = property(lambda self: self.source.env)  # MARLHF rounds: the reward model's once fitted
    settings = property(lambda self: getattr(self.update, "settings", None))
    global_batch = property(lambda self: self.source.cursor.global_batch)
    steps_per_epoch = property(lambda self: self.source.cursor.steps_per_epoch)

    def epoch_order(self, epoch: int) -> list[int]:
        """Item order of ``epoch`` (a permutation seeded by (seed, epoch))."""
        return self.source.cursor.order(epoch)

    def next_batch(self) -> list[dict]:
        """This rank's items of the next global batch (advances the data position); prompt batches only."""
        from ..sources import PromptBatches

        if not isinstance(self.source, PromptBatches):
            raise TypeError(f"Trainer.next_batch: {self.config.algorithm} takes its batches from "
                            f"{type(self.source).__name__}, not from prompt batches")
        return self.source.next_items()

    def training_step(self, items: list[dict]) -> dict[str, float]:
        """One update on ``items`` (this rank's), outside the loop's schedule."""
        out = self.update.step(self.team, PromptBatch(items, self.env), self.state.step)
        out.metrics.update(self.team.sync_generator())
        self._last_examples = out.examples or self._last_examples
        return out.metrics

    # ----------------------------------------------------------------- loop
    def train(self) -> list[dict[str, float]]:
        """Run until ``max_steps`` / the epochs are done; returns the per-step metrics."""
        with user_terms(self.config):
            return self._train()

    def _train(self) -> list[dict[str, float]]:
        cfg = self.config
        main = dist.is_main()
        if main and cfg.run.output_dir:
            run_dir.write_marker(cfg.run.output_dir, self.run_id, self.resumed_from)
        logger = MetricsLogger(cfg.run.output_dir, cfg.run.report_to, enabled=main, wandb_project=cfg.run.wandb_project,
                               run_config={"train": to_dict(cfg), "agents": [to_dict(a.config) for a in self.agents]})
        bar = Progress(self.total_steps, self.state.step, enabled=main and cfg.run.progress_bar)
        stop = DeferredInterrupt(cfg.run.save_on_interrupt and bool(cfg.run.output_dir)).start()
        skips = SkipStreak(cfg.run.max_consecutive_skips, self.state.counters)
        # train.run.step_timeout_s: a phase past its limit dumps every rank's stacks and stops the run
        self._watchdog = Watchdog(cfg.run.step_timeout_s, cfg.run.step_timeout_factor, cfg.run.output_dir,
                                  dist.rank(), dist.world_size())
        saved_at = None
        try:
            while self.state.step < self.total_steps:
                skips.before_step()
                with self._phase("step", self.state.step + 1):
                    metrics = self._one_step()
                step = self.state.step
                if skips.after_step(step):  # train.run.max_consecutive_skips: stop with a checkpoint
                    self.history.append(metrics)
                    logger.log(step, metrics)
                    with self._phase("checkpoint", step):
                        path = self.save_checkpoint() if cfg.run.output_dir else None
                    raise skips.stop(step, path)
                if cfg.run.eval_steps and self.eval_items and step % cfg.run.eval_steps == 0:
                    with self._phase("evaluation", step):
                        metrics.update({f"eval/{k}": v for k, v in self.evaluate()["metrics"].items()})
                self.history.append(metrics)
                if step % cfg.run.logging_steps == 0 or step == self.total_steps:
                    logger.log(step, metrics)
                if cfg.run.log_samples_steps and (step == 1 or step % cfg.run.log_samples_steps == 0):
                    logger.log_samples(step, self._last_examples)
                    logger.log_trees(self._tree_records(step) if main else [])
                self._last_step = None
                bar.update(metrics)
                round_end = self.source.ends_round(step)
                if cfg.run.output_dir and ((cfg.run.save_steps and step % cfg.run.save_steps == 0) or round_end):
                    with self._phase("checkpoint", step):
                        path, saved_at = self.save_checkpoint(), step
                    self.source.saved(path, step)  # rounds: rounds.json
                if stop.requested_on_all_ranks():  # train.run.save_on_interrupt: checkpoint at a step boundary
                    if saved_at != step:
                        with self._phase("checkpoint", step):
                            self.save_checkpoint()
                    raise KeyboardInterrupt
            if cfg.run.output_dir and saved_at != self.state.step:
                with self._phase("checkpoint", self.state.step):
                    self.save_checkpoint()
        except KeyboardInterrupt:
            raise self._interrupted() from None
        finally:
            self._watchdog.close()
            self._watchdog = None
            stop.stop()
            bar.close()
            logger.close()
        return self.history

    def _phase(self, what: str, step: int) -> AbstractContextManager:
        """The watchdog's deadline for this part of ``step`` (training/loop.py; none outside :meth:`train`)."""
        return self._watchdog.phase(what, step) if self._watchdog is not None else nullcontext()

    def _one_step(self) -> dict[str, float]:
        """Take the source's next batch, run the update on it, and combine the metrics over ranks."""
        done, errors = self.state.counters["completions"], self.error_policy.errors
        batch = self.source.next(self.state.step, self.team)
        out = StepOutput({}) if isinstance(batch, SkipStep) else self.update.step(self.team, batch, self.state.step)
        with self._phase("push", self.state.step + 1):
            out.metrics.update(self.team.sync_generator())  # the generator's engines follow the optimiser steps
        out.metrics.update(batch.metrics)
        self._last_examples = out.examples or self._last_examples
        self._last_step = (batch, out) if out.rollouts else None
        rolled = getattr(batch, "rolled", None)  # sampled ahead: its errors happened during earlier steps
        errors = rolled.env_errors if rolled is not None else self.error_policy.errors - errors  # on_error=zero
        if dist.is_distributed():  # count completions and env errors over all ranks (the others agree already)
            mine = self.state.counters["completions"] - done
            self.state.counters["completions"] = done + int(dist.all_reduce_sum(mine))
            errors = int(dist.all_reduce_sum(errors))
        if errors:
            self.team.count("env_errors", errors)
        self.state.step += 1
        metrics = dist.reduce_metrics(out.metrics, weight=out.weight, sum_keys=("tokens_per_s",),
                                      key_weights=out.counts)
        metrics.update(self.team.peak_memory_gb())
        metrics.update(self.team.helper_metrics())  # helpers/<name>/...: requests, tokens, cost, loads
        metrics.update({f"count/{k}": v for k, v in self.state.counters.items()})
        epoch = getattr(batch, "epoch", None)  # the batch's: a source sampling ahead has moved its cursor on
        metrics["epoch"] = epoch if epoch is not None else self.state.epoch
        return metrics

    def _tree_records(self, step: int) -> list[dict]:
        """The rollout trees of the step just done for ``trees.jsonl`` (this rank's items; none when the step
        rolled nothing out or ``train.run.log_samples_max_kb`` is 0)."""
        if self._last_step is None:
            return []
        batch, out = self._last_step
        alg = self.algorithm.step_algorithm(self.config)
        return tree_records(out.rollouts, batch.items, [a.name for a in self.agents], step=step, env=batch.env,
                            advantages=out.advantages, values=out.values,
                            max_bytes=self.config.run.log_samples_max_kb * 1024,
                            algorithm={"name": alg.name, "summary": alg.summary,
                                       "critic": alg.critic, "scaled": self.config.loss.scale_advantages})

    def _interrupted(self) -> TrainingInterrupted:
        """The exception a Ctrl-C ends training with: step reached and newest checkpoint of this run."""
        out = self.config.run.output_dir
        last = run_dir.latest_checkpoint(out, self.run_id) if out else None
        return TrainingInterrupted(self.state.step, self.total_steps, last)

    # ----------------------------------------------------------------- eval
    def evaluate(self, items: Sequence[dict] | None = None, num_generations: int | None = None) -> dict[str, Any]:
        """Roll out (no training) on ``items`` (default: the eval set); returns
        ``{"metrics": {...}, "summary": env.summarize(records) or {}}``."""
        items = list(items) if items is not None else self.eval_items
        with self.team.gathered(env=self.env, rollout=True):
            return evaluate_agents(self.agents, self.env, items,
                                   num_generations or self.config.run.eval_num_generations, self.config,
                                   shard=True, lockstep=self.team.lockstep, generator=self.generator)

    # ----------------------------------------------------------------- files (training/run_files.py)
    def save_checkpoint(self) -> Path | None:
        """Write ``checkpoint-<step>``: the team, the data position, the counters, and what the update and
        the source need to resume (a critic, a round's reward model or reference)."""
        return run_files.save_checkpoint(self)

    def resume(self, where: str) -> None:
        """Load the checkpoint ``where`` names (a path, or ``latest``: the newest that verifies)."""
        run_files.resume(self, where)

    def close(self) -> None:
        """Stop the generator's engines (``train.hardware.generator: vllm``; a no-op for Hugging Face's) and close the
        helpers (their models, an endpoint's connections). Training and evaluation need a new Trainer afterwards."""
        close = getattr(self.generator, "close", None)
        if close is not None:
            close()
        self.team.helpers.close()

    def save(self, path: str | Path) -> Path:
        """Write each agent's final model (or adapter) and tokenizer to ``path/agent<i>``.

        Sharded agents are gathered one tensor at a time onto rank 0, which writes
        plain Hugging Face folders (every rank must call this then).
        """
        return run_files.save_agents(self.team, Path(path))

__all__ = ["Trainer", "TrainState"]
