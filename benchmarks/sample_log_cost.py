"""What the rollout-tree log (``trees.jsonl``, ``comarl view``) costs: bytes per logged step and per 1,000 steps,
and the time to build and write one logged step's records.

Two parts:

* **Sizes** (deterministic): rollouts of realistic shapes from a scripted generator (texts of the given lengths,
  no model), through ``collect_rollout`` and ``tree_records``, uncapped and at the default cap
  (``train.run.log_samples_max_kb`` = 256). Per 1,000 steps at the default ``log_samples_steps`` = 10, i.e.
  100 logged steps.
* **Time**: the demo workload with tiny models (2 agents, 4 items x K=4, 24 new tokens): per step, the update's
  ``step`` (rollout and update, what the loop runs anyway) and then what logging adds (``tree_records`` and
  writing the lines), medians after warm-up.

    python benchmarks/sample_log_cost.py [--steps 10] [--warmup 2] [--reps 20]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = {  # name -> (agents, K, items per step, turns, joint mode, stages, prompt chars, completion chars)
    "demo (tiny demo's shape)": (2, 4, 4, 1, "aligned", 1, 110, 100),
    "coding, 2 turns (HumanEval-like)": (2, 4, 8, 2, "aligned", 1, 1500, 1200),
    "coding, 2 turns, cross": (2, 4, 8, 2, "cross", 1, 1500, 1200),
    "planner -> coder, 2 stages": (2, 4, 8, 1, "aligned", 2, 1500, 1200),
    "TravelPlanner-like, 1 turn": (2, 8, 16, 1, "aligned", 1, 6000, 1500),
}
CAP_KB = 256


def synthetic(agents: int, k: int, items: int, turns: int, mode: str, stages: int, p_chars: int, c_chars: int):
    """(rollout, items, env) of one step with texts of the given lengths (advantages filled as MAGRPO does)."""
    from comarl.objective.advantages import group_relative
    from comarl.envs.base import FunctionEnv
    from comarl.generation import Completions
    from comarl.generation.team import scripted
    from comarl.rollout import RolloutSettings, collect_rollout
    from comarl.core.stages import Stage, StageGraph

    class Agent:
        def __init__(self, i):
            self.name = f"agent{i}"

        def encode_prompts(self, texts):
            return [[1] * 4 for _ in texts]

    def one(agent, prompt_ids, kk, greedy=False, batch_size=0, share_prefix=False):
        texts = [(f"{agent.name} sample {j} " * c_chars)[:c_chars] for _ in prompt_ids for j in range(kk)]
        return Completions(prompt_ids, [[1, 0] for _ in texts], [False] * len(texts), texts, kk)

    def prompt(it):
        return (it["text"] * p_chars)[:p_chars]

    def reward(responses, it):
        return (sum(len(r) for r in responses) % 7) / 7

    def feedback(state, responses):  # the next turn quotes the previous answers, as coding feedback does
        return [(prompt(state.item) + "\nYour previous code:\n" + r + "\nTests: 2/5 passed")[:2 * p_chars]
                for r in responses]

    env = FunctionEnv([prompt] * agents, reward, transition_fn=feedback if turns > 1 else None, max_turns=turns)
    if stages > 1:
        env.stages = StageGraph(tuple(Stage((i,)) for i in range(agents)))
    batch = [{"text": f"item {b}: write a function that does something useful. "} for b in range(items)]
    out = collect_rollout([Agent(i) for i in range(agents)], env, batch,
                          RolloutSettings(num_generations=k, joint_mode=mode, num_turns=turns, generator=scripted(one)))
    for s in out.agents:
        s.advantages = group_relative(s.returns)
    return out, batch, env


def sizes() -> list[dict]:
    from comarl.training.sample_records import tree_records

    rows = []
    for name, shape in WORKLOADS.items():
        rollout, batch, env = synthetic(*shape)
        names = [f"agent{i}" for i in range(shape[0])]
        full = tree_records([rollout], batch, names, step=1, max_bytes=1 << 40, env=env)
        capped = tree_records([rollout], batch, names, step=1, max_bytes=CAP_KB * 1024, env=env)
        size = lambda recs: sum(len(json.dumps(r, ensure_ascii=False).encode()) + 1 for r in recs)  # noqa: E731
        t = []
        with tempfile.TemporaryFile("w") as f:
            for _ in range(10):
                t0 = time.perf_counter()
                recs = tree_records([rollout], batch, names, step=1, max_bytes=CAP_KB * 1024, env=env)
                f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
                t.append(time.perf_counter() - t0)
        rows.append({"workload": name, "items": shape[2], "nodes_per_item": len(full[0]["nodes"]),
                     "kb_uncapped": size(full) / 1024, "kb_capped": size(capped) / 1024,
                     "items_kept": len(capped), "cut": sum(r["cut"] for r in capped),
                     "mb_per_1000_steps": size(capped) * 100 / 2**20, "ms_per_logged_step": statistics.median(t) * 1e3})
    return rows


def demo_times(steps: int, warmup: int, reps: int) -> dict:
    """Median seconds of the demo's update step, and of building + writing its trees.jsonl lines."""
    import torch

    import comarl
    from comarl.demo import demo_setup
    from comarl.core.steps import PromptBatch
    from comarl.training.sample_records import tree_records

    torch.set_num_threads(2)
    agents, env, items, cfg = demo_setup("tiny", "writing", steps + warmup, None, 0)
    cfg.run.progress_bar = False
    trainer = comarl.Trainer(agents, env, items, cfg)
    step_s, log_s, kb = [], [], []
    with tempfile.TemporaryFile("w") as f:
        for s in range(steps + warmup):
            batch = trainer.next_batch()
            t0 = time.perf_counter()
            out = trainer.update.step(trainer.team, PromptBatch(batch, trainer.env), s)
            t1 = time.perf_counter()
            names = [a.name for a in trainer.agents]
            per = []
            for _ in range(reps):
                t2 = time.perf_counter()
                recs = tree_records(out.rollouts, batch, names, step=s + 1, max_bytes=CAP_KB * 1024, env=trainer.env,
                                    algorithm={"name": "magrpo"})
                text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
                f.write(text)
                f.flush()
                per.append(time.perf_counter() - t2)
            if s >= warmup:
                step_s.append(t1 - t0)
                log_s.append(statistics.median(per))
                kb.append(len(text.encode()) / 1024)
    return {"step_s": statistics.median(step_s), "log_ms": statistics.median(log_s) * 1e3,
            "kb_per_logged_step": statistics.median(kb)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20, help="timings of the logging work per step (median)")
    a = ap.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    print("| workload | items/step | nodes/item | KiB/step uncapped | KiB/step at 256 KiB cap | items kept | texts cut "
          "| MB per 1,000 steps (log every 10) | ms per logged step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sizes():
        print(f"| {r['workload']} | {r['items']} | {r['nodes_per_item']} | {r['kb_uncapped']:.1f} "
              f"| {r['kb_capped']:.1f} | {r['items_kept']} | {r['cut']} | {r['mb_per_1000_steps']:.1f} "
              f"| {r['ms_per_logged_step']:.1f} |")
    d = demo_times(a.steps, a.warmup, a.reps)
    print(f"\ndemo (tiny models): step {d['step_s']:.3f} s, logging its trees {d['log_ms']:.2f} ms "
          f"({100 * d['log_ms'] / 1e3 / d['step_s']:.2f}% of a step when every step is logged; "
          f"{100 * d['log_ms'] / 1e3 / d['step_s'] / 10:.3f}% at log_samples_steps=10), "
          f"{d['kb_per_logged_step']:.1f} KiB per logged step")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
