"""One spelling per config key: no shipped YAML, doc page, example, benchmark or test writes an old key
(``train.num_generations`` for ``train.rollout.num_generations``, ``train.preference.beta``,
``train.critic.entropy_coef``, ``generation_batch_size``), so what users copy is what comarl 0.2 reads.

Read independently of scripts/migrate_config_keys.py: YAML is parsed and its keys compared with the old-key
table the config classes declare (``config_io.old_spellings``), text is searched for dotted mentions, Python
for keyword arguments of the config classes. The pages that explain the old keys mark those lines
(``<!-- old keys -->`` ... ``<!-- /old keys -->``); the tests of the old spellings themselves are listed below.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from comarl.config import ExperimentConfig
from comarl.core.config_io import load_yaml, old_spellings

ROOT = Path(__file__).resolve().parents[2]
OLD = old_spellings(ExperimentConfig)
OLD_ON_PURPOSE = {"tests/unit/test_one_spelling.py", "tests/unit/test_config_sections.py",
                  "tests/unit/test_migrate_config_keys.py", "scripts/migrate_config_keys.py"}
"""Files that write old keys to test that they still work (with a warning) or are rewritten."""
MARKED = re.compile(r"<!-- old keys[^>]*-->.*?<!-- /old keys -->", re.S)
MENTION = re.compile(r"(?<!\w)(" + "|".join(re.escape(k) for k in sorted(OLD, key=len, reverse=True)) + r")(?!\w)")
CLASSES = {"TrainConfig", "PreferenceSettings", "HardwareConfig", "CriticSettings"}


def shipped(*patterns: str) -> list[Path]:
    found = {p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()}
    return sorted(p for p in found if p.relative_to(ROOT).as_posix() not in OLD_ON_PURPOSE
                  and ".venv" not in p.parts and "site" not in p.relative_to(ROOT).parts[:1])


def old_keys_in(data, path: str = "") -> list[str]:
    """Full dotted paths of the old keys in a parsed YAML experiment."""
    found = []
    if isinstance(data, dict):
        for k, v in data.items():
            full = f"{path}.{k}" if path else str(k)
            if full in OLD:
                found.append(full)
            found += old_keys_in(v, full)
    return found


FLAT = sorted({k.split(".")[1] for k in OLD if k.count(".") == 1}, key=len, reverse=True)
PYTHON_MENTION = re.compile(r"\bTrainConfig(?:\((?:[^()]*?,\s*)?|\.)(" + "|".join(FLAT) + r")\b(?![(.])")
"""``TrainConfig(resume="latest")`` or ``TrainConfig.output_dir`` written in prose (inline code): a keyword at the
top level of the call, or an attribute."""


def mentions(text: str) -> list[str]:
    text = MARKED.sub("", text)
    return MENTION.findall(text) + [f"TrainConfig {m}" for m in PYTHON_MENTION.findall(text)]


def yaml_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```ya?ml[^\n]*\n(.*?)^```", MARKED.sub("", markdown), re.M | re.S)


def old_keywords(source: str) -> list[str]:
    """``TrainConfig(num_generations=...)`` and the like: calls of the config classes with an old keyword."""
    from comarl.core.config_io import aliases

    from comarl.config import HardwareConfig, TrainConfig
    from comarl.critics.settings import CriticSettings
    from comarl.preference.settings import PreferenceSettings

    classes = {c.__name__: c for c in (TrainConfig, PreferenceSettings, HardwareConfig, CriticSettings)}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in classes:
                old = set(aliases(classes[name])) | set(getattr(classes[name], "MOVED_OUT", {}))
                found += [f"line {node.lineno}: {name}({k.arg}=...)" for k in node.keywords if k.arg in old]
    return found


def test_the_old_key_table_is_complete():
    """The table the checks below use holds every kind of old key (so a check that finds nothing means something)."""
    assert OLD["train.num_generations"] == "train.rollout.num_generations"
    assert OLD["train.preference.beta"] == "train.preference.dpo.beta"
    assert OLD["train.critic.entropy_coef"] == "train.loss.entropy_coef"
    assert OLD["train.generation_batch_size"] == OLD["train.hardware.generation_batch_size"] == \
        "train.hardware.prompts_per_generate"
    assert len([k for k in OLD if k.count(".") == 1]) == 57  # the flat keys of rollout, loss, run and hardware


def test_no_shipped_yaml_writes_an_old_key():
    bad = {}
    for path in shipped("configs/**/*.yaml", "configs/**/*.yml", "examples/**/*.yaml", "benchmarks/**/*.yaml",
                        "tests/**/*.yaml", "docs/**/*.yaml"):
        found = old_keys_in(load_yaml(path.read_text()))
        if found:
            bad[path.relative_to(ROOT).as_posix()] = found
    assert not bad, f"old config keys (python scripts/migrate_config_keys.py FILE rewrites them): {bad}"


def test_no_page_names_an_old_key():
    bad = {}
    for path in shipped("README.md", "docs/**/*.md", "examples/**/*.md", "benchmarks/**/*.md", "configs/**/*.md"):
        text = path.read_text()
        found = mentions(text) + [k for block in yaml_blocks(text) for k in old_keys_in(load_yaml(block))]
        found += [k for block in re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.M | re.S)
                  for k in old_keywords(block)]
        if found:
            bad[path.relative_to(ROOT).as_posix()] = found
    assert not bad, f"pages name old config keys: {bad}"


def yaml_in_strings(source: str) -> list[str]:
    """Old keys in the YAML experiments Python writes as string literals (``"train: {num_generations: 2}"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "train:" in node.value:
            try:
                data = load_yaml(node.value)
            except Exception:  # noqa: BLE001 - not YAML, or YAML broken on purpose
                continue
            found += [f"line {node.lineno}: {k}" for k in old_keys_in(data)]
    return found


def test_no_example_benchmark_or_test_uses_an_old_key():
    bad = {}
    for path in shipped("examples/**/*.py", "benchmarks/**/*.py", "tests/**/*.py", "scripts/**/*.py",
                        "docs/**/*.py", "benchmarks/**/*.sh", "configs/**/*.yaml"):
        text = path.read_text()
        found = mentions(text) + (old_keywords(text) + yaml_in_strings(text) if path.suffix == ".py" else [])
        if found:
            bad[path.relative_to(ROOT).as_posix()] = found
    assert not bad, f"old config keys in code: {bad}"


@pytest.mark.parametrize("text, found", [
    ("comarl train c.yaml train.num_generations=8", ["train.num_generations"]),
    ("`train.preference.beta` and `train.vllm.cpu_threads`", ["train.preference.beta", "train.vllm"]),
    ("train.rollout.num_generations, data.train.split, train.critic.lr", []),
    ("<!-- old keys -->train.batch_size<!-- /old keys -->", []),
    ('`TrainConfig(resume="latest")` and `TrainConfig.output_dir`', ["TrainConfig resume", "TrainConfig output_dir"]),
    ('`TrainConfig(algorithm="x", kl_beta=0.1)`, `TrainConfig(run=RunConfig(seed=1))`', ["TrainConfig kl_beta"]),
    ("TrainConfig(rollout=comarl.RolloutConfig(num_generations=4)), TrainConfig.run.seed", []),
])
def test_mentions_are_found(text, found):
    assert mentions(text) == found


def test_yaml_keys_and_keywords_are_found():
    assert old_keys_in(load_yaml("train:\n  batch_size: 2\n  critic: {entropy_coef: 0.1}\n  hardware:\n"
                                 "    generation_batch_size: 2\n")) == \
        ["train.batch_size", "train.critic.entropy_coef", "train.hardware.generation_batch_size"]
    assert old_keywords("comarl.TrainConfig(rollout=R(num_generations=2), seed=1)\nCriticSettings(entropy_coef=1)") \
        == ["line 1: TrainConfig(seed=...)", "line 2: CriticSettings(entropy_coef=...)"]
    assert yaml_in_strings('f.write_text("agents: []\\n"\n             "train: {rollout: {joint_mode: x}, seed: 1}")') \
        == ["line 1: train.seed"]
