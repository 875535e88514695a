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

import hashlib
import json
import platform
import sys
from pathlib import Path

import pytest
import torch

import comarl
from comarl.critics import CriticSettings
from comarl.envs.base import AgentRewards
from comarl.generation.team import generate_for_agents

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


def _digest(chunks) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c if isinstance(c, bytes) else str(c).encode())
    return h.hexdigest()[:16]


def run_scenario(name: str) -> dict:
    """Train 3 steps; returns the token digest of every generate call, the history and the weights."""
    algorithm, rollout, team_reward = SCENARIOS[name]
    calls = []

    def recording(agents, prompt_ids, k, **kw):
        out = generate_for_agents(agents, prompt_ids, k, **kw)
        calls.append(_digest([json.dumps(prompt_ids), json.dumps([c.ids for c in out])]))
        return out

    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=2e-2, chat_template=False,
                                 model_kwargs={"seed": i}) for i in range(2)]
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=2, **rollout),
                             run=comarl.RunConfig(batch_size=2, max_steps=3, progress_bar=False, report_to=[], seed=0))
    if algorithm == "iac":
        cfg.critic = CriticSettings(lr=1e-3)
    t = comarl.Trainer(agents, _env(_team_reward if team_reward else _reward), ITEMS, cfg, generator=recording)
    hist = t.train()
    weights = {}
    modules = [a.model for a in t.agents] + ([m for m in t.critic.modules()] if t.critic is not None else [])
    for n, m in enumerate(modules):
        params = sorted(m.state_dict().items())
        weights[f"module{n}"] = {
            "digest": _digest(v.detach().cpu().contiguous().numpy().tobytes() for _, v in params),
            "sum": float(sum(v.detach().double().sum() for _, v in params)),
            "abs_sum": float(sum(v.detach().double().abs().sum() for _, v in params))}
    metrics = [{k: v for k, v in sorted(h.items()) if not k.startswith(("time/", "tokens_per_s"))} for h in hist]
    return {"generate_calls": calls, "metrics": metrics, "weights": weights}


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def _platform() -> dict:
    return {"torch": torch.__version__, "machine": platform.machine(), "python": sys.version.split()[0],
            "cpu": _cpu()}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_one_stage_default_reproduces_the_recorded_run(name):
    recorded = json.loads(FIXTURE.read_text())
    want = recorded["runs"][name]
    got = run_scenario(name)
    assert got["generate_calls"] == want["generate_calls"], "generated tokens differ from the recorded run"
    exact = recorded["platform"] == _platform()
    for step, (g, w) in enumerate(zip(got["metrics"], want["metrics"])):
        assert sorted(g) == sorted(w), f"step {step}: metric names differ"
        for k in w:
            if exact:
                assert g[k] == w[k] or (g[k] != g[k] and w[k] != w[k]), f"step {step}: {k} {g[k]} != {w[k]}"
            else:
                assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-5, nan_ok=True), f"step {step}: {k}"
    for m, w in want["weights"].items():
        if exact:
            assert got["weights"][m]["digest"] == w["digest"], f"{m}: weights after 3 steps differ"
        else:
            assert got["weights"][m]["sum"] == pytest.approx(w["sum"], rel=1e-4)
            assert got["weights"][m]["abs_sum"] == pytest.approx(w["abs_sum"], rel=1e-4)


if __name__ == "__main__":
    if "--record" not in sys.argv:
        sys.exit("usage: PYTHONPATH=. python tests/components/test_stages_default.py --record")
    torch.set_num_threads(1)
    runs = {name: run_scenario(name) for name in sorted(SCENARIOS)}
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps({"platform": _platform(), "runs": runs}, indent=1) + "\n")
    print(f"wrote {FIXTURE}")
