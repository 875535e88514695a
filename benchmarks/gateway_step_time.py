"""Step time of the demo workload through ProgramEnv + the gateway against FunctionEnv, alternating in one process.

The demo writing task (two agents: a short and a longer summary, ``comarl.demo``), MAGRPO, ``--items`` posts x
K = ``--k`` concurrent runs. ``function``: the demo's FunctionEnv and the breadth-first rollout. ``program``: the
same task as a program (``async``: both agents asked at once through the ``openai`` client, each with its
formatter's prompt), run K times per post against the gateway. Both trainers share the same agents (built
once), so each step samples from the same models; they alternate ``--repeats`` times after ``--warmup`` untimed
rounds. Each timed step prints its wall seconds, rollout seconds, the gateway's generate calls and the 1-minute
load average; the table gives medians.

    PYTHONPATH=. .venv/bin/python benchmarks/gateway_step_time.py --model tiny --k 8 --items 4 --repeats 5
    PYTHONPATH=. .venv/bin/python benchmarks/gateway_step_time.py --model smollm2 --k 8 --items 4 --repeats 2
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", choices=["tiny", "smollm2"])
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--items", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    import comarl
    from comarl.models.agents import build_agents
    from comarl.demo import demo_setup

    configs, env, items, cfg = demo_setup(args.model, "writing", 1, None, 0)
    items = items[:args.items]
    cfg.rollout.num_generations, cfg.run.batch_size, cfg.run.max_steps = args.k, args.items, 10 ** 6
    cfg.run.progress_bar, cfg.run.report_to, cfg.run.log_samples_steps = False, [], 0
    short, long = env.formatters
    reward = env.reward_fn
    names = [c.name or f"agent{i}" for i, c in enumerate(configs)]

    async def program(item, client):
        a, b = await asyncio.gather(*[client.chat.completions.create(model=n, messages=[
            {"role": "user", "content": f(item)}]) for n, f in zip(names, (short, long))])
        return reward([a.choices[0].message.content, b.choices[0].message.content], item)

    agents = build_agents(configs)
    program_env = comarl.ProgramEnv(program, 2)
    trainers = {"function": comarl.Trainer(agents, env, items, cfg),
                "program": comarl.Trainer(agents, program_env, items, cfg)}
    rows: dict[str, list[dict]] = {m: [] for m in trainers}
    try:
        for r in range(args.warmup + args.repeats):
            for mode, tr in trainers.items():
                m = tr.training_step(items)
                row = {"step_s": m["time/step_s"], "rollout_s": m["time/rollout_s"],
                       "generate_calls": m.get("program/generate_calls", float("nan")), "load": os.getloadavg()[0]}
                timed = r >= args.warmup
                print(f"{'round' if timed else 'warm-up'} {r + 1} {mode}: " +
                      ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
                if timed:
                    rows[mode].append(row)
    finally:
        program_env.close()
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in rows.items()}
    base = med["function"]["step_s"]
    print(f"\n{args.model}, {args.items} posts x K={args.k}, {args.repeats} alternating repeats (medians):")
    print("| mode | s / step | rollout s | generate calls | vs function | load |\n|---|---:|---:|---:|---:|---:|")
    for m, v in med.items():
        print(f"| {m} | {v['step_s']:.3f} | {v['rollout_s']:.3f} | {v['generate_calls']:.0f} | "
              f"{v['step_s'] / base:.2f}x | {v['load']:.2f} |")


if __name__ == "__main__":
    main()
