"""LoRA agents on one shared base: only adapters train, each agent uses only its adapter, save/load/resume."""
import json

import pytest
import torch

import comarl
from comarl.models.agents import AgentConfig, build_agents
from comarl.core.config_io import ConfigError, from_dict
from comarl.envs.base import FunctionEnv
from comarl.objective.logprobs import completion_logprobs
from comarl.models.lora import AdapterModel, LoraSettings
from comarl.runs import checkpoint as ckpt

PROMPT, COMP = [[5, 6, 7]], [[8, 9, 0]]


def _lp(model):
    with torch.no_grad():
        return completion_logprobs(model, PROMPT, COMP, 0)[0]


def _lora_agents(n=2, **kw):
    return build_agents([AgentConfig(model="tiny", lora=LoraSettings(r=4, **kw)) for _ in range(n)])


def _base_state(agent):
    return {k: v.detach().clone() for k, v in agent.model.shared.peft_model.named_parameters() if "lora_" not in k}


def test_agents_share_one_base_and_own_disjoint_adapters():
    a, b = _lora_agents()
    assert isinstance(a.model, AdapterModel) and a.model.shared is b.model.shared
    pa, pb = {id(p) for p in a.model.parameters()}, {id(p) for p in b.model.parameters()}
    assert pa and not pa & pb
    assert all(".agent0." in n for n, _ in a.model.named_parameters())
    base = a.model.shared.peft_model
    assert not any(p.requires_grad for n, p in base.named_parameters() if "lora_" not in n)


def test_forward_uses_only_the_agents_own_adapter():
    a, b = _lora_agents()
    fresh, = build_agents(["tiny"])
    base = _lp(fresh.model)
    assert torch.allclose(_lp(a.model), base, atol=1e-6)  # B = 0 at the start: adapter is a no-op
    with torch.no_grad():
        for n, p in a.model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.05)
    lp_a, lp_b, lp_a2 = _lp(a.model), _lp(b.model), _lp(a.model)
    assert not torch.allclose(lp_a, base, atol=1e-4)
    assert torch.allclose(lp_b, base, atol=1e-6)  # b's adapter still zero: a's must not leak into b
    assert torch.equal(lp_a, lp_a2)


def _team_trainer(tmp_path, lora_flags=(True, True), steps=2, **run):
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=steps, progress_bar=False, report_to=[],
                                                  log_samples_steps=0, output_dir=str(tmp_path), **run))
    agents = [AgentConfig(model="tiny", max_new_tokens=6, lr=1e-2, lora=LoraSettings(r=4) if f else None)
              for f in lora_flags]
    env = FunctionEnv([lambda it: f"A {it['q']}", lambda it: f"B {it['q']}"],
                      lambda resps, it: (len(resps[0]) - len(resps[1])) / 10.0)
    return comarl.Trainer(agents, env, [{"q": "a"}, {"q": "b"}, {"q": "c"}, {"q": "d"}], cfg)


def test_two_lora_agents_train_only_adapters_and_base_stays_bit_identical(tmp_path):
    t = _team_trainer(tmp_path)
    base_before = _base_state(t.agents[0])
    adapters_before = [{n: p.detach().clone() for n, p in a.model.named_parameters()} for a in t.agents]
    t.train()
    for k, v in _base_state(t.agents[0]).items():
        assert torch.equal(v, base_before[k]), k
    for agent, before in zip(t.agents, adapters_before):
        changed = [n for n, p in agent.model.named_parameters() if not torch.equal(p, before[n])]
        assert any("lora_B" in n for n in changed), agent.name
    # the checkpoint holds adapters only, loadable by peft
    folder = tmp_path / "checkpoint-2" / "agent1"
    assert (folder / "adapter_model.safetensors").exists() and not (folder / "model.safetensors").exists()
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == 4


def test_lora_checkpoint_resume_gives_the_same_adapters(tmp_path):
    straight = _team_trainer(tmp_path / "a", steps=2)
    straight.train()
    first = _team_trainer(tmp_path / "b", steps=2, save_steps=1)
    first.total_steps = 1
    first.train()
    resumed = _team_trainer(tmp_path / "b", steps=2, save_steps=1, resume="latest")
    assert resumed.state.step == 1
    for a, r in zip(first.agents, resumed.agents):  # loading put the saved adapters back on the new base
        for (n, p), (_, q) in zip(a.model.named_parameters(), r.model.named_parameters()):
            assert torch.equal(p, q), n
    resumed.train()
    for a, r in zip(straight.agents, resumed.agents):
        for (n, p), (_, q) in zip(a.model.named_parameters(), r.model.named_parameters()):
            assert torch.allclose(p, q, atol=1e-6), n


def test_saved_adapter_loads_with_peft_on_a_fresh_base(tmp_path):
    a, b = _lora_agents()
    with torch.no_grad():
        for n, p in b.model.named_parameters():
            p.add_(0.03 if "lora_B" in n else 0.0)
    ckpt.save_agent_weights(b, tmp_path / "b")
    from peft import PeftModel

    fresh, = build_agents(["tiny"])
    loaded = PeftModel.from_pretrained(fresh.model, str(tmp_path / "b"))
    assert torch.allclose(_lp(loaded), _lp(b.model), atol=1e-6)


def test_mixed_team_full_and_lora(tmp_path):
    t = _team_trainer(tmp_path, lora_flags=(False, True), steps=1)
    full, lora = t.agents
    assert not isinstance(full.model, AdapterModel) and isinstance(lora.model, AdapterModel)
    w0 = {k: v.clone() for k, v in full.model.state_dict().items()}
    t.train()
    assert any(not torch.equal(v, w0[k]) for k, v in full.model.state_dict().items())
    assert (tmp_path / "checkpoint-1" / "agent0" / "model.safetensors").exists()
    assert (tmp_path / "checkpoint-1" / "agent1" / "adapter_model.safetensors").exists()


def test_lora_config_from_yaml_dict_and_errors():
    cfg = from_dict(AgentConfig, {"model": "tiny", "lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj"]}})
    assert cfg.lora == LoraSettings(r=2, alpha=4.0, target_modules=["q_proj"])
    with pytest.raises(ConfigError, match=r"agents.0.lora.r"):
        build_agents([AgentConfig(model="tiny", lora=LoraSettings(r=0))])
    with pytest.raises(ConfigError, match="target_modules|adapter"):
        build_agents([AgentConfig(model="tiny", lora=LoraSettings(target_modules=["no_such_layer"]))])
    agent, = build_agents([AgentConfig(model="tiny", lora=LoraSettings(r=2, target_modules=["q_proj"]))])
    assert all("q_proj" in n for n, _ in agent.model.named_parameters())
