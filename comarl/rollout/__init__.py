"""Rollouts: the breadth-first tree of turns and team stages with its credited returns (tree.py), and a
ProgramEnv's runs (program.py)."""
