"""Reward integrity, round 3: multi-turn feedback cannot be copied into a pass.

The lookup-table policy (benchmarks/feedback_leak.py) codes nothing: it answers every call with the expected
value its prompt quotes for exactly those arguments (and, variant ``guess``, the value quoted most otherwise).
Through every shipped multi-turn coding config, on a few items each: under ``default`` its reward's pass rate at
turn 2 is no higher than at turn 1 (copying the feedback, or the task's own examples, earns nothing); under
``paper`` (the reference's feedback) the gain is measured, and must be there, since docs/coding.md states it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import feedback_leak  # noqa: E402

CONFIGS = feedback_leak.multi_turn_coding_configs()
LIMITS = {"test_timeout_s": 5.0, "total_timeout_s": 40.0}


def _unique_envs(paths):
    """One config per distinct environment section (the smoke twins test the same env)."""
    seen, out = set(), []
    for p in paths:
        cfg = yaml.safe_load(p.read_text())
        key = repr((cfg["env"], len(cfg["agents"]), cfg["data"]["train"]["source"]))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _preset(path: Path) -> str:
    return (yaml.safe_load(path.read_text())["env"].get("args") or {}).get("preset", "default")


def test_every_shipped_multi_turn_coding_config_is_measured():
    names = {p.relative_to(ROOT).as_posix() for p in CONFIGS}
    assert {"configs/coding/mbpp_2turn.yaml", "configs/coding/humaneval_2turn.yaml",
            "configs/coding/coophumaneval_2turn.yaml", "configs/coding/classeval_2turn.yaml",
            "configs/paper/mbpp.yaml", "configs/ac/humaneval_iac.yaml"} <= names


@pytest.mark.parametrize("path", [p for p in _unique_envs(CONFIGS) if _preset(p) in ("default", "comarl")],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
@pytest.mark.parametrize("variant", ["feedback", "prompt", "guess"])
def test_copying_earns_nothing_under_default(shared_data, path, variant):
    """``feedback`` copies what the feedback quotes, ``prompt`` also the task's examples, ``guess`` answers the
    value quoted most for any other arguments (a yes/no task's ``True``)."""
    row = feedback_leak.measure(path, limit=6, limits=LIMITS, variant=variant)
    assert row["turn2_pass_rate"] <= row["turn1_pass_rate"], row


def test_the_paper_feedback_gain_is_measured_not_hidden(shared_data):
    """The reference's level_feedback quotes the first test line with its expected value (sandbox_slice 1), and the
    paper preset scores every test: copying it raises the turn-2 pass rate (docs/coding.md gives the full-data
    numbers)."""
    rows = [feedback_leak.measure(ROOT / f"configs/paper/{name}.yaml", limit=8, limits=LIMITS)
            for name in ("mbpp", "humaneval")]
    assert all(r["turn2_pass_rate"] > r["turn1_pass_rate"] for r in rows), rows
