"""From an :class:`ExperimentConfig` to live objects: agents, environment, items, trainer."""
from __future__ import annotations

from .config import DataSource, ExperimentConfig
from .config_io import ConfigError
from .envs.registry import get_env
from .training.loop import Trainer


def build_env(cfg: ExperimentConfig):
    try:
        entry = get_env(cfg.env.name)
    except KeyError as e:
        raise ConfigError(str(e.args[0])) from None
    args = dict(cfg.env.args)
    if cfg.train.num_turns > 1:
        args.setdefault("max_turns", cfg.train.num_turns)
    try:
        return entry.build(num_agents=len(cfg.agents), **args)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"env.args ({cfg.env.name}): {e}") from e


def load_items(cfg: ExperimentConfig, which: str) -> list[dict]:
    src: DataSource | None = getattr(cfg.data, which)
    if src is None:
        return []
    entry = get_env(cfg.env.name)
    try:
        return entry.load_items(src.source, src.split, src.limit)
    except FileNotFoundError as e:
        raise ConfigError(f"data.{which}.source: {e}") from e


def build_trainer(cfg: ExperimentConfig, agents=None) -> Trainer:
    """Agents (built unless given), env and items from ``cfg`` -> a ready :class:`Trainer`."""
    env = build_env(cfg)
    train_items = load_items(cfg, "train")
    eval_items = load_items(cfg, "eval")
    return Trainer(agents if agents is not None else cfg.agents, env, train_items, cfg.train,
                   eval_dataset=eval_items)


__all__ = ["build_env", "build_trainer", "load_items"]
