"""Iterative MADPO: rounds write their pairs, change the weights, replay earlier rounds, resume after a kill."""
import json

import pytest
import torch

import comarl
from comarl.core.config_io import ConfigError
from comarl.preference import DPOSettings, IterativeSettings, PairSettings, PreferenceSettings

ENV = comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):", lambda it: f"Pick one ({it['n']}):"],
                         reward_fn=lambda r, it: float(bool(r[0].strip()) and bool(r[1].strip())
                                                       and ord(r[0].strip()[0]) % 3 == ord(r[1].strip()[0]) % 3))
ITEMS = [{"n": i} for i in range(8)]


def trainer(out, rounds=2, resume=None, **iterative):
    cfg = comarl.TrainConfig(algorithm="madpo_iter",
                             rollout=comarl.RolloutConfig(num_generations=3, joint_mode="cross"),
                             run=comarl.RunConfig(batch_size=4, progress_bar=False, report_to=["jsonl"], seed=0,
                                                  output_dir=str(out), shuffle=False, resume=resume))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_per_item=2),
                                        iterative=IterativeSettings(rounds=rounds, **iterative))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False) for _ in range(2)]
    return comarl.Trainer(agents, ENV, ITEMS, cfg)


def weights(t):
    return [p.detach().clone() for a in t.agents for p in a.model.parameters()]


def test_two_rounds_write_two_pair_files_change_weights_and_resume_after_a_kill(tmp_path):
    straight = trainer(tmp_path / "straight", replay="all")
    w0 = weights(straight)
    hist = straight.train()
    files = sorted((tmp_path / "straight").glob("round-*/pairs.jsonl"))
    assert [f.parent.name for f in files] == ["round-0", "round-1"]
    assert all(len(f.read_text().splitlines()) > 0 for f in files)
    assert [h["round"] for h in hist] == [0, 1]
    assert hist[1]["pref/pool"] == hist[0]["pref/pairs"] + hist[1]["pref/pairs"]
    assert any(not torch.equal(a, b) for a, b in zip(w0, weights(straight)))

    killed = trainer(tmp_path / "killed", rounds=1, replay="all")  # stops after round 0, as a kill between rounds
    killed.train()
    first = (tmp_path / "killed" / "round-0" / "pairs.jsonl").read_text()
    assert json.loads((tmp_path / "killed" / "rounds.json").read_text())["rounds_done"] == 1
    with pytest.raises(ConfigError, match="already holds a run"):  # a fresh run never mixes into it
        trainer(tmp_path / "killed", rounds=2, replay="all")
    resumed = trainer(tmp_path / "killed", rounds=2, replay="all", resume="latest")
    hist = resumed.train()
    assert [h["round"] for h in hist] == [1] and resumed.state.step == 2
    assert (tmp_path / "killed" / "round-0" / "pairs.jsonl").read_text() == first  # round 0 not redone
    assert (tmp_path / "killed" / "round-1" / "pairs.jsonl").exists()
    for a, b in zip(weights(straight), weights(resumed)):  # same weights as the run that was never killed
        assert torch.allclose(a, b, atol=1e-6)


def test_iterative_settings_are_checked():
    with pytest.raises(ConfigError, match="train.preference.iterative.replay"):
        PreferenceSettings(iterative=IterativeSettings(replay="some")).validate()
    with pytest.raises(ConfigError, match=r"TrainConfig\.run\.output_dir"):  # built in Python: named as its argument
        cfg = comarl.TrainConfig(algorithm="madpo_iter", rollout=comarl.RolloutConfig(num_generations=2),
                                 run=comarl.RunConfig(batch_size=2, progress_bar=False, report_to=[]))
        comarl.Trainer([comarl.AgentConfig(model="tiny", max_new_tokens=2) for _ in range(2)], ENV, ITEMS, cfg).train()


def test_offline_madpo_trains_on_the_pairs_an_online_run_wrote(tmp_path):
    out = tmp_path / "pairs.jsonl"
    cfg = comarl.TrainConfig(algorithm="madpo", rollout=comarl.RolloutConfig(num_generations=3, joint_mode="cross"),
                             run=comarl.RunConfig(batch_size=4, max_steps=1, progress_bar=False, report_to=[], seed=0))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5),
                                        pairs=PairSettings(pairs_per_item=2, pairs_out=str(out)))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False) for _ in range(2)]
    comarl.Trainer(agents, ENV, ITEMS, cfg).train()
    n = len(out.read_text().splitlines())
    assert n > 0
    cfg = comarl.TrainConfig(algorithm="madpo_offline",
                             run=comarl.RunConfig(batch_size=2, epochs=2, progress_bar=False, report_to=[],
                                                  output_dir=str(tmp_path / "offline")))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_in=str(out)))
    t = comarl.Trainer(agents, ENV, ITEMS, cfg)
    w0 = weights(t)
    hist = t.train()
    assert len(hist) == 2 * -(-n // 2) and all(h["pref/loss"] > 0 for h in hist)
    assert any(not torch.equal(a, b) for a, b in zip(w0, weights(t)))
    out.write_text(json.dumps({"prompts": ["a"], "chosen": ["x", "y"], "rejected": ["z", "w"]}) + "\n")
    cfg.run.output_dir = str(tmp_path / "offline-bad")
    with pytest.raises(ConfigError, match="pair 0: 'prompts' needs 2 entries"):
        comarl.Trainer(agents, ENV, ITEMS, cfg).train()


def test_max_steps_stops_inside_a_round_eval_steps_evaluate_and_resume_continues_the_round(tmp_path):
    def run(out, **run_keys):
        cfg = comarl.TrainConfig(algorithm="madpo_iter",
                                 rollout=comarl.RolloutConfig(num_generations=2, joint_mode="cross"),
                                 run=comarl.RunConfig(batch_size=4, progress_bar=False, report_to=["jsonl"], seed=0,
                                                      output_dir=str(out), shuffle=False, eval_steps=2, **run_keys))
        cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_per_item=2),
                                            iterative=IterativeSettings(rounds=2, steps_per_round=2))
        agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False) for _ in range(2)]
        return comarl.Trainer(agents, ENV, ITEMS, cfg, eval_dataset=[{"n": 9}, {"n": 10}])

    straight = run(tmp_path / "straight")
    hist = straight.train()
    assert [h["round"] for h in hist] == [0, 0, 1, 1]
    assert ["eval/reward/mean" in h for h in hist] == [False, True, False, True]  # train.run.eval_steps=2
    stopped = run(tmp_path / "stopped", max_steps=3)  # train.run.max_steps: 3 DPO steps, inside round 1
    assert len(stopped.train()) == 3
    assert (tmp_path / "stopped" / "checkpoint-3" / "reference0.pt").exists()  # round 1's reference kept
    resumed = run(tmp_path / "stopped", resume="latest")
    assert [h["round"] for h in resumed.train()] == [1]
    for a, b in zip(weights(straight), weights(resumed)):
        assert torch.allclose(a, b, atol=1e-6)


def test_offline_position_counts_pairs_and_a_resume_with_another_global_batch_continues_after_them(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompts": [f"p{k}", f"q{k}"], "chosen": ["a", "b"], "rejected": ["c", "d"]})
                             + "\n" for k in range(12)))
    seen = []

    def run(batch_size, **run_keys):
        cfg = comarl.TrainConfig(algorithm="madpo_offline",
                                 run=comarl.RunConfig(batch_size=batch_size, epochs=1, shuffle=False,
                                                      progress_bar=False, report_to=[], seed=0,
                                                      output_dir=str(tmp_path / "run"), **run_keys))
        cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_in=str(pairs)))
        agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False) for _ in range(2)]
        t = comarl.Trainer(agents, ENV, ITEMS, cfg)
        to_ids = t.source.to_ids  # which pairs each step trains on, watched
        t.source.to_ids = lambda agents, mine: seen.append([p["prompts"][0] for p in mine]) or to_ids(agents, mine)
        return t

    first = run(2, max_steps=4, save_steps=2)  # 12 pairs / 2 = 6 steps an epoch (not 8 items / 2 = 4)
    assert first.steps_per_epoch == 6
    first.train()
    assert seen == [["p0", "p1"], ["p2", "p3"], ["p4", "p5"], ["p6", "p7"]]
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    seen.clear()
    # global batch 2 -> 4 (as 1 rank -> 2): 8 pairs were seen, the rest of the epoch is one step of 4
    resumed = run(4, resume=str(tmp_path / "run" / "checkpoint-4"))
    hist = resumed.train()
    assert seen == [["p8", "p9", "p10", "p11"]] and len(hist) == 1 and resumed.state.step == 5
    assert hist[0]["pref/pairs"] == 4 and hist[0]["epoch"] == 0


def test_madpo_iter_trains_on_the_sampled_pool(tmp_path):
    """Two rounds with replay=decay_sample and 3 pairs drawn: each round's pool holds 3 pairs."""
    hist = trainer(tmp_path / "run", replay="decay_sample", replay_sample_size=3).train()
    assert [h["round"] for h in hist] == [0, 1]
    assert all(h["pref/pairs"] > 0 and h["pref/pool"] == 3 for h in hist), hist
