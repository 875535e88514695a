"""Schemas on a vLLM engine: the HF path's forced skeleton, sampled values and forced flags (vllm_schema.py).

Needs ``vllm`` (skipped otherwise; models and tolerance as in tests/components/test_vllm_engine.py).
"""
import pytest

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation import generate
from comarl.generation.vllm_engine import EngineSettings, Sampling
from comarl.generation.vllm_settings import vllm_installed
from comarl.generation.vllm_generator import VLLMGenerator
from comarl.core.schema import Schema, Slot
from test_structured_generation import SCHEMA, _check_rows
from test_vllm_engine import TINY, TOL, hf_token_logprobs

pytestmark = pytest.mark.vllm  # make test runs these with .venv-vllm (pytest -m vllm)
needs_vllm = pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed (scripts/install_vllm_cpu.sh)")


@pytest.fixture(scope="module")
def served():
    if not vllm_installed():
        pytest.skip("vllm is not installed")
    agent, = build_agents([AgentConfig(model="tiny", max_new_tokens=40, model_kwargs=TINY)])
    gen = VLLMGenerator([agent], EngineSettings(cpu_kv_cache_gib=0.25))
    yield agent, gen
    gen.close()


@needs_vllm
def test_greedy_schema_output_equals_hf_with_the_same_forced_flags(served):
    agent, gen = served
    prompts = [agent.encode_prompts(["Plan a day.", "Where to eat?", "no schema here"])]
    schemas = [[SCHEMA, SCHEMA, None]]
    hf = generate(agent, prompts[0], 1, greedy=True, schemas=schemas[0])
    comp, = gen.generate_for_agents([agent], prompts, 1, greedy=True, schemas=schemas)
    assert comp.ids == hf.ids and comp.forced == hf.forced and comp.texts == hf.texts
    assert comp.truncated == hf.truncated
    _check_rows(agent, comp, schemas[0], 1)
    # the engine's log-probs are after the mask: a forced token is certain; a free row's match HF's
    for s in range(2):
        assert all(lp == 0.0 for lp, f in zip(comp.logprobs[s], comp.forced[s]) if f)
    chosen, _ = hf_token_logprobs(agent.model, prompts[0][2], comp.ids[2])
    assert max(abs(a - b) for a, b in zip(chosen.tolist(), comp.logprobs[2])) < TOL


@needs_vllm
def test_sampled_schema_rows_follow_the_schema_per_sample(served):
    agent, gen = served
    tight = Schema(('{"city": "', Slot(2), ', "food": "', Slot(2), '}'))  # values hit their cap: forced terminators
    prompts = [agent.encode_prompts(["Plan a day.", "Where to eat?", "free text"])]
    schemas = [[SCHEMA, tight, None]]
    comp, = gen.generate_for_agents([agent], prompts, 4, schemas=schemas)
    assert len(comp.ids) == 12 and len(comp.forced) == 12
    _check_rows(agent, comp, schemas[0], 4)
    assert len({tuple(i) for i in comp.ids[:4]}) > 1  # the values are sampled per sample


@needs_vllm
def test_schema_checks_as_on_hf_and_refused_by_an_engine_in_its_own_process(served):
    agent, gen = served
    too_long = Schema(("a" * 40,))  # 40+ forced tokens and EOS > max_new_tokens=40
    with pytest.raises(ValueError, match="agents.0.max_new_tokens: agent0's max_new_tokens=40 cannot hold"):
        gen.generate_for_agents([agent], [agent.encode_prompts(["x"])], 1, schemas=[[too_long]])
    engine = next(iter(gen.engines.values()))
    engine.settings.in_process = False  # as an engine in its own process would see it
    try:
        with pytest.raises(ValueError, match="needs an in-process vLLM engine"):
            engine.generate(agent.encode_prompts(["x"]), 1, Sampling.of(agent), schemas=[SCHEMA])
    finally:
        engine.settings.in_process = True
