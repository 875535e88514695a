"""Rollouts: the breadth-first tree of turns and team stages with its credited returns, and a ProgramEnv's runs.

``tree.py`` grows the tree (``collect_rollout``); its parts are ``returns.py`` (joint actions, credit, tree
sizes), ``settings.py`` (``RolloutSettings``), ``nodes.py``, ``sampling.py`` (one stage of sampling; the
sharded ``join_rollout``), ``greedy.py`` (MAReMax's greedy chains) and ``record.py`` (each agent's samples, the
``RolloutTree``, metrics). ``program.py`` runs a user's program through the gateway instead.
"""
from .record import rollout_items, rollout_metrics
from .returns import check_tree_size, credit_returns, joint_actions, reward_vector, samples_per_item, siblings_end
from .sampling import join_rollout
from .settings import RolloutSettings
from .tree import collect_rollout

__all__ = ["RolloutSettings", "check_tree_size", "collect_rollout", "credit_returns", "join_rollout",
           "joint_actions", "reward_vector", "rollout_items", "rollout_metrics", "samples_per_item", "siblings_end"]
