"""The seams of the training loop, as Protocols: what the loop, the updates, the sources and the rollout rely on of
each other, and nothing more.

::

    while step < total:
        batch = source.next(step, team)      # StepSource: prompt batches | a pairs file | a round's pool
        out = update.step(team, batch, step)  # Update: policy gradient | joint DPO
        team.sync_generator()                 # the TeamGenerator's engines follow the optimiser steps

A component satisfies its Protocol by shape (no base class to inherit): ``updates.PolicyGradient``,
``updates.OnlineDPO`` and ``updates.PairDPO`` are Updates; ``sources.PromptBatches``,
``preference.pairs_file.PairsFile``,
``preference.rounds.DPORounds`` and ``preference.rounds.RewardModelRounds`` are StepSources; the Team
(``training/team.py``) is a ``TeamView`` to them; ``generation.team.generate_for_agents`` and
``generation.vllm_generator.VLLMGenerator`` are TeamGenerators; ``compute.sharding.AgentAtATime`` is the
Lockstep; a helper model (``generation/helpers.py``: a local model or a hosted endpoint) is a TextGenerator to the
environments and the comparators it is handed to. mypy checks the modules that name them (``pyproject.toml``:
this module is checked strictly).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

import torch

from .steps import PairBatch, PromptBatch, SkipStep, StepOutput

Batch = PromptBatch | PairBatch | SkipStep


@runtime_checkable
class Lockstep(Protocol):
    """Ranks in step while sharded models are gathered one agent at a time (``train.hardware.fsdp_gather: agent``)."""

    def scope(self, agents: Sequence[Any]) -> AbstractContextManager[Any]:
        """A context in which ``agents``' sharded models are whole on every rank (every rank enters it)."""

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on some rank (the turn loop goes on while any rank has work)."""

    def max(self, n: int) -> int:
        """The largest ``n`` over ranks."""


@runtime_checkable
class TeamGenerator(Protocol):
    """Samples a team's completions: ``prompt_ids[i]`` are agent i's prompts, K samples each (1 when ``greedy``);
    one ``Completions`` per agent, in agent order (``generation/team.py``)."""

    def __call__(self, agents: Sequence[Any], prompt_ids: list[list[list[int]]], k: int, *, greedy: bool = ...,
                 batch_size: int = ..., batch_adapters: bool = ..., schemas: list[Any] | None = ...,
                 share_prefix: bool = ..., scope: Callable[[Sequence[Any]], AbstractContextManager[Any]] | None = ...
                 ) -> list[Any]:
        ...


@runtime_checkable
class TextGenerator(Protocol):
    """A frozen helper model as the components it is handed to see it: text in, text out, one completion per prompt.

    Environments call it (the coding expert of ``expert_edits``) and never build or place a model themselves: the
    Team builds the helper (``helpers:`` in a config; a local model on its own device or a hosted endpoint,
    ``generation/helpers.py``) and the environment receives it. A test passes any function of this shape."""

    def __call__(self, prompts: Sequence[str]) -> list[str]:
        """One completion per prompt, in order."""


class TeamView(Protocol):
    """What the updates and the sources use of the Team (``training/team.py``): its models, the one gather context,
    the one optimiser step and the run's counters."""

    agents: list[Any]
    references: list[Any]
    scalers: dict[int, Any]
    sharding: Any
    counters: dict[str, int]
    generator: Any
    helpers: Any
    """The run's helper models by name (``generation.helpers.Helpers``): comparators, judges, experts."""

    @property
    def lockstep(self) -> Lockstep | None: ...

    def gathered(self, models: Iterable[torch.nn.Module] | None = None, *, env: Any = None, rollout: bool = False,
                 also: Iterable[torch.nn.Module] = ()) -> AbstractContextManager[Any]: ...

    def optimizer_step(self, i: int, bad: bool, step: int) -> float | None: ...

    def count(self, key: str, n: int = 1) -> int: ...

    def lr(self, i: int) -> float: ...

    def new_references(self) -> list[Any]:
        """Frozen copies of the current policy, one per distinct model (an iterative round's new reference)."""

    def place_references(self) -> None: ...

    def distinct_references(self) -> Iterable[tuple[int, Any]]: ...


class Update(Protocol):
    """What one training step does with its batch (``comarl/updates/``)."""

    def step(self, team: TeamView, batch: Any, step: int) -> StepOutput:
        """Learn from ``batch`` (collective under torchrun: every rank calls it)."""

    def checkpoint_parts(self, team: TeamView, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(modules for DCP, files for torch.save) a checkpoint must hold for this update (a critic)."""

    def restore(self, path: Path, team: TeamView) -> None:
        """Put back what ``checkpoint_parts`` saved."""


class StepSource(Protocol):
    """Where each step's batch comes from (``comarl/sources.py``, ``comarl/preference/rounds.py``)."""

    total_steps: int
    """How many steps the run takes."""
    cursor: Any
    """The ``sources.EpochCursor``: one shuffle per epoch, one resume position."""
    env: Any
    """The environment rollouts use now (evaluation rolls out with it too)."""
    epoch_based: bool
    """The run's length follows the epochs (a resume with another global batch recomputes it)."""

    def next(self, step: int, team: TeamView) -> Batch: ...

    def checkpoint_parts(self, team: TeamView, step: int) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def restore(self, path: Path, team: TeamView) -> None: ...

    def ends_round(self, step: int) -> bool:
        """A checkpoint must follow this step (the end of an iterative round)."""

    def saved(self, path: Path | None, step: int) -> None:
        """After that checkpoint was written."""


__all__ = ["Batch", "Lockstep", "StepSource", "TeamGenerator", "TeamView", "TextGenerator", "Update"]
