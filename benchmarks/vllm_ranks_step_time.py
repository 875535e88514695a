"""Seconds per training step on 2 torchrun ranks, ``train.hardware.generator: vllm`` (one engine per agent on each rank)
against ``hf``, alternating launches (issue 42).

Each launch is ``torchrun --standalone --nproc_per_node 2`` of this file with ``--child MODE``: two tiny random
Qwen2 agents (``--hidden`` 256, ``--layers`` 4: head size 64, which vLLM's CPU attention serves), MAGRPO on the
demo's writing task (posts of ~20-30 words), K=4, 2 items per rank per step, ``--new-tokens`` 48 new tokens,
temperature 1, one torch thread per rank (2 ranks on the machine's 2 cores). After ``--warmup`` untimed steps,
``--steps`` steps are timed on every rank between barriers (a step: the rollout, the update, and with vllm the
push of both agents); rank 0 prints the median step, rollout and push seconds, the engines' start and the
1-minute load average. The modes alternate ``--repeats`` times (hf, vllm, hf, vllm, ...) so they see the same
load; the table gives medians over the repeats.

    .venv-vllm/bin/python benchmarks/vllm_ranks_step_time.py [--repeats 2] [--steps 3] [--warmup 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(args) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    import comarl
    from comarl.compute import distributed as dist
    from comarl.envs.registry import get_env
    from comarl.generation.vllm_settings import EngineSettings

    entry = get_env("demo_writing")
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=args.new_tokens, temperature=1.0, lr=1e-3,
                                 model_kwargs={"hidden_size": args.hidden, "num_layers": args.layers, "seed": i})
              for i in range(2)]
    total = args.warmup + args.steps
    cfg = comarl.TrainConfig(hardware=comarl.HardwareConfig(generator=args.child,
                                                            vllm=EngineSettings(cpu_kv_cache_gib=0.25)),
                             rollout=comarl.RolloutConfig(num_generations=4),
                             run=comarl.RunConfig(batch_size=2, max_steps=total, progress_bar=False, report_to=[],
                                                  seed=0))
    started = time.perf_counter()
    trainer = comarl.Trainer(agents, entry.build(num_agents=2), entry.load_items(None, None, None), cfg)
    build_s = time.perf_counter() - started
    steps, rollouts, pushes = [], [], []
    try:
        for s in range(total):
            tdist.barrier()
            t0 = time.perf_counter()
            metrics = trainer.training_step(trainer.next_batch())
            tdist.barrier()
            if s >= args.warmup:
                steps.append(time.perf_counter() - t0)
                rollouts.append(metrics["time/rollout_s"])
                pushes.append(metrics.get("time/sync_s", 0.0))
    finally:
        trainer.close()
    if dist.is_main():
        print("RESULT " + json.dumps({"step_s": statistics.median(steps), "rollout_s": statistics.median(rollouts),
                                      "push_s": statistics.median(pushes), "build_s": build_s,
                                      "load": os.getloadavg()[0]}), flush=True)


def launch(mode: str, args) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--child", mode, "--steps", str(args.steps), "--warmup", str(args.warmup), "--hidden", str(args.hidden),
           "--layers", str(args.layers), "--new-tokens", str(args.new_tokens)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        sys.exit(f"{mode} launch failed:\n{out.stderr[-3000:]}")
    return json.loads(line[0][7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["hf", "vllm"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    runs: dict[str, list[dict]] = {"hf": [], "vllm": []}
    for r in range(args.repeats):
        for mode in runs:
            runs[mode].append(launch(mode, args))
            print(f"repeat {r + 1} {mode}: {runs[mode][-1]}", flush=True)
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in runs.items()}
    print("\n| generator | step (median) | rollout | push | Trainer built (engines included) | load |")
    print("|---|---:|---:|---:|---:|---:|")
    for m, v in med.items():
        print(f"| {m} | {v['step_s']:.2f} s | {v['rollout_s']:.2f} s | {v['push_s']:.3f} s | "
              f"{v['build_s']:.1f} s | {v['load']:.1f} |")
    print(f"\nvllm / hf step: {med['vllm']['step_s'] / med['hf']['step_s']:.2f}x")


if __name__ == "__main__":
    main()
