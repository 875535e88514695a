"""The staged environments on real benchmark rows (issue #30): who reads what, what is scored, the per-stage
metrics. Reference programs stand in for the agents; the sandbox runs them as in training."""
import pytest

from comarl.envs.registry import get_env
from comarl.generation import Completions
from comarl.generation.team import scripted
from comarl.rollout import RolloutSettings, collect_rollout
from comarl.core.stages import stage_graph

LIMITS = {"test_timeout_s": 60.0, "total_timeout_s": 240.0, "cpu_time_s": 90}


class Agent:
    def __init__(self, name):
        self.name = name

    def encode_prompts(self, texts):
        return [[ord(c) for c in t] for t in texts]


def team(texts):
    """A scripted team: agent X writes ``texts[X](prompt)`` for every sample; records the prompts it saw."""
    seen = {}

    def one(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        prompts = ["".join(map(chr, p)) for p in prompt_ids]
        seen.setdefault(agent.name, []).extend(prompts)
        out = [texts[agent.name](p) for p in prompts for _ in range(k)]
        return Completions(prompt_ids, [[1] for _ in out], [False] * len(out), out, k)

    return scripted(one), seen


@pytest.mark.parametrize("dataset, folder", [("humaneval", "humaneval/HumanEval.jsonl.gz"),
                                             ("coophumaneval", "coophumaneval/che_raw.json")])
def test_planner_coder_scores_the_coders_program_read_from_the_plan(dataset, folder, shared_data):
    entry = get_env(f"{dataset}_planner")
    items = entry.load_items(str(shared_data / folder), None, 2)
    env = entry.build(2, sandbox=LIMITS, workers=1)
    try:
        refs = {it["prompt"]: it["reference"] or "def stub():\n    pass" for it in items}  # CoopHumanEval has none
        gen, seen = team({"planner": lambda p: "1. loop over the input\n2. return the result",
                          "coder": lambda p: next(r for q, r in refs.items() if q.strip() in p)})
        s = RolloutSettings(num_generations=2, generator=gen, keep_records=True)
        out = collect_rollout([Agent("planner"), Agent("coder")], env, items, s)
    finally:
        env.close()
    assert [s.agents for s in stage_graph(env, 2).stages] == [(0,), (1,)]
    assert len(seen["planner"]) == 2 and len(seen["coder"]) == 4  # K plans per item, one coder prompt per plan
    assert all("A planner wrote this plan" in p and "2. return the result" in p for p in seen["coder"])
    assert out.metrics["env/passed_all"] == (1.0 if items[0]["reference"] else 0.0)
    assert out.metrics["env/plan_words"] == 9
    assert out.agents[0].returns.shape == (2, 2) and out.agents[1].returns.shape == (4, 2)
    assert len(out.records) == 2 and len(out.records[0].responses) == 4  # every leaf of the item's tree


def test_solver_verifier_fixer_reports_each_stage(shared_data):
    entry = get_env("mbpp_chain")
    items = entry.load_items(str(shared_data / "mbpp" / "sanitized-mbpp.json"), None, 1)
    env = entry.build(3, sandbox=LIMITS, workers=1)
    ref = items[0]["reference"]
    try:
        gen, seen = team({"solver": lambda p: "def nothing():\n    return None",  # a wrong draft
                          "verifier": lambda p: "The draft does not define the function the task asks for.",
                          "fixer": lambda p: ref})
        s = RolloutSettings(num_generations=2, generator=gen)
        out = collect_rollout([Agent("solver"), Agent("verifier"), Agent("fixer")], env, items, s)
        # the fixer writes no function: the draft is the program
        gen2, _ = team({"solver": lambda p: ref, "verifier": lambda p: "Correct.", "fixer": lambda p: "Correct."})
        kept = collect_rollout([Agent("solver"), Agent("verifier"), Agent("fixer")], env, items,
                               RolloutSettings(num_generations=2, generator=gen2))
    finally:
        env.close()
    assert "def nothing()" in seen["verifier"][0] and "does not define" in seen["fixer"][0]
    assert len(seen["verifier"]) == 2 and len(seen["fixer"]) == 2  # aligned: one per draft
    assert out.metrics["env/draft_passed_all"] == 0.0 and out.metrics["env/passed_all"] == 1.0
    assert [a.returns.shape for a in out.agents] == [(1, 2)] * 3  # one node, one group each
    assert kept.metrics["env/fixer_kept_draft"] == 1.0 and kept.metrics["env/passed_all"] == 1.0


def test_writer_editor_gives_the_editor_the_draft():
    entry = get_env("tldr_editor")
    items = entry.load_items("tests/data/writing/tldr_sample.jsonl", "train[:2]", 2)
    env = entry.build(2)
    gen, seen = team({"writer": lambda p: "A short draft.", "editor": lambda p: "A longer summary " * 5})
    out = collect_rollout([Agent("writer"), Agent("editor")], env, items,
                          RolloutSettings(num_generations=2, generator=gen))
    assert all("Concise summary by your colleague:\nA short draft." in p for p in seen["editor"])
    assert items[0]["text"][:40] in seen["editor"][0]
    assert out.metrics["tree/leaves"] == 8 and out.agents[1].returns.shape == (4, 2)


def test_team_env_arguments_are_checked():
    with pytest.raises(ValueError, match="needs 2 agents"):
        get_env("humaneval_planner").build(3)
    with pytest.raises(ValueError, match="max_turns"):
        get_env("mbpp_chain").build(3, max_turns=2)
    with pytest.raises(ValueError, match="unknown template"):
        get_env("humaneval_planner").build(2, prompts={"planning": "x"})


def test_planner_coder_over_two_turns(shared_data):
    """A failing program goes on to a second turn: the coder gets the single agent's revision prompt, the
    planner the planning prompt with it; each keeps its own history."""
    entry = get_env("humaneval_planner")
    items = entry.load_items(str(shared_data / "humaneval/HumanEval.jsonl.gz"), None, 1)
    env = entry.build(2, sandbox=LIMITS, workers=1, max_turns=2)
    try:
        gen, seen = team({"planner": lambda p: "Plan A", "coder": lambda p: "def nothing():\n    return 1"})
        out = collect_rollout([Agent("planner"), Agent("coder")], env, items,
                              RolloutSettings(num_generations=1, num_turns=2, generator=gen))
    finally:
        env.close()
    assert out.tree.turn.tolist() == [0, 0, 1, 1]  # planner, coder; then both again
    planner_t2, coder_t2 = seen["planner"][1], seen["coder"][1]
    assert "The last attempt:" in planner_t2 and "def nothing()" in planner_t2
    assert "def nothing()" in coder_t2 and "A planner wrote this plan" in coder_t2 and "Plan A" in coder_t2
