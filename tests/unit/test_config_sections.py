"""``train`` in sections (rollout, loss, run, hardware, critic, preference.{pairs, dpo, iterative}), one spelling per
key: every config in configs/ resolves as recorded, and the old spellings (flat ``train`` keys,
``train.critic.entropy_coef``, ``generation_batch_size``) still reach their key for one release, each use with a
one-line DeprecatedKey warning naming the new key (in YAML, ``key=value`` overrides, keyword arguments and
attributes). This file writes the old keys on purpose (tests/unit/test_one_spelling.py lists it)."""
import dataclasses
import json
import subprocess
import sys
import typing
import warnings
from pathlib import Path

import pytest

from comarl.config import HardwareConfig, LossConfig, RunConfig, TrainConfig, load_config
from comarl.core.config_io import ConfigError, DeprecatedKey, Moved, to_dict
from comarl.critics import CriticSettings
from comarl.preference import PreferenceSettings

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "tests" / "fixtures" / "resolved_configs.json").read_text())
"""Every config of configs/ as it resolved before its keys were rewritten into sections (to_dict, sectioned)."""


@pytest.mark.parametrize("path", sorted(RECORDED))
def test_every_config_resolves_as_recorded(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert to_dict(load_config(ROOT / path)) == RECORDED[path]  # and warns of no old key (pytest: an error)


def test_every_shipped_config_is_recorded():
    assert sorted(RECORDED) == sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "configs").rglob("*.yaml"))


def _warned(record, old: str, new: str) -> None:
    said = [str(w.message) for w in record if issubclass(w.category, DeprecatedKey)]
    assert any(s.startswith(f"{old} is deprecated, write {new} ") for s in said), said


def test_old_keys_in_yaml_and_overrides_warn_and_reach_their_section(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  algorithm: iac\n  num_generations: 3\n  generation_batch_size: 2\n  preference:\n"
                   "    beta: 0.3\n  critic:\n    entropy_coef: 0.01\n")
    with pytest.warns(DeprecatedKey) as record:
        c = load_config(cfg, ["train.batch_size=7", "train.preference.rounds=4", "train.critic.entropy_coef=0.02",
                              "train.hardware.generation_batch_size=3", "train.rollout.num_generations=5"])
    assert (c.train.rollout.num_generations, c.train.run.batch_size) == (5, 7)  # the override wins, either form
    assert (c.train.preference.dpo.beta, c.train.preference.iterative.rounds) == (0.3, 4)
    assert (c.train.loss.entropy_coef, c.train.hardware.prompts_per_generate) == (0.02, 3)
    for old, new in [("train.num_generations", "train.rollout.num_generations"),
                     ("train.generation_batch_size", "train.hardware.prompts_per_generate"),
                     ("train.preference.beta", "train.preference.dpo.beta"),
                     ("train.critic.entropy_coef", "train.loss.entropy_coef"),
                     ("train.batch_size", "train.run.batch_size"),
                     ("train.preference.rounds", "train.preference.iterative.rounds"),
                     ("train.hardware.generation_batch_size", "train.hardware.prompts_per_generate")]:
        _warned(record, old, new)
    said = [str(w.message) for w in record if issubclass(w.category, DeprecatedKey)]
    assert all("\n" not in s and "scripts/migrate_config_keys.py" in s for s in said)  # one line each


def test_the_warning_is_a_future_warning_users_see_by_default():
    """FutureWarning: Python's default filters show it to whoever runs comarl (a DeprecationWarning raised inside
    a library is hidden). Checked in a fresh interpreter, without pytest's filters."""
    assert issubclass(DeprecatedKey, FutureWarning)
    code = "from comarl.config import load_config; load_config(None, ['train.seed=1'])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "DeprecatedKey: train.seed is deprecated, write train.run.seed" in r.stderr, r.stderr


def test_a_key_given_both_ways_is_an_error_naming_both(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  num_generations: 3\n  rollout:\n    num_generations: 4\n")
    with pytest.raises(ConfigError, match=r"train\.num_generations and train\.rollout\.num_generations are the same"):
        load_config(cfg)
    cfg.write_text("train:\n  critic:\n    entropy_coef: 0.1\n  loss:\n    entropy_coef: 0.2\n")
    with pytest.raises(ConfigError, match=r"train\.critic\.entropy_coef and train\.loss\.entropy_coef are the same"):
        load_config(cfg)


def test_unknown_keys_are_errors_suggesting_the_sectioned_key(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key train\.num_generation \(did you mean "
                                          r"train\.rollout\.num_generations "):
        load_config(None, ["train.num_generation=3"])
    with pytest.raises(ConfigError, match=r"train\.rollout\.batch_size \(did you mean train\.run\.batch_size\?\)"):
        load_config(None, ["train.rollout.batch_size=3"])
    with pytest.raises(TypeError, match=r"did you mean rollout=RolloutConfig\(num_generations=\.\.\.\)"):
        TrainConfig(num_generation=3)


def test_validation_errors_name_the_sectioned_key():
    with pytest.raises(ConfigError, match=r"^train\.run\.batch_size: must be >= 1"):
        TrainConfig(run=RunConfig(batch_size=0)).validate(1)
    with pytest.raises(ConfigError, match=r"^train\.hardware\.prompts_per_generate: must be >= 0"):
        TrainConfig(hardware=HardwareConfig(prompts_per_generate=-1)).validate(1)
    with pytest.raises(ConfigError, match=r"^train\.loss\.entropy_coef: must be >= 0"):
        TrainConfig(loss=LossConfig(entropy_coef=-0.1)).validate(1)


def test_python_keywords_and_attributes_warn_and_reach_the_sections():
    with pytest.warns(DeprecatedKey) as record:
        c = TrainConfig(algorithm="marloo", num_generations=3, batch_size=2, sharding="none")
    assert (c.rollout.num_generations, c.run.batch_size, c.hardware.sharding) == (3, 2, "none")
    _warned(record, "TrainConfig(num_generations=...)", "TrainConfig(rollout=RolloutConfig(num_generations=...))")
    with pytest.warns(DeprecatedKey) as record:
        c.save_steps = 5
        assert c.save_steps == 5 and c.hardware.generation_batch_size == 0
    assert c.run.save_steps == 5
    _warned(record, "TrainConfig.save_steps", "TrainConfig.run.save_steps")
    _warned(record, "HardwareConfig.generation_batch_size", "HardwareConfig.prompts_per_generate")
    with pytest.warns(DeprecatedKey):
        p = PreferenceSettings(beta=0.5, rounds=3, replay="all")
    assert (p.dpo.beta, p.iterative.rounds, p.iterative.replay) == (0.5, 3, "all")
    with pytest.warns(DeprecatedKey):
        assert p.beta == 0.5
    with pytest.warns(DeprecatedKey):
        h = HardwareConfig(generation_batch_size=4)
    assert h.prompts_per_generate == 4


def test_the_entropy_bonus_moved_to_the_loss_section():
    with pytest.warns(DeprecatedKey) as record:
        c = TrainConfig(algorithm="iac", critic=CriticSettings(lr=1e-3, entropy_coef=0.01))
    _warned(record, "CriticSettings(entropy_coef=...)", "train.loss.entropy_coef")
    assert c.loss.entropy_coef == 0.01 and c.critic.lr == 1e-3
    assert "entropy_coef" not in {f.name for f in dataclasses.fields(CriticSettings)}
    with pytest.raises(AttributeError):  # a section does not see its neighbour: no alias to read
        c.critic.entropy_coef  # noqa: B018
    later = TrainConfig()
    with pytest.warns(DeprecatedKey):
        later.critic = CriticSettings(entropy_coef=0.02)  # assigned after construction: placed by validate
    later.validate(1)
    assert later.loss.entropy_coef == 0.02
    with pytest.warns(DeprecatedKey), pytest.raises(ConfigError, match="same key"):
        TrainConfig(loss=LossConfig(entropy_coef=0.1), critic=CriticSettings(entropy_coef=0.2))


def test_no_warning_for_the_sectioned_spelling(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  algorithm: iac\n  rollout: {num_generations: 3}\n  loss: {entropy_coef: 0.01}\n"
                   "  hardware: {prompts_per_generate: 2}\n  preference: {dpo: {beta: 0.2}}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = load_config(cfg, ["train.run.batch_size=2"])
        assert (c.train.rollout.num_generations, c.train.preference.dpo.beta) == (3, 0.2)


@pytest.mark.parametrize("cls", [TrainConfig, PreferenceSettings, HardwareConfig])
def test_every_old_attribute_is_typed_as_its_field(cls):
    """The Moved descriptors are written out (so mypy sees them): each names a field that exists and carries its
    type, so a typed read of an old name type-checks as the new one does (and mypy flags it as deprecated)."""
    moved = {n: d for n, d in vars(cls).items() if isinstance(d, Moved)}
    assert moved and set(moved) == {k for k in cls.ALIASES if "." not in k}
    for name, d in moved.items():
        owner: typing.Any = cls
        *head, last = d.path.split(".")
        for part in head:
            owner = typing.get_type_hints(owner)[part]
        assert typing.get_args(d.__orig_class__)[0] == typing.get_type_hints(owner)[last], name


def test_an_entropy_bonus_an_algorithm_would_ignore_is_refused():
    """A term of the policy-gradient loss: every policy-gradient algorithm takes it, a DPO update has none."""
    with pytest.raises(ConfigError, match=r"train\.loss\.entropy_coef: the entropy bonus is a term of the "
                                          r"policy-gradient loss, and madpo takes no policy-gradient step"):
        load_config(None, ["train.algorithm=madpo", "train.loss.entropy_coef=0.01"])
    for algorithm in ("magrpo", "iac"):
        cfg = load_config(None, [f"train.algorithm={algorithm}", "train.loss.entropy_coef=0.01"])
        assert cfg.train.loss.entropy_coef == 0.01
