"""Preference-based training: joint preference pairs, MADPO settings (see docs/preference.md)."""
from .pairs import JointPair, joint_returns, select_pairs, tree_pairs
from .settings import PreferenceSettings

__all__ = ["JointPair", "PreferenceSettings", "joint_returns", "select_pairs", "tree_pairs"]
from .centralized import CentralizedEnv, ParseError, TaggedFormat

__all__ += ["CentralizedEnv", "ParseError", "TaggedFormat"]
from .reward_model import JointRewardModel, RewardModelEnv

__all__ += ["JointRewardModel", "RewardModelEnv"]
