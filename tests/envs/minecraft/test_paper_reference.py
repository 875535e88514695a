"""Preset ``paper`` equals the reference repository's reward and follow-up data on the generated command lists.

The numbers come from OpenMLRL/LLM_Collab_Minecraft's own code (``fixtures/reference.json``, written by
``benchmarks/minecraft_compare.py REFERENCE --record``; the script also compares directly when the reference is
checked out). Every case's reward is checked exactly; the follow-up data of every mode on every 7th case (the
comparison script checks them all).
"""
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from minecraft_cases import data_lines, digest, house_cases, str_cases  # noqa: E402
from minecraft_compare import modes_of, my_prompts, my_reward  # noqa: E402

RECORD = json.loads((Path(__file__).parent / "fixtures" / "reference.json").read_text())["records"]
CASES = str_cases() + house_cases()


def test_the_generated_cases_are_the_recorded_ones():
    assert [c.id for c in CASES] == list(RECORD)
    assert len(CASES) == 2160
    kinds = {c.id.split("/")[-1].rstrip("0123456789") for c in CASES}
    assert {"gold", "random", "adversarial", "garbage", "empty", "over_max_commands", "odd_only"} <= kinds


@pytest.mark.parametrize("kind", ["str", "house"])
def test_rewards_equal_the_reference_exactly(kind):
    diffs = [(c.id, RECORD[c.id][0], my_reward(c)) for c in CASES if c.kind == kind]
    wrong = [d for d in diffs if d[1] != d[2]]
    assert not wrong, f"{len(wrong)} of {len(diffs)} differ, e.g. {wrong[:3]}"
    assert all(math.isfinite(r) for _, r, _ in diffs)


def test_follow_up_data_equals_the_reference():
    wrong = []
    for case in CASES[::7]:
        mine = digest([[digest([data_lines(p, "comarl") for p in my_prompts(case, m)]) for m in modes_of(case)]])
        if mine != RECORD[case.id][1]:
            wrong.append(case.id)
    assert not wrong, f"{len(wrong)} cases differ (run benchmarks/minecraft_compare.py for details): {wrong[:5]}"
