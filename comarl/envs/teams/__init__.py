"""Environments whose agents act in stages within a turn (``comarl/core/stages.py``, docs/teams.md).

``coding.py``: planner -> coder on HumanEval / CoopHumanEval / MBPP, solver -> verifier -> fixer on MBPP;
``writing.py``: writer -> editor on TL;DR. Each wraps the benchmark's own environment (its data, sandbox,
reward and summary) and adds the team graph and the prompts of its later agents.
"""
