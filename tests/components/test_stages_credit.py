"""Team stages in one turn: the tree, its credit and its pairs, worked by hand (issue #30).

A scripted generator writes ``<agent>s<k>`` for sample k (``<agent>g`` when greedy) and records every
call, so the tables below follow from the reward tables alone. docs/teams.md works the first one.
"""
import pytest
import torch

from comarl.objective.advantages import group_relative, leave_one_out, no_baseline
from comarl.core.config_io import ConfigError
from comarl.envs.base import FunctionEnv
from comarl.generation import Completions
from comarl.generation.team import scripted
from comarl.preference.pairs import tree_pairs
from comarl.rollout import RolloutSettings, check_tree_size, collect_rollout
from comarl.core.stages import Stage, StageGraph, parse_stages, tag_route


class FakeAgent:
    """Prompts are encoded as their characters, so the scripted generator can read them back."""

    def __init__(self, name):
        self.name = name

    def encode_prompts(self, texts):
        return [[ord(c) for c in t] for t in texts]


class Script:
    """A team generator: sample k of agent X is ``Xs<k>``, greedy ``Xg``; ``calls`` records
    (agent, prompts as text, k, greedy, share_prefix) of every per-agent call."""

    def __init__(self, texts=None):
        self.calls = []
        self.texts = texts  # optional (agent, prompt, k) -> text

    def one(self, agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        prompts = ["".join(map(chr, p)) for p in prompt_ids]
        self.calls.append((agent.name, prompts, k, greedy, share_prefix))
        texts = [(self.texts(agent, p, j) if self.texts else f"{agent.name}{'g' if greedy else f's{j}'}")
                 for p in prompts for j in range(k)]
        return Completions(prompt_ids, [[1, 0] for _ in texts], [False] * len(texts), texts, k)

    @property
    def generator(self):
        return scripted(self.one)


def settings(script, k=2, **kw):
    return RolloutSettings(num_generations=k, generator=script.generator, **kw)


def planner_coder_env(table, graph=None):
    """Planner (agent 0) -> coder (agent 1); the reward is ``table[(planner text, coder text)]``."""
    env = FunctionEnv([lambda it: "Plan:", lambda it: "Code:"], lambda r, it: table[tuple(r)])
    env.stages = graph or StageGraph((Stage((0,)), Stage((1,))), names=("Planner", "Coder"))
    return env


TABLE = {("Ps0", "Cs0"): 1.0, ("Ps0", "Cs1"): 0.0, ("Ps1", "Cs0"): 1.0, ("Ps1", "Cs1"): 1.0}


def test_two_stage_k2_tree_credit_table():
    """The docs/teams.md example. Leaves (plan, code) -> reward: (P0,C0) 1, (P0,C1) 0, (P1,C0) 1, (P1,C1) 1.

    | node          | samples | returns  | value | MAGRPO      | RLOO       |
    | planner       | P0, P1  | .5, 1    | .75   | -.25, .25   | -.5, .5    |
    | coder of P0   | C0, C1  | 1, 0     | .5    | .5, -.5     | 1, -1      |
    | coder of P1   | C0, C1  | 1, 1     | 1     | 0, 0        | 0, 0       |
    """
    script = Script()
    out = collect_rollout([FakeAgent("P"), FakeAgent("C")], planner_coder_env(TABLE), [{}], settings(script))
    planner, coder = out.agents
    assert planner.returns.tolist() == [[0.5, 1.0]]
    assert coder.returns.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    assert group_relative(planner.returns).tolist() == [[-0.25, 0.25]]
    assert group_relative(coder.returns).tolist() == [[0.5, -0.5], [0.0, 0.0]]
    assert leave_one_out(planner.returns).tolist() == [[-0.5, 0.5]]
    assert leave_one_out(coder.returns).tolist() == [[1.0, -1.0], [0.0, 0.0]]
    assert no_baseline(coder.returns).tolist() == [[1.0, 0.0], [1.0, 1.0]]
    # one generate per agent and stage; the coder's two nodes each share one prompt for their K=2 samples
    assert [(c[0], len(c[1]), c[2], c[4]) for c in script.calls] == [("P", 1, 2, True), ("C", 2, 2, True)]
    assert script.calls[1][1] == ["Code:\n\n[Planner's output]\nPs0", "Code:\n\n[Planner's output]\nPs1"]
    assert coder.texts == ["Cs0", "Cs1", "Cs0", "Cs1"] and len(coder.prompt_ids) == 4
    tree = out.tree
    assert tree.groups.tolist() == [[0, -1], [-1, 0], [-1, 1]]  # node -> row in each agent's samples
    assert tree.child.tolist() == [[1, 2], [-1, -1], [-1, -1]] and tree.stage_child[0].all()
    assert tree.rewards[0].abs().sum() == 0  # the planner's edges carry no reward: the leaves do
    assert out.metrics["tree/leaves"] == 4 and out.metrics["stage1/spread"] == pytest.approx(0.5)


def test_pairs_are_siblings_that_share_every_earlier_output():
    """MADPO at the same tree: the planner's pair (P1 over P0, gap .5) leaves the coder out (-1), the coder's pair
    at P0's node (C0 over C1, gap 1) leaves the planner out; P1's coders tie: no pair."""
    out = collect_rollout([FakeAgent("P"), FakeAgent("C")], planner_coder_env(TABLE), [{}], settings(Script()))
    t = out.tree
    pairs = tree_pairs(t.rewards, t.child, t.joints, [2, 2], 1.0, "reward_gap", 1, tree=t)
    assert [(p.group, p.chosen_samples, p.rejected_samples, p.gap) for p in pairs] == [
        (0, [1, -1], [0, -1], 0.5), (1, [-1, 0], [-1, 1], 1.0)]


def test_three_stage_aligned_chain():
    """Solver -> verifier (aligned) -> fixer (aligned), K=2: one node, two joint actions (s_k, v_k, f_k); the
    verifier's sample k reads solver sample k, the fixer's reads both. Leaf rewards 2 and 5: every agent's
    group is [2, 5] (MAGRPO -1.5, 1.5), as the agents of one aligned stage."""
    graph = StageGraph((Stage((0,)), Stage((1,), aligned=True), Stage((2,), aligned=True)),
                       names=("Solver", "Verifier", "Fixer"))
    env = FunctionEnv([lambda it: "Solve:", lambda it: "Verify:", lambda it: "Fix:"],
                      lambda r, it: {("Ss0", "Vs0", "Fs0"): 2.0, ("Ss1", "Vs0", "Fs0"): 5.0}[tuple(r)])
    env.stages = graph
    script = Script()
    out = collect_rollout([FakeAgent("S"), FakeAgent("V"), FakeAgent("F")], env, [{}], settings(script))
    assert [a.returns.tolist() for a in out.agents] == [[[2.0, 5.0]]] * 3
    assert group_relative(out.agents[2].returns).tolist() == [[-1.5, 1.5]]
    assert out.tree.joints[0].tolist() == [[0, 0, 0], [1, 1, 1]]
    assert [c[1] for c in script.calls[1:]] == [
        ["Verify:\n\n[Solver's output]\nSs0", "Verify:\n\n[Solver's output]\nSs1"],
        ["Fix:\n\n[Solver's output]\nSs0\n\n[Verifier's output]\nVs0",
         "Fix:\n\n[Solver's output]\nSs1\n\n[Verifier's output]\nVs0"]]
    assert [c[2] for c in script.calls] == [2, 1, 1]  # aligned: one sample per joint action
    assert out.tree.joint_prompts[(0, 1)][1].endswith("Ss1")


def _cross_two_turn_env():
    """Stage 0: agents A and B in parallel (cross), stage 1: C reads both. Texts end in the sample index
    (``As1`` -> a = 1); turn 1 pays ``a + 2b + 4c`` and goes on only after (1, 1, 1); turn 2 pays ``10c``."""
    def reward(r, it):
        a, b, c = (int(t[-1]) for t in r)
        return 10.0 * c if it.get("turn2") else a + 2.0 * b + 4.0 * c

    def transition(state, r):
        return ["again"] * 3 if all(t.endswith("1") for t in r) else None

    env = FunctionEnv([lambda it: "A:", lambda it: "B:", lambda it: "C:"], reward, transition, max_turns=2)
    env.stages = StageGraph((Stage((0, 1)), Stage((2,))))
    return env


def test_cross_stages_and_multi_turn_credit_table():
    """K=2, cross, 2 turns, gamma .5. Turn 1, C's node under (a, b) has returns [a+2b, a+2b+4], except (1, 1)
    whose second leaf continues: turn 2's root is worth 5 (C pays 10c: [0, 10] at every C node; A and B get 5),
    so that leaf returns 7 + .5 * 5 = 9.5 and C's node (1, 1) is [3, 9.5], worth 6.25.
    Stage-0 joint (a, b) returns V(C node) = a+2b+2, but (1, 1) 6.25; cross credit:
    A: sample 0 mean(2, 4) = 3, sample 1 mean(3, 6.25) = 4.625; B: sample 0 mean(2, 3) = 2.5,
    sample 1 mean(4, 6.25) = 5.125."""
    env = _cross_two_turn_env()
    inner = env.step_batch

    def step_batch(states, responses):  # turn 2 pays 10c: mark its items
        states = [s if s.turn == 0 else type(s)(**{**s.__dict__, "item": {"turn2": True}}) for s in states]
        return inner(states, responses)

    env.step_batch = step_batch
    out = collect_rollout([FakeAgent("A"), FakeAgent("B"), FakeAgent("C")], env, [{}],
                          settings(Script(), joint_mode="cross", num_turns=2, discount=0.5))
    a, b, c = out.agents
    assert a.returns.tolist() == [[3.0, 4.625], [5.0, 5.0]] and a.turns.tolist() == [0, 1]
    assert b.returns.tolist() == [[2.5, 5.125], [5.0, 5.0]]
    assert c.returns.tolist() == [[0, 4], [2, 6], [1, 5], [3, 9.5]] + [[0, 10]] * 4
    assert c.turns.tolist() == [0] * 4 + [1] * 4
    assert out.tree.width.tolist() == [4, 2, 2, 2, 2, 4, 2, 2, 2, 2]
    assert out.tree.discounts(0.5)[0].tolist() == [1.0] * 4  # into C's nodes: the same turn
    assert out.tree.discounts(0.5)[4, :2].tolist() == [0.5, 0.5]  # C's leaves into turn 2
    assert out.metrics["return/mean"] == pytest.approx((2 + 4 + 3 + 6.25) / 4)


def test_greedy_baselines_continue_from_each_node():
    """ReMax at the planner -> coder tree: the planner node's chain decodes Pg then Cg (reward 7); a coder
    node's chain keeps its sampled plan and decodes Cg (P0: 3, P1: 4). One greedy call per agent and stage."""
    table = {**TABLE, ("Pg", "Cg"): 7.0, ("Ps0", "Cg"): 3.0, ("Ps1", "Cg"): 4.0}
    script = Script()
    out = collect_rollout([FakeAgent("P"), FakeAgent("C")], planner_coder_env(table), [{}],
                          settings(script, greedy_baseline=True))
    assert out.agents[0].baseline.tolist() == [7.0]
    assert out.agents[1].baseline.tolist() == [3.0, 4.0]
    greedy = [(c[0], c[1]) for c in script.calls if c[3]]
    assert greedy == [("P", ["Plan:"]), ("C", ["Code:\n\n[Planner's output]\nPg", "Code:\n\n[Planner's output]\nPs0",
                                               "Code:\n\n[Planner's output]\nPs1"])]


def test_router_gives_unchosen_agents_no_sample():
    """Router R (K=2) writes a tag; stage 1 routes each branch to the coder or the writer: each acts at one node,
    the other writes nothing there, and the environment sees "" for it."""
    def texts(agent, prompt, k):
        if agent.name == "R":
            return ["<route>coder</route>", "<route>writer</route>"][k]
        return f"{agent.name}s{k}"

    seen = []

    def reward(r, it):
        seen.append(tuple(r))
        return 1.0 if r[1] else 0.0

    env = FunctionEnv([lambda it: "Route:", lambda it: "Code:", lambda it: "Write:"], reward)
    env.stages = StageGraph((Stage((0,)), Stage((1, 2), route=tag_route(0, {"coder": 1, "writer": 2}, [1]))))
    script = Script(texts)
    out = collect_rollout([FakeAgent("R"), FakeAgent("C"), FakeAgent("W")], env, [{}], settings(script))
    r, c, w = out.agents
    assert c.texts == ["Cs0", "Cs1"] and w.texts == ["Ws0", "Ws1"]
    assert c.returns.tolist() == [[1.0, 1.0]] and w.returns.tolist() == [[0.0, 0.0]]
    assert r.returns.tolist() == [[1.0, 0.0]]
    assert seen == [("<route>coder</route>", "Cs0", ""), ("<route>coder</route>", "Cs1", ""),
                    ("<route>writer</route>", "", "Ws0"), ("<route>writer</route>", "", "Ws1")]
    assert out.tree.groups.tolist() == [[0, -1, -1], [-1, 0, -1], [-1, -1, 0]]
    assert out.metrics["route/C"] == 0.5 and out.metrics["route/W"] == 0.5


def test_route_fallback_and_tag_parsing():
    route = tag_route(0, {"coder": 1, "writer": 2}, [2])
    assert route.chosen((1, 2), {0: "I pick <ROUTE>Coder, writer</ROUTE>"}) == (1, 2)
    assert route.chosen((1, 2), {0: "no tag here"}) == (2,)
    assert route.chosen((1, 2), {}) == (2,)  # the router did not write on this branch


def test_budget_and_graph_errors_name_the_problem():
    graph = StageGraph((Stage((0,)), Stage((1,)), Stage((2,))), max_leaves=16)
    check_tree_size("aligned", 2, 3, 1, 1000, graph)  # 8 leaves
    with pytest.raises(ConfigError, match=r"3 branching stages .* 27 leaves .*max_leaves 16"):
        check_tree_size("aligned", 3, 3, 1, 1000, graph)
    with pytest.raises(ValueError, match="max_samples_per_item.*3 stages"):
        check_tree_size("aligned", 2, 3, 3, 50, graph)  # 14 completions per turn x (1 + 8 + 64) leaves
    for bad, msg in [(StageGraph((Stage((0,)), Stage((0, 1)))), "already acts in stage 0"),
                     (StageGraph((Stage((0,)),)), r"agents \[1\] act in no stage"),
                     (StageGraph((Stage((0,), aligned=True), Stage((1,)))), "first stage cannot be aligned"),
                     (StageGraph((Stage((0,)), Stage((1,), reads={1: (1,)}))), "reads agent 1"),
                     (StageGraph((Stage((0,)), Stage((1,), route=tag_route(1, {}, [1])))), "router")]:
        with pytest.raises(ConfigError, match=msg):
            bad.validate(2)


def test_yaml_stages_by_agent_name():
    graph = parse_stages([{"agents": ["router"]},
                          {"agents": ["coder", "writer"], "route": {"by": "router", "fallback": ["writer"]}},
                          {"agents": "editor", "aligned": True, "reads": {"editor": ["coder", "writer"]}}],
                         ["router", "coder", "writer", "editor"])
    assert [s.agents for s in graph.stages] == [(0,), (1, 2), (3,)]
    assert graph.stages[1].route.chosen((1, 2), {0: "<route>coder</route>"}) == (1,)
    assert graph.stages[1].route.fallback == (2,) and graph.reads_of(3) == (1, 2)
    assert graph.reads_of(1) == (0,) and graph.names == ("router", "coder", "writer", "editor")
    assert parse_stages({"stages": [[0], [1]], "max_leaves": 8}, ["a", "b"]).max_leaves == 8
    with pytest.raises(ConfigError, match=r"env.stages\[1\].agents\[0\]: unknown agent 'nobody'"):
        parse_stages([["router"], ["nobody"]], ["router", "coder"])
    with pytest.raises(ConfigError, match=r"env.stages\[0\]: unknown keys \['agent'\]"):
        parse_stages([{"agent": [0]}], ["a"])


def test_critics_read_the_prefix_with_the_earlier_outputs():
    """At the planner -> coder tree: the coder's own critic reads its prompt (which holds the plan) at its two
    nodes and values nothing at the planner's; the central critic reads every prompt on the branch and, as
    responses, what was written before the node (a Q critic: the joint action too)."""
    from comarl.critics.inputs import AgentInputs, JointInputs

    out = collect_rollout([FakeAgent("P"), FakeAgent("C")], planner_coder_env(TABLE), [{}], settings(Script()))
    t, texts = out.tree, [a.texts for a in out.agents]
    coder = AgentInputs("v", 2).units(t, texts, 1, [2, 2])
    assert coder.prompts == ["Code:\n\n[Planner's output]\nPs0", "Code:\n\n[Planner's output]\nPs1"]
    assert coder.index.tolist() == [[-1, -1], [0, 0], [1, 1]]
    q = AgentInputs("q", 2).units(t, texts, 1, [2, 2])
    assert q.responses == ["Cs0", "Cs1", "Cs0", "Cs1"] and q.index.tolist() == [[-1, -1], [0, 1], [2, 3]]

    def seen(prompts, responses):
        return f"{prompts}|{responses}"

    central = JointInputs("v", seen).units(t, texts, 0, [2, 2])
    assert central.prompts == [seen(["Plan:", "Code:"], None),
                               seen(["Plan:", "Code:\n\n[Planner's output]\nPs0"], ["Ps0", ""]),
                               seen(["Plan:", "Code:\n\n[Planner's output]\nPs1"], ["Ps1", ""])]
    assert central.index.tolist() == [[0, 0], [1, 1], [2, 2]]
    assert JointInputs("q", seen).units(t, texts, 0, [2, 2]).prompts[2] == \
        seen(["Plan:", "Code:\n\n[Planner's output]\nPs0"], ["Ps0", "Cs0"])


def test_gae_passes_through_the_nodes_a_column_does_not_value():
    """The planner -> coder tree with independent critics: V_planner(root) .6, V_coder(P0's node) .4,
    V_coder(P1's node) .8, lambda .5. The planner's column passes through the coder's nodes (their backed-up
    values .5 and 1, lambda 1 into them): A = [.5 - .6, 1 - .6] = [-.1, .4]. The coder's column at its nodes:
    rewards minus its values, [.6, -.4] and [.2, .2]."""
    from comarl.objective.advantages import gae_tree, sample_advantages

    out = collect_rollout([FakeAgent("P"), FakeAgent("C")], planner_coder_env(TABLE), [{}], settings(Script()))
    t = out.tree
    values = torch.tensor([[[0.6, 0.0], [0.6, 0.0]], [[0.0, 0.4], [0.0, 0.4]], [[0.0, 0.8], [0.0, 0.8]]],
                          dtype=torch.float64)
    adv = gae_tree(t.rewards, values, t.child, 0.9, 0.5, None, t.discounts(0.9), t.valid(), t.acting())
    assert adv[0, :, 0].tolist() == pytest.approx([-0.1, 0.4])
    assert adv[1:, :, 1].reshape(-1).tolist() == pytest.approx([0.6, -0.4, 0.2, 0.2])
    nodes = t.agent_nodes(1)
    per_sample = sample_advantages(adv[nodes][:, :, 1], values[nodes][:, :, 1], t.joints[nodes][:, :, 1], 2)
    assert per_sample.reshape(-1).tolist() == pytest.approx([0.6, -0.4, 0.2, 0.2])


def test_function_env_declares_stages_and_stage_formatters():
    """FunctionEnv(stages=[[0], [1]], stage_formatters={1: ...}): the coder's formatter gets the plan."""
    env = FunctionEnv([lambda it: "Plan:", lambda it: "Code:"], lambda r, it: TABLE[tuple(r)], stages=[[0], [1]],
                      stage_formatters={1: lambda state, inputs: f"Code {state.item['q']} from: {inputs[0]}"})
    script = Script()
    out = collect_rollout([FakeAgent("P"), FakeAgent("C")], env, [{"q": "x"}], settings(script))
    assert script.calls[1][1] == ["Code x from: Ps0", "Code x from: Ps1"]
    assert out.agents[1].returns.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match="stage_formatters: agent 0"):
        FunctionEnv([lambda it: "a", lambda it: "b"], lambda r, it: 0.0, stages=[[0], [1]],
                    stage_formatters={0: lambda s, i: ""})
