"""``train.rollout.max_staleness: 0`` (the default) is the loop as it was before overlap existed, bit for bit (#41).

Recorded before the key existed (``python tests/components/test_overlap_default.py --record`` on the code of
commit d3e9ba2): for MAGRPO (two passes, a KL term, two turns), MAREINFORCE and online MADPO, 3 training steps on
tiny models with a fixed seed. The test replays them with the default and with ``max_staleness=0`` given, and
compares every generated token (a digest per ``generate`` call), every logged metric and the weights after the
third step (a digest of every parameter's bytes). As in ``test_stages_default.py``: float digests are exact on
the recording platform (torch version, machine and CPU model in the fixture); elsewhere the test compares the
metrics and the weights' float sums within 1e-4 (relative) instead; the generated tokens exactly everywhere.
"""
from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch

import comarl
from comarl.generation.team import generate_for_agents
from recorded_runs import assert_matches, record, recording_generator, run_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "overlap_default_regression.json"
ITEMS = [{"n": i} for i in range(4)]

SCENARIOS = {  # algorithm, train.rollout keys, train.loss keys
    "magrpo_kl_2pass_2turn": ("magrpo", dict(num_turns=2, discount=0.9), dict(num_iterations=2, kl_beta=0.05)),
    "mareinforce": ("mareinforce", {}, {}),
    "madpo": ("madpo", {}, {}),
}


def _reward(responses, item):
    a, b = (ord(r.strip()[0]) % 3 if r.strip() else 3 for r in responses)
    return float(a == b) + 0.1 * a + 0.2 * (b == 1)


def _transition(state, responses):
    return [f"t{state.turn + 1} {i}: {r[:8]}" for i, r in enumerate(responses)]


def run_scenario(name: str, **rollout_keys) -> dict:
    """Train 3 steps; returns the token digest of every generate call, the history and the weights."""
    algorithm, rollout, loss = SCENARIOS[name]
    calls: list = []
    recording = recording_generator(generate_for_agents, calls)

    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=2e-2, chat_template=False,
                                 model_kwargs={"seed": i}) for i in range(2)]
    env = comarl.FunctionEnv([lambda it: f"Say a ({it['n']}):", lambda it: f"Say b ({it['n']}):"], _reward,
                             _transition, max_turns=2)
    cfg = comarl.TrainConfig(algorithm=algorithm,
                             rollout=comarl.RolloutConfig(num_generations=2, **rollout, **rollout_keys),
                             loss=comarl.LossConfig(**loss),
                             run=comarl.RunConfig(batch_size=2, max_steps=3, progress_bar=False, report_to=[], seed=0))
    t = comarl.Trainer(agents, env, ITEMS, cfg, generator=recording)
    hist = t.train()
    return run_record(calls, hist, [a.model for a in t.agents])


def _given_zero() -> dict:
    """``max_staleness=0`` written out (the key exists since #41)."""
    return {"max_staleness": 0} if "max_staleness" in {f.name for f in fields(comarl.RolloutConfig)} else {}


@pytest.mark.parametrize("given", [False, True], ids=["default", "zero_given"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_max_staleness_zero_reproduces_the_recorded_run(name, given):
    assert_matches(run_scenario(name, **(_given_zero() if given else {})), json.loads(FIXTURE.read_text()), name)


if __name__ == "__main__":
    if "--record" not in sys.argv:
        sys.exit("usage: PYTHONPATH=.:tests python tests/components/test_overlap_default.py --record")
    torch.set_num_threads(1)
    runs = {name: run_scenario(name) for name in sorted(SCENARIOS)}
    record(FIXTURE, runs)
