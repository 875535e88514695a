"""bfcl_parallel / bfcl_multiturn_flat: parsing agents' calls, the team reward (numbers by hand),
role modes, config errors, loaders (local BFCL files, hub-style JSONL, offline hub) and `comarl eval`."""
import json
from pathlib import Path

import pytest

from comarl.cli import main
from comarl.envs.base import EvalRecord
from comarl.envs.registry import get_env
from comarl.envs.tools.calls import ToolCall, call_key, merge_calls, parse_calls
from comarl.envs.tools.reward import RewardWeights, even_split, name_f1, reward_weights, score_team

ROOT = Path(__file__).resolve().parents[3]

SCHEMAS = [
    {"name": "f", "parameters": {"type": "dict", "required": ["n"], "properties": {"n": {"type": "integer"}}}},
    {"name": "g.h", "parameters": {"type": "dict", "required": ["s"], "properties": {"s": {"type": "string"}}}},
]
GOLD = [{"f": {"n": [1]}}, {"f": {"n": [2]}}, {"g.h": {"s": ["x"]}}]
ITEM = {"id": "t0", "category": "parallel", "request": "Do f for 1 and 2, then g.h for x.", "function": SCHEMAS,
        "ground_truth": GOLD}


# -- parsing

@pytest.mark.parametrize("text, want", [
    ("f(n=1)\ng.h(s='x')", [("f", {"n": 1}), ("g.h", {"s": "x"})]),
    ("[f(n=1), f(n=2)]", [("f", {"n": 1}), ("f", {"n": 2})]),
    ("Sure, here you go:\n```python\nf(n=1)\n```\nHope it helps!", [("f", {"n": 1})]),
    ("<think>maybe f(n=9)</think>\n1. f(n=1)\n2. g.h(s=\"a, b)\")", [("f", {"n": 1}), ("g.h", {"s": "a, b)"})]),
    ("I would call f(n=-2) here.", [("f", {"n": -2})]),
    ("Here (in two calls):\nf(\n  n=1,\n)\nthen g.h(s='a (b')", [("f", {"n": 1}), ("g.h", {"s": "a (b"})]),
    ("f(n=1, flag=true, v=null, xs=(1, 2))", [("f", {"n": 1, "flag": True, "v": None, "xs": (1, 2)})]),
    ("[f(n=96 * 1), g.h(s='a' + 'b')]", [("f", {"n": 96}), ("g.h", {"s": "ab"})]),   # computed, as BFCL does
])
def test_parse_python(text, want):
    got = parse_calls(text, "python", ["f", "g.h"])
    assert got.ok and [(c.name, dict(c.args)) for c in got.calls] == want


@pytest.mark.parametrize("text, want", [
    ('[{"name": "f", "arguments": {"n": 1}}, {"g.h": {"s": "x"}}]', [("f", {"n": 1}), ("g.h", {"s": "x"})]),
    ('```json\n[{"name": "f", "arguments": "{\\"n\\": 2}"}]\n```', [("f", {"n": 2})]),
    ('Calls: {"name": "f", "parameters": {"n": 3}} done', [("f", {"n": 3})]),
    # BFCL's own JSON form
    ('[{"function": "f", "parameters": {"n": 1}}, {"function": "g.h", "parameters": {"s": "x"}}]',
     [("f", {"n": 1}), ("g.h", {"s": "x"})]),
    ('```json\n[{"function": "f", "parameters": {}}]\n```', [("f", {})]),
])
def test_parse_json(text, want):
    got = parse_calls(text, "json")
    assert got.ok and [(c.name, dict(c.args)) for c in got.calls] == want
    assert parse_calls(text, "auto", ["f"]).calls == got.calls or not text.startswith("[")


def test_parse_failures_and_empty():
    assert parse_calls("", "python") == parse_calls("[]", "json") == parse_calls("```\n[]\n```", "auto")
    assert parse_calls("[]", "python").ok and not parse_calls("[]", "python").calls
    bad = parse_calls("f(1)", "python", ["f"])
    assert not bad.ok and "positional" in bad.errors[0]
    assert not parse_calls("f(n=1 + x)", "python", ["f"]).ok          # not a literal
    assert not parse_calls("f(n=1 / 0)", "python", ["f"]).ok          # Python's own error
    assert not parse_calls("f(n=2 ** 100000)", "python", ["f"]).ok    # too large to compute here
    assert not parse_calls("no calls here", "python", ["f"]).ok
    assert not parse_calls("<think>f(n=1) or maybe", "python", ["f"]).ok       # cut off while thinking
    assert not parse_calls("f(n=1)", "json").ok
    mixed = parse_calls("f(n=1)\nf(2)", "python", ["f"])              # good calls kept, error reported
    assert [c.args for c in mixed.calls] == [{"n": 1}] and not mixed.ok
    with pytest.raises(ValueError, match="call format"):
        parse_calls("f()", "yaml")


def test_canonical_keys_and_team_merge():
    a = ToolCall("f", {"city": "New York ", "n": 2, "xs": [1, 2]})
    b = ToolCall("f", {"xs": [1, 2], "n": 2, "city": "New York"})
    assert call_key(a) == call_key(b)
    for other in ({"n": 2.0}, {"xs": (1, 2)}, {"city": "new york"}):
        assert call_key(ToolCall("f", {**b.args, **other})) != call_key(b)
    assert call_key(ToolCall("f", {"n": True})) != call_key(ToolCall("f", {"n": 1}))
    # multiset union: shared calls once, an agent's own repeats kept
    x, y, z = ToolCall("f", {"n": 1}), ToolCall("f", {"n": 2}), ToolCall("g", {})
    assert merge_calls([[x, x, y], [b, x, z]]) == [x, x, y, b, z]
    assert merge_calls([[x], [x], [x]]) == [x] and merge_calls([[], []]) == []


def test_team_merge_reads_values_as_their_declared_type():
    """BFCL's checker reads an int given for a float parameter as that float, and a tuple for a tuple
    parameter as a list: such calls are one call in the team. Case and other types stay distinct."""
    schemas = [{"name": "bmi", "parameters": {"type": "dict", "required": ["height"], "properties": {
        "height": {"type": "float"}, "n": {"type": "integer"}, "unit": {"type": "string"},
        "span": {"type": "tuple", "items": {"type": "integer"}}}}}]
    six, six_f = ToolCall("bmi", {"height": 6}), ToolCall("bmi", {"height": 6.0})
    assert call_key(six, schemas) == call_key(six_f, schemas) and call_key(six) != call_key(six_f)
    assert merge_calls([[six], [six_f]], schemas) == [six] and len(merge_calls([[six], [six_f]])) == 2
    assert call_key(ToolCall("bmi", {"span": (1, 2)}), schemas) == call_key(ToolCall("bmi", {"span": [1, 2]}), schemas)
    for a, b in (({"n": 6}, {"n": 6.0}), ({"unit": "cm"}, {"unit": "CM"}), ({"height": True}, {"height": 1.0})):
        assert call_key(ToolCall("bmi", a), schemas) != call_key(ToolCall("bmi", b), schemas), (a, b)
    # through the reward: both agents write the whole answer, one with 6, the other with 6.0
    gold = [{"bmi": {"height": [6.0]}}, {"bmi": {"height": [7.0]}}]
    r, m = score_team([[six, ToolCall("bmi", {"height": 7})], [six_f, ToolCall("bmi", {"height": 7.0})]],
                      [True, True], gold, schemas, RewardWeights())
    assert m["exact"] == 1 and m["team_calls"] == 2 and m["cross_duplicate"] == 1


# -- reward, by hand

def test_reward_terms_by_hand():
    """Gold f(n=1), f(n=2), g.h(s='x'). Agent 0: f(n=1) twice and g.h(s='y'); agent 1: f(n=1).
    Team (multiset union): f(n=1), f(n=1), g.h(s='y') -> not exact. parse 1; names {f: 2, g.h: 1}
    as gold: F1 1; args: one f(n=1) pairs with gold 0 (1.0), the other gets n wrong for gold 1 (0),
    g.h(s='y') gets s wrong (0): 1/3; count 3 vs 3: 1; f(n=1) by both agents: cross 1/3; agent 0
    repeats f(n=1), which fills one gold call: 1 surplus, 1/3; calls less surplus [2, 1] = even
    split of 3: unbalanced 0; no lazy agent.
    reward = .05 + .25 + .35/3 + .1 - .2/3 - .05/3 = 13/30."""
    a0 = [ToolCall("f", {"n": 1}), ToolCall("f", {"n": 1}), ToolCall("g.h", {"s": "y"})]
    a1 = [ToolCall("f", {"n": 1})]
    r, m = score_team([a0, a1], [True, True], GOLD, SCHEMAS, RewardWeights())
    assert r == pytest.approx(13 / 30)
    assert m["exact"] == 0 and m["name_f1"] == 1 and m["args"] == pytest.approx(1 / 3) and m["count"] == 1
    assert m["cross_duplicate"] == pytest.approx(1 / 3) and m["repeated"] == pytest.approx(1 / 3)
    assert m["lazy"] == 0 and m["unbalanced"] == 0
    assert (m["calls_agent0"], m["calls_agent1"], m["team_calls"]) == (2, 1, 3)


def test_repeats_the_gold_answer_needs_are_not_penalised():
    """BFCL parallel_158 asks for two draws from each of two distributions: the same call twice."""
    schema = [{"name": "draw",
               "parameters": {"type": "dict", "required": ["mu"], "properties": {"mu": {"type": "integer"}}}}]
    gold = [{"draw": {"mu": [5]}}, {"draw": {"mu": [5]}}, {"draw": {"mu": [10]}}, {"draw": {"mu": [10]}}]
    five, ten = ToolCall("draw", {"mu": 5}), ToolCall("draw", {"mu": 10})
    r, m = score_team([[five, five], [ten, ten]], [True, True], gold, schema, RewardWeights())
    assert m["exact"] == 1 and m["repeated"] == 0 and r == pytest.approx(1.75)
    r, m = score_team([[five, five, five], [ten, ten]], [True, True], gold, schema, RewardWeights())
    assert m["exact"] == 0 and m["repeated"] == pytest.approx(1 / 4) and m["calls_agent0"] == 2


def test_a_call_both_agents_write_is_kept_once():
    """The team merge's rule (docs/bfcl.md): a call written by both agents counts once, an agent's own repeats
    count. The two-call case: the request needs draw(mu=5) twice. One copy from each agent is one call (one
    short: not exact); both copies from one agent are the answer. A call needed once and written by both is
    exact, charged as a cross duplicate."""
    schema = [{"name": "draw",
               "parameters": {"type": "dict", "required": ["mu"], "properties": {"mu": {"type": "integer"}}}}]
    five = ToolCall("draw", {"mu": 5})
    twice = [{"draw": {"mu": [5]}}, {"draw": {"mu": [5]}}]
    r, m = score_team([[five], [five]], [True, True], twice, schema, RewardWeights())
    assert merge_calls([[five], [five]], schema) == [five]
    assert m["exact"] == 0 and m["team_calls"] == 1 and m["count"] == 0.5 and m["cross_duplicate"] == 0.5
    # .05 parse + .25 name F1 (2/3) + .35 args (1/2) + .1 count (1/2) - .2 cross (1/2); balanced [1, 1]
    assert r == pytest.approx(0.05 + 0.25 * 2 / 3 + 0.35 / 2 + 0.1 / 2 - 0.2 / 2)
    r, m = score_team([[five, five], []], [True, True], twice, schema, RewardWeights())
    assert m["exact"] == 1 and m["team_calls"] == 2 and m["repeated"] == 0 and m["cross_duplicate"] == 0
    once = [{"draw": {"mu": [5]}}]
    r, m = score_team([[five], [five]], [True, True], once, schema, RewardWeights())
    # exact; cross duplicate 1/1; calls [1, 1] against the even split [1, 0] of one call: unbalanced 1
    assert m["exact"] == 1 and m["cross_duplicate"] == 1 and m["unbalanced"] == 1 and r == pytest.approx(1.75 - 0.35)


def test_reward_exact_split_and_lazy():
    full = [ToolCall("f", {"n": 2}), ToolCall("g.h", {"s": "X"}), ToolCall("f", {"n": 1})]
    r, m = score_team([full[:2], full[2:]], [True, True], GOLD, SCHEMAS, RewardWeights())
    assert m["exact"] == 1 and r == pytest.approx(RewardWeights().max_reward()) == pytest.approx(1.75)
    # one agent does everything, the other writes []: exact, but lazy (1/2) and unbalanced (|3-2| + |0-1|) / 3
    r, m = score_team([full, []], [True, True], GOLD, SCHEMAS, RewardWeights())
    assert m["exact"] == 1 and m["lazy"] == 0.5 and m["unbalanced"] == pytest.approx(2 / 3)
    assert r == pytest.approx(1.75 - 0.15 * 0.5 - 0.15 * 2 / 3)
    # ordered scoring: the same calls in another order are not exact
    assert score_team([full], [True], GOLD, SCHEMAS, RewardWeights(), ordered=True)[1]["exact"] == 0


def test_reward_helpers():
    assert even_split(5, 2) == [3, 2] and even_split(2, 3) == [1, 1, 0]
    assert name_f1([ToolCall("f"), ToolCall("f"), ToolCall("g")], [{"f": {}}, {"g": {}}, {"g": {}}]) == \
        pytest.approx(2 / 3)
    assert name_f1([], GOLD) == 0
    assert reward_weights({"exact": 2, "lazy": 0}).exact == 2.0
    with pytest.raises(ValueError, match="env.args.reward: unknown key"):
        reward_weights({"bonus": 1})
    with pytest.raises(ValueError, match="env.args.reward.exact"):
        reward_weights({"exact": "high"})


# -- environment

def test_role_modes_and_prompts():
    entry = get_env("bfcl_parallel")
    split = entry.build(2, role_mode="split_by_order").reset(ITEM).prompts
    assert "first half" in split[0] and "second half" in split[1] and "g.h" in split[0] and ITEM["request"] in split[1]
    same = entry.build(2, role_mode="same_prompt").reset(ITEM).prompts
    assert same[0] == same[1] and "every function call" in same[0]
    own = entry.build(3, role_mode="self_select", call_format="json").reset(ITEM).prompts
    assert len(own) == 3 and '"function": "get_weather", "parameters"' in own[0]
    assert "3 function-calling agents" in own[0]
    listed = entry.build(2, call_format="python_list").reset(ITEM).prompts[0]
    assert '[get_weather(city="Paris", days=3), get_time(zone="CET")]' in listed and "no code fence" in listed
    assert "part 3" in entry.build(3, role_mode="split_by_order").reset(ITEM).prompts[2]


@pytest.mark.parametrize("args, match", [
    ({"mode": "x"}, "unknown key"), ({"role_mode": "odd_even"}, "role_mode"),
    ({"call_format": "xml"}, "call_format"), ({"reward": {"exactt": 1}}, "reward: unknown"),
    ({"prompt": "no slots"}, "env.args.prompt"), ({"scoring": "strict"}, "env.args.scoring"),
])
def test_bad_env_args_name_the_key(args, match):
    with pytest.raises(ValueError, match=match):
        get_env("bfcl_parallel").build(2, **args)


def test_step_and_summarize():
    env = get_env("bfcl_parallel").build(2)
    other = {**ITEM, "id": "t1", "category": "live_parallel"}
    joint = [("f(n=1)\nf(n=2)", "g.h(s='x')"), ("f(n=1)", "nothing")]
    records = []
    for item in (ITEM, other):
        trs = env.step_batch([env.reset(item)] * 2, joint)
        assert [t.done for t in trs] == [True, True] and trs[0].metrics["exact"] == 1 and trs[1].metrics["exact"] == 0
        records.append(EvalRecord(item, joint, trs))
    s = env.summarize(records)
    assert s["exact"] == s["exact_lenient"] == {"overall": 0.5, "by_category": {"live_parallel": 0.5, "parallel": 0.5}}
    # BFCL's decoder rejects two calls on two lines: no exact sample
    assert s["exact_bfcl"] == {"overall": 0.0, "by_category": {"live_parallel": 0.0, "parallel": 0.0}}
    assert s["exact_any"] == 1.0 and s["samples"] == 4 and s["scoring"] == "lenient"
    assert s["agent_call_share"] == pytest.approx([0.75, 0.25])   # agent 0: 2 + 1 calls, agent 1: 1 + 0
    table = env.render_table(s)
    assert "BFCL exact  lenient exact" in table and "overall" in table and "agent1  25.0%" in table
    assert table.splitlines()[-4].split() == ["overall", "0.0%", "50.0%"]
    # the bfcl scoring mode: the reward reads BFCL's decoding; BFCL's list form is exact in both
    strict = get_env("bfcl_parallel").build(2, scoring="bfcl", call_format="python_list")
    [lines, listed] = strict.step_batch([strict.reset(ITEM)] * 2, [joint[0], ("[f(n=1), f(n=2)]", "[g.h(s='x')]")])
    assert lines.metrics["exact"] == lines.metrics["exact_bfcl"] == 0 and lines.metrics["exact_lenient"] == 1
    assert lines.metrics["bfcl_decode_fail"] == 0.5 and lines.reward < listed.reward
    assert listed.metrics["exact"] == listed.metrics["exact_bfcl"] == listed.metrics["exact_lenient"] == 1


def test_load_bfcl_files(shared_data):
    load = get_env("bfcl_parallel").load_items
    folder = str(shared_data / "bfcl_v4")
    train, test = load(folder, "train", None), load(folder, "test", None)
    assert len(train) + len(test) == 440 and len(test) == 87 and not {i["id"] for i in train} & {i["id"] for i in test}
    one = load(folder + "/BFCL_v4_live_parallel.json", "all", 3)
    assert [i["category"] for i in one] == ["live_parallel"] * 3 and one[0]["ground_truth"]
    with_system = next(i for i in load(folder, "all", None) if i["id"] == "live_parallel_3-0-3")
    assert with_system["request"].startswith("[system]")
    with pytest.raises(ValueError, match="no splits"):
        load(folder, "validation", None)


def test_multiturn_flat_local_rows_and_offline_message(tmp_path):
    rows = [{"id": "mt_0", "official_category": "multi_turn_base_step", "turn_index": 1,
             "user_prompt": "[user] go to docs\n[assistant] ...\n[user] list files then sort them",
             "function": [{"name": "ls",
                           "parameters": {"type": "dict", "properties": {"a": {"type": "boolean"}}, "required": []}},
                          {"name": "sort",
                           "parameters": {"type": "dict", "properties": {"file_name": {"type": "string"}},
                                          "required": ["file_name"]}}],
             "ground_truth": json.dumps(["ls(a=True)", "sort('notes.txt')"])}]   # positional, as BFCL multi-turn gold
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    entry = get_env("bfcl_multiturn_flat")
    items = entry.load_items(str(tmp_path), "train", None)
    assert items[0]["turn_index"] == 1 and items[0]["ground_truth"][1] == {"sort": {"file_name": ["notes.txt"]}}
    env = entry.build(2, role_mode="split_by_order")
    assert "order they must run" in env.reset(items[0]).prompts[0]
    in_order = env.step_batch([env.reset(items[0])], [("ls(a=True)", "sort(file_name='notes.txt')")])[0]
    swapped = env.step_batch([env.reset(items[0])], [("sort(file_name='notes.txt')", "ls(a=True)")])[0]
    assert in_order.metrics["exact"] == 1 and swapped.metrics["exact"] == 0
    # a step whose answer is "no call": the team is exact when nobody calls
    (tmp_path / "test.jsonl").write_text(json.dumps({**rows[0], "id": "mt_1", "ground_truth": []}))
    empty = entry.load_items(str(tmp_path), "test", None)[0]
    assert env.score(empty, ["[]", ""])[1]["exact"] == 1 and env.score(empty, ["ls(a=True)", "[]"])[1]["exact"] == 0
    with pytest.raises(RuntimeError, match="no offline copy"):
        entry.load_items(None, "train", 2)   # tests run with HF_HUB_OFFLINE / HF_DATASETS_OFFLINE


def test_bad_rows_are_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"id": "x9", "user_prompt": "hi", "function": [{"name": "f"}],
                                "ground_truth": [{"f": {"n": 1}}]}))
    with pytest.raises(ValueError, match=r"row 0 \(id 'x9'\).*list of accepted values"):
        get_env("bfcl_parallel").load_items(str(path), "train", None)


def test_comarl_eval_reports_exact_by_category(tmp_path, monkeypatch, capsys, shared_data):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "bfcl.json"
    rc = main(["eval", "configs/tools/bfcl_parallel_smoke.yaml", "--num-generations", "1", "--out", str(out),
               "data.eval.limit=2", f"train.run.output_dir={tmp_path}"])
    assert rc == 0
    summary = json.loads(out.read_text())["summary"]
    assert set(summary["exact"]) == set(summary["exact_bfcl"]) == {"overall", "by_category"}
    assert summary["scoring"] == "bfcl" and len(summary["agent_call_share"]) == 2   # as the smoke config sets
    out = capsys.readouterr().out
    assert "share of the calls" in out and "BFCL exact" in out
