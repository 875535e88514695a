"""A YAML config can name a user's environment by import path, with items from a local file."""
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.experiment import build_trainer

HERE = Path(__file__).resolve().parents[1]  # tests/


def test_env_by_import_path_trains(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE / "data" / "custom"))
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(f"""
agents: [{{model: tiny, max_new_tokens: 4}}, {{model: tiny, max_new_tokens: 4}}]
env: {{name: "my_task:build", args: {{greeting: Hi}}}}
data: {{train: {{source: {HERE / 'data' / 'custom' / 'items.jsonl'}, limit: 2}}}}
train: {{rollout: {{num_generations: 2}}, run: {{batch_size: 2, max_steps: 1, progress_bar: false}}}}
""")
    trainer = build_trainer(load_config(cfg_file))
    assert [it["q"] for it in trainer.train_items] == ["one", "two"]
    assert trainer.env.reset(trainer.train_items[0]).prompts[1] == "Hi agent 1: one"
    assert len(trainer.train()) == 1


def test_bad_import_path_names_env_name():
    from comarl.config import ExperimentConfig, EnvConfig
    from comarl.experiment import build_env

    with pytest.raises(ConfigError, match=r"env\.name: cannot import 'no_such_module_xyz:build'"):
        build_env(ExperimentConfig(env=EnvConfig(name="no_such_module_xyz:build")))
