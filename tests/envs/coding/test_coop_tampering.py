"""Reward integrity, round 3: in a two-agent program neither agent's code can rebind or swap the other's, and the
cooperation bonus comes from what ran (the helper was called and its result decided a test), not from the text.

CoopHumanEval's ``x_or_y`` (return x when n is prime, else y); the helper writes ``aux(n)`` (is n prime), the
main agent ``x_or_y``. Default reward weights: helper 0.4, main 0.6, compiled 0.5, tests 1.0 x pass rate, use of
the helper 0.5 + 1.0 when main is more than a wrapper. Each tampering pair must score what its honest
counterpart scores; under the ``paper`` preset (the reference's text rule, one program) the gap is measured and
documented (docs/coding.md).
"""
from __future__ import annotations

import pytest

from comarl.envs.coding import function_env
from comarl.envs.coding.data import load_function_items

HELPER = "def aux(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
GARBAGE = "def aux(n):\n    return 'garbage'\n"
MAIN = "def x_or_y(n, x, y):\n    return x if aux(n) else y\n"
WRONG_MAIN = "def x_or_y(n, x, y):\n    return y\n"
# calls the helper for show, then decides alone
IGNORES = ("def x_or_y(n, x, y):\n    _ = aux(n)\n    prime = n > 1 and all(n % d for d in range(2, n))\n"
           "    return x if prime else y\n")
SOLO = "def x_or_y(n, x, y):\n    prime = n > 1 and all(n % d for d in range(2, n))\n    return x if prime else y\n"
# issue #37, 2a: the main agent rebinds the module's `aux` to its own function inside its body
REBINDS = ("def x_or_y(n, x, y):\n    global aux\n    def aux(k):\n"
           "        return k > 1 and all(k % d for d in range(2, k))\n    return x if aux(n) else y\n")
# issue #37, 2b: a helper whose default argument installs a profile hook that, when the program's module body
# returns, swaps the entry point for a correct one
SWAPS = '''import sys
def _fix(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "<module>" and "x_or_y" in frame.f_globals:
        def x_or_y(n, x, y):
            return x if n > 1 and all(n % d for d in range(2, n)) else y
        frame.f_globals["x_or_y"] = x_or_y
def aux(n, _hook=sys.setprofile(_fix)):
    return True
'''


@pytest.fixture
def item(shared_data):
    items = load_function_items("coophumaneval", str(shared_data / "coophumaneval"), None, None)
    return next(i for i in items if i["entry_point"] == "x_or_y")


def _score(item, pairs, preset="default"):
    env = function_env.FunctionCodingEnv("coophumaneval", 2, preset=preset, sandbox={"test_timeout_s": 5.0})
    try:
        s = env.reset(item)
        return env.step_batch([s] * len(pairs), list(pairs))
    finally:
        env.close()


def test_tampering_pairs_score_as_their_honest_counterparts(item):
    honest, solo, ignores, rebinds, wrong, swaps = _score(
        item, [(HELPER, MAIN), (HELPER, SOLO), (HELPER, IGNORES), (GARBAGE, REBINDS), (HELPER, WRONG_MAIN),
               (SWAPS, WRONG_MAIN)])
    assert honest.reward == pytest.approx(4.0) and honest.metrics["helper_used"] == 1.0
    # a correct main that decides alone: tests, no cooperation bonus, whatever it calls
    assert solo.reward == pytest.approx(2.5) and solo.metrics["calls_helper"] == 0.0
    assert ignores.reward == pytest.approx(2.5)
    assert ignores.metrics["calls_helper"] == 1.0 and ignores.metrics["helper_used"] == 0.0
    # 2a: rebinding `aux` rebinds only the main program's own name; the helper is never called
    assert rebinds.reward == pytest.approx(solo.reward)
    assert rebinds.metrics["calls_helper"] == 0.0
    # 2b: the hook is refused and could reach only the helper's own process: a wrong main stays wrong
    # (`return y` passes 1 of the 3 hidden tests: 0.4 + 0.6 + 0.5 + 1/3)
    assert swaps.reward == pytest.approx(wrong.reward) == pytest.approx(1.5 + 1 / 3)
    assert swaps.metrics["pass_rate"] == wrong.metrics["pass_rate"]


def test_helper_and_main_run_as_separate_programs(item):
    """The main program sees only `aux` of the helper's code (a stand-in that calls across), and only plain
    data crosses: an object of the main program passed to the helper is refused, not shared."""
    helper = "SECRET = 41\ndef aux(n):\n    return n > 1 and all(n % d for d in range(2, n))\n"
    peeks = "def x_or_y(n, x, y):\n    return x if SECRET == 41 or aux(n) else y\n"
    passes_object = "def x_or_y(n, x, y):\n    return x if aux(type('T', (), {})()) else y\n"
    peek, obj = _score(item, [(helper, peeks), (helper, passes_object)])
    assert peek.metrics["pass_rate"] == 0.0  # NameError: SECRET is the helper's
    assert obj.metrics["pass_rate"] == 0.0


def test_paper_preset_keeps_the_reference_text_rule(item):
    """The reference joins both functions into one program and reads the bonus from the text: a main that calls
    `aux` for show and decides alone gets the whole bonus there, more than the honest pair (4.0 against 3.0;
    documented in docs/coding.md, "What the paper preset leaks"); under `default` it gets none."""
    honest, ignores = _score(item, [(HELPER, MAIN), (HELPER, IGNORES)], preset="paper")
    assert ignores.reward == pytest.approx(4.0) and honest.reward == pytest.approx(3.0)
