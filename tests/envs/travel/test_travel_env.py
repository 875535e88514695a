"""TravelPlanner environment: prompts, parsing/merging, reward terms, summary, build errors, loaders."""
import json

import pytest

from comarl.envs.base import EvalRecord
from comarl.envs.registry import get_env
from comarl.envs.travel import catalog as C
from comarl.envs.travel.data import item_query, load_items
from comarl.envs.travel.parse import merge, parse_agent
from comarl.envs.travel.reference import parse_reference
from comarl.envs.travel.reward import TravelRewardWeights, reward_weights


@pytest.fixture(scope="module")
def items():
    from pathlib import Path
    root = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "travelplanner"
    if not root.exists():
        pytest.skip("benchmark data not found")
    return load_items(str(root), "train", 6)


def role_json(plan, fields, as_list=False):
    days = []
    for d in plan:
        entry = {"day": d["days"], **{f: d[f] for f in fields}}
        if as_list and entry.get("attraction", "-") != "-":
            entry["attraction"] = [a for a in entry["attraction"].split(";") if a]
        days.append(entry)
    return json.dumps({"days": days})


def test_parse_repairs_and_failures():
    ok = parse_agent('Sure!\n```json\n{"days": [{"day": 1, "breakfast": "A, X", '
                     '"attraction": ["P, X", "Q, X"],},]}\n```', 3)
    assert ok.ok and ok.repaired
    assert ok.values == {(1, "breakfast"): "A, X", (1, "attraction"): "P, X;Q, X;"}
    assert parse_agent('[{"day": 2, "lunch": "-"}]', 3).values == {(2, "lunch"): "-"}   # a bare list of days
    for bad, why in (("no json here", "no JSON"), ('{"days": [{"day": 1}, {"day": 1}]}', "twice"),
                     ('{"days": [{"day": 4}]}', "not a day"), ('{"days": [{"day": 1', "unbalanced"),
                     ('{"plan": []}', '"days"'), ('{"days": [{"day": 1, "lunch": {"a": 1}}]}', "string")):
        p = parse_agent(bad, 3)
        assert not p.ok and why in p.error, (bad, p.error)


def test_merge_takes_owner_values_and_counts_foreign_slots():
    a = parse_agent('{"days": [{"day": 1, "current_city": "X", "lunch": "L0, X"}]}', 1)
    b = parse_agent('{"days": [{"day": 1, "lunch": "L1, X", "dinner": "D, X"}]}', 1)
    m = merge([a, b], (C.LOGISTICS_FIELDS, C.EXPERIENCE_FIELDS), 1)
    assert m.plan[0]["lunch"] == "L1, X" and m.plan[0]["current_city"] == "X" and m.plan[0]["accommodation"] == "-"
    assert m.filled == [1, 2] and m.foreign == [1, 0]


def test_budget_split_by_hand():
    assert C.budget_split(1000, (400, 200)) == (600.0, 400.0)
    assert C.budget_split(300, (400, 200)) == (200.0, 100.0)


def test_fit_drops_least_useful_first():
    lines = [C.Line("stay X", (True, 10.0), "bad-rule"), C.Line("stay X", (False, 50.0), "pricey"),
             C.Line("stay X", (False, 20.0), "cheap"), C.Line("eat X", (0, 5.0), "meal")]
    kept, dropped = C.fit(lines, max_chars=len("cheap") + len("meal") + len("pricey") + 3)
    assert [ln.text for ln in kept] == ["pricey", "cheap", "meal"] and dropped == 1   # the rule-breaker goes first
    kept, dropped = C.fit(lines, max_chars=len("cheap") + len("meal") + 2)
    assert [ln.text for ln in kept] == ["cheap", "meal"] and dropped == 2


def test_prompts_hold_query_route_budget_and_catalog(items):
    env = get_env("travelplanner").build(2, catalog_chars=800)
    st = env.reset(items[5])                    # 5-day Orlando -> San Antonio -> Houston
    logi, exp = st.prompts
    assert "Day 1: from Orlando to San Antonio" in logi and "Day 3: from San Antonio to Houston" in exp
    assert "Flight Number: F4023177, from Orlando to San Antonio" in logi and "[stay Houston]" in logi
    assert "[eat Houston]" in exp and "Flight Number" not in exp and "transportation" not in exp.split("Answer")[1]
    assert "budget: $3,100" in logi and "your fields may cost about $" in exp
    dropped = st.info["catalog_dropped"]
    assert all(d > 0 for d in dropped)          # 800 characters cannot hold everything
    assert len(logi.split("Catalog")[1].split("Answer")[0]) < 900
    full = get_env("travelplanner").build(2, catalog_chars=10**6).reset(items[5]).info["catalog_dropped"]
    assert full == (0, 0)


def test_route_scaffold_three_day(items):
    q, ref = item_query(items[0]), parse_reference(items[0]["reference"])
    assert [r.current_city for r in C.route_scaffold(q, ref)] == [
        "from St. Petersburg to Rockford", "Rockford", "from Rockford to St. Petersburg"]


def test_annotated_plan_split_by_role_gets_the_maximum(items):
    env = get_env("travelplanner").build(2)
    it = items[0]
    resp = (role_json(it["annotated_plan"], C.LOGISTICS_FIELDS),
            role_json(it["annotated_plan"], C.EXPERIENCE_FIELDS, True))
    [tr] = env.step_batch([env.reset(it)], [resp])
    assert tr.reward == pytest.approx(1.0) == pytest.approx(env.weights.max_reward)
    assert tr.metrics["final_pass"] == 1.0
    assert tr.metrics["agent0/filled"] == 1.0 - 2 / 9   # "-" transport on day 2, no hotel day 3
    # a lazy experience agent: parse ok, nothing filled -> incomplete plan, lazy penalty
    value, m = env.score(it, (resp[0], '{"days": []}'))
    assert m["travel/lazy"] == 0.5 and m["final_pass"] == 0.0
    # by hand: parse 1, grounding 4/4 (2 transports, 2 hotels), 7 of 9 checks (complete information fails, budget
    # is not run), no budget margin for an incomplete plan, half the agents lazy
    assert value == pytest.approx(0.1 * 1 + 0.2 * 1 + 0.4 * 7 / 9 + 0.1 * 0 + 0.2 * 0 - 0.2 * 0.5)
    # logistics also writes the meals: overlap penalty, plan unchanged
    both = json.loads(resp[0])
    for d, src in zip(both["days"], json.loads(resp[1])["days"]):
        d["lunch"] = src["lunch"]
    value, m = env.score(it, (json.dumps(both), resp[1]))
    assert m["travel/overlap"] == pytest.approx(2 / 21) and m["final_pass"] == 1.0
    assert value == pytest.approx(1.0 - 0.1 * 2 / 21)
    # an invented hotel: grounding and sandbox fail
    bad = resp[0].replace("Pure luxury one bdrm + sofa bed on Central Park", "Hotel Nowhere")
    value, m = env.score(it, (bad, resp[1]))
    assert m["travel/invented"] > 0 and m["commonsense/within_sandbox"] == 0.0 and value < 0.8
    # unparseable output is a counted failure
    value, m = env.score(it, ("I cannot help", resp[1]))
    assert m["agent0/parse_fail"] == 1.0 and m["travel/parse"] == 0.5


def test_summarize_and_table(items):
    env = get_env("travelplanner").build(2)
    it = items[0]
    good = (role_json(it["annotated_plan"], C.LOGISTICS_FIELDS), role_json(it["annotated_plan"], C.EXPERIENCE_FIELDS))
    states = [env.reset(it)] * 2
    trs = env.step_batch(states, [good, ("", "")])
    s = env.summarize([EvalRecord(it, [good, ("", "")], trs)])
    # two empty answers merge into a plan of "-": delivered (eval.py delivers any non-empty plan), and it
    # passes 5 of the 8 commonsense checks (tests/envs/travel/test_travel_official.py): 8 + 5 of 16
    assert s["delivery_rate"] == 1.0 and s["final_pass_rate"] == 0.5 and s["commonsense_macro"] == 0.5
    assert s["commonsense_micro"] == 13 / 16
    assert s["hard_micro"] == 0.5 and s["roles"]["logistics"]["parse_fail"] == 0.5
    # comarl's stricter reading (env.args.delivery: comarl_strict): not delivered, passes no check
    strict = get_env("travelplanner").build(2, delivery="comarl_strict")
    st = strict.summarize([EvalRecord(it, [good, ("", "")], strict.step_batch(states, [good, ("", "")]))])
    assert st["delivery_rate"] == 0.5 and st["commonsense_micro"] == 0.5
    table = env.render_table(s)
    assert "final pass rate" in table and "logistics" in table and "50.0%" in table


def test_build_errors_name_the_key():
    build = get_env("travelplanner").build
    with pytest.raises(ValueError, match="unknown key"):
        build(2, catalog=1)
    with pytest.raises(ValueError, match="twice: \\['lunch'\\]"):
        build(2, roles=[["current_city", "transportation", "accommodation", "lunch"],
                        ["breakfast", "attraction", "lunch", "dinner"]])
    with pytest.raises(ValueError, match="unowned"):
        build(2, roles=[["current_city"], ["breakfast"]])
    with pytest.raises(ValueError, match="no default roles for 3"):
        build(3)
    with pytest.raises(ValueError, match="env.args.reward.final"):
        build(2, reward={"final": -1})
    env = build(3, roles=[["current_city", "transportation"], ["accommodation"],
                          ["breakfast", "attraction", "lunch", "dinner"]])
    assert env.role_names == ("agent0", "agent1", "agent2")
    assert build(1).roles[0][0] == "current_city"
    assert reward_weights({"final": 0.5}).max_reward == TravelRewardWeights().max_reward - 0.2 + 0.5


def test_loader_errors(shared_data, tmp_path):
    with pytest.raises(ValueError, match="only for 'train'"):
        load_items(str(shared_data / "travelplanner"), "validation", None)
    with pytest.raises(FileNotFoundError, match="train_ref_info.jsonl"):
        load_items(str(tmp_path), "train", None)
    with pytest.raises(RuntimeError, match="Offline"):
        load_items("osunlp/TravelPlanner", "train", 2)


def test_annotated_plans_through_the_env(shared_data):
    """All 45 annotated plans, split into the two roles: the benchmark's rates and the reward."""
    env = get_env("travelplanner").build(2)
    all_items = load_items(str(shared_data / "travelplanner"), "train", None)
    records = []
    for it in all_items:
        resp = (role_json(it["annotated_plan"], C.LOGISTICS_FIELDS),
                role_json(it["annotated_plan"], C.EXPERIENCE_FIELDS))
        records.append(EvalRecord(it, [resp], env.step_batch([env.reset(it)], [resp])))
    s = env.summarize(records)
    assert s["delivery_rate"] == 1.0
    assert s["commonsense_micro"] == pytest.approx(358 / 360) and s["commonsense_macro"] == pytest.approx(44 / 45)
    assert s["hard_micro"] == pytest.approx(101 / 105) and s["hard_macro"] == pytest.approx(44 / 45)
    assert s["final_pass_rate"] == pytest.approx(44 / 45)
    rewards = [r.transitions[0].reward for r in records]
    assert [i for i, r in enumerate(rewards) if r != pytest.approx(1.0)] == [41]


def test_cost_floors_and_shares_by_hand():
    from dataclasses import replace

    from test_travel_eval import Q, RAW   # 3 people, Salem -> Bend -> Salem, budget 1000

    ref = parse_reference(RAW)
    route = C.route_scaffold(Q, ref)
    assert [r.current_city for r in route] == ["from Salem to Bend", "Bend", "from Bend to Salem"]
    f = C.cost_floors(Q, ref, route)
    # each leg: self-driving 40 x ceil(3/5) beats flight 200 x 3 and taxi 200 x ceil(3/4)
    assert f["transportation"] == 80
    # 2 nights in Bend: Cozy Loft 100 x ceil(3/2) x 2 (Shared Bunk needs 3 nights)
    assert f["accommodation"] == 400
    # one stay day: the 3 cheapest restaurants (10 + 20 + 30) x 3 people, a third per meal
    assert (f["breakfast"], f["lunch"], f["dinner"]) == (60, 60, 60)
    assert C.budget_split(1000, [80 + 400, 180]) == (650, 350)
    assert C.cost_floors(replace(Q, transportation="no self-driving"), ref, route)["transportation"] == 400


def test_each_role_sees_the_catalog_of_its_fields(items):
    env = get_env("travelplanner").build(3, roles=[["current_city", "transportation"], ["accommodation", "attraction"],
                                                   ["breakfast", "lunch", "dinner"]])
    p0, p1, p2 = (p.split("Catalog")[1].split("Answer")[0] for p in env.reset(items[0]).prompts)
    assert "[move St. Petersburg -> Rockford]" in p0 and "[stay" not in p0 and "[eat" not in p0
    assert "[stay Rockford]" in p1 and "[see Rockford]" in p1 and "[move" not in p1 and "[eat" not in p1
    assert "[eat Rockford]" in p2 and "[see" not in p2


def test_catalog_names_are_copyable():
    """A name with a line break is shown by its first line, which the benchmark's substring match still finds."""
    raw = {"Accommodations in Kalamazoo": [{"NAME": "Angie Suite  in the Heights\nSe habla Español", "price": 217.0,
                                            "room type": "Private room", "house_rules": "No pets",
                                            "minimum nights": 3.0, "maximum occupancy": 2, "review rate number": 3.0,
                                            "city": "Kalamazoo"}]}
    ref = parse_reference(raw)
    assert C.entity_name(raw["Accommodations in Kalamazoo"][0]["NAME"]) == "Angie Suite  in the Heights"
    assert ref.accommodation("Angie Suite  in the Heights", "Kalamazoo") is not None
