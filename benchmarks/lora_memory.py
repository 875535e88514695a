"""Peak memory and speed: N LoRA agents on one base vs N fully fine-tuned agents.

Every configuration runs in a fresh Python process (peak RSS is per process),
builds N agents on a random Qwen2 model (``--hidden``/``--layers``, default
1024 x 8, ~75M parameters, so weights and optimiser state dominate), trains
``--steps`` MAGRPO steps after one warm-up step and prints one JSON line.
``--gen`` also times generation for N adapters of one base: N ``generate``
calls vs one mixed-adapter batch (peft ``adapter_names=``). ``--rollout``
instead times the rollout path itself (``collect_rollout`` sampled, and the
greedy MAReMax call) with ``train.hardware.batch_adapters`` off vs on.

    python benchmarks/lora_memory.py                 # the table (markdown)
    python benchmarks/lora_memory.py --gen           # + mixed-adapter generation timing
    python benchmarks/lora_memory.py --rollout --hidden 512 --layers 4 --agents 2 4
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

THREADS = int(os.environ.get("BENCH_THREADS", "1"))  # 1: steady numbers on a shared machine


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_one(mode: str, n: int, hidden: int, layers: int, steps: int, tokens: int) -> dict:
    import torch

    import comarl
    from comarl.envs.base import FunctionEnv
    from comarl.models.lora import LoraSettings

    torch.set_num_threads(THREADS)
    kw = {"hidden_size": hidden, "num_layers": layers}
    agents = [comarl.AgentConfig(model="tiny", model_kwargs=kw, max_new_tokens=tokens, lr=1e-4,
                                 lora=LoraSettings(r=16) if mode == "lora" else None) for _ in range(n)]
    env = FunctionEnv([(lambda it, i=i: f"agent {i} writes about {it['q']}") for i in range(n)],
                      lambda resps, it: sum(len(r) for r in resps) / 100.0)
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=steps + 1, progress_bar=False, report_to=[],
                                                  log_samples_steps=0),
                             hardware=comarl.HardwareConfig(micro_batch_size=4))
    items = [{"q": w} for w in ("cats", "rain", "trains", "maths", "tea", "boats")]
    t = comarl.Trainer(agents, env, items, cfg)
    built = _rss_mb()
    trainable = sum(p.numel() for a in t.agents for p in a.model.parameters())
    t.training_step(t.next_batch())  # warm-up (allocator, optimiser state)
    t0 = time.perf_counter()
    for _ in range(steps):
        t.training_step(t.next_batch())
    return {"mode": mode, "agents": n, "s_per_step": (time.perf_counter() - t0) / steps, "rss_built_mb": built,
            "peak_rss_mb": _rss_mb(), "trainable_params": trainable}


def run_gen(n: int, hidden: int, layers: int, tokens: int, reps: int = 3) -> dict:
    """N adapters of one base: N generate calls vs one mixed-adapter batch (same rows, same length)."""
    import torch

    from comarl.models.agents import AgentConfig, build_agents
    from comarl.generation import left_pad
    from comarl.models.lora import LoraSettings

    torch.set_num_threads(THREADS)
    kw = {"hidden_size": hidden, "num_layers": layers}
    agents = build_agents([AgentConfig(model="tiny", model_kwargs=kw, lora=LoraSettings(r=16)) for _ in range(n)])
    with torch.no_grad():
        for a in agents:
            for name, p in a.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.01)
    k = 2
    prompts = agents[0].encode_prompts([f"prompt number {j} about something" for j in range(4)])
    ids, mask = left_pad(prompts, agents[0].tokenizer.pad_token_id)
    common = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                  pad_token_id=agents[0].tokenizer.pad_token_id)
    peft_model = agents[0].model.shared.peft_model
    peft_model.eval()

    def sequential():
        for a in agents:
            a.model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=k, **common)

    rows_ids, rows_mask = ids.repeat_interleave(k, 0).repeat(n, 1), mask.repeat_interleave(k, 0).repeat(n, 1)
    names = [a.model.adapter for a in agents for _ in range(len(prompts) * k)]

    def mixed():
        peft_model.generate(input_ids=rows_ids, attention_mask=rows_mask, adapter_names=names, **common)

    out = {"mode": "gen", "agents": n, "rows_per_agent": len(prompts) * k, "new_tokens": tokens}
    return {**out, **_mean_seconds({"sequential_s": sequential, "mixed_batch_s": mixed}, reps)}


def run_rollout(n: int, batched: bool, hidden: int, layers: int, tokens: int, reps: int = 3) -> dict:
    """Seconds of the rollout's own generation for N LoRA agents of one base, ``batch_adapters`` on or off.

    ``collect_rollout`` of 4 items, K=2 (sampled, as MAGRPO), and the greedy
    ``generate_for_agents`` call of MAReMax for the same 4 prompts per agent.
    The adapters get distinct non-zero ``lora_B`` so they really differ.
    """
    import torch

    from comarl.models.agents import AgentConfig, build_agents
    from comarl.envs.base import FunctionEnv
    from comarl.models.lora import LoraSettings
    from comarl.generation.team import generate_for_agents
    from comarl.rollout import RolloutSettings, collect_rollout

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    kw = {"hidden_size": hidden, "num_layers": layers}
    agents = build_agents([AgentConfig(model="tiny", model_kwargs=kw, max_new_tokens=tokens, lora=LoraSettings(r=16))
                           for _ in range(n)])
    with torch.no_grad():
        for a in agents:
            for name, p in a.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.01)
    formats = [(lambda it, i=i: f"agent {i} writes about {it['q']}") for i in range(n)]
    env = FunctionEnv(formats, lambda resps, it: sum(len(r) for r in resps) / 100.0)
    items = [{"q": w} for w in ("cats", "rain", "trains", "maths")]
    settings = RolloutSettings(num_generations=2, batch_adapters=batched)
    prompts = [a.encode_prompts([formats[i](it) for it in items]) for i, a in enumerate(agents)]

    def sampled():
        collect_rollout(agents, env, items, settings)

    def greedy():
        generate_for_agents(agents, prompts, 1, greedy=True, batch_adapters=batched)

    out = {"mode": "rollout", "agents": n, "batched": batched, "rows_per_agent": len(items) * 2, "new_tokens": tokens}
    return {**out, **_mean_seconds({"rollout_s": sampled, "greedy_s": greedy}, reps)}


def _mean_seconds(fns: dict, reps: int) -> dict:
    """Mean seconds per call of each function, after one warm-up call."""
    out = {}
    for label, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        out[label] = (time.perf_counter() - t0) / reps
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16, help="max_new_tokens")
    ap.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--gen", action="store_true", help="also time mixed-adapter generation")
    ap.add_argument("--rollout", action="store_true",
                    help="only time the rollout's generation, train.hardware.batch_adapters on vs off")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, n = args.child[0], int(args.child[1])
        if mode == "gen":
            res = run_gen(n, args.hidden, args.layers, args.tokens)
        elif mode.startswith("rollout"):
            res = run_rollout(n, mode == "rollout-batched", args.hidden, args.layers, args.tokens)
        else:
            res = run_one(mode, n, args.hidden, args.layers, args.steps, args.tokens)
        print(json.dumps(res))
        return
    rows = []
    jobs = [(m, n) for m in ("lora", "full") for n in args.agents]
    if args.gen:
        jobs += [("gen", n) for n in args.agents if n > 1]
    if args.rollout:
        jobs = [(m, n) for n in args.agents if n > 1 for m in ("rollout-separate", "rollout-batched")]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    for mode, n in jobs:
        cmd = [sys.executable, __file__, "--child", mode, str(n), "--hidden", str(args.hidden), "--layers",
               str(args.layers), "--steps", str(args.steps), "--tokens", str(args.tokens)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode:
            sys.exit(f"{mode} N={n} failed:\n{out.stderr[-3000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    rolls = [r for r in rows if r["mode"] == "rollout"]
    if rolls:
        print(f"\nRandom Qwen2, hidden {args.hidden}, {args.layers} layers; LoRA r=16; 4 items, K=2, "
              f"max_new_tokens {args.tokens}; {THREADS} CPU thread(s); fresh process per row.\n")
        print("| LoRA agents (one base) | rows each (sampled / greedy) | sampled rollout: separate (s) | batched (s) "
              "| speed-up | greedy (MAReMax): separate (s) | batched (s) | speed-up |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in sorted({r["agents"] for r in rolls}):
            off, on = (next(r for r in rolls if r["agents"] == n and r["batched"] == b) for b in (False, True))
            print(f"| {n} | {on['rows_per_agent']} / {on['rows_per_agent'] // 2} | {off['rollout_s']:.2f} | "
                  f"{on['rollout_s']:.2f} | {off['rollout_s'] / on['rollout_s']:.2f}x | {off['greedy_s']:.2f} | "
                  f"{on['greedy_s']:.2f} | {off['greedy_s'] / on['greedy_s']:.2f}x |")
        return
    print(f"\nRandom Qwen2, hidden {args.hidden}, {args.layers} layers; K=2, 2 items/step, "
          f"max_new_tokens {args.tokens}; {THREADS} CPU thread(s); fresh process per row.\n")
    print("| agents | kind | trainable params | peak RSS (MB) | vs same kind N=1 | s/step |")
    print("|---:|---|---:|---:|---:|---:|")
    first = {r["mode"]: r["peak_rss_mb"] for r in rows if r["mode"] != "gen" and r["agents"] == min(args.agents)}
    for r in rows:
        if r["mode"] == "gen":
            continue
        print(f"| {r['agents']} | {'LoRA r=16, one base' if r['mode'] == 'lora' else 'full fine-tuning'} | "
              f"{r['trainable_params'] / 1e6:.2f}M | {r['peak_rss_mb']:.0f} | "
              f"{r['peak_rss_mb'] / first[r['mode']]:.2f}x | {r['s_per_step']:.2f} |")
    gens = [r for r in rows if r["mode"] == "gen"]
    if gens:
        print("\n| adapters | rows each | N generate calls (s) | one mixed-adapter batch (s) |")
        print("|---:|---:|---:|---:|")
        for r in gens:
            print(f"| {r['agents']} | {r['rows_per_agent']} | {r['sequential_s']:.2f} | {r['mixed_batch_s']:.2f} |")


if __name__ == "__main__":
    main()
