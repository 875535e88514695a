"""Sampling and training at the same time: ``train.rollout.max_staleness`` k >= 1 (docs/overlap.md).

A generation worker (one thread, ``rollout/prefetch.py``) rolls out the batch of step t+k while the trainer
updates on step t's, with the weights of step t; the trainer's weights reach the worker between its batches.
Two seams carry it, so the loop and the updates stay as they are:

* the source: :class:`PrefetchedBatches` wraps the run's prompt batches. ``next(t)`` hands the worker every
  batch up to t+k (their items drawn in order, in the trainer's thread) and returns batch t with its rollouts
  (``PromptBatch.rolled``); the update learns from them instead of rolling out (``updates/policy_gradient.py``,
  ``updates/dpo.py``);
* the team generator: :class:`Overlap` is the Team's generator. ``sync(agents)``, called by the loop after
  each optimiser step, writes the new weights into the worker's once it is between batches; called as a
  team generator (evaluation, an update that rolls out itself), it samples with the trainer's weights while
  the worker waits.

Where the worker's weights live: with Hugging Face ``generate`` (or a team generator without ``sync``), a copy
of each agent's trainable weights (``models/sampling_copy.py``), whose log-probs of every sample the worker
computes after sampling (the behaviour log-probs); with a generator that holds its own weights (vLLM engines:
``sync``), those engines, in their own processes when ``train.hardware.vllm.in_process`` is false, whose
log-probs come with the samples. Either way each sample carries its policy version
(``AgentSamples.policy_version``) and its behaviour log-probs (``AgentSamples.engine_logprobs``).

Randomness: batch b is sampled after seeding Python's, numpy's and torch's streams with
``sampling_seed(seed, 0, b)``, so its samples depend on its weights and b only, not on where the threads were.

Checkpoints: the batches sampled ahead (k of them, finished by the time the loop saves: the push waited for
them) are written to ``inflight.pt`` and taken up again on resume, so a resumed run goes on exactly as the
uninterrupted one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch

from ..compute.distributed import sampling_seed
from ..compute.micro_batches import micro_batch_spans
from ..compute.precision import autocast
from ..core.config_io import ConfigError
from ..core.steps import Prefetched, PromptBatch
from ..core.types import joined_samples
from ..envs.error_policy import error_policy_of
from ..generation.team import generate_for_agents
from ..models.sampling_copy import copy_bytes, copy_trained, sampling_copies
from ..objective.logprobs import completion_logprobs
from ..rollout.prefetch import Prefetcher
from ..runs import checkpoint as ckpt
from .policy_gradient import group_sizes
from .rollout_step import roll_out

if TYPE_CHECKING:
    from ..core.seams import TeamView

INFLIGHT = "inflight.pt"
"""The checkpoint file of the batches sampled ahead:
``{"max_staleness": k, "batches": [(b, items, rolled, epoch)]}``."""


class SamplingTeam:
    """What ``roll_out`` reads of a team, for the worker's agents: their models are whole (no sharding)."""

    def __init__(self, agents: list):
        self.agents = agents

    def gathered(self, models: Iterable[torch.nn.Module] | None = None, *, env: Any = None, rollout: bool = False,
                 also: Iterable[torch.nn.Module] = ()) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


class Overlap:
    """The generation worker of ``max_staleness`` k and the team-generator seam it plugs into (module docstring).

    Args:
        agents: the trained agents.
        settings: the rollout settings of the steps (``RolloutSettings``; their generator samples).
        hardware: ``train.hardware`` (micro-batches, precision, shared prefixes of the behaviour log-probs).
        accumulation_steps: rollout chunks per batch (``train.run.gradient_accumulation_steps``).
        seed: the run's seed (each batch's sampling streams).
        max_staleness: k.
        behaviour: compute the behaviour log-probs of a weight copy's samples (a policy-gradient loss reads them;
            DPO does not).
    """

    def __init__(self, agents: Sequence, settings, hardware, accumulation_steps: int, seed: int, max_staleness: int,
                 behaviour: bool = True):
        inner = settings.generator
        self.inner = inner
        self.own_weights = inner is not None and callable(getattr(inner, "sync", None))  # e.g. vLLM engines
        self.agents = list(agents)
        self.copies = self.agents if self.own_weights else sampling_copies(self.agents)
        self.copy_bytes = 0 if self.own_weights else copy_bytes(self.agents, self.copies)
        self.settings, self.hardware = settings, hardware
        self.accumulation_steps, self.seed, self.k = accumulation_steps, seed, max_staleness
        self.behaviour = behaviour and not self.own_weights
        self.taken = -1  # the batch the trainer took last: its push is version taken + 1
        # GPUs: the worker's kernels on streams of their own (one thread's kernels on the default stream would
        # queue behind the other's)
        devices = {str(a.device) for a in self.copies if a.device.type == "cuda"} if not self.own_weights else set()
        self.streams = [torch.cuda.Stream(torch.device(d)) for d in sorted(devices)]
        self.prefetcher = Prefetcher(self._sample, max_staleness)

    @classmethod
    def of(cls, parts, agents: Sequence) -> "Overlap":
        """The worker of a run's ``Parts`` (``algorithms/base.py``): its rollout settings, seed and k."""
        cfg = parts.config
        return cls(agents, parts.rollout_settings(), cfg.hardware, cfg.run.gradient_accumulation_steps, cfg.run.seed,
                   cfg.rollout.max_staleness, behaviour=parts.algorithm.advantage is not None)

    def prefetching(self, source) -> "PrefetchedBatches":
        """``source`` (the run's prompt batches) with its batches sampled ahead."""
        return PrefetchedBatches(source, self)

    # ------------------------------------------------------------- the team generator
    def __call__(self, agents: Sequence, prompt_ids: list[list[list[int]]], k: int, **kwargs) -> list:
        """The team generator contract with the trainer's weights (evaluation): the worker waits meanwhile."""
        with self.prefetcher.paused():
            generate = self.inner if self.inner is not None else generate_for_agents
            return generate(agents, prompt_ids, k, **kwargs)

    def sync(self, agents: Sequence) -> Any:
        """Write ``agents``' trained weights into the worker's (a copy, or the generator's own engines) once the
        worker is between batches and every batch of an older version is sampled (``Prefetcher.push``)."""
        if self.own_weights:
            assert self.inner is not None
            return self.prefetcher.push(self.taken + 1, lambda: self.inner.sync(agents))
        index = {id(a): i for i, a in enumerate(self.agents)}
        missing = [a.name for a in agents if id(a) not in index]
        if missing:
            raise ValueError(f"Overlap.sync: {missing} are not the agents the worker copied")

        def write() -> None:
            copy_trained(list(agents), [self.copies[index[id(a)]] for a in agents])
            for stream in self.streams:  # the copies are written before the worker's stream reads them
                torch.cuda.current_stream(stream.device).synchronize()

        return self.prefetcher.push(self.taken + 1, write)

    def close(self) -> None:
        """Stop the worker, then the generator's engines."""
        self.prefetcher.close()
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------- the worker's thread
    def _sample(self, b: int, batch: PromptBatch, version: int) -> PromptBatch:
        s = sampling_seed(self.seed, 0, b)
        random.seed(s)
        np.random.seed(s % (2 ** 32))
        torch.manual_seed(s)
        t0 = time.perf_counter()
        policy = error_policy_of(batch.env)  # (the trainer's thread calls no environment while the worker samples)
        errors = policy.errors if policy is not None else 0
        with contextlib.ExitStack() as on_streams:
            for stream in self.streams:
                on_streams.enter_context(torch.cuda.stream(stream))
            rollouts, _, _ = roll_out(SamplingTeam(self.copies), batch.env, batch.items, self.settings,
                                      self.accumulation_steps)
            if self.behaviour:
                for i, agent in enumerate(self.copies):
                    behaviour_logprobs(agent, [r.agents[i] for r in rollouts], self.hardware)
        for r in rollouts:
            for samples in r.agents:
                samples.policy_version = torch.full((samples.num_samples,), version, dtype=torch.long)
        errors = policy.errors - errors if policy is not None else 0
        return dataclasses.replace(batch, rolled=Prefetched(rollouts, version, time.perf_counter() - t0,
                                                            env_errors=errors))


@torch.no_grad()
def behaviour_logprobs(agent, samples: list, hardware) -> None:
    """Set each sample's ``engine_logprobs`` to ``agent``'s log-probs of its completion tokens (the sampling
    copy's: the behaviour policy), over the micro-batches the loss cuts (``LossBatch.spans``), without dropout."""
    prompts, comps, _ = joined_samples(samples)
    rows: list[list[float]] = []
    if comps:
        model = agent.model
        model.eval()
        spans = micro_batch_spans(group_sizes(samples, len(comps)), hardware.micro_batch_size, hardware.share_prefix)
        with autocast(hardware.mixed_precision, agent.device):
            for a, b in spans:
                logp, _ = completion_logprobs(model, prompts[a:b], comps[a:b], agent.tokenizer.pad_token_id,
                                              agent.config.temperature, hardware.share_prefix)
                rows += [logp[j, :len(comps[a + j])].float().cpu().tolist() for j in range(b - a)]
    start = 0
    for s in samples:
        s.engine_logprobs = rows[start:start + s.num_samples]
        start += s.num_samples


def staleness(rollouts: list, step: int) -> dict[str, float]:
    """``rollout/staleness_mean`` and ``_max``: steps between each sample's policy version and ``step``, over
    every agent's samples of the batch."""
    versions = [s.policy_version for r in rollouts for s in r.agents if s.policy_version is not None]
    lag = (step - torch.cat(versions)).double() if versions else torch.zeros(0, dtype=torch.float64)
    if lag.numel() == 0:  # no agent wrote a sample
        return {"rollout/staleness_mean": 0.0, "rollout/staleness_max": 0.0}
    return {"rollout/staleness_mean": float(lag.mean()), "rollout/staleness_max": float(lag.max())}


class PrefetchedBatches:
    """A prompt-batch source whose batches the generation worker samples ahead (a ``StepSource``,
    ``core/seams.py``): the run's length, cursor and environment are the wrapped source's."""

    def __init__(self, source, overlap: Overlap):
        self.source, self.overlap = source, overlap
        self.next_b: int | None = None  # the next batch to hand the worker

    cursor = property(lambda self: self.source.cursor)
    total_steps = property(lambda self: self.source.total_steps)
    env = property(lambda self: self.source.env)
    epoch_based = property(lambda self: self.source.epoch_based)

    def next(self, step: int, team: "TeamView") -> PromptBatch:
        """Batch ``step``, rolled out by the worker; first hands it every batch up to ``step + k``."""
        ov, work = self.overlap, self.overlap.prefetcher
        work.at_least(step)  # the worker's weights are this step's (any change was pushed after the last step)
        ov.taken = step
        if self.next_b is None:
            self.next_b = step
        last = min(step + ov.k, self.total_steps - 1)
        while self.next_b <= last:
            work.submit(self.next_b, self.source.next(self.next_b, team))
            self.next_b += 1
        batch, waited = work.take(step)
        assert batch.rolled is not None
        batch = dataclasses.replace(batch, rolled=dataclasses.replace(batch.rolled, wait_s=waited))
        batch.metrics = {**batch.metrics, **staleness(batch.rolled.rollouts, step), "time/rollout_wait_s": waited}
        return batch

    # ------------------------------------------------------------- checkpoints
    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        """The wrapped source's, and the batches sampled ahead (``inflight.pt``)."""
        modules, files = self.source.checkpoint_parts(team, step)
        ahead = self.overlap.prefetcher.pending()
        files = {**files, INFLIGHT: {"max_staleness": self.overlap.k,
                                     "batches": [(b, pb.items, pb.rolled, pb.epoch) for b, pb in ahead.items()]}}
        return modules, files

    def restore(self, path: Path, team: "TeamView") -> None:
        """Take up the checkpoint's batches sampled ahead (a checkpoint of an on-policy run has none). The
        wrapped prompt batches keep no state but their cursor, which the loop restores."""
        if not (Path(path) / INFLIGHT).exists():
            return
        saved = ckpt.load_extra(path, INFLIGHT)
        if saved["max_staleness"] != self.overlap.k:
            raise ConfigError(f"train.rollout.max_staleness: {path} was written with {saved['max_staleness']} "
                              f"(its batches sampled ahead are part of the run); resume with the same value")
        for b, items, rolled, epoch in saved["batches"]:
            self.overlap.prefetcher.restore(b, PromptBatch(items, self.env, rolled=rolled, epoch=epoch))
            self.next_b = b + 1

    def ends_round(self, step: int) -> bool:
        return self.source.ends_round(step)

    def saved(self, path: Path | None, step: int) -> None:
        self.source.saved(path, step)


__all__ = ["INFLIGHT", "Overlap", "PrefetchedBatches", "SamplingTeam", "behaviour_logprobs", "staleness"]
