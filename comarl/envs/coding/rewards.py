"""Level-based team rewards for the coding tasks (weights are config values).

Function-level tasks (HumanEval, MBPP, CoopHumanEval), ``p`` = fraction of
tests passed, ``[.]`` = 1 if true else 0::

    level 1   r  = w_helper*[helper defined] + w_main*[main defined]     (stop if main is missing)
    level 2   r += w_compiled*[joint program parses]                       (stop if it does not)
    level 3   r += w_tests*p
    level 4   if p > 0 and helper defined and main calls the helper:
                  r += w_uses_helper + w_not_wrapper*[main is not a thin wrapper]
                       - w_ignored*[a helper call's result is thrown away]

Defaults (0.4, 0.6, 0.5, 1.0, 0.5, 1.0, 0.5): maximum 4.0 with two agents,
``w_main + w_compiled + w_tests`` = 2.1 in single-agent mode (no helper terms),
minimum 0. ``normalize=True`` divides by the maximum so rewards lie in [0, 1].

ClassEval, ``m`` = share of the class's methods with a real body in the
merged class, ``d`` = share of methods written by two or more agents::

    r = w_methods*m + w_compiled*[merged class parses and m > 0] + w_tests*p - w_overlap*d

(the test term only when the class parses; the compile term only when some method was written: the benchmark's
skeleton with stub methods always parses, so junk text would otherwise earn it). Defaults (1.0, 0.5, 2.0, 0.5):
maximum 3.5.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CodeRewardWeights:
    """Weights of the function-level reward levels (see module docstring)."""

    helper_defined: float = 0.4   # helper agent defined the helper with a body
    main_defined: float = 0.6     # main agent defined the entry point with a body
    compiled: float = 0.5         # the joint program parses
    tests: float = 1.0            # times the fraction of tests passed
    uses_helper: float = 0.5      # main calls the helper (and >= 1 test passes)
    not_wrapper: float = 1.0      # ... and main is more than ``return aux(...)``
    ignored_result: float = 0.5   # subtracted when a helper call's result is discarded
    normalize: bool = False       # divide by the maximum


@dataclass(frozen=True)
class CodeLevels:
    """What was observed about one joint program (inputs of the reward)."""

    helper_defined: bool
    main_defined: bool
    compiled: bool
    pass_fraction: float
    calls_helper: bool = False
    thin_wrapper: bool = False
    ignored_result: bool = False


def code_reward_max(w: CodeRewardWeights, with_helper: bool) -> float:
    """Largest reachable reward: all levels met, no penalty."""
    base = w.main_defined + w.compiled + w.tests
    return base + (w.helper_defined + w.uses_helper + w.not_wrapper if with_helper else 0.0)


def code_reward(lv: CodeLevels, w: CodeRewardWeights, with_helper: bool) -> tuple[float, dict[str, float]]:
    """(team reward, per-level metrics) for one joint program; see module docstring."""
    parts = {"r_helper": 0.0, "r_main": 0.0, "r_compiled": 0.0, "r_tests": 0.0, "r_coop": 0.0}
    if with_helper and lv.helper_defined:
        parts["r_helper"] = w.helper_defined
    if lv.main_defined:
        parts["r_main"] = w.main_defined
        if lv.compiled:
            parts["r_compiled"] = w.compiled
            parts["r_tests"] = w.tests * lv.pass_fraction
            if with_helper and lv.pass_fraction > 0 and lv.helper_defined and lv.calls_helper:
                parts["r_coop"] = (w.uses_helper + (0.0 if lv.thin_wrapper else w.not_wrapper)
                                   - (w.ignored_result if lv.ignored_result else 0.0))
    total = sum(parts.values())
    if w.normalize:
        total /= code_reward_max(w, with_helper)
    return total, parts


@dataclass(frozen=True)
class ClassRewardWeights:
    """Weights of the ClassEval reward (see module docstring)."""

    methods: float = 1.0   # times the share of methods with a real body
    compiled: float = 0.5  # the merged class parses
    tests: float = 2.0     # times the fraction of test classes passed
    overlap: float = 0.5   # times the share of methods written by two or more agents (subtracted)
    normalize: bool = False


def class_reward_max(w: ClassRewardWeights) -> float:
    return w.methods + w.compiled + w.tests


def class_reward(method_share: float, compiled: bool, pass_fraction: float, overlap_share: float,
                 w: ClassRewardWeights) -> tuple[float, dict[str, float]]:
    """(team reward, parts) for one merged class; see module docstring."""
    parts = {
        "r_methods": w.methods * method_share,
        "r_compiled": w.compiled if compiled and method_share > 0 else 0.0,
        "r_tests": w.tests * pass_fraction if compiled else 0.0,
        "r_overlap": -w.overlap * overlap_share,
    }
    total = sum(parts.values())
    if w.normalize:
        total /= class_reward_max(w)
    return total, parts
