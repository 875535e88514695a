"""Forced answer start (comarl.core.prefill) and the TravelPlanner ``prefill`` option: the JSON opening is
prompt, not completion, so it is never sampled nor in the loss; the env parses it back."""
import json
import pickle

import pytest

from comarl.models.agents import AgentConfig, build_agents
from comarl.envs.registry import get_env
from comarl.envs.travel import catalog as C
from comarl.envs.travel.data import load_items
from comarl.core.prefill import prefill_of, with_prefill
from comarl.rollout import RolloutSettings, collect_rollout


def test_prefilled_prompt_is_a_string_that_keeps_its_prefill():
    p = with_prefill("Plan a trip.", '{"days": [')
    assert p == "Plan a trip." and prefill_of(p) == '{"days": ['
    assert prefill_of(pickle.loads(pickle.dumps(p))) == '{"days": ['
    assert with_prefill("x", "") == "x" and type(with_prefill("x", "")) is str and prefill_of("x") == ""


@pytest.fixture(scope="module")
def agent():
    return build_agents([AgentConfig(model="tiny", max_new_tokens=4)])[0]


def test_agent_puts_the_prefill_inside_the_assistant_turn(agent):
    rendered = agent.render_prompt(with_prefill("Plan a trip.", '{"days": [{"day": 1, "lunch": "'))
    assert rendered.endswith('<|assistant|>\n{"days": [{"day": 1, "lunch": "')
    assert agent.render_prompt("Plan a trip.").endswith("<|assistant|>\n")


def test_env_prefill_roundtrip_and_rollout(agent, shared_data):
    env = get_env("travelplanner").build(2, prefill=True, catalog_chars=300)
    it = load_items(str(shared_data / "travelplanner"), "train", 1)[0]
    state = env.reset(it)
    assert [prefill_of(p) for p in state.prompts] == ['{"days": [{"day": 1, "current_city": "',
                                                      '{"days": [{"day": 1, "breakfast": "']
    # the policy writes only what follows the forced opening
    resp = []
    for i, fields in enumerate((C.LOGISTICS_FIELDS, C.EXPERIENCE_FIELDS)):
        full = json.dumps({"days": [{"day": d["days"], **{f: d[f] for f in fields}} for d in it["annotated_plan"]]})
        assert full.startswith(env.answer_prefix(i))
        resp.append(full[len(env.answer_prefix(i)):])
    [tr] = env.step_batch([state], [tuple(resp)])
    assert tr.reward == pytest.approx(1.0) and tr.metrics["final_pass"] == 1.0
    # in a rollout the forced tokens end the prompt ids; completions are sampled after them
    agents = [agent, agent]
    out = collect_rollout(agents, env, [it], RolloutSettings(num_generations=2))
    prefix_ids = agent.tokenizer(env.answer_prefix(0), add_special_tokens=False)["input_ids"]
    samples = out.agents[0]
    assert all(ids[-len(prefix_ids):] == prefix_ids for ids in samples.prompt_ids)
    assert all(len(c) <= 4 for c in samples.completion_ids)


def test_prefill_must_be_a_bool():
    with pytest.raises(ValueError, match="env.args.prefill"):
        get_env("travelplanner").build(2, prefill="yes")
