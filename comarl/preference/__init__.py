"""Preference-based training: joint preference pairs, MADPO settings (see docs/preference.md)."""
from .centralized import CentralizedEnv, ParseError, TaggedFormat
from .judge import JudgeEnv, JudgeSettings
from .pairs import JointPair, joint_returns, select_pairs, tree_pairs
from .reward_model import JointRewardModel, RewardModelEnv
from .settings import DPOSettings, IterativeSettings, PairSettings, PreferenceSettings

__all__ = ["CentralizedEnv", "DPOSettings", "IterativeSettings", "JointPair", "JointRewardModel", "JudgeEnv",
           "JudgeSettings", "PairSettings",
           "ParseError", "PreferenceSettings", "RewardModelEnv", "TaggedFormat", "joint_returns", "select_pairs",
           "tree_pairs"]
