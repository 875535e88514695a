"""LoRA agents on one base generate in one mixed-adapter call; results match separate calls."""
import pytest
import torch

import comarl
from comarl.models.agents import AgentConfig, build_agents
from comarl.envs.base import FunctionEnv
from comarl.generation import adapter_groups, generate_adapters
from comarl.models.lora import LoraSettings
from comarl.generation.team import generate_for_agents


def _distinct_adapters(agents):
    """lora_B starts at 0 (adapter = no-op); give each agent its own non-zero B so the adapters differ."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for j, a in enumerate(agents):
            for n, p in a.model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5 * (j + 1))


@pytest.fixture(scope="module")
def pair():
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=10, lora=LoraSettings(r=4)) for _ in range(2)])
    _distinct_adapters(agents)
    return agents


def _count_generate(monkeypatch, model):
    calls = []
    real = model.generate

    def counting(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting)
    return calls


def test_greedy_mixed_batch_equals_separate_calls(pair, monkeypatch):
    # both agents see the SAME prompts (of different lengths: left padding differs between the two paths), so
    # equal outputs per agent and different outputs across agents show each row ran its own agent's adapter
    texts = ["def f(x): return", "a much longer prompt about the weather in spring", "x"]
    prompts = [pair[0].encode_prompts(texts), pair[1].encode_prompts(texts)]
    calls = _count_generate(monkeypatch, pair[0].model.shared.peft_model)
    mixed = generate_for_agents(pair, prompts, 1, greedy=True)
    assert calls == [6]  # one call, 2 agents x 3 prompts
    separate = generate_for_agents(pair, prompts, 1, greedy=True, batch_adapters=False)
    assert calls == [6, 3, 3]
    for m, s in zip(mixed, separate):
        assert m.ids == s.ids and m.truncated == s.truncated and m.texts == s.texts
        assert m.prompt_ids == s.prompt_ids and m.num_samples == s.num_samples == 1
    assert mixed[0].ids != mixed[1].ids  # the adapters differ, so their greedy outputs do
    # a prompt cap splits the 6 agent-prompt pairs into calls of 4 and 2 prompts; same results
    chunked = generate_for_agents(pair, prompts, 1, greedy=True, batch_size=4)
    assert calls[3:] == [4, 2]
    assert [c.ids for c in chunked] == [c.ids for c in separate]


def test_sampled_rows_are_prompt_major_per_agent(pair):
    """top_k=1 sampling picks the argmax: sample k of prompt p must equal the greedy completion of prompt p."""
    texts = ["def f(x): return", "import os"]
    prompts = [a.encode_prompts(texts) for a in pair]
    greedy = generate_for_agents(pair, prompts, 1, greedy=True, batch_adapters=False)
    for a in pair:
        a.config.top_k = 1
    try:
        out = generate_adapters(pair, prompts, 3)
    finally:
        for a in pair:
            a.config.top_k = 0
    for j in range(2):
        assert len(out[j].ids) == 6 and out[j].num_samples == 3
        assert out[j].ids == [greedy[j].ids[p] for p in range(2) for _ in range(3)]
        assert out[j].texts == [greedy[j].texts[p] for p in range(2) for _ in range(3)]


def test_groups_need_one_base_and_equal_settings():
    cfgs = [AgentConfig(model="tiny", lora=LoraSettings(r=2)),  # 0: base A
            AgentConfig(model="tiny"),  # 1: full fine-tuning, own call
            AgentConfig(model="tiny", lora=LoraSettings(r=4)),  # 2: base A (another rank is fine)
            AgentConfig(model="tiny", lora=LoraSettings(r=2), temperature=0.7),  # 3: base A, other sampling
            AgentConfig(model="tiny", lora=LoraSettings(r=2), model_kwargs={"seed": 1})]  # 4: base B
    agents = build_agents(cfgs)
    assert agents[0].model.shared is agents[3].model.shared is not agents[4].model.shared
    assert adapter_groups(agents) == [[0, 2], [1], [3], [4]]
    assert adapter_groups(agents, greedy=True) == [[0, 2, 3], [1], [4]]  # greedy ignores the sampling settings
    agents[2].config.max_new_tokens = 5
    assert adapter_groups(agents, greedy=True) == [[0, 3], [1], [2], [4]]
    with pytest.raises(ValueError, match="not one adapter group"):
        generate_adapters([agents[0], agents[4]], [[[5]], [[5]]], 1)


def test_mixed_team_trains_with_one_call_per_base(tmp_path, monkeypatch):
    """[LoRA, full, LoRA] with MAReMax: per turn one sampled + one greedy call on the base, same for the full agent."""
    cfg = comarl.TrainConfig(algorithm="maremax", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[],
                                                  log_samples_steps=0, output_dir=str(tmp_path)))
    agents = [AgentConfig(model="tiny", max_new_tokens=6, lr=1e-2, lora=LoraSettings(r=4) if f else None)
              for f in (True, False, True)]
    env = FunctionEnv([lambda it, c=c: f"{c} {it['q']}" for c in "ABC"],
                      lambda resps, it: (len(resps[0]) - len(resps[2]) + len(resps[1]) / 2) / 10.0)
    t = comarl.Trainer(agents, env, [{"q": "a"}, {"q": "bb"}, {"q": "c"}, {"q": "dd"}], cfg)
    lora_calls = _count_generate(monkeypatch, t.agents[0].model.shared.peft_model)
    full_calls = _count_generate(monkeypatch, t.agents[1].model)
    before = [{n: p.detach().clone() for n, p in a.model.named_parameters()} for a in t.agents]
    t.train()
    assert t.state.step == 2
    # per step: greedy call (2 items x 2 adapters = 4 rows), sampled call (2 items x K=2 x 2 adapters = 8 rows)
    assert lora_calls == [4, 8, 4, 8]
    # greedy: 2 rows; sampled: the 2 prompts are prefilled once and their cache expanded to 2 x K=2 rows
    # (train.hardware.share_prefix; with it off num_return_sequences would expand the 2 rows inside generate)
    assert full_calls == [2, 4, 2, 4]
    for agent, b in zip(t.agents, before):
        assert any(not torch.equal(p, b[n]) for n, p in agent.model.named_parameters()), agent.name
    assert (tmp_path / "checkpoint-2" / "agent2" / "adapter_model.safetensors").exists()


def test_switch_off_keeps_one_call_per_agent(tmp_path, monkeypatch):
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[],
                                                  log_samples_steps=0),
                             hardware=comarl.HardwareConfig(batch_adapters=False))
    agents = [AgentConfig(model="tiny", max_new_tokens=4, lora=LoraSettings(r=2)) for _ in range(2)]
    env = FunctionEnv([lambda it: f"A {it['q']}", lambda it: f"B {it['q']}"], lambda resps, it: 0.5)
    t = comarl.Trainer(agents, env, [{"q": "a"}, {"q": "b"}], cfg)
    assert t.settings.batch_adapters is False
    calls = _count_generate(monkeypatch, t.agents[0].model.shared.peft_model)
    t.train()
    assert calls == [4, 4]  # one call per agent, 2 prompts each prefilled once, expanded to K=2 (share_prefix)
