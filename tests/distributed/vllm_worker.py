"""Worker for tests/distributed/test_vllm_ranks.py and test_vllm_stall.py: MAGRPO with
``train.hardware.generator: vllm`` on 2 gloo ranks, one engine per agent (or per LoRA base) on every rank. Needs
the vLLM venv.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed/vllm_worker.py OUT SCENARIO...

Scenarios (one after another in these processes; each writes ``OUT/<name>/rank<r>.pt``):

* ``dp``: two full agents, data parallel (no sharding), 2 steps of 2 items per rank. The engines' samples are
  recorded; then the same run is trained again with ``generator: hf``'s update on those samples (a replay
  generator), and both runs' final weights are saved.
* ``fsdp``: ``dp`` with ``sharding: fsdp`` (engines built and full agents pushed inside ``Sharding.gathered``).
* ``lora_fsdp``: two LoRA agents on one base, sharded: one engine per rank, the adapters pushed without
  gathering the base (the number of whole-model gathers during each push is recorded).
* ``stall``: ``dp`` with checkpoints, where rank 1's second weight push stalls (its engine never answers) and
  ``push_timeout_s`` is 5 s: the run must stop with one line naming rank 1 and the agent.

Each rank also records its engines' log-probs of greedy probe samples against HF on the (gathered) trained
weights, before and after training, and its peak memory (ru_maxrss).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from comarl import AgentConfig, FunctionEnv, TrainConfig, Trainer  # noqa: E402
from comarl.compute import distributed as dist  # noqa: E402
from comarl.compute.sharding import full_state_dict  # noqa: E402
from comarl.generation.hf import Completions  # noqa: E402
from comarl.generation.vllm_settings import EngineSettings  # noqa: E402
from comarl.models.lora import LoraSettings  # noqa: E402

PROBES = ["Name a colour (9):", "Pick a colour (7):"]
ITEMS = [{"n": i} for i in range(8)]


def scrambled(responses, item):
    """A reward that differs between almost any two texts (non-zero advantages every step)."""
    return (sum(map(ord, "".join(responses))) % 11) / 10


def env():
    return FunctionEnv(formatters=[lambda it, j=j: f"Name colour {j} ({it['n']}):" for j in range(2)],
                       reward_fn=scrambled)


def agents(lora: bool):
    return [AgentConfig(model="tiny", max_new_tokens=5, lr=3e-2, chat_template=False,
                        lora=LoraSettings(r=4) if lora else None,
                        model_kwargs={"hidden_size": 128, "seed": 0 if lora else i}) for i in range(2)]


def config(name: str, out: Path, generator: str, **more) -> TrainConfig:
    engine = EngineSettings(cpu_kv_cache_gib=0.25, **more.pop("vllm", {}))
    return TrainConfig(**{**dict(algorithm="magrpo", generator=generator, num_generations=2, batch_size=2,
                                 max_steps=2, shuffle=False, progress_bar=False, report_to=[], seed=0,
                                 batch_adapters=False, sharding="fsdp" if name.endswith("fsdp") else "none",
                                 vllm=engine), **more})


class Replay:
    """The team generator of the replayed run: returns the recorded calls' completions in order (as HF's
    ``Completions``, without the engine's log-probs), checking that each call asks for the same prompts."""

    def __init__(self, calls):
        self.calls = list(calls)

    def __call__(self, agents, prompt_ids, k, **kw):
        want, comps = self.calls.pop(0)
        assert want == prompt_ids, "the replayed run asked for other prompts than the recorded one"
        return [Completions(c["prompt_ids"], c["ids"], c["truncated"], c["texts"], k) for c in comps]


def record(generator) -> list:
    """Record every call of ``generator`` (prompts and completions) from now on."""
    calls: list = []
    real = generator.generate_for_agents

    def recording(agents, prompt_ids, k, **kw):
        out = real(agents, prompt_ids, k, **kw)
        calls.append(([list(map(list, p)) for p in prompt_ids],
                      [{"prompt_ids": c.prompt_ids, "ids": c.ids, "truncated": c.truncated, "texts": c.texts}
                       for c in out]))
        return out

    generator.generate_for_agents = recording
    return calls


def probe_gaps(trainer, engine_lps=None):
    """(the engines' log-probs of their greedy probe samples, the largest gap to HF on the current weights)."""
    prompts = [a.encode_prompts(PROBES) for a in trainer.agents]
    comps = trainer.generator.generate_for_agents(trainer.agents, prompts, 1, greedy=True)
    lps = [c.logprobs for c in comps]
    gap = 0.0
    with trainer.team.gathered():
        for a, c in zip(trainer.agents, comps):
            for p, ids, lp in zip(c.prompt_ids, c.ids, c.logprobs):
                with torch.no_grad():
                    logits = a.model(input_ids=torch.tensor([p + ids])).logits[0, len(p) - 1:-1].float()
                ref = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
                gap = max(gap, (ref - torch.tensor(lp)).abs().max().item())
    moved = None
    if engine_lps is not None:  # how far the engine's probe log-probs moved from the initial ones
        moved = max(abs(x - y) for a0, a1 in zip(engine_lps, lps) for s0, s1 in zip(a0, a1) for x, y in zip(s0, s1))
    return lps, gap, moved


def weights(trainer):
    out = []
    for a in trainer.agents:
        if trainer.team.sharding is not None:
            out.append(full_state_dict(a.model, keep=True))
        else:
            out.append({k: v.detach().clone() for k, v in a.model.state_dict().items()})
    return out


def count_gathers(trainer) -> list[int]:
    """Whole-model gathers entered during each push (``Sharding.gathered`` calls inside ``generator.sync``)."""
    counts: list[int] = []
    sharding, gen = trainer.team.sharding, trainer.generator
    real_gathered, real_sync = sharding.gathered, gen.sync
    inside = [False]

    def gathered(models):
        if inside[0]:
            counts[-1] += 1
        return real_gathered(models)

    def sync(agents=None):
        counts.append(0)
        inside[0] = True
        try:
            return real_sync(agents)
        finally:
            inside[0] = False

    sharding.gathered, gen.sync = gathered, sync
    return counts


def stall_second_push(trainer) -> None:
    """Rank 1: the engine of agent1 never answers its second push (the helper thread sleeps)."""
    engine = trainer.generator.engines[trainer.generator.engine_of[1]]
    real = engine.llm.collective_rpc
    pushes = [0]

    def rpc(method, *a, **kw):
        if method == "reload_weights":
            pushes[0] += 1
            if pushes[0] == 2:
                time.sleep(3600)
        return real(method, *a, **kw)

    engine.llm.collective_rpc = rpc


def run(name: str, out: Path) -> None:
    r = dist.launch_rank()
    result: dict = {"world_size": int(os.environ.get("WORLD_SIZE", "1"))}
    more: dict = {}
    if name == "stall":
        more = dict(output_dir=str(out / name / "run"), save_steps=1, max_steps=3, vllm={"push_timeout_s": 5})
    started = time.perf_counter()
    trainer = Trainer(agents(name == "lora_fsdp"), env(), ITEMS, config(name, out, "vllm", **more))
    result["build_s"] = time.perf_counter() - started
    try:
        result["engines"] = len(trainer.generator.engines)
        if name == "stall":
            if r == 1:
                stall_second_push(trainer)
            trainer.train()
            raise AssertionError("the stalled push did not stop the run")
        before, _, _ = probe_gaps(trainer)
        calls = record(trainer.generator)
        gathers = count_gathers(trainer) if name == "lora_fsdp" else None
        started = time.perf_counter()
        history = trainer.train()
        result["train_s"] = time.perf_counter() - started
        calls = list(calls)  # the training's calls (the probes below are not replayed)
        result["gathers_per_push"] = gathers
        _, result["gap"], result["moved"] = probe_gaps(trainer, before)
        result["history"] = history
        result["vllm_weights"] = weights(trainer)
        result["items"] = [len(c[0][0]) for c in calls]  # prompts per call and agent 0 (this rank's share)
    finally:
        trainer.close()
    replayed = Trainer(agents(name == "lora_fsdp"), env(), ITEMS, config(name, out, "hf"), generator=Replay(calls))
    replayed.train()
    result["hf_weights"] = weights(replayed)
    result["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(result, folder / f"rank{r}.pt")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("scenarios", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.scenarios:
        run(name, Path(args.out))


if __name__ == "__main__":
    main()
