"""Comparators of the iterative rounds: who writes the other side of each pair, and how pairs are picked."""
import json
from pathlib import Path

import pytest
import torch

import comarl
from comarl.core.config_io import ConfigError
from comarl.preference import DPOSettings, IterativeSettings, PairSettings, PreferenceSettings
from comarl.preference.pairs import comparator_pairs
from comarl.models.tiny_model import tiny_model
from comarl.runs.checkpoint import save_agent_weights
from toy_tasks import same_word

ENV = comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):", lambda it: f"Pick one ({it['n']}):"],
                         reward_fn=same_word)
ITEMS = [{"n": i} for i in range(8)]


def test_comparator_pairs_on_a_hand_table():
    policy, other = [1.0, 0.0, 0.5, 0.2], [0.0, 0.0, 0.9, 0.7]  # gaps +1, tie, -0.4, -0.5
    assert comparator_pairs(policy, other, "reward_gap", 2) == [(0, True, 1.0), (3, False, pytest.approx(0.5))]
    assert [(j, w) for j, w, _ in comparator_pairs(policy, other, "all", None)] == [(0, True), (2, False), (3, False)]
    assert sorted(j for j, _, _ in comparator_pairs(policy, other, "random", None)) == [0, 2, 3]  # the tie is dropped
    with pytest.raises(ValueError, match="max_pairs must be None"):
        comparator_pairs(policy, other, "all", 1)


def trainer(out, **iterative):
    cfg = comarl.TrainConfig(algorithm="madpo_iter", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=4, progress_bar=False, report_to=[], seed=0,
                                                  output_dir=str(out), shuffle=False))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_per_item=2),
                                        iterative=IterativeSettings(rounds=2, **iterative))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=5e-2, chat_template=False) for _ in range(2)]
    return comarl.Trainer(agents, ENV, ITEMS, cfg)


def params(agents):
    return [p.detach().clone() for a in agents for p in a.model.parameters()]


def equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["current", "checkpoint", "path", "model"])
def test_each_comparator_writes_the_other_side_of_the_pairs(kind, tmp_path):
    pref = {"path": {"comparator": "checkpoint"}}.get(kind, {"comparator": kind})
    if kind == "model":
        pref["comparator_model"] = "tiny"
    if kind == "path":  # a fixed checkpoint folder: the starting tiny weights, shifted
        shifted = [a for a in comarl.build_agents([comarl.AgentConfig(model="tiny", chat_template=False)] * 2)]
        for i, a in enumerate(shifted):
            with torch.no_grad():
                for p in a.model.parameters():
                    p.add_(0.01)
            save_agent_weights(a, tmp_path / "fixed" / f"agent{i}")
        pref["comparator_path"] = str(tmp_path / "fixed")
    t = trainer(tmp_path / "run", **pref)
    start = params(t.agents)
    calls = []  # (round, agents object, their weights then, rollout)
    real = t.source.sampler.collect

    def spy(agents, env, items, settings):  # the rounds' sampling, watched
        out = real(agents, env, items, settings)
        calls.append((t.state.step, agents, params(agents), out))
        return out

    t.source.sampler.collect = spy
    t.train()
    assert len(calls) == 4  # per round: the policy's batch, then the comparator's on the same items
    for r in range(2):
        (_, policy, w_policy, ro), (_, comp, w_comp, co) = calls[2 * r], calls[2 * r + 1]
        assert policy is t.agents
        if kind == "current":  # sampled before the round's update: the frozen copy is the policy itself
            assert comp is t.agents
        else:
            assert comp is not t.agents
        if kind == "checkpoint":  # one round back: the starting policy in rounds 0 and 1
            assert equal(w_comp, start) and (r == 0 or not equal(w_comp, w_policy))
        if kind == "path":
            assert equal(w_comp, [p + 0.01 for p in start])
        if kind == "model":
            fresh = tiny_model()[0]
            assert equal(w_comp, [p.detach() for _ in range(2) for p in fresh.parameters()])
        pairs = [json.loads(x) for x in (tmp_path / "run" / f"round-{r}" / "pairs.jsonl").read_text().splitlines()]
        assert pairs
        k, joints = 2, ro.tree.joints[0]  # every node's joint actions (a one-stage tree)
        for p in pairs:  # one side is a joint candidate of the policy, the other the comparator's at the same j
            mine = p["chosen"] if p["chosen_by"] == "policy" else p["rejected"]
            theirs = p["rejected"] if p["chosen_by"] == "policy" else p["chosen"]
            g = next(g for g in range(len(ro.tree.prompts)) if ro.tree.prompts[g] == p["prompts"])
            found = [j for j in range(len(joints))
                     if [ro.agents[i].texts[g * k + int(joints[j, i])] for i in range(2)] == mine
                     and [co.agents[i].texts[g * k + int(joints[j, i])] for i in range(2)] == theirs]
            assert found, p
    if kind == "checkpoint":  # each round snapshots the policy at its start (round 0: the starting policy)
        assert (tmp_path / "run" / "round-0" / "policy").exists() and (tmp_path / "run" / "round-1" / "policy").exists()


def test_comparator_settings_name_the_key():
    with pytest.raises(ConfigError, match="train.preference.iterative.comparator: must be one of"):
        PreferenceSettings(iterative=IterativeSettings(comparator="judge")).validate()
    with pytest.raises(ConfigError, match="train.preference.iterative.comparator_model: comparator=model needs"):
        PreferenceSettings(iterative=IterativeSettings(comparator="model")).validate()
    with pytest.raises(ConfigError, match="train.preference.iterative.comparator_path: only read with "
                                          "comparator=checkpoint"):
        PreferenceSettings(iterative=IterativeSettings(comparator="model", comparator_model="tiny",
                                                       comparator_path="x")).validate()


def test_a_missing_comparator_checkpoint_is_named(tmp_path):
    t = trainer(tmp_path / "run", comparator="checkpoint", comparator_path=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"TrainConfig\.preference\.iterative\.comparator_path: "
                                          r".*nowhere/agent0 does not exist"):
        t.train()


def test_a_rounds_comparator_snapshot_is_freed_before_the_rounds_training(tmp_path):
    """``comparator: checkpoint`` loads a policy snapshot for each round's sampling only: by the round's first
    update nothing holds it any more (issue #39: the old ``_drop_comparator`` deleted only its own argument)."""
    import weakref

    t = trainer(tmp_path / "run", comparator="checkpoint")
    refs, alive_at_update = [], []
    real_collect, real_step = t.source.sampler.collect, t.update.step

    def collect(agents, env, items, settings):
        if agents is not t.agents:
            refs.append(weakref.ref(agents[0].model))
        return real_collect(agents, env, items, settings)

    def step(team, batch, n):
        alive_at_update.append([r() is not None for r in refs])
        return real_step(team, batch, n)

    t.source.sampler.collect, t.update.step = collect, step
    t.train()
    assert refs and alive_at_update and all(not any(a) for a in alive_at_update), alive_at_update


def test_each_comparator_kind_is_one_record_chosen_once(tmp_path):
    """The five cases of ``train.preference.iterative.comparator`` map to records (``preference/comparators.py``); a
    round-only comparator frees itself on release, a fixed one keeps what it built."""
    from comarl.preference.comparators import (CurrentPolicy, EarlierRound, FixedCheckpoint, FixedModel,
                                               NoComparator, comparator_for)
    from comarl.preference.settings import IterativeSettings

    def pick(**kw):
        return comparator_for(IterativeSettings(**kw), tmp_path)

    assert isinstance(pick(), NoComparator) and pick().agents(None, 3) is None
    assert isinstance(pick(comparator="current"), CurrentPolicy)
    assert pick(comparator="model", comparator_model="tiny") == FixedModel("tiny")
    assert pick(comparator="checkpoint", comparator_path="ck") == FixedCheckpoint(Path("ck"))
    earlier = pick(comparator="checkpoint", comparator_rounds_back=2)
    assert earlier == EarlierRound(tmp_path, 2)
    earlier.loaded = ["a snapshot"]
    earlier.release()
    assert earlier.loaded is None
    fixed = FixedModel("tiny", held=["built"])
    fixed.release()
    assert fixed.held == ["built"]
