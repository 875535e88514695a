"""What a vLLM engine is given: weight names, the tied output layer, adapter folders, refusals (no vLLM needed)."""
import json

import pytest
import torch
from safetensors.torch import load_file

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation.vllm_weights import (base_weights, full_weights, lora_rank_slot, write_adapter,
                                            write_model_folder)
from comarl.models.lora import LoraSettings
from comarl.models.tiny_model import tiny_model


def test_full_weights_spell_out_the_tied_output_layer():
    model, _ = tiny_model(hidden_size=32)
    assert model.config.tie_word_embeddings
    names = dict(full_weights(model))
    params = dict(model.named_parameters())
    assert "lm_head.weight" not in params  # named_parameters drops the tied copy ...
    assert "lm_head.weight" in names  # ... which vLLM's CPU backend needs on a reload
    assert names["lm_head.weight"] is not None and torch.equal(names["lm_head.weight"],
                                                               params["model.embed_tokens.weight"])
    assert set(names) == set(params) | {"lm_head.weight"}


def test_full_weights_refuse_a_lora_view():
    agent, = build_agents([AgentConfig(model="tiny", lora=LoraSettings(r=4))])
    with pytest.raises(TypeError, match="push its adapter"):
        list(full_weights(agent.model))


def test_base_weights_use_the_base_model_names_without_adapters():
    plain, _ = tiny_model(hidden_size=32)
    agent, = build_agents([AgentConfig(model="tiny", model_kwargs={"hidden_size": 32}, lora=LoraSettings(r=4))])
    names = dict(base_weights(agent.model.shared.peft_model))
    assert set(names) == set(dict(full_weights(plain)))  # peft's base_layer / lora_ names are gone
    for n, t in full_weights(plain):  # same seed, frozen base: same values
        assert torch.equal(names[n], t), n


def test_model_folder_has_config_and_loadable_weights(tmp_path):
    model, _ = tiny_model(hidden_size=32)
    folder = write_model_folder(model, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["tie_word_embeddings"] is True
    state = load_file(str(folder / "model.safetensors"))
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])  # tied: a copy, not shared
    assert state["lm_head.weight"].data_ptr() != state["model.embed_tokens.weight"].data_ptr()


def test_adapter_folder_holds_only_that_adapter(tmp_path):
    agents = build_agents([AgentConfig(model="tiny", lora=LoraSettings(r=4)) for _ in range(2)])
    folder = write_adapter(agents[1].model, tmp_path / "a")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    assert cfg["r"] == 4
    keys = list(load_file(str(folder / "adapter_model.safetensors")))
    assert keys and all("lora_" in k for k in keys) and not any("agent0" in k or "agent1" in k for k in keys)


def test_write_adapter_refuses_a_model_that_writes_no_adapter(tmp_path):
    class NotAnAdapter:
        def save_pretrained(self, folder):
            folder.mkdir(parents=True)

    with pytest.raises(ValueError, match="no adapter_config.json"):
        write_adapter(NotAnAdapter(), tmp_path / "x")


@pytest.mark.parametrize("r,slot", [(1, 1), (4, 8), (8, 8), (9, 16), (64, 64), (300, 320)])
def test_lora_rank_slot(r, slot):
    assert lora_rank_slot(r) == slot


def test_lora_rank_slot_refuses_too_large_a_rank():
    with pytest.raises(ValueError, match="above the largest rank"):
        lora_rank_slot(513)
