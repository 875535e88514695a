"""From an :class:`ExperimentConfig` to live objects: agents, environment, items, trainer."""
from __future__ import annotations

import dataclasses

from .config import DataSource, ExperimentConfig
from .core.config_io import ConfigError
from .envs.error_policy import with_error_policy
from .envs.loading import check_no_overlap
from .envs.registry import get_env
from .envs.reward_processing import with_reward_processing
from .generation.helpers import Helpers
from .training.loop import Trainer


def build_helpers(cfg: ExperimentConfig) -> Helpers:
    """The run's helper models of ``cfg.helpers`` (a hosted one's key is read now; a local one's model is read when
    the Team places it, or at its first use)."""
    return Helpers.build(cfg.helpers)


def inject_helpers(args: dict, keys: tuple[str, ...], helpers: Helpers, where: str) -> dict:
    """``args`` with each helper arg (``keys``, the entry's ``EnvEntry.helpers``) replaced by the built helper it
    names: ``expert: coder`` -> ``helpers.get("coder")``. The earlier spelling, an inline mapping
    (``expert: {model: tiny, max_new_tokens: 64, retries: 3, agent: {device: cuda:1}}``), still works: it declares
    a helper named after the key, its ``retries`` becomes ``<key>_retries`` and its ``agent`` fields the helper's."""
    from .core.config_io import from_dict
    from .generation.helper_settings import HelperSpec
    from .generation.helpers import build_helper

    args = dict(args)
    for key in keys:
        value, at = args.get(key), f"{where}.{key}"
        if value is None or callable(value):  # absent, or built already (a Python caller's)
            continue
        if isinstance(value, str):
            args[key] = helpers.get(value, at)
        elif isinstance(value, dict):
            inline = dict(value)
            if "retries" in inline:
                args.setdefault(f"{key}_retries", inline.pop("retries"))
            inline.update(inline.pop("agent", None) or {})
            known = {f.name for f in dataclasses.fields(HelperSpec)}
            unknown = sorted(set(inline) - known)
            if unknown:
                raise ConfigError(f"{at}.{unknown[0]}: not a helper key (helpers take {', '.join(sorted(known))})")
            helper = build_helper(key, from_dict(HelperSpec, inline, at))
            helpers.add(key, helper, at)
            args[key] = helper
        else:
            raise ConfigError(f"{at}: name a helper of helpers: (docs/helpers.md), got {value!r}")
    return args


def build_env(cfg: ExperimentConfig, helpers: Helpers | None = None):
    """The environment of ``cfg.env``, under ``env.on_error`` (comarl/envs/error_policy.py), with
    ``env.reward_scale`` / ``env.reward_shift`` applied. ``helpers``: the run's helper models (None: built here
    from ``cfg.helpers``); the args that name one (``env.args.expert``) get the built helper."""
    entry = get_env(cfg.env.name)
    helpers = helpers if helpers is not None else build_helpers(cfg)
    args = inject_helpers(dict(cfg.env.args), entry.helpers, helpers, "env.args")
    if cfg.train.rollout.num_turns > 1:
        args.setdefault("max_turns", cfg.train.rollout.num_turns)
    roles = cfg.env.centralized_roles or len(cfg.agents)
    try:
        env = entry.build(num_agents=roles, **args)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"env.args ({cfg.env.name}): {e}") from e
    if cfg.env.stages is not None:  # the config's team graph replaces the environment's own (docs/teams.md)
        from .core.stages import attach_stages, parse_stages

        names = [a.name or f"agent{i}" for i, a in enumerate(cfg.agents)]
        env = attach_stages(env, parse_stages(cfg.env.stages, names))
    env = with_error_policy(env, cfg.env.on_error)  # inside the reward processing: a zeroed item is a raw 0
    env = with_reward_processing(env, cfg.env.reward_scale, cfg.env.reward_shift)
    if cfg.env.reward_model is not None:  # MARLHF: the fitted joint reward model's score is the reward
        env = _reward_model_env(env, cfg)
    if cfg.env.judge is not None:  # a generating judge (a helper model) scores each joint response
        from .preference.judge import JudgeEnv

        env = JudgeEnv(env, helpers.get(cfg.env.judge.helper, "env.judge.helper"), cfg.env.judge)
    if cfg.env.centralized_roles:  # one model writes every role (docs/preference.md)
        from .preference.centralized import CentralizedEnv, TaggedFormat
        from .core.stages import stage_graph

        if not stage_graph(env, roles).is_single:
            raise ConfigError(f"env.centralized_roles: {cfg.env.name} runs its roles in stages (docs/teams.md); one "
                              f"model writing every role in one completion cannot read the earlier roles' outputs")

        fmt = TaggedFormat(cfg.env.centralized_tag)
        env = CentralizedEnv(env, fmt.build_prompt, fmt.parse, cfg.env.centralized_failure_reward)
    return env


def _reward_model_env(env, cfg: ExperimentConfig):
    """MARLHF's fitted reward model around ``env``. Under torchrun the process group (and, with
    ``train.hardware.sharding: fsdp``, the run's mesh) exists from here on: the fit is data parallel, the model sharded
    before it; the trainer later finds both as they are."""
    import json
    from pathlib import Path

    import torch

    from .preference.marlhf import reward_model_env
    from .compute import distributed as dist
    from .preference.parallel_fit import ParallelFit
    from .compute.sharding import run_sharding

    settings = cfg.env.reward_model
    if settings is None:
        raise ConfigError("env.reward_model: MARLHF needs the reward model's settings")
    parallel = None
    if dist.init_from_env(cfg.train.hardware.dist_backend):
        parallel = ParallelFit(run_sharding(cfg.train, torch.device(settings.device).type))
    env, report = reward_model_env(env, settings, cfg.train.run.seed, parallel)
    if not dist.is_main():
        return env
    print(f"reward model: held-out pairwise accuracy {report['rm/accuracy']:.3f} "
          f"({int(report['rm/held_out_pairs'])} pairs; trained on {int(report['rm/train_pairs'])})")
    if cfg.train.run.output_dir:
        Path(cfg.train.run.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.train.run.output_dir) / "reward_model.json").write_text(json.dumps(report, indent=2))
    return env


def load_items(cfg: ExperimentConfig, which: str) -> list[dict]:
    src: DataSource | None = getattr(cfg.data, which)
    if src is None:
        return []
    entry = get_env(cfg.env.name)
    try:
        return entry.load_items(src.source, src.split, src.limit)
    except FileNotFoundError as e:
        raise ConfigError(f"data.{which}.source: {e}") from e


def _describe(src: DataSource | None) -> str:
    src = src or DataSource()
    return f"source {src.source or '(default)'!s}, split {src.split or '(default)'!s}, limit {src.limit}"


def build_trainer(cfg: ExperimentConfig, agents=None) -> Trainer:
    """Agents (built unless given), env and items from ``cfg`` -> a ready :class:`Trainer`.

    Raises:
        ConfigError: the eval set shares items with the training set and
            ``data.allow_overlap`` is false (the message names both splits).
    """
    helpers = build_helpers(cfg)  # the Team holds and places them; the environment gets those it names
    env = build_env(cfg, helpers)
    train_items = load_items(cfg, "train")
    eval_items = load_items(cfg, "eval")
    if not cfg.data.allow_overlap:
        try:
            check_no_overlap(train_items, eval_items, f"data.train ({_describe(cfg.data.train)})",
                             f"data.eval ({_describe(cfg.data.eval)})")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return Trainer(agents if agents is not None else cfg.agents, env, train_items, cfg.train,
                   eval_dataset=eval_items, helpers=helpers)


__all__ = ["build_env", "build_helpers", "build_trainer", "inject_helpers", "load_items"]
