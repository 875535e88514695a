"""Build the critic an actor-critic algorithm asks for: ``independent`` (IAC) or ``central`` (MAAC)."""
from __future__ import annotations

import copy
import dataclasses

import torch

from ..core.config_io import ConfigError
from ..models.agents import AgentConfig, build_agents
from .critic import Critic
from .inputs import AgentInputs, JointInputs
from .joint_input import resolve_joint_input
from .settings import CriticSettings
from .value_model import ValueHead, ValueModel, is_sequence_classifier


def hidden_size(model) -> int:
    cfg = model.config
    size = getattr(cfg, "hidden_size", None)
    if size is None and hasattr(cfg, "get_text_config"):
        size = getattr(cfg.get_text_config(), "hidden_size", None)
    if size is None:
        raise ConfigError(f"train.critic: cannot find the hidden size of {type(model).__name__} for a value head")
    return int(size)


def _separate(settings: CriticSettings, devices: list[str]) -> list[ValueModel]:
    """Separate critic models (own tokenizer, device, dtype), one per device, each with a value head (none for
    a one-label classifier). Built in one ``build_agents`` call: the same id or object twice gives two copies."""
    spec = settings.model
    base = spec if isinstance(spec, AgentConfig) else AgentConfig(model=spec, chat_template=False,
                                                                    dtype=settings.dtype)
    if is_sequence_classifier(base.model):  # a classifier object: no generation settings to build, a copy each
        if base.tokenizer is None:
            raise ConfigError("train.critic.model: a model object needs its tokenizer (AgentConfig(model=obj, "
                              "tokenizer=tok))")
        built = [(copy.deepcopy(base.model).to(d), base.tokenizer) for d in devices]
    else:
        built = [(c.model, c.tokenizer) for c in build_agents(  # meta: a sharded run's rank > 0 (Sharding.add)
            [dataclasses.replace(base, device=d, name=f"critic{i}") for i, d in enumerate(devices)],
            meta=all(d == "meta" for d in devices))]
    out = []
    for (model, tokenizer), device in zip(built, devices):
        head = None
        if not is_sequence_classifier(model):
            head = ValueHead(hidden_size(model), settings.head_hidden_dim).to(device)
        elif model.config.num_labels != 1:
            raise ConfigError(f"train.critic.model: a sequence-classification critic needs num_labels=1, "
                              f"got {model.config.num_labels}")
        model.eval()  # no dropout in the values the advantages are built from
        out.append(ValueModel(model, tokenizer, head, owns_backbone=True, max_length=settings.max_length))
    return out


def _on_agent(agent, settings: CriticSettings) -> ValueModel:
    """A value head beside the agent's own model (its LoRA adapter, if any); the backbone is the agent's."""
    head = ValueHead(hidden_size(agent.model), settings.head_hidden_dim).to(agent.device)
    return ValueModel(agent.model, agent.tokenizer, head, encode_prompts=agent.encode_prompts,
                      owns_backbone=False, max_length=settings.max_length)


def build_critic(kind: str, settings: CriticSettings, agents: list, gamma: float, micro_batch_size: int,
                 max_grad_norm: float) -> Critic:
    """``independent``: one critic per agent (value head on its model, or a separate model each);
    ``central``: one separate critic model over all agents' text."""
    settings.validate()
    if kind == "independent":
        if settings.model is None:
            models = [_on_agent(a, settings) for a in agents]
        else:
            models = _separate(settings, [settings.device or str(a.device) for a in agents])
        inputs: AgentInputs | JointInputs = AgentInputs(settings.critic_type, len(agents))
    elif kind == "central":
        if settings.model is None:
            raise ConfigError("train.critic.model: maac needs a separate critic model (one central critic reads "
                              "every agent's text); give a hub id, a local path or 'tiny'")
        models = _separate(settings, [settings.device or str(agents[0].device)])
        inputs = JointInputs(settings.critic_type, resolve_joint_input(settings.joint_input))
    else:
        raise ValueError(f"critic kind must be 'independent' or 'central', got {kind!r}")
    return Critic(models, critic_optimizers(models, settings), inputs, settings, [a.name for a in agents], gamma,
                  micro_batch_size, max_grad_norm)


def critic_optimizers(models: list[ValueModel], settings: CriticSettings) -> list[torch.optim.Optimizer]:
    """One AdamW per column over what it trains (``ValueModel.parameters``)."""
    return [torch.optim.AdamW(vm.parameters(), lr=settings.lr, weight_decay=settings.weight_decay) for vm in models]


def shard_critic(critic: Critic, sharding) -> None:
    """Put the critic on the agents' FSDP mesh (``train.hardware.sharding: fsdp``); every rank calls it, after
    ``shard_agents``.

    A separate critic's backbone is sharded by transformer block and at its
    root, each value head as one unit (a value head on an agent's model: the
    head only, the backbone is the agent's, sharded already). FSDP swaps the
    parameters for DTensors, so the optimisers are rebuilt over them (those of
    ``build_critic`` had no state yet).
    """
    for c, vm in enumerate(critic.models):
        where = critic.names[c] + "'s critic"
        if vm.owns_backbone:
            sharding.add(vm.backbone, where)
        if vm.head is not None:
            sharding.add(vm.head, where + " value head", by_block=False)
    critic.optimizers = critic_optimizers(critic.models, critic.settings)
    critic.sharded = True
