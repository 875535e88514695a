"""Coding environments: HumanEval, MBPP, CoopHumanEval (helper + main) and ClassEval.

Importing ``comarl.envs.coding.function_env`` registers humaneval / mbpp /
coophumaneval; ``comarl.envs.coding.classeval`` registers classeval. See
docs/coding.md.
"""
from .passk import pass_at_k, render_table, summarize_records
from .rewards import ClassRewardWeights, CodeRewardWeights

__all__ = ["pass_at_k", "render_table", "summarize_records", "ClassRewardWeights", "CodeRewardWeights"]
