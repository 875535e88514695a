"""MARLHF-iter: rounds write pairs, refit the joint reward model, run RL on its score, resume at the step reached."""
import json

import pytest
import torch

import comarl
from comarl.core.config_io import ConfigError
from comarl.preference import IterativeSettings, PairSettings, PreferenceSettings
from comarl.preference.marlhf import RewardModelSettings
from toy_tasks import same_word

ENV = comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):", lambda it: f"Pick one ({it['n']}):"],
                         reward_fn=same_word)
ITEMS = [{"n": i} for i in range(8)]


def trainer(out, rounds=2, max_steps=0, resume=None, **iterative):
    cfg = comarl.TrainConfig(algorithm="marlhf_iter",
                             rollout=comarl.RolloutConfig(num_generations=3, joint_mode="cross"),
                             run=comarl.RunConfig(batch_size=2, progress_bar=False, report_to=["jsonl"], seed=0,
                                                  output_dir=str(out), shuffle=False, resume=resume,
                                                  max_steps=max_steps, save_total_limit=4))
    rm = RewardModelSettings(model="tiny", epochs=2, batch_size=4, lr=1e-3, held_out=0.25)
    cfg.preference = PreferenceSettings(pairs=PairSettings(pairs_per_item=2),
                                        iterative=IterativeSettings(rounds=rounds, steps_per_round=2, replay="decay",
                                                                    reward_model=rm, **iterative))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False) for _ in range(2)]
    return comarl.Trainer(agents, ENV, ITEMS, cfg)


def weights(t):
    return [p.detach().clone() for a in t.agents for p in a.model.parameters()]


def same(a, b):
    return all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a, b))


def test_two_rounds_refit_the_reward_model_train_on_it_and_resume_between_and_inside_rounds(tmp_path):
    straight = trainer(tmp_path / "straight")
    w0 = weights(straight)
    hist = straight.train()
    out = tmp_path / "straight"
    files = sorted(out.glob("round-*/pairs.jsonl"))
    assert [f.parent.name for f in files] == ["round-0", "round-1"]
    assert all(f.read_text().strip() for f in files)
    assert [h["round"] for h in hist] == [0, 0, 1, 1]
    assert hist[2]["pref/pool"] == hist[0]["pref/pairs"] + hist[2]["pref/pairs"]  # decay replay keeps round 0
    for h in hist:  # RL on the reward model's score; the task's own reward is logged beside it
        assert "env/env_reward" in h and 0.0 <= h["env/env_reward"] <= 1.0 and h["rm/refit"] == 1.0
    rm_report = json.loads((out / "round-1" / "reward_model.json").read_text())
    assert rm_report["rm/train_pairs"] + rm_report["rm/held_out_pairs"] == hist[2]["pref/pool"]
    assert not same(w0, weights(straight))
    assert json.loads((out / "rounds.json").read_text())["rounds_done"] == 2

    between = trainer(tmp_path / "between", rounds=1)  # a kill after round 0
    between.train()
    round0 = (tmp_path / "between" / "round-0" / "pairs.jsonl").read_text()
    resumed = trainer(tmp_path / "between", rounds=2, resume="latest")
    hist = resumed.train()
    assert [h["round"] for h in hist] == [1, 1] and resumed.state.step == 4
    assert (tmp_path / "between" / "round-0" / "pairs.jsonl").read_text() == round0  # round 0 not redone
    assert same(weights(straight), weights(resumed))

    inside = trainer(tmp_path / "inside", max_steps=3)  # a kill after the first RL step of round 1
    inside.train()
    assert (tmp_path / "inside" / "checkpoint-3" / "reward_model.pt").exists()
    resumed = trainer(tmp_path / "inside", resume="latest")
    hist = resumed.train()
    assert [h["round"] for h in hist] == [1] and resumed.state.step == 4  # the round's last step only
    assert same(weights(straight), weights(resumed))  # the same reward model and sampling stream


def test_marlhf_iter_settings_are_checked(tmp_path):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=2) for _ in range(2)]
    cfg = comarl.TrainConfig(algorithm="marlhf_iter", rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, progress_bar=False, report_to=[],
                                                  output_dir=str(tmp_path / "a")))
    with pytest.raises(ConfigError, match=r"TrainConfig\.preference\.iterative\.reward_model: marlhf_iter fits"):
        comarl.Trainer(agents, ENV, ITEMS, cfg)
    cfg.preference = PreferenceSettings(iterative=IterativeSettings(rl_algorithm="madpo",
                                                                    reward_model=RewardModelSettings()))
    with pytest.raises(ConfigError, match=r"TrainConfig\.preference\.iterative\.rl_algorithm: marlhf_iter runs an "
                                          r"on-policy"):
        comarl.Trainer(agents, ENV, ITEMS, cfg)
    with pytest.raises(ConfigError, match="train.preference.iterative.reward_model.pairs: marlhf_iter builds its"):
        PreferenceSettings(iterative=IterativeSettings(reward_model=RewardModelSettings(pairs="p.jsonl"))).validate()
    with pytest.raises(ConfigError, match="train.preference.iterative.reward_model_refit"):
        PreferenceSettings(iterative=IterativeSettings(reward_model_refit="again")).validate()


def test_continue_keeps_training_one_reward_model_across_rounds(tmp_path):
    t = trainer(tmp_path / "cont", reward_model_refit="continue")
    t.config.preference.iterative.steps_per_round = 1
    t.total_steps = 2
    seen = []
    real = t.source.fit_reward_model

    def spy(team, r):
        real(team, r)
        seen.append(t.source.reward_model)

    t.source.fit_reward_model = spy
    t.train()
    assert len(seen) == 2 and seen[0] is seen[1]  # one model, trained further in round 1
    assert (tmp_path / "cont" / "checkpoint-1" / "reward_model.pt").exists()  # kept for a resume at the boundary
