"""TravelPlanner ``structured``: each agent's JSON skeleton (every day, every owned field) is a schema; the values
are the only sampled text, and every structured answer parses."""
import json

import pytest

from comarl.models.agents import AgentConfig, build_agents
from comarl.envs.registry import get_env
from comarl.envs.travel import catalog as C
from comarl.envs.travel.data import load_items
from comarl.rollout import RolloutSettings, collect_rollout
from comarl.core.schema import Slot, schema_of


def test_schema_of_a_two_day_logistics_answer():
    env = get_env("travelplanner").build(2, structured=True, slot_tokens={"transportation": 7})
    sc = env.answer_schema(0, 2)
    assert sc.parts == ('{"days": [{"day": 1, "current_city": "', Slot(24), ', "transportation": "', Slot(7),
                        ', "accommodation": "', Slot(32), '}, {"day": 2, "current_city": "', Slot(24),
                        ', "transportation": "', Slot(7), ', "accommodation": "', Slot(32), '}]}')
    assert json.loads(sc.fill(["A", "-", "h", "from A to B", "f", "-"])) == {"days": [
        {"day": 1, "current_city": "A", "transportation": "-", "accommodation": "h"},
        {"day": 2, "current_city": "from A to B", "transportation": "f", "accommodation": "-"}]}


def test_annotated_plan_through_the_schema_passes(shared_data):
    env = get_env("travelplanner").build(2, structured=True, catalog_chars=300)
    it = load_items(str(shared_data / "travelplanner"), "train", 1)[0]
    state = env.reset(it)
    resp = []
    for i, fields in enumerate((C.LOGISTICS_FIELDS, C.EXPERIENCE_FIELDS)):
        sc = schema_of(state.prompts[i])
        assert len(sc.slots) == it["days"] * len(fields)
        values = [json.dumps(str(d[f]))[1:-1] for d in it["annotated_plan"] for f in fields]
        resp.append(sc.fill(values))
    [tr] = env.step_batch([state], [tuple(resp)])
    assert tr.reward == pytest.approx(1.0) and tr.metrics["final_pass"] == 1.0


def test_random_tiny_agents_always_parse(shared_data):
    """By construction: random models, sampled values, K=3, both agents: no parse failure."""
    env = get_env("travelplanner").build(2, structured=True, catalog_chars=300, slot_tokens=2)
    items = load_items(str(shared_data / "travelplanner"), "train", 1)
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=190, temperature=1.0) for _ in range(2)])
    out = collect_rollout(agents, env, items, RolloutSettings(num_generations=3))
    for i in range(2):
        assert out.metrics[f"env/agent{i}/parse_fail"] == 0.0
        assert all(json.loads(t)["days"] for t in out.agents[i].texts)
        assert out.agents[i].forced is not None and not out.agents[i].truncated.any()
    # an agent that does not follow schemas writes free text: random models do not produce JSON
    free = build_agents([AgentConfig(model="tiny", max_new_tokens=8, structured=False) for _ in range(2)])
    out = collect_rollout(free, env, items, RolloutSettings(num_generations=2))
    assert out.agents[0].forced is None and out.metrics["env/agent0/parse_fail"] == 1.0


@pytest.mark.parametrize("args, match", [
    (dict(structured="yes"), "env.args.structured"),
    (dict(structured=True, prefill=True), "exclude each other"),
    (dict(structured=True, slot_tokens=0), "env.args.slot_tokens"),
    (dict(structured=True, slot_tokens={"lunch": 0}), r"env.args.slot_tokens.lunch"),
    (dict(structured=True, slot_tokens={"hotel": 3}), "unknown field 'hotel'"),
])
def test_bad_structured_args_name_the_key(args, match):
    with pytest.raises(ValueError, match=match):
        get_env("travelplanner").build(2, **args)
