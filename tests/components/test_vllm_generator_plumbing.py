"""What ``VLLMGenerator`` does around its engines, with a fake engine (no vLLM needed): where each engine is told to
run (``agent_cpus``, its agent's GPU), the refusals of CPU lists, the gathers of a sharded team's pushes (a full
agent gathered whole, LoRA adapters alone), engines in their own processes sampling at once, and a push that fails
under torchrun stopping the run with one line. The real engines: test_vllm_agent_cpus.py,
tests/distributed/test_vllm_ranks.py, tests/distributed/test_vllm_stall.py."""
import contextlib
import time

import pytest

from comarl.models.agents import AgentConfig, build_agents
from comarl.compute import distributed as dist
from comarl.generation.vllm_engine import EngineCompletions
from comarl.generation.vllm_generator import VLLMGenerator
from comarl.generation.vllm_settings import EngineSettings
from comarl.models.lora import LoraSettings

OWN = EngineSettings(in_process=False)


class FakeEngine:
    """Records how it was built, the pushes it got and when it sampled; samples token 5 after each prompt."""

    def __init__(self, model, tokenizer, settings, lora_rank=0, num_adapters=1, name="engine", cpus=None, gpu=None,
                 on_timeout=None):
        self.name, self.cpus, self.gpu, self.lora = name, cpus, gpu, lora_rank > 0
        self.pushes: list = []
        self.calls: list[tuple[float, float]] = []
        self.fail = None

    def generate(self, prompts, k, sampling, adapters=None, schemas=None):
        started = time.monotonic()
        time.sleep(0.3)
        self.calls.append((started, time.monotonic()))
        ids = [[5] for _ in prompts for _ in range(k)]
        return EngineCompletions(list(prompts), ids, [False] * len(ids), ["x"] * len(ids), k,
                                 logprobs=[[-1.0] for _ in ids])

    def push_weights(self, model):
        if self.fail:
            raise self.fail
        self.pushes.append(("weights", next(model.parameters()).detach().clone()))
        return 0.0

    def push_adapter(self, name, model, state=None):
        self.pushes.append(("adapter", name, state))
        return 0.0

    def close(self):
        pass


class FakeSharding:
    """Counts ``gathered`` blocks (a real one unshards FSDP2 modules there)."""

    def __init__(self):
        self.gathers: list[list] = []

    @contextlib.contextmanager
    def gathered(self, models):
        self.gathers.append(list(models))
        yield


def full_agents(n=2):
    return build_agents([AgentConfig(model="tiny", max_new_tokens=3, model_kwargs={"seed": i}) for i in range(n)])


def test_each_engine_is_told_its_agents_cpus_and_engines_in_their_own_processes_sample_at_once():
    agents = full_agents()
    gen = VLLMGenerator(agents, EngineSettings(in_process=False, agent_cpus=["0-1", "2"]), engine_factory=FakeEngine)
    engines = list(gen.engines.values())
    assert [e.cpus for e in engines] == ["0-1", "2"] and [e.gpu for e in engines] == [None, None]
    assert gen.concurrent
    gen.generate_for_agents(agents, [a.encode_prompts(["hi"]) for a in agents], 2)
    (a0, b0), (a1, b1) = (e.calls[0] for e in gen.engines.values())
    assert max(a0, a1) < min(b0, b1)  # both 0.3 s calls overlapped
    one = VLLMGenerator(agents, EngineSettings(), engine_factory=FakeEngine)
    assert not one.concurrent  # in-process engines share this process's threads: one after another


@pytest.mark.parametrize("cpus, message", [
    (["0-1", "1-2"], r"CPU 1 is given to the engines of agent0 and of agent1; give each engine its own cores"),
    (["0"], r"agent_cpus: has 1 entries for 2 agents"),
])
def test_cpu_lists_that_overlap_or_miss_an_agent_are_refused(cpus, message):
    with pytest.raises(ValueError, match=message):
        VLLMGenerator(full_agents(), EngineSettings(in_process=False, agent_cpus=cpus), engine_factory=FakeEngine)


def test_agents_of_one_engine_must_name_the_same_cpus():
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=3, lora=LoraSettings(r=2)) for _ in range(2)])
    with pytest.raises(ValueError, match=r"agent0, agent1 share one engine but name different CPUs"):
        VLLMGenerator(agents, EngineSettings(in_process=False, agent_cpus=["0", "1"]), engine_factory=FakeEngine)


def test_a_sharded_teams_full_agents_are_pushed_whole_and_lora_adapters_alone():
    full = full_agents(1)
    lora = build_agents([AgentConfig(model="tiny", max_new_tokens=3, lora=LoraSettings(r=2)) for _ in range(2)])
    for agents, expect in ((full, 1), (lora, 0)):
        sharding = FakeSharding()
        gen = VLLMGenerator(agents, EngineSettings(), sharding=sharding, engine_factory=FakeEngine)
        assert len(sharding.gathers) == 1  # the engine starts from the whole model (a LoRA base: once, at build)
        [engine] = gen.engines.values()
        built = len(engine.pushes)
        gen.sync()
        assert len(sharding.gathers) == 1 + expect  # a push gathers a full agent; never a LoRA base
        pushed = engine.pushes[built:]
        if expect == 0:  # each adapter's own weights, gathered alone (here: not sharded, so as they are)
            assert [(kind, name) for kind, name, _ in pushed] == [("adapter", "agent0"), ("adapter", "agent1")]
            assert all(set(state) == set(a.model.state_dict()) for (_, _, state), a in zip(pushed, agents))


def test_a_push_that_fails_under_torchrun_stops_the_run_with_one_line(monkeypatch):
    agents = full_agents(1)
    lines = []
    gen = VLLMGenerator(agents, EngineSettings(), engine_factory=FakeEngine, stop=lines.append)
    [engine] = gen.engines.values()
    engine.fail = RuntimeError("engine died\nmore")
    with pytest.raises(RuntimeError):  # one process: the error itself
        gen.sync()
    assert lines == []
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "rank", lambda: 1)
    with pytest.raises(RuntimeError):  # (the real stop leaves the process here)
        gen.sync()
    assert lines == ["rank 1: the weight push of agent0 to its vLLM engine failed (RuntimeError: engine died)"]


def test_an_engine_process_is_started_on_its_cpus_or_its_agents_gpu(monkeypatch):
    """What an engine in its own process inherits while it starts (``vllm_engine._engine_env``): this thread's CPU
    affinity (restored after) and OMP threads for ``agent_cpus``; ``CUDA_VISIBLE_DEVICES`` for its agent's GPU, as
    this process's own list names it."""
    import os

    from comarl.generation.vllm_engine import _engine_env, visible_gpu

    mine = os.sched_getaffinity(0)
    first = min(mine)
    with _engine_env(OWN, on_cpu=True, cpus=str(first)):
        assert os.sched_getaffinity(0) == {first} and os.environ["OMP_NUM_THREADS"] == "1"
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == str(first)
    assert os.sched_getaffinity(0) == mine and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with _engine_env(OWN, on_cpu=False, gpu=1):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert visible_gpu(1) == "6"
    with pytest.raises(ValueError, match=r"cuda:2 is not among this process's visible GPUs \(CUDA_VISIBLE_DEVICES="):
        visible_gpu(2)
    with _engine_env(EngineSettings(), on_cpu=False, gpu=1):  # an in-process engine: nothing to set
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,6"
