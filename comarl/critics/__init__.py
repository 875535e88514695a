"""Critics for the actor-critic algorithms (IAC: one per agent; MAAC: one central critic)."""
from .build import build_critic, shard_critic
from .critic import Critic
from .joint_input import resolve_joint_input, role_marker_template
from .settings import CriticSettings
from .value_model import ValueHead, ValueModel

__all__ = ["Critic", "CriticSettings", "ValueHead", "ValueModel", "build_critic", "resolve_joint_input",
           "role_marker_template", "shard_critic"]
