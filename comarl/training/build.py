"""Building a run, in one place: every check the config allows first, then the Team, the critic, the update
and the source, in the order that keeps every rank's models and random streams as they were.

``check_run`` runs before any data row is rendered or any model is read (a bad key costs a second, not the
minutes a 7B model takes to load and shard); ``build_run`` then builds, for the algorithm record:

    agents (rank 0 reads them under sharding, the others build on meta) -> the critic the record names
    -> fp16 scalers, memory savers -> references (the KL term, or an update that learns against one)
    -> FSDP2 sharding of agents, references and critic -> optimisers -> the generator (``train.hardware.generator:
    vllm``: engines built from the final weights; ``train.rollout.max_staleness``: the generation worker around it,
    ``updates/overlap.py``) -> the source (the run's length) -> schedulers -> the helper models placed (``helpers:``)
    -> the Team, in one constructor call with every part -> the update
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..algorithms.base import Algorithm, Parts
from ..algorithms.program import check_program_run
from ..compute import distributed as dist
from ..compute.placement import agent_device_names, check_shared_devices
from ..compute.placement import place_references
from ..compute.precision import setup_memory_savers
from ..compute.sharding import AgentAtATime, built_on_rank0, shard_agents
from ..core.config_io import ConfigError
from ..core.runtime import check_mixed_precision
from ..core.seams import StepSource, TeamGenerator, Update
from ..core.stages import stage_graph
from ..critics import build_critic, shard_critic
from ..envs.base import Environment
from ..envs.program import program_env_of
from ..generation.helpers import Helpers, LocalHelper
from ..generation.hosted import HostedModel
from ..models.agents import Agent, AgentConfig, build_agents
from ..rollout import check_tree_size
from ..updates.overlap import Overlap
from .optim import build_optimizer, build_scheduler
from .team import Team, new_references


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


def check_helpers(cfg, agents: Sequence, helpers: Helpers) -> None:
    """A helper is never trained (an endpoint has no weights here), and every helper the config names exists."""
    for i, a in enumerate(agents):
        helper = (HostedModel, LocalHelper)
        if isinstance(a, helper) or isinstance(getattr(a, "model", None), helper):
            raise ConfigError(f"agents.{i}: {a!r} is a helper: helpers are frozen (a hosted endpoint's weights are "
                              f"not here to train); use it as a comparator, judge or expert (docs/helpers.md)")
    it = cfg.preference.iterative
    if it.comparator == "helper" and it.comparator_helper is not None:
        helpers.get(it.comparator_helper, "train.preference.iterative.comparator_helper")


def check_run(cfg, algorithm: Algorithm, agents: Sequence, env: Environment, generator=None,
              helpers: Helpers | None = None) -> None:
    """Every check that needs no model: the config, the algorithm's own (``Algorithm.check``), the tree size,
    the team size the environment expects, the generator (``generator``: one the caller built) and the helpers
    the config names (``helpers``)."""
    cfg.validate(len(agents), algorithm.generations_needed(cfg))
    check_helpers(cfg, agents, helpers if helpers is not None else Helpers())
    check_tree_size(cfg.rollout.joint_mode, cfg.rollout.num_generations, len(agents), cfg.rollout.num_turns,
                    cfg.rollout.max_samples_per_item, stage_graph(env, len(agents)))  # and the team graph (stages.py)
    algorithm.check_config(cfg, list(agents))
    if program_env_of(env) is not None:  # what program runs cannot do (comarl/envs/program.py)
        check_program_run(cfg, algorithm)
    if generator is not None and cfg.hardware.generator != "hf":
        raise ConfigError(f"train.hardware.generator: {cfg.hardware.generator} and Trainer(generator=...) both "
                          f"choose the generator; give one")
    cfg.check_generator(generator)  # tis_cap, vllm importable, one process (after the algorithm's own reasons)
    if getattr(env, "num_agents", len(agents)) != len(agents):
        raise ConfigError(f"agents: the environment expects {env.num_agents} agents, {len(agents)} given")


def place_agents(agents: Sequence, cfg, rank0_build: bool) -> list[Agent]:
    """Build agents on their devices (``train.hardware.agent_devices`` over ``agents.<i>.device``), or move built ones.

    ``rank0_build`` (sharded under torchrun): rank 0 builds the models on the CPU, the other ranks on
    ``meta``; ``Sharding.add`` later fills every rank's shards from rank 0's weights."""
    if all(isinstance(a, Agent) for a in agents):
        built = list(agents)
        if cfg.hardware.agent_devices is not None:
            devices = agent_device_names([a.config for a in built], cfg.hardware.agent_devices)
            owner: dict[int, int] = {}
            for i, (a, d) in enumerate(zip(built, devices)):
                j = owner.setdefault(id(a.model), i)
                if devices[j] != d:
                    raise ConfigError(f"train.hardware.agent_devices: agents {j} and {i} share one model object "
                                      f"but are placed on {devices[j]} and {d}")
                a.model.to(d)
                a.config = dataclasses.replace(a.config, device=d)
        return built
    configs = [a if isinstance(a, AgentConfig) else AgentConfig(model=a) for a in agents]
    devices = agent_device_names(configs, cfg.hardware.agent_devices)
    check_shared_devices(configs, devices)
    placed = [dataclasses.replace(c, device=d) for c, d in zip(configs, devices)]
    return built_on_rank0(build_agents, placed) if rank0_build else build_agents(placed)


@contextlib.contextmanager
def kept_random_state():
    """Python's, numpy's and torch's random states as they were on entry, restored on exit (an in-process vLLM
    engine seeds all three when it starts)."""
    py, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng():
        yield
    random.setstate(py)
    np.random.set_state(np_state)


def build_generator(agents: Sequence, cfg, given=None, sharding=None):
    """The rollouts' team generator: ``given`` (``Trainer(generator=...)``), else a ``VLLMGenerator`` over the
    built agents when ``train.hardware.generator`` is vllm (its engines start from the agents' current weights, gathered
    from their shards under ``sharding``; their seed is ``train.hardware.vllm.seed``, else the run's), else None
    (Hugging Face ``generate``)."""
    if given is not None or cfg.hardware.generator != "vllm":
        return given
    from ..generation.vllm_generator import VLLMGenerator

    settings = cfg.hardware.vllm
    if settings.seed is None:
        settings = dataclasses.replace(settings, seed=cfg.run.seed)
    with kept_random_state():  # the run's random streams stay its own
        return VLLMGenerator(agents, settings, sharding=sharding)


@dataclass
class Run:
    """A built run: the team, the update each step runs, the source of each step's batch, the generator."""

    team: Team
    update: Update
    source: StepSource
    critic: Any = None
    generator: TeamGenerator | None = None


def build_run(agents: Sequence, env: Environment, items: list[dict], cfg, algorithm: Algorithm,
              generator=None, helpers: Helpers | None = None) -> Run:
    """The Team, critic, update and source of ``algorithm`` (``check_run`` has passed; the process group, if
    any, is up). Every rank calls it. ``generator``: the team generator of the rollouts (None: Hugging
    Face's; ``train.hardware.generator: vllm`` builds one). ``helpers``: the run's helper models
    (``experiment.build_helpers``), placed here after the agents and held by the Team."""
    step_alg = algorithm.step_algorithm(cfg)
    # sharded: rank 0 builds the models on the CPU, the other ranks on `meta`, and every module is sharded
    # with rank 0's weights (Sharding.add), so no rank holds an agent whole on its device
    rank0_build = cfg.hardware.sharding == "fsdp" and dist.is_distributed()
    seed_everything(cfg.run.seed)  # the same model init on every rank ...
    built = place_agents(agents, cfg, rank0_build)
    if not rank0_build:
        for m in {id(a.model): a.model for a in built}.values():
            dist.broadcast_parameters(m)  # ... made certain: rank 0's trainable weights everywhere
    critic = build_critic(step_alg.critic, cfg.critic, built, cfg.rollout.discount, cfg.hardware.micro_batch_size,
                          cfg.loss.max_grad_norm) if step_alg.critic else None  # iac, maac
    for m in critic.modules() if critic is not None and not rank0_build else []:
        dist.broadcast_parameters(m)
    check_mixed_precision(cfg.hardware.mixed_precision, [a.config.device if rank0_build else str(a.device)
                                                for a in built])  # rank-0 build: not there yet
    scalers = setup_memory_savers(built, cfg)
    if dist.world_size() > 1:  # ... but a different sampling stream per rank
        seed_everything(dist.sampling_seed(cfg.run.seed, dist.rank()))
    hw = cfg.hardware
    references = (place_references(new_references(built, hw.share_prefix), hw.reference_device, built)
                  if algorithm.needs_reference(cfg) else [None] * len(built))
    # FSDP2: references are copied whole first, then agents and references sharded, then optimisers built
    sharding = shard_agents(built, references, cfg)
    if sharding is not None and critic is not None:  # on the same mesh; its optimisers rebuilt
        shard_critic(critic, sharding)
    optimizers = [build_optimizer(a.model, a.config, f"agents.{i}") for i, a in enumerate(built)]
    generator = build_generator(built, cfg, generator, sharding)  # synced after each optimiser step
    lockstep = AgentAtATime(sharding) if sharding is not None and hw.fsdp_gather == "agent" else None
    parts = Parts(cfg, lockstep, env, items, step_alg, critic, generator)
    overlap = Overlap.of(parts, built) if cfg.rollout.max_staleness else None  # a worker samples ahead
    if overlap is not None:  # it is the generator the team syncs, and the source's batches come rolled out
        parts = dataclasses.replace(parts, generator=overlap)
    source = algorithm.source(parts) if overlap is None else overlap.prefetching(algorithm.source(parts))
    total_opt = source.total_steps * cfg.loss.num_iterations
    schedulers = [build_scheduler(o, cfg.run.lr_scheduler, cfg.run.warmup_steps, total_opt) for o in optimizers]
    helpers = helpers if helpers is not None else Helpers()
    helpers.place()  # the resident local helpers on their devices (their own random stream: the run's is untouched)
    team = Team(built, references, optimizers, schedulers, scalers, sharding, cfg.loss.max_grad_norm,
                hw.fsdp_gather, hw.share_prefix, hw.reference_device, generator=parts.generator, helpers=helpers)
    return Run(team, algorithm.update(parts), source, critic, parts.generator)


__all__ = ["Run", "as_items", "build_generator", "build_run", "check_helpers", "check_items", "check_run",
           "kept_random_state", "place_agents", "seed_everything"]
