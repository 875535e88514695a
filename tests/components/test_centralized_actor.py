"""Centralised actor: tagged prompt and parser, scoring through the unchanged env, parse failures, training."""
import pytest
import torch

import comarl
from comarl.preference import CentralizedEnv, DPOSettings, PairSettings, ParseError, PreferenceSettings, TaggedFormat


def both_say_yes(responses, item):
    return float(sum(r == "yes" for r in responses)) / 2


ENV = comarl.FunctionEnv(formatters=[lambda it: f"A: {it['q']}", lambda it: f"B: {it['q']}"], reward_fn=both_say_yes)


def test_tagged_prompt_holds_every_role_and_the_format():
    p = TaggedFormat().build_prompt({"q": 1}, ["A: 1", "B: 1"])
    assert "Role 0 prompt:\nA: 1" in p and "Role 1 prompt:\nB: 1" in p
    assert "<agent_0>\n...\n</agent_0>\n<agent_1>\n...\n</agent_1>" in p


def test_tagged_parser_splits_sections_and_refuses_a_missing_one():
    f = TaggedFormat()
    assert f.parse("x <agent_1> no </agent_1> <AGENT_0>\nyes\n</agent_0>", 2) == ["yes", "no"]
    with pytest.raises(ParseError, match="role 1"):
        f.parse("<agent_0>yes</agent_0>", 2)
    assert TaggedFormat(tag="role{i}").parse("<role0>a</role0><role1>b</role1>", 2) == ["a", "b"]


def test_env_scores_parsed_sections_and_counts_failures():
    env = CentralizedEnv(ENV, failure_reward=-1.0)
    assert env.num_agents == 1 and env.roles == 2
    s = env.reset({"q": "go?"})
    assert "A: go?" in s.prompts[0] and "B: go?" in s.prompts[0]
    trs = env.step_batch([s, s, s], [("<agent_0>yes</agent_0><agent_1>yes</agent_1>",),
                                     ("<agent_0>yes</agent_0><agent_1>no</agent_1>",), ("yes yes",)])
    assert [t.reward for t in trs] == [1.0, 0.5, -1.0]
    assert [t.metrics["central/parse_failure"] for t in trs] == [0.0, 0.0, 1.0] and all(t.done for t in trs)


def first_chars(completion, n):
    """A parser random tiny models can satisfy: role i's response is the i-th character (fails when too short)."""
    t = completion.strip()
    if len(t) < n:
        raise ParseError(f"{len(t)} characters for {n} roles")
    return list(t[:n])


@pytest.mark.parametrize("algorithm", ["magrpo", "madpo"])
def test_centralized_actor_trains_and_logs_parse_failures(algorithm):
    same = comarl.FunctionEnv(formatters=[lambda it: f"Pick ({it['n']}):", lambda it: f"Match ({it['n']}):"],
                              reward_fn=lambda r, it: float(ord(r[0]) % 3 == ord(r[1]) % 3))
    env = CentralizedEnv(same, parser=first_chars, failure_reward=-0.5)
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=4),
                             run=comarl.RunConfig(batch_size=4, max_steps=2, progress_bar=False, report_to=[], seed=0))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_per_item=2))
    t = comarl.Trainer([comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False)], env,
                       [{"n": i} for i in range(8)], cfg)
    w0 = [p.detach().clone() for p in t.agents[0].model.parameters()]
    hist = t.train()
    assert all(0.0 <= h["env/central/parse_failure"] <= 1.0 for h in hist)
    assert any(not torch.equal(a, b) for a, b in zip(w0, t.agents[0].model.parameters()))


def test_config_centralized_needs_one_agent_and_a_role_tag():
    from comarl.config import load_config
    from comarl.core.config_io import ConfigError

    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "configs/preference/tldr_centralized_smoke.yaml"
    with pytest.raises(ConfigError, match="one agent; 2 are given"):
        load_config(path, ["agents=[{model: tiny}, {model: tiny}]"])
    with pytest.raises(ConfigError, match="centralized_tag"):
        load_config(path, ["env.centralized_tag=agent"])


def test_summary_passes_through_on_parsed_roles_and_counts_failures():
    from comarl.envs.base import EvalRecord

    class Summarising:  # records what summarize saw
        num_agents = 2

        def reset(self, item):
            return ENV.reset(item)

        def step_batch(self, states, responses):
            return ENV.step_batch(states, responses)

        def summarize(self, records):
            return {"responses": [list(r.responses) for r in records], "reward": {"mean": 0.5}}

        def render_table(self, summary):
            return "inner table"

    env = CentralizedEnv(Summarising())
    s = env.reset({"q": 1})
    completions = [("<agent_0>yes</agent_0><agent_1>no</agent_1>",), ("garbage",)]
    rec = EvalRecord(item={"q": 1}, responses=completions, transitions=env.step_batch([s, s], completions))
    summary = env.summarize([rec])
    assert summary["responses"] == [[("yes", "no"), ("", "")]]  # the inner env sees role responses
    assert summary["central"] == {"parse_failure": 0.5, "samples": 2}
    assert env.render_table(summary) == "inner table\ncentralised actor: parse failures 0.5000"


def test_eval_compares_a_team_with_the_centralised_baseline_in_one_table(tmp_path, monkeypatch, capsys):
    import json
    from pathlib import Path

    from comarl.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    out = tmp_path / "cmp.json"
    rc = main(["eval", "configs/writing/tldr_smoke.yaml", "--compare", "configs/preference/tldr_centralized_smoke.yaml",
               "--num-generations", "2", "--out", str(out), "data.eval.limit=2", "agents.*.max_new_tokens=8"])
    assert rc == 0
    res = json.loads(out.read_text())
    for side in ("a", "b"):  # the same environment summary (levels, ROUGE) for the team and the single model
        assert {"reward", "levels"} <= set(res[side]["summary"]) and len(res[side]["records"]) == 2
    assert "central" in res["b"]["summary"] and "central" not in res["a"]["summary"]
    text = capsys.readouterr().out
    table = text[text.index("== comparison"):]
    assert "A: tldr_smoke" in table and "B: tldr_centralized_smoke" in table
    row = next(line for line in table.splitlines() if line.startswith("summary.reward.mean "))
    assert len(row.split()) == 3  # a value for each side
    assert next(line for line in table.splitlines()
                if line.startswith("summary.central.parse_failure")).split()[1] == "-"


class NoNextState:
    """A two-role env whose step is not done yet has no next state: the rollout ends such a branch."""

    num_agents = 2

    def reset(self, item):
        return comarl.EnvState(item=item, prompts=("A", "B"))

    def step_batch(self, states, responses):
        return [comarl.Transition(0.5, False, None) for _ in states]


def test_a_wrapped_transition_without_next_state_ends_the_branch():
    env = CentralizedEnv(NoNextState())
    tr, = env.step_batch([env.reset({})], [("<agent_0>a</agent_0><agent_1>b</agent_1>",)])
    assert (tr.reward, tr.done, tr.next_state) == (0.5, False, None)
