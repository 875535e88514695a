"""Helper models declared in one place (``helpers:``): read from a config, built and placed by the Team, freed
between uses where asked, handed to the environment (the coding expert) and to the rounds (a comparator), never
trained."""
from __future__ import annotations

import gc
import re
import weakref

import pytest
import torch

import comarl
from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.experiment import build_env, build_helpers, inject_helpers
from comarl.generation.helper_settings import EndpointSettings, HelperSpec
from comarl.generation.helpers import Helpers, LocalHelper
from comarl.preference import DPOSettings, IterativeSettings, PairSettings, PreferenceSettings
from toy_tasks import same_word

ENV = comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):", lambda it: f"Pick one ({it['n']}):"],
                         reward_fn=same_word)
ITEMS = [{"n": i} for i in range(8)]
CONFIG = """
agents: [{model: tiny}, {model: tiny}]
env: {name: humaneval, args: {preset: paper, feedback: expert_edits, max_turns: 2, expert: coder}}
helpers:
  coder: {model: tiny, device: cpu, dtype: float32, free_between_uses: true, max_new_tokens: 8}
  judge: {endpoint: {api: anthropic, model: claude-x, api_key_env: null, price_in_per_m: 3.0}}
train: {algorithm: madpo_iter, run: {output_dir: out}, rollout: {num_turns: 2},
        preference: {iterative: {comparator: helper,
        comparator_helper: judge}}}
"""


def test_helpers_are_read_from_the_config_and_named_by_their_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    cfg = load_config(path, ["helpers.coder.device=cuda:1", "helpers.judge.endpoint.concurrency=8"])
    coder, judge = cfg.helpers["coder"], cfg.helpers["judge"]
    assert (coder.model, coder.device, coder.free_between_uses, coder.max_new_tokens) == ("tiny", "cuda:1", True, 8)
    assert judge.endpoint == EndpointSettings(api="anthropic", model="claude-x", api_key_env=None,
                                              price_in_per_m=3.0, concurrency=8)
    assert LocalHelper("coder", coder).agent_config().device == "cuda:1"  # placed like an agent, on its own device
    for override, says in [
        (["helpers.coder.endpoint.model=x"], "helpers.coder: give either model (a local model) or endpoint (a hosted "
                                             "one), not both"),
        (["helpers.judge.endpoint.api=grpc"], "helpers.judge.endpoint.api: must be one of"),
        (["helpers.coder.colour=red"], "unknown config key helpers.coder.colour"),
        (["train.preference.iterative.comparator_helper=nobody"], "comparator_helper: no helper 'nobody'"),
        (["train.preference.iterative.comparator=model", "train.preference.iterative.comparator_model=tiny"],
         "comparator_helper: only read with comparator=helper"),
        (["agents.0.endpoint.model=gpt-x"], "agents.0.endpoint: a hosted endpoint cannot be trained"),
        (["agents=[{model: tiny}, {endpoint: {model: gpt-x}}]"], "agents.1.endpoint: a hosted endpoint cannot be")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_config(path, override)


def test_a_local_helper_freed_between_uses_is_rebuilt_and_its_memory_released():
    kept = LocalHelper("kept", HelperSpec(model="tiny", max_new_tokens=3))
    freed = LocalHelper("freed", HelperSpec(model="tiny", max_new_tokens=3, free_between_uses=True))
    for h in (kept, freed):
        assert h(["a", "b"]) and h(["c"])
    assert (kept.loads, freed.loads) == (1, 2) and kept.loaded and not freed.loaded
    first = weakref.ref(freed.load().model)
    freed.release()
    gc.collect()
    assert first() is None  # nothing holds the released model
    with freed.use():  # a round's sampling: one load for every call inside
        freed(["x"])
        freed(["y"])
        assert freed.loaded
    assert freed.loads == 4 and not freed.loaded and freed.metrics()["helpers/freed/loads"] == 4.0


def test_a_helper_samples_from_its_own_stream_and_never_trains():
    h = LocalHelper("h", HelperSpec(model="tiny", max_new_tokens=4, temperature=1.0, seed=3))
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    out = h(["p", "q"])
    assert torch.equal(torch.rand(3), before)  # the run's stream is where it was
    again = LocalHelper("h", HelperSpec(model="tiny", max_new_tokens=4, temperature=1.0, seed=3))
    assert again(["p", "q"]) == out  # its weights and samples follow its seed
    assert not any(p.requires_grad for p in h.load().model.parameters())


def rounds_config(out, **iterative):
    cfg = comarl.TrainConfig(algorithm="madpo_iter", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=4, progress_bar=False, report_to=[], seed=0,
                                                  output_dir=str(out), shuffle=False))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_per_item=2),
                                        iterative=IterativeSettings(rounds=2, **iterative))
    return cfg


AGENTS = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=5e-2, chat_template=False) for _ in range(2)]


def test_a_local_helper_writes_the_comparator_side_and_is_freed_after_each_round(tmp_path):
    helpers = Helpers.build({"rival": HelperSpec(model="tiny", max_new_tokens=3, chat_template=False,
                                                 free_between_uses=True)})
    t = comarl.Trainer(AGENTS, ENV, ITEMS, rounds_config(tmp_path, comparator="helper", comparator_helper="rival"),
                       helpers=helpers)
    seen = []
    real = t.source.sampler.collect

    def spy(agents, env, items, settings):
        seen.append((agents, settings.generator))
        return real(agents, env, items, settings)

    t.source.sampler.collect = spy
    history = t.train()
    rival = helpers.get("rival", "test")
    assert t.team.helpers is helpers and rival.loads == 2 and not rival.loaded  # one load per round, then freed
    policy, (seats, generator) = seen[0], seen[1]
    assert policy[0] is t.agents and [s.helper for s in seats] == [rival, rival] and generator is not None
    assert history[-1]["helpers/rival/calls"] == 2.0  # one call per round: every seat's prompts, K each
    pairs = [p for r in range(2) for p in comarl.preference.pairs_file.read_pairs(tmp_path / f"round-{r}/pairs.jsonl")]
    assert {p["chosen_by"] for p in pairs} <= {"policy", "comparator"} and pairs


def test_a_helper_is_refused_as_a_trained_agent():
    hosted = build_helpers(comarl.config.ExperimentConfig(helpers={"api": HelperSpec(endpoint=EndpointSettings(
        model="gpt-x", base_url="http://127.0.0.1:9/v1", api_key_env=None))})).get("api", "test")
    with pytest.raises(ConfigError, match="agents.1: .*is a helper: helpers are frozen"):
        comarl.Trainer([AGENTS[0], hosted], ENV, ITEMS, comarl.TrainConfig())
    with pytest.raises(ConfigError, match="comparator_helper: no helper 'rival'"):
        comarl.Trainer(AGENTS, ENV, ITEMS, rounds_config(None, comparator="helper", comparator_helper="rival"))


def test_the_environment_gets_the_built_helper_it_names(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    cfg = load_config(path)
    helpers = build_helpers(cfg)
    env = build_env(cfg, helpers)
    try:
        inner = env
        while not hasattr(inner, "expert"):
            inner = inner.env
        assert inner.expert.generate is helpers.get("coder", "test")  # injected, not built by the environment
    finally:
        env.close()
    with pytest.raises(ConfigError, match="env.args.expert: no helper 'nobody'"):
        build_env(load_config(path, ["env.args.expert=nobody"]))


def test_the_earlier_inline_expert_declares_a_helper():
    helpers = Helpers()
    args = inject_helpers({"expert": {"model": "tiny", "max_new_tokens": 4, "retries": 2,
                                      "agent": {"device": "cpu", "chat_template": False}}},
                          ("expert",), helpers, "env.args")
    expert = helpers.get("expert", "test")
    assert args == {"expert": expert, "expert_retries": 2}
    assert (expert.spec.max_new_tokens, expert.spec.chat_template, expert.spec.temperature) == (4, False, 0.3)
    with pytest.raises(ConfigError, match="env.args.expert.lr: not a helper key"):
        inject_helpers({"expert": {"model": "tiny", "agent": {"lr": 1.0}}}, ("expert",), Helpers(), "env.args")


def test_a_judge_s_score_replaces_the_reward_and_the_env_s_is_logged():
    from comarl.preference.judge import JudgeEnv, JudgeSettings, judge_score

    assert [judge_score(t, 10) for t in ("Score: 7", "3 of 10... Score: 12", "none", "-2")] == [0.7, 1.0, None, 0.0]
    asked: list[str] = []

    def judge(prompts):
        asked.extend(prompts)
        return ["Score: 8", "I cannot tell"]

    env = JudgeEnv(ENV, judge, JudgeSettings(helper="j", failure_reward=-1.0))
    states = [env.reset(it) for it in ITEMS[:2]]
    trs = env.step_batch(states, [("red", "red"), ("red", "blue")])
    assert [t.reward for t in trs] == [0.8, -1.0]
    assert [t.metrics["env_reward"] for t in trs] == [1.0, 0.0] and trs[1].metrics["judge_unparsed"] == 1.0
    assert "[Agent 2 prompt]\nPick one (1):\n\n[Agent 2 response]\nblue" in asked[1]


def test_a_judge_from_a_config_is_its_named_helper(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("agents: [{model: tiny}, {model: tiny}]\nenv: {name: demo_writing, judge: {helper: critic}}\n"
                    "helpers: {critic: {model: tiny, max_new_tokens: 4}}\n")
    cfg = load_config(path)
    helpers = build_helpers(cfg)
    env = build_env(cfg, helpers)
    assert env.judge is helpers.get("critic", "test") and env.settings.max_score == 10.0
    for override, says in [(["env.judge.helper=nobody"], "env.judge.helper: no helper 'nobody'"),
                           (["env.judge.prompt=rate it"], "env.judge.prompt: must contain {joint}")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_config(path, override)
