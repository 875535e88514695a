"""The MAGRPO paper's coding rewards (preset ``paper``) as pure functions of what was observed.

Function level (HumanEval, MBPP, CoopHumanEval), ``[.]`` = 1 if true::

    r  = 0.4*[helper defined] + 0.6*[main defined]            stop unless main is defined
    r += 0.5*[program parses]                                 stop unless it parses
    r += passed/n                                             stop if n = 0 (no test line found)
    if passed > 0 and a helper text was found and main mentions ``helper(``:
        r += 0.5 + 1.0*[main is not a wrapper] - 0.5*[a helper result is ignored]

Maximum 4.0; one agent (no helper) 2.1. "Defined", "wrapper" and "ignored"
are the paper's text tests (``paper_text.py``); unlike preset ``default`` the
cooperation bonus needs only a helper *text*, not a defined helper.

ClassEval, ``M`` = methods to write, ``v`` = methods whose text (from the
assigned agent) parses, ``o`` = methods written by two or more agents::

    r = 2*v/M + 4*passed/run - o/M        and r = 0 when the merged module does not compile

Maximum 6.0 (the paper's configs then shift by -6).
"""
from __future__ import annotations

HELPER_DEFINED, MAIN_DEFINED, PARSES, TESTS, USES_HELPER, NOT_WRAPPER, IGNORED = 0.4, 0.6, 0.5, 1.0, 0.5, 1.0, 0.5


def paper_code_reward(helper_defined: bool, main_defined: bool, parses: bool, n_tests: int, passed: int,
                      helper_found: bool, calls_helper: bool, wrapper: bool,
                      ignored: bool) -> tuple[float, dict[str, float]]:
    """(team reward, parts) of the paper's function-level reward; see the module docstring.

    ``passed`` counts tests as the paper did (``paper_text.paper_pass_count``);
    ``helper_found``: the helper agent's text contains a ``def`` of the helper.
    """
    parts = {"r_helper": 0.0, "r_main": 0.0, "r_compiled": 0.0, "r_tests": 0.0, "r_coop": 0.0}
    reward = 0.0
    if helper_defined:
        parts["r_helper"] = HELPER_DEFINED
        reward += HELPER_DEFINED
    if not main_defined:
        return reward, parts
    parts["r_main"] = MAIN_DEFINED
    reward += MAIN_DEFINED
    if not parses:
        return reward, parts
    parts["r_compiled"] = PARSES
    reward += PARSES
    if n_tests <= 0:
        return reward, parts
    parts["r_tests"] = TESTS * passed / n_tests
    reward += parts["r_tests"]
    if passed > 0 and helper_found and calls_helper:
        coop = USES_HELPER
        reward += USES_HELPER  # same order of additions as the paper, so floats match exactly
        if not wrapper:
            coop += NOT_WRAPPER
            reward += NOT_WRAPPER
        if ignored:
            coop -= IGNORED
            reward -= IGNORED
        parts["r_coop"] = coop
    return reward, parts


def paper_class_reward(total_methods: int, valid_methods: int, overlap: int, compiles: bool, tests_run: int,
                       passed: int) -> tuple[float, dict[str, float]]:
    """(team reward, parts) of the paper's ClassEval reward; see the module docstring."""
    lv1 = 2.0 * valid_methods / total_methods if total_methods > 0 else 0.0
    lv2 = 4.0 * passed / tests_run if tests_run > 0 else 0.0
    lv3 = -float(overlap) / total_methods if total_methods > 0 else 0.0
    parts = {"r_methods": lv1, "r_tests": lv2, "r_overlap": lv3}
    if not compiles:
        return 0.0, {k: 0.0 for k in parts}
    return float(lv1 + lv2 + lv3), parts
