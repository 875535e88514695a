"""Per-agent device placement: train.hardware.agent_devices validation, placement, thread-per-GPU generation."""
import threading

import pytest
import torch

from comarl.generation.team import generate_for_agents
from comarl import (AgentConfig, ConfigError, FunctionEnv, HardwareConfig, RolloutConfig, RunConfig, TrainConfig,
                    Trainer, load_config)
from comarl.generation import Completions, device_groups, overlap_generation
from comarl.compute.placement import ReferenceOnDevice, check_shared_devices, place_references, resolve_device

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")


def _tiny(seed=0):
    return AgentConfig(model="tiny", max_new_tokens=4, model_kwargs={"hidden_size": 32, "num_layers": 1,
                                                                     "seed": seed})


def _env():
    return FunctionEnv([lambda it: "a " + it["q"], lambda it: "b " + it["q"]], lambda r, it: float(len(r[0]) % 2))


def test_agent_devices_needs_one_entry_per_agent():
    with pytest.raises(ConfigError, match=r"train.hardware.agent_devices: has 1 entries for 2 agents"):
        TrainConfig(hardware=HardwareConfig(agent_devices=["cpu"])).validate(2)


def test_agent_devices_rejects_a_non_device_naming_the_entry():
    with pytest.raises(ConfigError, match=r"train.hardware.agent_devices\[1\]: 'gpu1' is not a device"):
        TrainConfig(hardware=HardwareConfig(agent_devices=["cpu", "gpu1"])).validate(2)
    with pytest.raises(ConfigError, match=r"train.hardware.agent_devices\[0\]: must be a device string"):
        TrainConfig(hardware=HardwareConfig(agent_devices=[0, "cpu"])).validate(2)


def test_agent_devices_from_yaml_override():
    cfg = load_config(None, ["agents=[{model: tiny}, {model: tiny}]", "train.hardware.agent_devices=[cpu, cpu]"])
    assert cfg.train.hardware.agent_devices == ["cpu", "cpu"]
    with pytest.raises(ConfigError, match="train.hardware.agent_devices"):
        load_config(None, ["agents=[{model: tiny}, {model: tiny}]", "train.hardware.agent_devices=[cpu]"])


@no_cuda
def test_cuda_device_without_cuda_is_a_clear_error():
    cfg = TrainConfig(hardware=HardwareConfig(agent_devices=["cpu", "cuda:1"]),
                      run=RunConfig(progress_bar=False, report_to=[]))
    with pytest.raises(ConfigError, match=r"TrainConfig.hardware.agent_devices\[1\]: 'cuda:1' asks for a GPU but "
                                          r"CUDA is not"):
        Trainer([_tiny(0), _tiny(1)], _env(), [{"q": "x"}], cfg)
    with pytest.raises(ConfigError, match=r"agents\[0\]\.device: 'cuda' asks for a GPU"):
        Trainer([AgentConfig(model="tiny", device="cuda"), _tiny(1)], _env(), [{"q": "x"}],
                TrainConfig(run=RunConfig(progress_bar=False, report_to=[])))


def test_agent_devices_override_the_agent_config_and_place_models():
    cfg = TrainConfig(hardware=HardwareConfig(agent_devices=["cpu", "cpu"]), rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=1, max_steps=1, progress_bar=False, report_to=[]))
    a0 = AgentConfig(model="tiny", device="cuda:7", max_new_tokens=4, model_kwargs={"hidden_size": 32})
    t = Trainer([a0, _tiny(1)], _env(), [{"q": "x"}], cfg)  # cuda:7 is overridden, so no error
    assert [str(a.device) for a in t.agents] == ["cpu", "cpu"]
    assert [a.config.device for a in t.agents] == ["cpu", "cpu"]
    assert a0.device == "cuda:7"  # the caller's config is not mutated
    t.train()


def test_built_agents_are_moved_and_shared_models_must_stay_together():
    from comarl import build_agents

    agents = build_agents([_tiny(0), AgentConfig(model="tiny", share_weights_with=0)])
    t = Trainer(agents, _env(), [{"q": "x"}], TrainConfig(hardware=HardwareConfig(agent_devices=["cpu", "cpu:0"]),
                                                          rollout=RolloutConfig(num_generations=2),
                                                          run=RunConfig(progress_bar=False, report_to=[])))
    assert t.agents[0].model is t.agents[1].model and str(t.agents[1].device) == "cpu"
    with pytest.raises(ConfigError, match="agent 1 shares agent 0's weights"):
        check_shared_devices([_tiny(0), AgentConfig(share_weights_with=0)], ["cpu", "cuda:1"])
    check_shared_devices([_tiny(0), AgentConfig(share_weights_with=0)], ["cuda:1", "cuda:1"])


def test_resolve_device_normalises_cpu():
    assert resolve_device("cpu", "k") == "cpu"
    assert resolve_device("cpu:0", "k") == "cpu"
    with pytest.raises(ConfigError, match="k: 'npu' is not a device"):
        resolve_device("npu", "k")


def test_device_groups_and_when_generation_overlaps():
    assert device_groups(["cuda:0", "cuda:1", "cuda:0"]) == [[0, 2], [1]]
    assert device_groups(["cpu", "cpu"]) == [[0, 1]]
    assert overlap_generation(["cuda:0", "cuda:1"])
    assert not overlap_generation(["cuda:0", "cuda:0"])
    assert not overlap_generation(["cpu", "cpu"])
    assert not overlap_generation(["cpu", "cuda:0"])


class _FakeAgent:
    def __init__(self, name, device):
        self.name, self.device = name, device


def test_generate_for_agents_threads_per_gpu_and_keeps_agent_order():
    """Agents on cuda:0, cuda:1, cuda:0: two threads (one per device), results in agent order."""
    threads = {}
    barrier = threading.Barrier(2, timeout=10)  # both device threads must be running at once

    def fake(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
        threads[agent.name] = threading.get_ident()
        if agent.name in ("a", "b"):
            barrier.wait()
        texts = [f"{agent.name}{p[0]}-{j}" for p in prompt_ids for j in range(k)]
        return Completions(prompt_ids, [[1]] * len(texts), [False] * len(texts), texts, k)

    agents = [_FakeAgent("a", "cuda:0"), _FakeAgent("b", "cuda:1"), _FakeAgent("c", "cuda:0")]
    out = generate_for_agents(agents, [[[1]], [[2]], [[3]]], 2, generate_one=fake)
    assert [c.texts for c in out] == [["a1-0", "a1-1"], ["b2-0", "b2-1"], ["c3-0", "c3-1"]]
    assert threads["a"] == threads["c"] != threads["b"]
    # on CPU: sequential, in the caller's thread
    cpu = [_FakeAgent("x", "cpu"), _FakeAgent("y", "cpu")]
    generate_for_agents(cpu, [[[1]], [[2]]], 1, generate_one=fake)
    assert threads["x"] == threads["y"] == threading.get_ident()


class _Ref:
    def __init__(self):
        self.model = torch.nn.Linear(2, 2)

    def logprobs(self, prompts, completions):
        return torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2)


@no_cuda
def test_reference_device_moves_reference_copies_and_is_checked():
    refs = [_Ref(), None]
    agents = [_FakeAgent("a", torch.device("cpu")), _FakeAgent("b", torch.device("cpu"))]
    placed = place_references(refs, "cpu", agents)
    assert placed[0] is refs[0] and placed[1] is None  # same device: nothing to wrap
    assert refs[0].model.weight.device.type == "cpu"
    assert place_references(refs, None) == refs
    with pytest.raises(ConfigError, match="train.hardware.reference_device: 'cuda' asks for a GPU"):
        place_references(refs, "cuda", agents)
    # a reference on another device answers on its agent's device ("meta" stands in for a second device)
    wrapped = ReferenceOnDevice(refs[0], torch.device("meta"))
    lp, mask = wrapped.logprobs([[1]], [[2]])
    assert lp.device.type == "meta" and mask.device.type == "meta" and wrapped.model is refs[0].model
