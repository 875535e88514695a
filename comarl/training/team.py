"""The Team: the agents being trained and everything that steps with them.

Agents, their frozen references, optimisers, schedulers, fp16 loss scalers and the FSDP2 sharding, with
the two things every update needs from them: one ``gathered(...)`` context (sharded models whole on every
rank inside it; a no-op without sharding) and one ``optimizer_step(i, bad, step)``. Built in one place
(``training/build.py``). The updates (``comarl/updates/``) and the round sources
(``comarl/preference/rounds.py``) use it through these public members only. The Team also holds the run's helper
models (``helpers``), placed when it is built.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from ..compute import distributed as dist
from ..compute.placement import place_references
from ..compute.sharding import AgentAtATime, Sharding
from ..compute.stepping import optimizer_step
from ..envs.base import rollout_modules
from ..generation.helpers import Helpers
from ..models.reference import build_reference


def new_references(agents: list, share_prefix: bool) -> list:
    """Frozen copies of ``agents``' current policies, one per distinct model object (LoRA agents: their base with
    the adapter off), in agent order."""
    by_model: dict[int, Any] = {}
    for a in agents:
        if id(a.model) not in by_model:
            by_model[id(a.model)] = build_reference(a, share_prefix)
    return [by_model[id(a.model)] for a in agents]


def new_counters() -> dict[str, int]:
    """The run's counters (``count/*`` in the metrics; saved in checkpoints)."""
    return {"nonfinite_skips": 0, "empty_batch_skips": 0, "completions": 0, "optimizer_steps": 0}


@dataclass
class Team:
    """Attributes:
        agents: [N] the trained agents (LoRA agents on one base share its model object).
        references: [N] each agent's frozen reference policy (``comarl.models.reference``), or None where no
            KL or DPO needs one.
        optimizers, schedulers: [N] one of each per agent.
        scalers: id(model) -> fp16 ``LossScaler`` (``train.hardware.mixed_precision: fp16``).
        sharding: the run's FSDP2 sharding, or None.
        max_grad_norm: gradient clipping per agent (0 = off).
        fsdp_gather: ``team`` | ``agent``: what is whole during generation under sharding.
        share_prefix: the reference copies encode each prompt once for its samples.
        reference_device: where references live (None: each on its agent's device).
        counters: the run's counters (``new_counters``), shared with the loop's checkpoints.
        generator: the team generator of the rollouts (``generation/team.py``; None: Hugging Face's). One with
            a ``sync(agents)`` method (``VLLMGenerator``) samples from its own copy of the weights: the agents
            whose optimiser stepped are pushed to it by :meth:`sync_generator`.
        changed: indices of the agents whose weights an optimiser step changed since the last sync.
        helpers: the run's frozen helper models by name (``helpers:``; ``generation.helpers.Helpers``): local
            models placed on their own devices or hosted endpoints, handed to the environment (an expert, a judge)
            and to the rounds (a comparator); never trained, never synced.
    """

    agents: list
    references: list
    optimizers: list
    schedulers: list
    scalers: dict = field(default_factory=dict)
    sharding: Sharding | None = None
    max_grad_norm: float = 1.0
    fsdp_gather: str = "team"
    share_prefix: bool = True
    reference_device: str | None = None
    counters: dict[str, int] = field(default_factory=new_counters)
    generator: Any = None
    changed: set = field(default_factory=set)
    helpers: Helpers = field(default_factory=Helpers)

    # ------------------------------------------------------------- sharding
    @property
    def lockstep(self) -> AgentAtATime | None:
        """Under ``sharding: fsdp`` with ``fsdp_gather: agent``: one agent gathered per generate call
        (``RolloutSettings.lockstep``); None otherwise."""
        if self.sharding is None or self.fsdp_gather != "agent":
            return None
        return AgentAtATime(self.sharding)

    def gathered(self, models: Iterable[torch.nn.Module] | None = None, *, env: Any = None, rollout: bool = False,
                 also: Iterable[torch.nn.Module] = ()) -> contextlib.AbstractContextManager:
        """A context in which sharded ``models`` are whole on every rank (a no-op without sharding).

        ``models`` None: every agent's model, plus ``env``'s rollout modules (e.g. a reward model) and
        ``also``; with ``rollout`` under ``fsdp_gather: agent``, the agents are left out (the rollout
        gathers one agent per generate call) and only the environment's modules and ``also`` are."""
        if self.sharding is None:
            return contextlib.nullcontext()
        if models is None:
            one_at_a_time = rollout and self.lockstep is not None
            models = ([] if one_at_a_time else [a.model for a in self.agents]) + list(rollout_modules(env)) + list(also)
        return self.sharding.gathered(list(models))

    # ------------------------------------------------------------- references
    def new_references(self) -> list:
        """Frozen copies of the current policy, one per distinct model object (LoRA agents: their base with
        the adapter off); :meth:`place_references` puts them on ``reference_device``."""
        return new_references(self.agents, self.share_prefix)

    def place_references(self) -> None:
        """Put the references on ``reference_device`` (a no-op where they are there already)."""
        self.references = place_references(self.references, self.reference_device, self.agents)

    def distinct_references(self):
        """(agent index, reference) once per reference object that holds its own model."""
        seen = set()
        for i, ref in enumerate(self.references):
            if ref is not None and ref.model is not None and id(ref) not in seen:
                seen.add(id(ref))
                yield i, ref

    # ------------------------------------------------------------- stepping
    def optimizer_step(self, i: int, bad: bool, step: int) -> float | None:
        """All-reduce, clip and step agent ``i`` (``compute.stepping.optimizer_step``); None (update skipped,
        counted and warned) on non-finite values anywhere. Collective: every rank calls it for every agent."""
        model = self.agents[i].model

        def skipped() -> None:
            self.counters["nonfinite_skips"] += 1
            warnings.warn(f"step {step}: non-finite loss or gradient for {self.agents[i].name}; update "
                          f"skipped (skips so far: {self.counters['nonfinite_skips']})", RuntimeWarning, stacklevel=3)

        grad_norm = optimizer_step(
            [p for p in model.parameters() if p.requires_grad], self.optimizers[i], bad=bad,
            scheduler=self.schedulers[i], max_grad_norm=self.max_grad_norm, scaler=self.scalers.get(id(model)),
            reduce_grads=(lambda: dist.all_reduce_grads(model)) if self.sharding is None else None,  # FSDP2 summed
            on_skip=skipped)
        if grad_norm is not None:
            self.counters["optimizer_steps"] += 1
            self.changed.add(i)
        return grad_norm

    def sync_generator(self, everything: bool = False) -> dict[str, float]:
        """Push the agents an optimiser step changed (``everything``: all agents, e.g. after loading a
        checkpoint) into a generator that keeps its own weights, once; returns ``{"time/sync_s": s}`` when it
        pushed, else {}. A generator without ``sync`` (Hugging Face's, a test's) samples from the agents
        themselves and needs nothing."""
        chosen = range(len(self.agents)) if everything else sorted(self.changed)
        self.changed.clear()
        sync = getattr(self.generator, "sync", None)
        if sync is None or not chosen:
            return {}
        started = time.perf_counter()
        sync([self.agents[i] for i in chosen])
        return {"time/sync_s": time.perf_counter() - started}

    def lr(self, i: int) -> float:
        return self.schedulers[i].get_last_lr()[0]

    def count(self, key: str, n: int = 1) -> int:
        """Add ``n`` to counter ``key``; returns its new value."""
        self.counters[key] = self.counters.get(key, 0) + n
        return self.counters[key]

    def helper_metrics(self) -> dict[str, float]:
        """The helpers' counters (``helpers/<name>/...``: requests, tokens, cost, loads)."""
        return self.helpers.metrics()

    def peak_memory_gb(self) -> dict[str, float]:
        """Peak CUDA memory (GB) of each GPU the agents use, since the start (empty without CUDA)."""
        devs = sorted({a.device for a in self.agents if a.device.type == "cuda"}, key=str)
        return {f"memory/peak_gb_{d.type}{d.index}": torch.cuda.max_memory_allocated(d) / 2 ** 30 for d in devs}


__all__ = ["Team", "new_counters", "new_references"]
