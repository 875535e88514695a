"""Generation with each prompt prefilled once: the same tokens as copying the prompt K times."""
import torch

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation import generate, generate_adapters
from comarl.models.lora import LoraSettings

PROMPTS = [[5, 6, 0, 7, 8, 9], [10, 11], [12], [13, 14, 15, 0, 16, 17, 18, 19]]  # EOS/pad = 0 inside, 1-token


def _sharpen(model):
    """Random tiny models are near-uniform, so greedy repeats one token; larger logits make greedy informative."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "embed_tokens" in n or "lora_B" in n:
                p.mul_(40.0) if "embed" in n else p.normal_(0, 0.3)


def test_greedy_gives_the_tokens_of_the_plain_path():
    agent, = build_agents([AgentConfig(model="tiny", max_new_tokens=10)])
    _sharpen(agent.model)
    k = 3
    plain = generate(agent, [p for p in PROMPTS for _ in range(k)], 1, greedy=True).ids  # HF: no K copies greedy
    shared = generate(agent, PROMPTS, k, greedy=True, share_prefix=True)
    assert shared.ids == plain and shared.num_samples == k
    assert len({tuple(c) for c in plain}) >= 3  # not one degenerate repeated token


def test_sampling_draws_the_same_samples_from_the_same_seed():
    """Same distributions and the same random stream (one multinomial over P*K rows per step)."""
    agent, = build_agents([AgentConfig(model="tiny-llama", max_new_tokens=8, temperature=0.9)])
    out = []
    for share in (False, True):
        torch.manual_seed(7)
        out.append(generate(agent, PROMPTS, 3, share_prefix=share, batch_size=3).ids)
    assert out[0] == out[1]
    assert len({tuple(c) for c in out[0]}) > len(PROMPTS)  # samples of one prompt differ


def test_mixed_adapter_generation_shares_the_prefix_per_adapter():
    lora = LoraSettings(r=4)
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=8, lora=lora),
                           AgentConfig(model="tiny", max_new_tokens=8, lora=lora)])
    _sharpen(agents[0].model.shared.peft_model)  # both adapters get their own random B: they differ
    prompts = [PROMPTS[:2], PROMPTS[2:]]
    greedy = [generate_adapters(agents, prompts, 2, greedy=True, share_prefix=s) for s in (False, True)]
    assert [c.ids for c in greedy[0]] == [c.ids for c in greedy[1]]
    sampled = []
    for share in (False, True):
        torch.manual_seed(3)
        sampled.append([c.ids for c in generate_adapters(agents, prompts, 3, share_prefix=share)])
    assert sampled[0] == sampled[1]
    # the adapter of each row is the one used in the prefill: agent 1 alone gives the same greedy tokens
    alone = generate(agents[1], [p for p in prompts[1] for _ in range(2)], 1, greedy=True).ids
    assert greedy[1][1].ids == alone


def test_the_expanded_prefill_cache_gives_the_logits_of_the_full_prompt():
    """Next-token logits after the last prompt token, from the shared cache vs the prompt copied K times."""
    from comarl.generation.hf import left_pad
    from comarl.generation.shared_prefix import shared_prompt_inputs

    agent, = build_agents([AgentConfig(model="tiny-llama")])
    model, k = agent.model.eval(), 2
    ids, mask = left_pad(PROMPTS, 0)
    inputs = shared_prompt_inputs(model, ids, mask, k)
    (cache_kw, cache), = [(n, v) for n, v in inputs.items() if n not in ("input_ids", "attention_mask")]
    assert cache.get_seq_length() == ids.shape[1] - 1 and inputs["input_ids"].shape == (len(PROMPTS) * k, ids.shape[1])
    rep_ids, rep_mask = inputs["input_ids"], inputs["attention_mask"]
    pos = (rep_mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(input_ids=rep_ids, attention_mask=rep_mask, position_ids=pos).logits[:, -1]
        step = model(input_ids=rep_ids[:, -1:], attention_mask=rep_mask, position_ids=pos[:, -1:],
                     use_cache=True, **{cache_kw: cache}).logits[:, -1]
    assert (full - step).abs().max() < 1e-5
    assert shared_prompt_inputs(model, ids, mask, 1) is None  # K = 1: nothing to share


def test_generation_falls_back_with_one_notice(capfd):
    from comarl.generation.hf import left_pad
    from comarl.generation.shared_prefix import shared_prompt_inputs

    class NoCache(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            return {"logits": self.inner(**kw).logits}

    agent, = build_agents([AgentConfig(model="tiny")])
    ids, mask = left_pad(PROMPTS, 0)
    wrapped = NoCache(agent.model)
    assert shared_prompt_inputs(wrapped, ids, mask, 2) is None
    assert shared_prompt_inputs(wrapped, ids, mask, 2) is None
    assert capfd.readouterr().err.count("shared-prefix generation off for NoCache") == 1
    agent.model.generation_config.cache_implementation = "static"
    assert shared_prompt_inputs(agent.model, ids, mask, 2) is None
    assert "cache_implementation is 'static'" in capfd.readouterr().err
