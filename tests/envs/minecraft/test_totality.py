"""No text makes scoring or the next prompts raise: random unicode, command-like noise, huge numbers, any mode."""
import math
import random
import zlib

import pytest

from comarl.envs.minecraft import build_house, build_str
from comarl.envs.minecraft.data import load_house_items, load_str_items
from comarl.envs.minecraft.feedback import HOUSE_MODES, STR_MODES

WORDS = ["/setblock", "setblock", "/fill", "fill", "/kill", "/SETBLOCK", "~", "^", "~1", "-1", "0", "1", "2", "4",
         "9" * 30, "9" * 5000, "\u0661", "\uff13", "1_0", "+3", "stone", "minecraft:stone", "air", "cave_air",
         "oak_planks", "obsidian", "white_concrete", "planks", "replace", "```", "```mc", "-", "*", "1.", "2)",
         "\n", "\n\n", "\r\n", "\t", " ", "\u2028", "\x85", "\x00", "\u200b", "\U0001f577", "é"]


def texts(rng: random.Random, n: int) -> tuple[str, ...]:
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            out.append("".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(0, 200))))
        else:
            out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randrange(0, 120))))
    return tuple(out)


CONFIGS = [(build_str, n, preset, mode, {}) for n in (1, 2) for preset in ("paper", "default") for mode in STR_MODES]
CONFIGS += [(build_house, n, preset, mode, {"limited_resource": True, "hp": 5, "lim": 3,
                                             "spiders": {"num": 2, "atk_low": 1, "atk_high": 4}})
            for n in (1, 2) for preset in ("paper", "default") for mode in HOUSE_MODES]
CONFIGS += [(build_house, 3, "default", "rect_modification", {}),
            (build_str, 3, "default", "perfect_feedback", {"blocks": [["stone"], ["obsidian"], ["air", "sand"]]})]


@pytest.mark.parametrize("build, n, preset, mode, extra", CONFIGS,
                         ids=[f"{b.__name__}-{n}-{p}-{m}" for b, n, p, m, _ in CONFIGS])
def test_random_text_never_raises(build, n, preset, mode, extra):
    rng = random.Random(zlib.crc32(f"{build.__name__}/{n}/{preset}/{mode}".encode()))
    items = load_str_items(None, "train", None) if build is build_str else load_house_items(None, "train", None)
    env = build(n, preset=preset, mode=mode, max_turns=2, previous_response=True, max_commands=40, **extra)
    for k in range(12):
        state = env.reset(items[k % len(items)])
        first = env.step_batch([state, state], [texts(rng, n), texts(rng, n)])
        for tr in first:
            assert math.isfinite(tr.reward) and not tr.done
            assert all(isinstance(p, str) and p for p in tr.next_state.prompts)
        last = env.step_batch([t.next_state for t in first], [texts(rng, n), texts(rng, n)])
        assert all(math.isfinite(t.reward) and t.done for t in last)
