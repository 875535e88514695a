"""Who writes the other side of an iterative preference round's pairs (``train.preference.iterative.comparator``).

One record per kind, chosen once when the rounds are built (``comparator_for``); the round asks it for round r's
comparator agents and hands them back after sampling (``release``), so a comparator that lives for one round is
freed before the round's training:

| kind | agents | lives |
|---|---|---|
| ``none`` | None: the policy's own candidates are paired | - |
| ``current`` | the policy itself (sampled before the round's first update) | the run |
| ``model`` | ``comparator_model`` for every agent, built once | the run |
| ``checkpoint`` + ``comparator_path`` | that checkpoint's agents, loaded once | the run |
| ``checkpoint`` | the policy ``comparator_rounds_back`` rounds earlier (snapshots taken at round starts) | a round |
| ``helper`` + ``comparator_helper`` | that helper (``Team.helpers``) in every agent's seat | the run (1) |

(1) A local helper with ``free_between_uses`` is freed after each round's sampling; a hosted one holds nothing.

The round samples a comparator's agents with the run's team generator, or with the comparator's own
``generator`` when it has one (a helper's seats: ``generation.helpers.helper_generator``).
A comparator's models are built as the agents are: under ``sharding: fsdp`` rank 0 reads the weights and the
others build on meta, then the models are sharded like the agents (gathered for the round's sampling only).
"""
from __future__ import annotations

import dataclasses
import gc
import shutil
from pathlib import Path
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Protocol

import torch

from ..compute import distributed as dist
from ..compute.sharding import built_on_rank0, full_state_dict
from ..core.config_io import ConfigError
from ..runs import checkpoint as ckpt

if TYPE_CHECKING:
    from ..core.seams import TeamView
    from .settings import IterativeSettings


class Comparator(Protocol):
    """The other side of round r's pairs."""

    name: str
    generator: Any
    """The team generator its agents sample with (None: the run's)."""

    def agents(self, team: "TeamView", r: int) -> list | None:
        """Round r's comparator agents (None: pair the policy's own candidates). Collective under torchrun:
        every rank calls it once per round."""

    def release(self) -> None:
        """The round's sampling is over: free what was built for this round only."""


@dataclasses.dataclass
class NoComparator:
    name: str = "none"
    generator: Any = None

    def agents(self, team: "TeamView", r: int) -> list | None:
        return None

    def release(self) -> None:
        pass


@dataclasses.dataclass
class CurrentPolicy:
    name: str = "current"
    generator: Any = None

    def agents(self, team: "TeamView", r: int) -> list | None:
        return team.agents

    def release(self) -> None:
        pass


@dataclasses.dataclass
class FixedModel:
    """``comparator: model``: one model id for every agent (each agent's generation settings kept)."""

    model: str
    name: str = "model"
    held: list | None = None
    generator: Any = None

    def agents(self, team: "TeamView", r: int) -> list | None:
        if self.held is None:
            from ..models.agents import build_agents  # (the agents module builds models: imported when one is needed)

            plain = [dataclasses.replace(a.config, model=self.model, tokenizer=None, lora=None,
                                         share_weights_with=None, gguf_file=None, model_kwargs={})
                     for a in team.agents]
            with torch.random.fork_rng(devices=[]):
                built = build_like_agents(team, build_agents, plain)
            for m in {id(a.model): a.model for a in built}.values() if team.sharding is None else []:
                dist.broadcast_parameters(m)  # as the agents' (sharded: Sharding.add sends rank 0's)
            self.held = shard_like_agents(team, built)
        return self.held

    def release(self) -> None:
        pass


@dataclasses.dataclass
class FixedCheckpoint:
    """``comparator: checkpoint`` with ``comparator_path``: a checkpoint or ``final/`` folder, loaded once."""

    path: Path
    name: str = "checkpoint"
    held: list | None = None
    generator: Any = None

    def agents(self, team: "TeamView", r: int) -> list | None:
        if self.held is None:
            self.held = shard_like_agents(team, load_folder(team, self.path,
                                                            "train.preference.iterative.comparator_path"))
        return self.held

    def release(self) -> None:
        pass


@dataclasses.dataclass
class EarlierRound:
    """``comparator: checkpoint``: the policy ``rounds_back`` rounds earlier (the starting policy before that).

    Each round's start writes the policy's snapshot to ``<out>/round-<r>/policy`` (rank 0) and deletes the ones no
    later round reads; the round's comparator is loaded from ``round-<max(0, r - rounds_back)>`` and released after
    the round's sampling."""

    out: Path
    rounds_back: int
    name: str = "checkpoint"
    loaded: list | None = None
    generator: Any = None

    def agents(self, team: "TeamView", r: int) -> list | None:
        k = self.rounds_back
        snap = self.out / f"round-{r}" / "policy"
        full = [full_state_dict(a.model, keep=dist.is_main()) if team.sharding is not None else None
                for a in team.agents]  # sharded: gathered onto rank 0 (collective)
        if dist.is_main():
            for i, agent in enumerate(team.agents):
                ckpt.save_agent_weights(agent, snap / f"agent{i}", state_dict=full[i])
            for old in range(0, r - k + 1):  # never needed again (round r+1 compares with r+1-k)
                if old != max(0, r - k):
                    shutil.rmtree(self.out / f"round-{old}" / "policy", ignore_errors=True)
        if dist.is_distributed():  # the other ranks load rank 0's snapshot
            torch.distributed.barrier()
        self.loaded = shard_like_agents(team, load_folder(team, self.out / f"round-{max(0, r - k)}" / "policy",
                                                          "train.preference.iterative.comparator"))
        return self.loaded

    def release(self) -> None:
        """Drop the round's snapshot (the caller holds no other reference) and hand its memory back."""
        self.loaded = None
        free_memory()


@dataclasses.dataclass
class HelperComparator:
    """``comparator: helper``: the helper ``comparator_helper`` (``Team.helpers``: a local model or a hosted
    endpoint) writes every agent's side, each agent's prompt sent to it as text. Its model stays loaded for the
    round's sampling and, with ``free_between_uses``, is freed after it."""

    helper: str
    name: str = "helper"
    generator: Any = None
    scope: AbstractContextManager | None = None

    def agents(self, team: "TeamView", r: int) -> list | None:
        from ..generation.helpers import helper_generator, helper_seats

        helper = team.helpers.get(self.helper, "train.preference.iterative.comparator_helper")
        self.generator = helper_generator
        self.scope = helper.use()
        self.scope.__enter__()
        return helper_seats(helper, team.agents)

    def release(self) -> None:
        scope, self.scope = self.scope, None
        (scope or nullcontext()).__exit__(None, None, None)


def comparator_for(settings: "IterativeSettings", out: Path) -> Comparator:
    """The record of ``train.preference.iterative.comparator`` (settings validated: ``PreferenceSettings.validate``)."""
    kind = settings.comparator
    if kind == "none":
        return NoComparator()
    if kind == "current":
        return CurrentPolicy()
    if kind == "model":
        assert settings.comparator_model is not None
        return FixedModel(settings.comparator_model)
    if kind == "helper":
        assert settings.comparator_helper is not None
        return HelperComparator(settings.comparator_helper)
    if kind == "checkpoint":
        if settings.comparator_path:
            return FixedCheckpoint(Path(settings.comparator_path))
        return EarlierRound(out, settings.comparator_rounds_back)
    raise ConfigError(f"train.preference.iterative.comparator: no comparator {kind!r}")


# ----------------------------------------------------------------- built and placed as the agents are
def build_like_agents(team: "TeamView", build: Callable, configs: list) -> list:
    """A comparator built as the agents are: under sharding rank 0 reads it and the others build it on meta
    (``sharding.built_on_rank0``; ``shard_like_agents`` then sends rank 0's weights)."""
    return built_on_rank0(build, configs) if team.sharding is not None else build(configs, meta=False)


def shard_like_agents(team: "TeamView", agents: list) -> list:
    """Under ``sharding: fsdp`` a comparator's models are sharded like the agents (gathered for the round's
    sampling only), so a fixed comparator does not stay whole on every rank for the whole run."""
    if team.sharding is not None:
        for m in {id(a.model): a.model for a in agents}.values():
            team.sharding.add(m, "the comparator")
    return agents


def load_folder(team: "TeamView", folder: Path, key: str) -> list:
    """The agents of a checkpoint folder (built as ``build_like_agents`` says), named by ``key`` when missing."""
    with torch.random.fork_rng(devices=[]):
        try:
            return build_like_agents(team, lambda cs, meta: ckpt.agents_from_folder(cs, folder, key, meta=meta),
                                     [a.config for a in team.agents])
        except FileNotFoundError as e:
            raise ConfigError(str(e)) from None


def free_memory() -> None:
    """Collect what nothing references any more and hand CUDA's cached blocks back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
