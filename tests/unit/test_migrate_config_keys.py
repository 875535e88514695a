"""scripts/migrate_config_keys.py: the old config keys rewritten into their sections, in YAML (comments and
layout kept), Markdown and Python; what it cannot rewrite safely is listed, not guessed. Expected outputs are
written out by hand."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("migrate_config_keys", ROOT / "scripts" / "migrate_config_keys.py")
migrate = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = migrate
_spec.loader.exec_module(migrate)

OLD_YAML = """\
# a run
agents: [{model: tiny}]
train:
  algorithm: iac
  num_generations: 4        # K
  batch_size: 2
  # the critic's own settings
  critic:
    lr: 1.0e-5
    entropy_coef: 0.01
  kl_beta: 0.1
  generation_batch_size: 8
  hardware:
    sharding: none
  report_to:
    - jsonl
  preference:
    beta: 0.2
    pairs_per_item: null
"""

NEW_YAML = """\
# a run
agents: [{model: tiny}]
train:
  algorithm: iac
  rollout:
    num_generations: 4        # K
  loss:
    entropy_coef: 0.01
    kl_beta: 0.1
  run:
    batch_size: 2
    report_to:
      - jsonl
  # the critic's own settings
  critic:
    lr: 1.0e-5
  hardware:
    sharding: none
    prompts_per_generate: 8
  preference:
    pairs:
      pairs_per_item: null
    dpo:
      beta: 0.2
"""


def test_yaml_keys_move_into_their_sections_keeping_comments_and_order():
    assert migrate.migrate_yaml(OLD_YAML) == NEW_YAML
    assert migrate.migrate_yaml(NEW_YAML) == NEW_YAML  # nothing left to move


def test_a_rewrite_that_would_read_differently_is_refused(monkeypatch):
    monkeypatch.setattr(migrate, "_shift", lambda lines, by: lines)  # a broken re-indent
    with pytest.raises(AssertionError, match="reads differently|old keys"):
        migrate.migrate_yaml(OLD_YAML)


def test_a_flow_mapping_with_old_keys_is_left_for_a_hand_edit(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    text = "train: {algorithm: magrpo, num_generations: 4}\n"
    f.write_text(text)
    assert migrate.main([str(f)]) == 1
    assert f.read_text() == text
    assert "by hand: " in capsys.readouterr().out
    sectioned = "train: {rollout: {num_generations: 4}}\n"
    assert migrate.migrate_yaml(sectioned) == sectioned  # a flow mapping without old keys is fine


def test_python_calls_are_grouped_into_section_objects_and_imported():
    old = ("from comarl import RunConfig, TrainConfig, Trainer\n"
           "cfg = TrainConfig(algorithm=\"magrpo\", num_generations=2, batch_size=2, max_steps=1,\n"
           "                  kl_beta=0.1, run=RunConfig(seed=3))\n"
           "train.seed  # a mention: train.max_steps=2\n")
    new, hand = migrate.migrate_python(old)
    assert new == ("from comarl import LossConfig, RolloutConfig, RunConfig, TrainConfig, Trainer\n"
                   "cfg = TrainConfig(algorithm=\"magrpo\", rollout=RolloutConfig(num_generations=2),\n"
                   "                  run=RunConfig(seed=3, batch_size=2, max_steps=1), loss=LossConfig(kl_beta=0.1))\n"
                   "train.run.seed  # a mention: train.run.max_steps=2\n")
    assert hand == []


def test_python_it_cannot_see_through_is_listed():
    src = ("import comarl\n"
           "cfg = comarl.TrainConfig(seed=1, **kw)\n"
           "critic = CriticSettings(entropy_coef=0.1)\n")
    new, hand = migrate.migrate_python(src)
    assert "cfg = comarl.TrainConfig(run=comarl.RunConfig(seed=1), **kw)" in new
    assert hand == ["<text>:2: TrainConfig(..., **...): check the keys the mapping holds",
                    "<text>:3: CriticSettings(entropy_coef=...) is now train.loss.entropy_coef; move it by hand"]


def test_markdown_blocks_and_mentions(tmp_path):
    page = ("Set `train.num_generations=8` or\n\n```yaml\ntrain:\n  seed: 1\n```\n\n"
            "```python\ncfg = comarl.TrainConfig(seed=1)\n```\n")
    new, hand = migrate.migrate_markdown(page)
    assert new == ("Set `train.rollout.num_generations=8` or\n\n```yaml\ntrain:\n  run:\n    seed: 1\n```\n\n"
                   "```python\ncfg = comarl.TrainConfig(run=comarl.RunConfig(seed=1))\n```\n")
    assert hand == []


def test_check_lists_and_writes_nothing(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  seed: 1\n")
    assert migrate.main(["--check", str(tmp_path)]) == 1
    assert f.read_text() == "train:\n  seed: 1\n" and f"would rewrite {f}" in capsys.readouterr().out
    assert migrate.main([str(tmp_path)]) == 0
    assert f.read_text() == "train:\n  run:\n    seed: 1\n"
    assert migrate.main(["--check", str(tmp_path)]) == 0
