"""Seconds per training step of the demo configuration versus a floor.

The floor is the least any trainer must do for the same samples: for each agent,
one batched ``generate`` of the same prompts x K samples, then one forward +
backward over prompt + completion. comarl's step adds the environment, credit
and advantages, the loss with its masks, clipping and the optimizer step.

Each measurement runs in a fresh process (peak RSS is per process); the two
modes alternate ``--repeats`` times and the table reports medians.

    python benchmarks/step_time.py [--steps 20] [--repeats 3]
    python benchmarks/step_time.py --compare DIR     # this checkout's step against another's (git worktree)
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from alternate import alternate, alternate_checkouts, floor_step

ROOT = Path(__file__).resolve().parents[1]


def run_comarl(steps: int, warmup: int) -> dict:
    import comarl
    from comarl.demo import demo_setup

    agents, env, items, cfg = demo_setup("tiny", "writing", steps + warmup, None, 0)
    cfg.run.progress_bar = False
    trainer = comarl.Trainer(agents, env, items, cfg)
    times, tokens = [], 0
    for s in range(steps + warmup):
        batch = trainer.next_batch()
        t = time.perf_counter()
        m = trainer.training_step(batch)
        if s >= warmup:
            times.append(time.perf_counter() - t)
            tokens += (sum(m[f"{a.name}/completion_len"] for a in trainer.agents)
                       * cfg.run.batch_size * cfg.rollout.num_generations)
    return {"s_per_step": statistics.median(times), "tokens_per_s": tokens / sum(times)}


def run_floor(steps: int, warmup: int) -> dict:
    import torch

    from comarl.models.agents import build_agents
    from comarl.demo import demo_setup

    agent_cfgs, env, items, cfg = demo_setup("tiny", "writing", steps + warmup, None, 0)
    torch.manual_seed(0)
    agents = build_agents(agent_cfgs)
    k, b = cfg.rollout.num_generations, cfg.run.batch_size
    times, tokens = [], 0
    for s in range(steps + warmup):
        batch = [items[(s * b + j) % len(items)] for j in range(b)]
        t = time.perf_counter()
        n_tok = sum(floor_step(agents, env, batch, k))
        if s >= warmup:
            times.append(time.perf_counter() - t)
            tokens += n_tok
    return {"s_per_step": statistics.median(times), "tokens_per_s": tokens / sum(times)}


def child(mode: str, steps: int, warmup: int) -> None:
    import torch

    torch.set_num_threads(2)
    res = run_comarl(steps, warmup) if mode == "comarl" else run_floor(steps, warmup)
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", choices=["comarl", "floor"])
    ap.add_argument("--compare", help="another checkout of comarl: its step and this one's, alternating")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.steps, a.warmup)
        return
    if a.compare:
        med = alternate_checkouts(__file__, {"other": Path(a.compare).resolve(), "this": ROOT}, "comarl",
                                  a.repeats, ["--steps", str(a.steps), "--warmup", str(a.warmup)])
        print("| checkout | s/step | trained tokens/s | peak RSS MB |\n|---|---:|---:|---:|")
        for m in ("other", "this"):
            print(f"| {m} | {med[m]['s_per_step']:.3f} | {med[m]['tokens_per_s']:.0f} | {med[m]['peak_rss_mb']:.0f} |")
        print(f"\nthis / other step time: {med['this']['s_per_step'] / med['other']['s_per_step']:.3f}x; "
              f"{a.repeats} alternating repeats, {a.steps} steps each after {a.warmup} warm-up steps")
        return
    med = alternate(__file__, ["floor", "comarl"], a.repeats, ["--steps", str(a.steps), "--warmup", str(a.warmup)])
    ratio = med["comarl"]["s_per_step"] / med["floor"]["s_per_step"]
    print("| run | s/step | trained tokens/s | peak RSS MB |\n|---|---:|---:|---:|")
    for m in ("floor", "comarl"):
        print(f"| {m} | {med[m]['s_per_step']:.3f} | {med[m]['tokens_per_s']:.0f} | {med[m]['peak_rss_mb']:.0f} |")
    print(f"\ncomarl / floor step time: {ratio:.2f}x (target <= 1.25x); {a.repeats} alternating repeats, "
          f"{a.steps} steps each after {a.warmup} warm-up steps")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
