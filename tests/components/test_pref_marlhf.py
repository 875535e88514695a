"""MARLHF from a config: the reward model is fitted on the pairs file and replaces the env's reward."""
import json
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.experiment import build_trainer
from comarl.preference import RewardModelEnv

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs/preference/tldr_marlhf_smoke.yaml"


def test_config_fits_the_reward_model_and_trains_on_its_score(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_config(SMOKE, [f"train.run.output_dir={tmp_path}", "train.run.max_steps=1",
                              "train.run.progress_bar=false", "train.run.report_to=[]"])
    t = build_trainer(cfg)
    assert isinstance(t.env, RewardModelEnv)
    report = json.loads((tmp_path / "reward_model.json").read_text())
    assert report["rm/held_out_pairs"] == 6 and report["rm/train_pairs"] == 18
    assert report["rm/accuracy"] >= 0.5  # 6 held-out pairs: good answers vs empty/garbage
    hist = t.train()
    assert "env/env_reward" in hist[0]


def test_reward_model_settings_errors_name_the_key(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError, match="env.reward_model.held_out"):
        load_config(SMOKE, ["env.reward_model.held_out=1.5"])
    cfg = load_config(SMOKE, ["env.reward_model.pairs=nowhere.jsonl", "train.run.report_to=[]"])
    with pytest.raises(ConfigError, match="env.reward_model.pairs: nowhere.jsonl does not exist"):
        build_trainer(cfg)
