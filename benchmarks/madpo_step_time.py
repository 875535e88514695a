"""Step time of MADPO against MAGRPO on the demo workload.

The demo configuration (2 tiny agents, 4 items x K=4 per step, 24 new tokens)
with ``train.algorithm`` = magrpo, madpo (aligned, reward_gap, 2 pairs per item,
frozen reference copy) and madpo reference-free. MADPO's update runs one
no-grad forward per agent for the coefficients, one reference forward and one
forward/backward over the samples in pairs (at most 2 x pairs per agent), so
its update should cost about what MAGRPO's does (which has no reference when
``kl_beta`` = 0): the table reports the ratio.

Each run is a fresh process; the modes alternate ``--repeats`` times and the
table reports medians of the per-step seconds after warm-up. Timings need a
quiet machine.

    python benchmarks/madpo_step_time.py [--steps 20] [--warmup 3] [--repeats 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from alternate import alternate, time_training_steps

ROOT = Path(__file__).resolve().parents[1]

MODES = {  # name -> (algorithm, reference-free DPO or None for no preference settings)
    "magrpo": ("magrpo", None),
    "madpo": ("madpo", False),
    "madpo_ref_free": ("madpo", True),
}


def run(mode: str, steps: int, warmup: int, threads: int) -> dict:
    import torch

    import comarl
    from comarl.demo import demo_setup
    from comarl.preference import DPOSettings, PairSettings, PreferenceSettings

    torch.set_num_threads(threads)
    algorithm, reference_free = MODES[mode]
    agents, env, items, cfg = demo_setup("tiny", "writing", steps + warmup, None, 0)
    cfg.run.progress_bar, cfg.algorithm = False, algorithm
    if reference_free is not None:
        cfg.preference = PreferenceSettings(pairs=PairSettings(pairs_per_item=2),
                                            dpo=DPOSettings(reference_free=reference_free))
    trainer = comarl.Trainer(agents, env, items, cfg)
    t = time_training_steps(trainer, steps, warmup, mean_keys=("pref/pairs",))
    return {"s_per_step": t["s_per_step"], "update_s": t["update_s"], "pairs_per_step": t["pref/pairs"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads per run")
    ap.add_argument("--child", choices=list(MODES))
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(run(a.child, a.steps, a.warmup, a.threads)))
        return
    med = alternate(__file__, list(MODES), a.repeats,
                    ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads)])
    base = med["magrpo"]["update_s"]
    print("| run | s/step | update s/step | update / magrpo's | pairs/step |\n|---|---:|---:|---:|---:|")
    for m in MODES:
        print(f"| {m} | {med[m]['s_per_step']:.3f} | {med[m]['update_s']:.3f} | {med[m]['update_s'] / base:.2f} | "
              f"{med[m]['pairs_per_step']:.1f} |")
    print(f"\n{a.repeats} alternating repeats, {a.steps} steps each after {a.warmup} warm-up steps")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
