"""comarl: multi-agent reinforcement learning for teams of cooperating LLM agents."""
from .config import (DataConfig, DataSource, EnvConfig, ExperimentConfig, HardwareConfig, LossConfig, RolloutConfig,
                     RunConfig, TrainConfig, load_config)
from .core.config_io import ConfigError
from .core.stages import Route, Stage, StageGraph, tag_route
from .envs.base import AgentRewards, EnvState, Environment, FunctionEnv, Transition
from .envs.error_policy import with_error_policy
from .envs.program import ProgramEnv
from .models.agents import Agent, AgentConfig, build_agents
from .models.lora import LoraSettings
from .training.loop import Trainer

__version__ = "0.1.0"

__all__ = ["Agent", "AgentConfig", "AgentRewards", "ConfigError", "DataConfig", "DataSource", "EnvConfig",
           "EnvState", "Environment", "ExperimentConfig", "FunctionEnv", "HardwareConfig", "LoraSettings", "LossConfig",
           "ProgramEnv", "RolloutConfig", "Route", "RunConfig", "Stage", "StageGraph", "TrainConfig", "Trainer",
           "Transition", "build_agents", "load_config", "tag_route", "with_error_policy"]
