"""configs/writing/*.yaml: the shape the core loader reads, env.args that build, data the smoke runs can read."""
import os
from pathlib import Path

import pytest
import yaml

from comarl.envs.registry import get_env
from comarl.envs.writing import arxiv, tldr  # noqa: F401  (registers the envs)

ROOT = str(Path(__file__).resolve().parents[3])
CONFIGS = ["tldr", "arxiv", "tldr_smoke", "arxiv_smoke"]


def load(name):
    with open(os.path.join(ROOT, "configs", "writing", name + ".yaml")) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_shape_and_env_builds(name):
    cfg = load(name)
    assert set(cfg) == {"agents", "env", "data", "train"}
    assert set(cfg["train"]) == {"algorithm", "rollout", "run"}
    assert (set(cfg["train"]["rollout"]), set(cfg["train"]["run"])) == (
        {"num_generations", "num_turns", "joint_mode"}, {"epochs", "batch_size", "output_dir"})
    for agent in cfg["agents"]:
        assert set(agent) == {"model", "max_new_tokens", "temperature", "lr"}
    env = get_env(cfg["env"]["name"]).build(len(cfg["agents"]), **cfg["env"]["args"])
    assert env.num_agents == 2 and cfg["train"]["rollout"]["num_turns"] == 1


def test_paper_setup():
    for name in ("tldr", "arxiv"):
        cfg = load(name)
        assert [a["model"] for a in cfg["agents"]] == ["Qwen/Qwen2.5-1.5B"] * 2
        assert all(a["max_new_tokens"] == 256 for a in cfg["agents"])
        assert cfg["train"]["rollout"]["num_generations"] == 4
        assert cfg["data"]["train"]["source"] in (tldr.HUB_ID, arxiv.HUB_ID)


@pytest.mark.parametrize("name", ["tldr_smoke", "arxiv_smoke"])
def test_smoke_configs_read_local_data(name):
    cfg = load(name)
    assert all(a["model"] == "tiny" and a["max_new_tokens"] == 16 for a in cfg["agents"])
    assert cfg["train"]["rollout"]["num_generations"] == 2
    entry = get_env(cfg["env"]["name"])
    for part in ("train", "eval"):
        d = cfg["data"][part]
        source = d["source"] if d["source"].startswith(("fixture:", "package:")) else os.path.join(ROOT, d["source"])
        items = entry.load_items(source, d["split"], d["limit"])
        assert len(items) == 4 and all(it["text"] for it in items)
