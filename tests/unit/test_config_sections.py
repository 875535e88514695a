"""``train`` in sections (rollout, loss, run, hardware, critic, preference.{pairs, dpo, iterative}), the old flat
keys kept as aliases: every config in configs/ resolves as it did before the sections."""
import json
from pathlib import Path

import pytest

from comarl.config import TrainConfig, load_config
from comarl.config_io import ConfigError, to_dict
from comarl.generation.vllm_settings import EngineSettings
from comarl.preference import PreferenceSettings

ROOT = Path(__file__).resolve().parents[2]
BEFORE = json.loads((ROOT / "tests" / "fixtures" / "resolved_configs.json").read_text())
# keys added after the recording, with the value every recorded config must have (its default)
ADDED = {("env", "on_error"): "raise", ("train", "max_consecutive_skips"): 20, ("train", "generator"): "hf",
         ("train", "tis_cap"): None, ("train", "vllm"): to_dict(EngineSettings())}


def flat(train: dict) -> dict:
    """A sectioned ``train`` dict written the way it was before the sections (for comparison)."""
    out = {k: v for k, v in train.items() if k not in ("rollout", "loss", "run", "hardware", "preference")}
    for section in ("rollout", "loss", "run", "hardware"):
        out.update(train[section])
    pref = train["preference"]
    out["preference"] = {**pref["pairs"], **pref["dpo"], **pref["iterative"]}
    return out


@pytest.mark.parametrize("path", sorted(BEFORE))
def test_every_config_resolves_as_before(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    now = to_dict(load_config(ROOT / path))
    before = BEFORE[path]
    now["train"] = flat(now["train"])
    for (section, key), default in ADDED.items():
        assert now[section].pop(key) == default, (section, key)
    for rm in (now["train"]["preference"].get("reward_model"), now["env"].get("reward_model")):
        if isinstance(rm, dict):  # added after the recording, default 0.0 (no clipping, as before)
            assert rm.pop("max_grad_norm") == 0.0
    assert {k: v for k, v in now.items() if k != "train"} == {k: v for k, v in before.items() if k != "train"}
    assert now["train"] == before["train"]


def test_old_and_new_keys_name_the_same_setting_everywhere(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  num_generations: 3\n  preference:\n    beta: 0.3\n")
    c = load_config(cfg, ["train.rollout.num_generations=5", "train.batch_size=7", "train.preference.dpo.beta=0.2",
                          "train.preference.rounds=4"])
    assert (c.train.rollout.num_generations, c.train.run.batch_size) == (5, 7)  # the override wins, either form
    assert (c.train.preference.dpo.beta, c.train.preference.iterative.rounds) == (0.2, 4)
    assert c.train.num_generations == 5 and c.train.preference.beta == 0.2  # attributes by the old names


def test_a_key_given_both_ways_is_an_error_naming_both(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  num_generations: 3\n  rollout:\n    num_generations: 4\n")
    with pytest.raises(ConfigError, match=r"train\.num_generations and train\.rollout\.num_generations are the same"):
        load_config(cfg)


def test_unknown_keys_are_still_errors_listing_old_and_new_names(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key train\.num_generation .*num_generations.*rollout"):
        load_config(None, ["train.num_generation=3"])
    with pytest.raises(TypeError):
        TrainConfig(num_generation=3)


def test_python_keywords_and_attributes_reach_the_sections():
    c = TrainConfig(algorithm="marloo", num_generations=3, batch_size=2, sharding="none")
    assert (c.rollout.num_generations, c.run.batch_size, c.hardware.sharding) == (3, 2, "none")
    c.save_steps = 5
    assert c.run.save_steps == 5 and c.save_steps == 5
    p = PreferenceSettings(beta=0.5, rounds=3, replay="all")
    assert (p.dpo.beta, p.iterative.rounds, p.iterative.replay) == (0.5, 3, "all")
    p.validate()
