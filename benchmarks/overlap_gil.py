"""How much of a ``generate`` call and of a forward + backward runs inside torch ops, where the GIL is released, on
one thread (issue 41: whether the generation worker can be a thread of the training process).

The share is the union of the top-level ops' intervals in ``torch.profiler``'s CPU trace over the call's wall time;
the rest is Python, which holds the GIL (the profiler's own overhead counts there too, so the share is a lower
bound). Load-independent enough to run on a busy machine: it compares two times of one thread.

    python benchmarks/overlap_gil.py [--model tiny|smollm2] [--new-tokens 16]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def inside_ops(fn) -> tuple[float, float]:
    """(wall seconds of ``fn()``, seconds inside top-level torch ops)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.cpu_parent is None and e.time_range.elapsed_us() > 0)
    total, current = 0, None
    for start, end in spans:
        if current is None or start > current[1]:
            total += current[1] - current[0] if current else 0
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    total += current[1] - current[0] if current else 0
    return wall, total / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", choices=["tiny", "smollm2"])
    ap.add_argument("--new-tokens", type=int, default=16)
    a = ap.parse_args()
    import torch

    from comarl.generation.hf import generate
    from comarl.models.agents import AgentConfig, build_agents

    torch.set_num_threads(1)
    agent, = build_agents([AgentConfig(model=a.model, max_new_tokens=a.new_tokens, chat_template=False)])
    prompts = agent.encode_prompts(["Write a short story about a cat and a dog."] * 4)
    x = torch.randint(0, 1000, (8, 64))

    def sample():
        generate(agent, prompts, 2)

    def update():
        agent.model.zero_grad()
        agent.model(input_ids=x).logits.float().logsumexp(-1).mean().backward()

    for name, fn in (("generate (4 prompts x 2 samples)", sample), ("forward + backward (8 x 64 tokens)", update)):
        fn()  # warm-up
        wall, ops = inside_ops(fn)
        print(f"{a.model} {name}: wall {wall:.2f} s, inside torch ops {ops:.2f} s = {ops / wall:.0%}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
