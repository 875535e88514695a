"""Agents on their own devices, on a CPU: ``train.hardware.vllm.agent_cpus`` gives each agent's engine its own cores.

Two tiny agents (hidden 128), each engine in its own process (``in_process: false``) bound to one core of this
2-core machine: every thread of each engine process may run on its own core only, the two engines sample at the
same time (one thread waiting on each), and each serves its own agent's weights before and after a push (its
log-probs within 2e-4 of HF's). Measured here: 60-90 s (two engine processes start, ~30 s each on 2 busy
cores), ~1 GB per engine process. Needs vLLM (``make test-vllm``); skipped otherwise.
"""
import os
import time

import pytest
import torch

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation.vllm_engine import VLLMEngine
from comarl.generation.vllm_generator import VLLMGenerator
from comarl.generation.vllm_settings import EngineSettings, vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed "
                                                   "(scripts/install_vllm_cpu.sh; make test-vllm runs these)")]
TOL = 2e-4


def engine_processes() -> set[int]:
    """This process's children that are vLLM engine processes."""
    out = set()
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            name = open(f"/proc/{d}/cmdline").read()
        except (OSError, IndexError):
            continue
        if ppid == os.getpid() and name.startswith("VLLM::EngineCore"):
            out.add(int(d))
    return out


def thread_cpus(pid: int) -> set[int]:
    """The CPUs any thread of ``pid`` may run on."""
    cpus: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        cpus |= os.sched_getaffinity(int(tid))
    return cpus


class Clocked:
    """A real engine that records when each of its sampling calls ran (start, end)."""

    def __init__(self, *args, **kwargs):
        self.engine = VLLMEngine(*args, **kwargs)
        self.calls: list[tuple[float, float]] = []

    def generate(self, *args, **kwargs):
        started = time.monotonic()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            self.calls.append((started, time.monotonic()))

    def __getattr__(self, name):
        return getattr(self.engine, name)


def gap(agent, comp) -> float:
    worst = 0.0
    for s, (ids, lps) in enumerate(zip(comp.ids, comp.logprobs)):
        p = comp.prompt_ids[s // comp.num_samples]
        with torch.no_grad():
            logits = agent.model(input_ids=torch.tensor([p + ids])).logits[0, len(p) - 1:-1].float()
        ref = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        worst = max(worst, (ref - torch.tensor(lps)).abs().max().item())
    return worst


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_each_agents_engine_runs_on_its_own_cores_and_they_sample_at_once():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=48, chat_template=False,
                                       model_kwargs={"hidden_size": 128, "seed": i}) for i in range(2)])
    before = engine_processes()
    settings = EngineSettings(cpu_kv_cache_gib=0.25, in_process=False, agent_cpus=[str(c) for c in cpus])
    gen = VLLMGenerator(agents, settings, engine_factory=Clocked)
    try:
        assert os.sched_getaffinity(0) >= set(cpus)  # the trainer's own threads are left as they were
        engines = engine_processes() - before
        assert len(engines) == 2
        bound = sorted((thread_cpus(pid) for pid in engines), key=sorted)  # sets only order by inclusion
        assert bound == [{cpus[0]}, {cpus[1]}], bound  # disjoint: one core each, every thread of the process
        prompts = [a.encode_prompts([f"Say {w}." for w in ("red", "green", "blue", "white")]) for a in agents]
        comps = gen.generate_for_agents(agents, prompts, 4)
        gaps = [gap(a, c) for a, c in zip(agents, comps)]
        assert max(gaps) < TOL, gaps  # each engine serves its own agent
        (a0, b0), (a1, b1) = (gen.engines[gen.engine_of[i]].calls[-1] for i in (0, 1))
        assert max(a0, a1) < min(b0, b1), f"the two engines did not sample at the same time: {(a0, b0, a1, b1)}"
        with torch.no_grad():  # a push still reaches each engine process
            for p in agents[1].model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        assert gap(agents[1], gen.generate_for_agents(agents, prompts, 1, greedy=True)[1]) > 1e-2  # stale
        gen.sync([agents[1]])
        gaps = [gap(a, c) for a, c in zip(agents, gen.generate_for_agents(agents, prompts, 1, greedy=True))]
        assert max(gaps) < TOL, gaps
    finally:
        gen.close()
