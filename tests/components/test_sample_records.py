"""trees.jsonl records (``comarl/training/sample_records.py``): the tree, its credit and the size cap, worked by hand.

A scripted generator writes ``<agent>s<k>`` for sample k, so every reward below follows from a table.
"""
import json

import pytest
import torch

import comarl
from comarl.objective.advantages import group_relative
from comarl.envs.base import AgentRewards, FunctionEnv
from comarl.envs.error_policy import with_error_policy
from comarl.generation import Completions
from comarl.generation.team import scripted
from comarl.rollout import RolloutSettings, collect_rollout
from comarl.core.stages import Stage, StageGraph, tag_route
from comarl.training.sample_records import MIN_TEXT, fit_texts, leaf_texts, tree_records


class FakeAgent:
    def __init__(self, name):
        self.name = name

    def encode_prompts(self, texts):
        return [[ord(c) for c in t] for t in texts]


def script(texts=None):
    """A team generator: sample k of agent X is ``Xs<k>`` (or ``texts(agent, prompt, k)``)."""
    def one(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        prompts = ["".join(map(chr, p)) for p in prompt_ids]
        out = [texts(agent, p, j) if texts else f"{agent.name}s{j}" for p in prompts for j in range(k)]
        return Completions(prompt_ids, [[1, 0] for _ in out], [False] * len(out), out, k)

    return scripted(one)


def roll(agents, env, items, k=2, **kw):
    return collect_rollout([FakeAgent(a) for a in agents], env, items,
                           RolloutSettings(num_generations=k, generator=script(kw.pop("texts", None)), **kw))


def magrpo(out):
    """Per agent, per rollout: what MAGRPO's update reports (``StepOutput.advantages``)."""
    return [[group_relative(s.returns)] for s in out.agents]


TABLE = {("Ps0", "Cs0"): 1.0, ("Ps0", "Cs1"): 0.0, ("Ps1", "Cs0"): 1.0, ("Ps1", "Cs1"): 1.0}


def planner_coder(**env_kw):
    env = FunctionEnv([lambda it: "Plan:", lambda it: "Code:"], lambda r, it: TABLE[tuple(r)], **env_kw)
    env.stages = StageGraph((Stage((0,)), Stage((1,))), names=("Planner", "Coder"))
    return env


def test_two_stage_tree_is_recorded_with_its_credit():
    """docs/teams.md's table: planner P0, P1 (returns .5, 1; MAGRPO -.25, .25); coder of P0 (1, 0), of P1 (1, 1)."""
    out = roll("PC", planner_coder(), [{"task_id": "T/1"}])
    [rec] = tree_records([out], [{"task_id": "T/1"}], ["planner", "coder"], step=7, max_bytes=10**6,
                         env=planner_coder(), advantages=magrpo(out))
    assert rec["step"] == 7 and rec["item"] == 0 and rec["of"] == 1 and rec["id"] == "task_id='T/1'"
    assert rec["stages"] == [{"agents": [0], "kind": "branch"}, {"agents": [1], "kind": "branch", "reads": {"1": [0]}}]
    assert rec["reward"] == 0.75 and rec["value"] == 0.75  # mean of the 4 leaves; V(root)
    root, c0, c1 = rec["nodes"]
    assert root["agents"] == [0] and root["stage_child"] and root["prompts"] == {"0": "Plan:"}
    assert [s["text"] for s in root["samples"]["0"]] == ["Ps0", "Ps1"]
    assert [(s["return"], s["advantage"]) for s in root["samples"]["0"]] == [(0.5, -0.25), (1.0, 0.25)]
    assert root["credit"] == {"0": {"mean": 0.75}}
    assert [j["child"] for j in root["joints"]] == [1, 2] and all("reward" not in j for j in root["joints"])
    assert [j["return"] for j in root["joints"]] == [0.5, 1.0]  # no reward on a stage edge: the coder node's value
    assert (c0["parent"], c0["via"], c0["stage"], c0["agents"]) == (0, 0, 1, [1])
    assert (c1["parent"], c1["via"]) == (0, 1)
    assert c0["prompts"]["1"].startswith("Code:") and "Ps0" in c0["prompts"]["1"]  # the coder read P0
    assert [j["reward"] for j in c0["joints"]] == [1.0, 0.0] and [j["reward"] for j in c1["joints"]] == [1.0, 1.0]
    assert [s["advantage"] for s in c0["samples"]["1"]] == [0.5, -0.5] and c0["credit"]["1"]["mean"] == 0.5
    assert leaf_texts(out, 1, 1) == ("Ps0", "Cs1")
    json.dumps(rec, allow_nan=False)  # the page parses it
    [bare] = tree_records([out], [{"task_id": "T/1"}], ["planner", "coder"], step=7, max_bytes=10**6)
    assert [s["advantage"] for s in bare["nodes"][0]["samples"]["0"]] == [None, None]  # none computed: null


def test_per_token_advantages_show_each_samples_mean_and_critic_values_each_joint():
    """Agent 0's [S=2, T=3] advantages over samples of 2 tokens each ([1, 0] from the script): means
    (1+3)/2 = 2 and (-1-3)/2 = -2 (the padding column 9 is past both lengths); a critic's [G=1, J=2, C=1] values
    show on the joint actions."""
    out = roll("AB", FunctionEnv([lambda it: "a", lambda it: "b"], lambda r, it: 1.0), [{}])
    token = torch.tensor([[1.0, 3.0, 9.0], [-1.0, -3.0, 9.0]])
    values = torch.tensor([[[0.25], [0.75]]])
    [rec] = tree_records([out], [{}], ["a", "b"], step=1, max_bytes=10**6, advantages=[[token], []],
                         values=[values])
    root = rec["nodes"][0]
    assert [s["advantage"] for s in root["samples"]["0"]] == [2.0, -2.0]
    assert [s["advantage"] for s in root["samples"]["1"]] == [None, None]  # agent 1: no advantages this step
    assert [j["values"] for j in root["joints"]] == [[0.25], [0.75]]


def feedback_env():
    """Two turns; reward = 1 if agent 0 wrote its sample 1 ("As1"); the next prompt quotes the reward."""
    def reward(r, it):
        return 1.0 if r[0] == "As1" else 0.0

    def nxt(state, r):
        return [f"got {reward(r, None):.0f}, again:" for _ in r]

    return FunctionEnv([lambda it: "go:", lambda it: "go:"], reward, transition_fn=nxt, max_turns=2)


def test_two_turns_record_feedback_prompts_and_discounted_returns():
    """Aligned, K=2, gamma .5. Turn 0: j=0 (As0) r 0, j=1 (As1) r 1; every turn-1 node again 0 and 1 (V = .5).
    G = r + .5 * .5: root joints .25 and 1.25; value .75; item reward (turn 0 only) .5."""
    out = roll("AB", feedback_env(), [{}], discount=0.5, num_turns=2)
    [rec] = tree_records([out], [{}], ["a", "b"], step=1, max_bytes=10**6)
    root = rec["nodes"][0]
    assert [j["reward"] for j in root["joints"]] == [0.0, 1.0]
    assert [j["return"] for j in root["joints"]] == [0.25, 1.25]
    assert rec["value"] == 0.75 and rec["reward"] == 0.5
    kids = [rec["nodes"][j["child"]] for j in root["joints"]]
    assert [k["turn"] for k in kids] == [1, 1] and [k["via"] for k in kids] == [0, 1]
    assert [k["prompts"]["0"] for k in kids] == ["got 0, again:", "got 1, again:"]  # the environment's feedback
    assert all(j["child"] is None and j["return"] == j["reward"] for k in kids for j in k["joints"])


def test_cross_mode_joint_returns_are_the_joint_actions_not_the_credit():
    """Cross, K=2, 2 agents: 4 joint actions; reward 1 only for (As1, Bs1). Agent 0's sample 1 is credited with
    the mean over its 2 joint actions (.5), the joint action itself returns 1."""
    env = FunctionEnv([lambda it: "a", lambda it: "b"], lambda r, it: float(r == ["As1", "Bs1"]))
    out = roll("AB", env, [{}], joint_mode="cross")
    [rec] = tree_records([out], [{}], ["a", "b"], step=1, max_bytes=10**6)
    root = rec["nodes"][0]
    assert [j["samples"] for j in root["joints"]] == [{"0": 0, "1": 0}, {"0": 0, "1": 1}, {"0": 1, "1": 0},
                                                      {"0": 1, "1": 1}]
    assert [j["return"] for j in root["joints"]] == [0.0, 0.0, 0.0, 1.0]
    assert [s["return"] for s in root["samples"]["0"]] == [0.0, 0.5]


def test_per_agent_rewards_are_lists_and_non_finite_numbers_null():
    env = FunctionEnv([lambda it: "a", lambda it: "b"], lambda r, it: AgentRewards((1.0, float("nan"))))
    out = roll("AB", env, [{}], k=1)
    [rec] = tree_records([out], [{}], ["a", "b"], step=1, max_bytes=10**6)
    assert rec["nodes"][0]["joints"][0]["reward"] == [1.0, None]
    json.dumps(rec, allow_nan=False)


def test_a_router_records_the_agents_it_chose():
    """Router R (K=2) picks the coder on branch 0 and the writer on branch 1."""
    def texts(agent, prompt, k):
        return ["<route>coder</route>", "<route>writer</route>"][k] if agent.name == "R" else f"{agent.name}s{k}"

    env = FunctionEnv([lambda it: "r", lambda it: "c", lambda it: "w"], lambda r, it: float(bool(r[1])))
    env.stages = StageGraph((Stage((0,)), Stage((1, 2), route=tag_route(0, {"coder": 1, "writer": 2}, [1]))))
    out = roll("RCW", env, [{}], texts=texts)
    [rec] = tree_records([out], [{}], ["r", "c", "w"], step=1, max_bytes=10**6, env=env)
    assert rec["stages"][1]["kind"] == "routed" and rec["stages"][1]["router"] == 0
    assert [n["agents"] for n in rec["nodes"]] == [[0], [1], [2]]
    assert [j["reward"] for j in rec["nodes"][1]["joints"]] == [1.0, 1.0]  # the coder wrote: reward 1
    assert [j["reward"] for j in rec["nodes"][2]["joints"]] == [0.0, 0.0]


def test_the_cap_keeps_whole_items_then_cuts_texts_then_writes_a_stub():
    long = "x" * 4000
    env = FunctionEnv([lambda it: it["p"], lambda it: it["p"]], lambda r, it: 0.5)
    items = [{"p": long}, {"p": long}, {"p": long}]
    out = roll("AB", env, items)
    whole = tree_records([out], items, ["a", "b"], step=1, max_bytes=10**6)
    assert len(whole) == 3 and all(r["of"] == 3 and r["cut"] == 0 for r in whole)
    one = len(json.dumps(whole[0], ensure_ascii=False)) + 1
    assert [r["item"] for r in tree_records([out], items, ["a", "b"], step=1, max_bytes=2 * one + 10)] == [0, 1]
    [cut] = tree_records([out], items, ["a", "b"], step=1, max_bytes=one // 2)
    assert cut["cut"] == 2 and len(json.dumps(cut)) + 1 <= one // 2  # the two prompts were cut, the texts are short
    assert "characters cut by train.log_samples_max_kb" in cut["nodes"][0]["prompts"]["0"]
    [stub] = tree_records([out], items, ["a", "b"], step=1, max_bytes=300)
    assert stub["nodes"] == [] and stub["too_big"] == one and stub["reward"] == 0.5
    assert tree_records([out], items, ["a", "b"], step=1, max_bytes=0) == []
    with pytest.raises(ValueError, match="3 rollout roots for 2 items"):
        tree_records([out], items[:2], ["a", "b"], step=1, max_bytes=10**6)


def test_fit_texts_cuts_no_text_below_min_text():
    rec = {k: None for k in ("v", "step", "item", "of", "id", "key", "agents", "stages", "algorithm", "reward",
                             "value")}
    rec["nodes"] = [{"prompts": {"0": "y" * (MIN_TEXT * 4)}}]
    cut, size = fit_texts(rec, 10**6)  # fits at half the longest text already
    assert len(cut["nodes"][0]["prompts"]["0"]) < MIN_TEXT * 3 and cut["cut"] == 1 and size < 10**6


class ViewEnv:
    """The planner/coder env with a sample_view: a table of the texts, checks from the metrics."""

    def __init__(self, fail=False):
        self.inner, self.fail = planner_coder(), fail
        self.num_agents, self.stages = 2, self.inner.stages

    def reset(self, item):
        return self.inner.reset(item)

    def step_batch(self, states, responses):
        from dataclasses import replace

        return [replace(t, metrics={"ok": t.reward}) for t in self.inner.step_batch(states, responses)]

    def sample_view(self, item, responses, metrics):
        if self.fail:
            raise RuntimeError("no picture today")
        return [{"title": "plan", "table": {"columns": ["agent", "text"], "rows": [[i, t] for i, t in
                                                                                 enumerate(responses)]}},
                {"title": "verdict", "checks": [["passed", metrics["ok"] == 1.0]]}, "not a block"]


def test_an_environment_draws_its_own_view_of_each_leaf_through_wrappers():
    env = with_error_policy(ViewEnv(), "zero")  # the trainer wraps every environment
    out = roll("PC", env, [{}])
    [rec] = tree_records([out], [{}], ["p", "c"], step=1, max_bytes=10**6, env=env)
    leaf = rec["nodes"][1]["joints"][1]  # coder of P0, sample 1: reward 0
    assert leaf["metrics"] == {"ok": 0.0}
    table, checks, bad = leaf["view"]
    assert table == {"title": "plan", "table": {"columns": ["agent", "text"], "rows": [[0, "Ps0"], [1, "Cs1"]]}}
    assert checks == {"title": "verdict", "checks": [["passed", False]]}
    assert bad["text"] == "a block must be a dict, got str"
    assert "view" not in rec["nodes"][0]["joints"][0]  # a stage edge is no leaf
    failing = ViewEnv(fail=True)
    [rec] = tree_records([roll("PC", failing, [{}])], [{}], ["p", "c"], step=1, max_bytes=10**6, env=failing)
    assert rec["nodes"][1]["joints"][0]["view"][0]["text"] == \
        "the environment's sample_view raised RuntimeError: no picture today"


def test_training_writes_trees_jsonl_and_resume_truncates_it(tmp_path):
    """Tiny models, 2 steps: a line per item per logged step; log_samples_max_kb=0 writes none."""
    from comarl.demo import demo_setup
    from comarl.runs.run_dir import truncate_logs

    agents, env, items, cfg = demo_setup("tiny", "writing", 2, str(tmp_path), 0)
    for a in agents:
        a.max_new_tokens = 4
    cfg.run.progress_bar, cfg.run.batch_size, cfg.rollout.num_generations, cfg.run.log_samples_steps = False, 2, 2, 1
    cfg.run.report_to = ["jsonl"]
    comarl.Trainer(agents, env, items[:4], cfg).train()
    rows = [json.loads(x) for x in (tmp_path / "trees.jsonl").read_text().splitlines()]
    assert [(r["step"], r["item"]) for r in rows] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert rows[0]["algorithm"]["name"] == "magrpo" and rows[0]["agents"] == ["agent0", "agent1"]
    adv = [s["advantage"] for s in rows[0]["nodes"][0]["samples"]["0"]]
    assert len(adv) == 2 and sum(adv) == pytest.approx(0, abs=1e-5)  # group-relative: sums to 0
    truncate_logs(tmp_path, 1)
    assert {json.loads(x)["step"] for x in (tmp_path / "trees.jsonl").read_text().splitlines()} == {1}
    cfg.run.log_samples_max_kb, cfg.run.output_dir = 0, str(tmp_path / "none")
    comarl.Trainer(agents, env, items[:2], cfg).train()
    assert not (tmp_path / "none" / "trees.jsonl").exists()


def test_an_actor_critic_run_logs_its_critics_values(tmp_path):
    """IAC, one step: every joint action carries one value per agent's critic, and advantages are GAE's."""
    from comarl.demo import demo_setup

    agents, env, items, cfg = demo_setup("tiny", "writing", 2, str(tmp_path), 0)
    for a in agents:
        a.max_new_tokens = 4
    cfg.algorithm, cfg.run.progress_bar, cfg.run.batch_size, cfg.rollout.num_generations = "iac", False, 2, 2
    cfg.run.log_samples_steps, cfg.run.report_to, cfg.critic.model = 1, ["jsonl"], "tiny"
    comarl.Trainer(agents, env, items[:2], cfg).train()
    rows = [json.loads(x) for x in (tmp_path / "trees.jsonl").read_text().splitlines()]
    joints = rows[0]["nodes"][0]["joints"]
    assert rows[0]["algorithm"]["name"] == "iac" and len(joints) == 2
    assert all(len(j["values"]) == 2 and all(isinstance(v, float) for v in j["values"]) for j in joints)
    assert all(isinstance(s["advantage"], float) for s in rows[0]["nodes"][0]["samples"]["1"])
