"""Side-by-side timing shared by the step-time benchmarks: each mode runs in a fresh process, the modes
alternate ``repeats`` times so they see the same machine load, and medians are compared."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]


def alternate(script: str, modes: Sequence[str], repeats: int, child_args: Sequence[str]) -> dict[str, dict]:
    """Run ``script --child MODE *child_args`` for every mode, ``repeats`` rounds; the child prints one
    ``RESULT {json}`` line. Returns per mode the median of each numeric field."""
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(repeats):
        for mode in modes:
            out = subprocess.run([sys.executable, script, "--child", mode, *child_args],
                                 capture_output=True, text=True, cwd=ROOT)
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                sys.exit(f"{mode} run failed:\n{out.stderr[-3000:]}")
            results[mode].append(json.loads(line[0][7:]))
            print(f"repeat {r + 1} {mode}: {results[mode][-1]}", file=sys.stderr)
    return {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in results.items()}


def alternate_checkouts(script: str, checkouts: dict[str, Path], mode: str, repeats: int,
                        child_args: Sequence[str]) -> dict[str, dict]:
    """Run ``<checkout>/<script> --child MODE`` in each checkout (its own code on the path), the checkouts
    alternating ``repeats`` times; returns per checkout the median of each numeric field."""
    results: dict[str, list[dict]] = {name: [] for name in checkouts}
    rel = Path(script).resolve().relative_to(ROOT)
    for r in range(repeats):
        for name, root in checkouts.items():
            out = subprocess.run([sys.executable, str(root / rel), "--child", mode, *child_args], capture_output=True,
                                 text=True, cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root)})
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                sys.exit(f"{name} run failed:\n{out.stderr[-3000:]}")
            results[name].append(json.loads(line[0][7:]))
            print(f"repeat {r + 1} {name}: {results[name][-1]}", file=sys.stderr)
    return {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in results.items()}


def time_training_steps(trainer, steps: int, warmup: int, mean_keys: Sequence[str] = ()) -> dict[str, float]:
    """Median ``time/step_s`` and ``time/update_s`` of ``steps`` training steps after ``warmup``, and the
    mean of each metric in ``mean_keys`` (0 where a step does not log it)."""
    step, update, extra = [], [], {k: [] for k in mean_keys}
    for s in range(steps + warmup):
        m = trainer.training_step(trainer.next_batch())
        if s >= warmup:
            step.append(m["time/step_s"])
            update.append(m["time/update_s"])
            for k in mean_keys:
                extra[k].append(m.get(k, 0.0))
    return {"s_per_step": statistics.median(step), "update_s": statistics.median(update),
            **{k: statistics.mean(v) for k, v in extra.items()}}


def floor_step(agents, env, batch: Sequence[dict], k: int) -> list[int]:
    """The floor of one step: per agent, bare ``generate`` of the batch's prompts x K plus one forward and
    backward over [prompt | completion] (the prompt copied per sample). Returns the completion lengths."""
    from comarl.generation import generate
    from comarl.objective.logprobs import completion_logprobs

    lengths: list[int] = []
    for i, agent in enumerate(agents):
        prompts = agent.encode_prompts([env.reset(it).prompts[i] for it in batch])
        comp = generate(agent, prompts, k)
        rep = [p for p in prompts for _ in range(k)]
        logp, mask = completion_logprobs(agent.model, rep, comp.ids, agent.tokenizer.pad_token_id)
        (logp.sum() / mask.sum()).backward()
        agent.model.zero_grad(set_to_none=True)
        lengths += [len(c) for c in comp.ids]
    return lengths
