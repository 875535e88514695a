"""Step time of IAC and MAAC against MAGRPO on the demo workload.

The demo configuration (2 tiny agents, 4 items x K=4 per step, 24 new tokens)
with ``train.algorithm`` = magrpo, iac (value head on each agent), iac with a
separate tiny critic per agent, and maac (one central tiny critic, V and Q).
The target: the critic's forward and backward cost at most what one more
agent's update costs, i.e. ``update_s(ac) - update_s(magrpo) <= update_s(magrpo) / N``.

Each run is a fresh process; the modes alternate ``--repeats`` times and the
table reports medians of the per-step seconds after warm-up.

    python benchmarks/ac_step_time.py [--steps 20] [--warmup 3] [--repeats 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from alternate import alternate, time_training_steps

ROOT = Path(__file__).resolve().parents[1]

MODES = {  # name -> (algorithm, critic settings)
    "magrpo": ("magrpo", {}),
    "iac_head": ("iac", {}),
    "iac_separate": ("iac", {"model": "tiny"}),
    "maac_v": ("maac", {"model": "tiny"}),
    "maac_q": ("maac", {"model": "tiny", "critic_type": "q"}),
}


def run(mode: str, steps: int, warmup: int, threads: int) -> dict:
    import torch

    import comarl
    from comarl.critics import CriticSettings
    from comarl.demo import demo_setup

    torch.set_num_threads(threads)
    algorithm, critic = MODES[mode]
    agents, env, items, cfg = demo_setup("tiny", "writing", steps + warmup, None, 0)
    cfg.run.progress_bar, cfg.algorithm, cfg.critic = False, algorithm, CriticSettings(**critic)
    trainer = comarl.Trainer(agents, env, items, cfg)
    return {**time_training_steps(trainer, steps, warmup), "num_agents": len(trainer.agents)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ", ".join(MODES))
    ap.add_argument("--threads", type=int, default=2, help="torch threads per run")
    ap.add_argument("--child", choices=list(MODES))
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(run(a.child, a.steps, a.warmup, a.threads)))
        return
    modes = a.modes.split(",")
    if "magrpo" not in modes:
        modes.insert(0, "magrpo")
    med = alternate(__file__, modes, a.repeats,
                    ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads)])
    base = med["magrpo"]
    per_agent = base["update_s"] / base["num_agents"]
    print("| run | s/step | update s/step | critic cost / one agent's update |\n|---|---:|---:|---:|")
    for m in modes:
        extra = (med[m]["update_s"] - base["update_s"]) / per_agent if m != "magrpo" else float("nan")
        print(f"| {m} | {med[m]['s_per_step']:.3f} | {med[m]['update_s']:.3f} | "
              f"{'-' if m == 'magrpo' else f'{extra:.2f}'} |")
    print(f"\ntarget: critic cost / one agent's update <= 1.0; {a.repeats} alternating repeats, {a.steps} steps "
          f"each after {a.warmup} warm-up steps")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
