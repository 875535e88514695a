"""Team stages through the one training loop: every estimator family, the critics and MADPO train on a staged
team; a router's unchosen agent is left untouched; the config's ``env.stages`` reaches the rollout (issue #30)."""
import pytest
import torch

import comarl
from comarl.config import load_config
from comarl.critics import CriticSettings
from comarl.envs.base import FunctionEnv
from comarl.core.stages import Stage, StageGraph, tag_route


def _reward(responses, item):
    """Planner -> coder: 1 when the coder's first character matches the plan's (mod 3)."""
    p, c = (r.strip()[:1] for r in responses)
    return 1.0 if p and c and ord(p) % 3 == ord(c) % 3 else 0.0


def staged_env():
    env = FunctionEnv([lambda it: f"Plan {it['n']}:", lambda it: f"Code {it['n']}:"], _reward)
    env.stages = StageGraph((Stage((0,)), Stage((1,))), names=("Planner", "Coder"))
    return env


def trainer(algorithm, env=None, n_agents=2, steps=2):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False,
                                 model_kwargs={"seed": i}) for i in range(n_agents)]
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=steps, progress_bar=False, report_to=[],
                                                  seed=0))
    if algorithm == "iac":
        cfg.critic = CriticSettings(lr=1e-3)
    elif algorithm == "maac":
        cfg.critic = CriticSettings(model="tiny", lr=1e-3, critic_type="q")
    return comarl.Trainer(agents, env or staged_env(), [{"n": i} for i in range(4)], cfg)


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("algorithm", ["magrpo", "marloo", "maremax", "mareinforce", "iac", "maac", "madpo"])
def test_every_family_trains_a_staged_team(algorithm):
    t = trainer(algorithm)
    before = [weights(a.model) for a in t.agents]
    hist = t.train()
    assert len(hist) == 2 and hist[0]["tree/leaves"] == 2 * 4  # 2 items x K^2 leaves
    assert hist[0]["count/completions"] >= 2 * (2 + 4)  # planner K per item, coder K per plan
    for a, w in zip(t.agents, before):  # both stages learn (their samples carry credit)
        assert any(not torch.equal(v, w[k]) for k, v in a.model.state_dict().items()), a.name
    assert all(torch.isfinite(torch.tensor(v)) for h in hist for k, v in h.items() if k.endswith("loss"))


def test_router_leaves_the_unchosen_agent_untouched():
    """The router's texts (a random tiny model) never hold a tag, so every branch falls back to the coder: the
    writer writes nothing, gets no gradient and keeps its weights exactly; the coder's change."""
    env = FunctionEnv([lambda it: "Route:", lambda it: "Code:", lambda it: "Write:"],
                      lambda r, it: float(len(r[1]) % 2) + (5.0 if r[2] else 0.0))
    env.stages = StageGraph((Stage((0,)), Stage((1, 2), route=tag_route(0, {"coder": 1, "writer": 2}, [1]))))
    t = trainer("magrpo", env, n_agents=3)
    before = [weights(a.model) for a in t.agents]
    hist = t.train()
    assert all(h["route/agent1"] == 1.0 and h["route/agent2"] == 0.0 for h in hist)
    assert all(torch.equal(v, before[2][k]) for k, v in t.agents[2].model.state_dict().items())
    assert any(not torch.equal(v, before[1][k]) for k, v in t.agents[1].model.state_dict().items())
    assert t.team.counters.get("empty_batch_skips", 0) == 0  # routed out is not an empty batch


def test_config_stages_reach_the_rollout(tmp_path):
    """``env.stages`` in YAML, agents named: the coder's prompt holds the planner's output."""
    from comarl.experiment import build_env

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(
        "agents:\n  - {model: tiny, name: planner}\n  - {model: tiny, name: coder}\n"
        "env:\n  name: tests.components.test_stages_training:plain_env\n"
        "  stages:\n    - [planner]\n    - {agents: [coder], reads: {coder: [planner]}}\n"
        "train: {rollout: {num_generations: 2}}\n")
    cfg = load_config(cfg_file)
    env = build_env(cfg)
    assert [s.agents for s in env.stages.stages] == [(0,), (1,)] and env.stages.name(0) == "planner"
    with pytest.raises(comarl.ConfigError, match="env.stages"):
        load_config(cfg_file, ["env.stages=[[planner], [nobody]]"])


def plain_env(num_agents=2, **_):
    return FunctionEnv([lambda it: "Plan:", lambda it: "Code:"], _reward)


def test_a_centralised_actor_refuses_an_environment_in_stages(tmp_path):
    from comarl.experiment import build_env

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("agents:\n  - {model: tiny}\nenv: {name: mbpp_chain, centralized_roles: 3}\n"
                        "train: {rollout: {num_generations: 2}}\n")
    with pytest.raises(comarl.ConfigError, match="runs its roles in stages"):
        build_env(load_config(cfg_file))
