"""The one-stage default of the team graph is today's rollout, bit for bit (issue #30).

Recorded before stages existed (``python tests/components/test_stages_default.py --record`` on the code of commit
3b00843): for a few algorithms and tree shapes, 3 training steps on tiny models with a fixed seed. The test
replays them and compares every generated token (a digest per ``generate`` call), every logged metric and
the weights after the third step (a digest of every parameter's bytes). Digests of floats are exact on
the recording platform (torch version, machine and CPU model in the fixture: two x86_64 CPUs differ in the last
bits of a reduction); elsewhere, or where the fixture does not name the CPU (it was recorded before the CPU
counted), the float digests are not comparable, so the test compares metrics and the float sums of the weights
within 1e-4 (relative) instead; the generated tokens are compared exactly everywhere.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import comarl
from comarl.critics import CriticSettings
from comarl.envs.base import AgentRewards
from comarl.generation.team import generate_for_agents
from recorded_runs import assert_matches, record, recording_generator, run_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "stages_default_regression.json"
ITEMS = [{"n": i} for i in range(4)]


def _reward(responses, item):
    """Per-agent rewards from the texts' first characters (a deterministic function of the tokens)."""
    a, b = (ord(r.strip()[0]) % 3 if r.strip() else 3 for r in responses)
    return AgentRewards((float(a == b) + 0.1 * a, float(a == b) + 0.2 * (b == 1)))


def _team_reward(responses, item):
    return float(sum(_reward(responses, item).values))


def _transition(state, responses):
    return [f"t{state.turn + 1} {i}: {r[:8]}" for i, r in enumerate(responses)]


def _env(reward=_reward):
    return comarl.FunctionEnv([lambda it: f"Say a ({it['n']}):", lambda it: f"Say b ({it['n']}):"], reward,
                              _transition, max_turns=2)


SCENARIOS = {  # algorithm, train.rollout keys, team reward
    "magrpo_cross_2turn": ("magrpo", dict(joint_mode="cross", num_turns=2, discount=0.9), False),
    "maremax_aligned_2turn": ("maremax", dict(joint_mode="aligned", num_turns=2), False),
    "iac_cross_2turn": ("iac", dict(joint_mode="cross", num_turns=2, discount=0.8), False),
    "madpo_cross_2turn": ("madpo", dict(joint_mode="cross", num_turns=2), True),
}


def run_scenario(name: str) -> dict:
    """Train 3 steps; returns the token digest of every generate call, the history and the weights."""
    algorithm, rollout, team_reward = SCENARIOS[name]
    calls: list = []
    recording = recording_generator(generate_for_agents, calls)

    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=2e-2, chat_template=False,
                                 model_kwargs={"seed": i}) for i in range(2)]
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=2, **rollout),
                             run=comarl.RunConfig(batch_size=2, max_steps=3, progress_bar=False, report_to=[], seed=0))
    if algorithm == "iac":
        cfg.critic = CriticSettings(lr=1e-3)
    t = comarl.Trainer(agents, _env(_team_reward if team_reward else _reward), ITEMS, cfg, generator=recording)
    hist = t.train()
    modules = [a.model for a in t.agents] + ([m for m in t.critic.modules()] if t.critic is not None else [])
    return run_record(calls, hist, modules)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_one_stage_default_reproduces_the_recorded_run(name):
    assert_matches(run_scenario(name), json.loads(FIXTURE.read_text()), name)


if __name__ == "__main__":
    if "--record" not in sys.argv:
        sys.exit("usage: PYTHONPATH=.:tests python tests/components/test_stages_default.py --record")
    torch.set_num_threads(1)
    runs = {name: run_scenario(name) for name in sorted(SCENARIOS)}
    record(FIXTURE, runs)
