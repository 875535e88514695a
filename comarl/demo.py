"""``comarl demo``: two agents learn a cooperative writing task, offline, on a CPU.

Agent 1 writes a short summary, agent 2 a longer one; the team reward comes
from their length ratio and distinct-word checks (``envs/demo_writing.py``),
or from the TL;DR environment with ``--task tldr``. The tiny model is random,
so its words are gibberish: what it learns is *how much* each agent writes.
"""
from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from .config import ExperimentConfig, mark_from_config
from .core.config_io import from_dict
from .envs.registry import get_env
from .generation import generate
from .runs.evaluation import evaluate_agents
from .runs.heldout import HeldOutScore, paired_gain, records_score
from .training.loop import Trainer


def demo_items(task: str = "writing") -> tuple[list[dict], list[dict]]:
    """(training items, held-out items) of a demo task; no held-out post is ever trained on (checked)."""
    if task == "writing":
        entry = get_env("demo_writing")
        train, heldout = entry.load_items(None, "train", None), entry.load_items(None, "heldout", None)
    elif task == "tldr":
        from .envs.writing.tldr import demo_items as tldr_items

        posts = tldr_items()
        train, heldout = posts[:-TLDR_HELDOUT], posts[-TLDR_HELDOUT:]
    else:
        raise ValueError(f"--task must be writing or tldr, got {task!r}")
    key = "text" if task == "writing" else "prompt"
    shared = {it[key] for it in train} & {it[key] for it in heldout}
    if shared:
        raise AssertionError(f"demo task {task}: {len(shared)} held-out post(s) are also training posts: "
                             f"{sorted(shared)[0][:80]!r}")
    return train, heldout


TLDR_HELDOUT = 8
"""Bundled TL;DR posts kept out of training for the held-out score (the last 8 of 24)."""


TLDR_SOURCE = "package:comarl/envs/writing/demo_tldr.jsonl"
"""The bundled TL;DR posts (``envs/writing/tldr.demo_items``) as a data source a config can name."""


def demo_config(model: str = "tiny", task: str = "writing", steps: int = 0, output_dir: str | None = "runs/demo",
                seed: int = 0, max_staleness: int = 0) -> dict:
    """The demo as an experiment config (the YAML shape of ``configs/demo/writing.yaml``): what ``comarl demo``
    trains, written as ``config.yaml`` into its run folder so that ``comarl eval`` scores the held-out posts
    as the demo does (``data.eval``, ``train.run.eval_num_generations``, ``train.run.seed``) and ``comarl train``
    repeats the run."""
    if model == "tiny":
        agents = [{"model": "tiny", "max_new_tokens": 24, "lr": 2e-3, "temperature": 1.0,
                   "model_kwargs": {"seed": seed + i}} for i in range(2)]
        steps, batch = steps or 300, 4
    elif model == "smollm2":  # a real model writes real sentences: wider word windows
        agents = [{"model": "smollm2", "max_new_tokens": 40, "lr": SMOLLM2_LR, "temperature": 0.9}
                  for _ in range(2)]
        steps, batch = steps or SMOLLM2_STEPS, SMOLLM2_BATCH
    else:
        raise ValueError(f"--model must be tiny or smollm2, got {model!r}")
    if task == "writing":
        env = {"name": "demo_writing", "args": {"short_max": 24, "long_max": 80} if model == "smollm2" else {}}
        data = {"train": {"split": "train"}, "eval": {"split": "heldout"}}
    elif task == "tldr":
        env = {"name": "tldr", "args": {}}
        data = {"train": {"source": TLDR_SOURCE, "split": f"train[:-{TLDR_HELDOUT}]"},
                "eval": {"source": TLDR_SOURCE, "split": f"train[-{TLDR_HELDOUT}:]"}}
    else:
        raise ValueError(f"--task must be writing or tldr, got {task!r}")
    rollout: dict[str, int] = {"num_generations": 4}
    if max_staleness:  # sampling while training (docs/overlap.md); benchmarks/smollm2_demo.py --max-staleness
        rollout["max_staleness"] = max_staleness
    train = {"algorithm": "magrpo", "rollout": rollout,
             "run": {"batch_size": batch, "max_steps": steps, "seed": seed,
                     "eval_num_generations": 1 if demo_greedy(model) else HELDOUT_SAMPLES, "log_samples_steps": 20,
                     "report_to": ["jsonl", "tensorboard"], "save_steps": 0, "output_dir": output_dir}}
    return {"agents": agents, "env": env, "data": data, "train": train}


def demo_greedy(model: str) -> bool:
    """Whether the held-out score decodes greedily: a real model yes; a random tiny model decoded greedily repeats
    itself, so its samples are scored instead."""
    return model != "tiny"


def demo_setup(model: str = "tiny", task: str = "writing", steps: int = 0, output_dir: str | None = "runs/demo",
               seed: int = 0, max_staleness: int = 0):
    """(agents, env, training items, TrainConfig) of the demo, built from :func:`demo_config`; the tests reuse
    this."""
    cfg = from_dict(ExperimentConfig, demo_config(model, task, steps, output_dir, seed, max_staleness))
    env = get_env(cfg.env.name).build(len(cfg.agents), **cfg.env.args)
    train, _ = demo_items(task)
    return cfg.agents, env, train, mark_from_config(cfg.train)  # the demo's users write keys (config.yaml)


SMOLLM2_STEPS, SMOLLM2_BATCH, SMOLLM2_LR = 10, 4, 2e-5
"""SmolLM2 demo: steps, items per step (x K=4 samples, generated in one batched call per agent), learning rate;
the held-out score rose by +0.31 and +0.12 in two runs of these (README); the aim is about 10 minutes on 2 idle
cores, not yet timed on a quiet machine."""


def new_run_folder(parent: str | Path) -> Path:
    """A fresh ``parent/<date>-<time>/`` folder (``-2``, ``-3`` within one second) with ``parent/latest`` pointing
    to it; the link is skipped where the file system has none (the path is printed either way)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        folder = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
            break
        except FileExistsError:
            continue
    latest, tmp = parent / "latest", parent / f".latest-{os.getpid()}"
    try:
        if latest.is_symlink() or not latest.exists():
            tmp.unlink(missing_ok=True)
            os.symlink(folder.name, tmp)
            os.replace(tmp, latest)
    except OSError:
        pass
    return folder


def show_samples(trainer: Trainer, items: list[dict], title: str, n: int = 2) -> float:
    """Print one sampled joint response for the first ``n`` items; returns their mean reward."""
    print(f"\n=== {title} ===")
    rewards = []
    for item in items[:n]:
        state = trainer.env.reset(item)
        texts = []
        for i, agent in enumerate(trainer.agents):
            ids = agent.encode_prompts([state.prompts[i]])
            texts.append(generate(agent, ids, 1).texts[0])
        tr = trainer.env.step_batch([state], [tuple(texts)])[0]
        rewards.append(float(np.mean(getattr(tr.reward, "values", [tr.reward]))))
        for agent, prompt, text in zip(trainer.agents, state.prompts, texts):
            print(f"[{agent.name}] prompt: {_clip(prompt, 100)!r}")
            print(f"[{agent.name}, {len(text.split())} words] {text.strip()[:200]!r}")
        print(f"-> team reward {rewards[-1]:.3f}")
    return float(np.mean(rewards))


def _clip(text: str, n: int) -> str:
    """One line of at most ``n`` characters: the start and the end of a long prompt (the instruction is at the end)."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else f"{text[:n // 2 - 2]} .. {text[-(n // 2 - 2):]}"


def reward_window(steps: int) -> int:
    """Steps averaged at each end of the training curve, in the plot's moving mean and the summary line alike:
    a tenth of the run, but at least a third of it up to 10 steps (a 30-step run: 10; 300 steps: 30)."""
    return max(1, steps // 10, min(steps // 3, 10))


def plot_rewards(history: list[dict], path: Path, before: HeldOutScore | None = None,
                 after: HeldOutScore | None = None) -> None:
    """reward.png: reward per step, its moving mean, and the held-out score before (step 0) and after (last step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = np.array([m["reward/mean"] for m in history])
    w = reward_window(len(r))
    smooth = np.convolve(r, np.ones(w) / w, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(1, len(r) + 1), r, alpha=0.35, label="training reward per step (sampled)")
    ax.plot(np.arange(w, len(r) + 1), smooth, label=f"moving mean ({w} steps)")
    if before is not None and after is not None:
        how = "greedy" if before.greedy else f"{before.samples} samples"
        ax.errorbar([0, len(r)], [before.mean, after.mean], yerr=[before.stderr, after.stderr], fmt="o--",
                    color="black", capsize=4, label=f"held-out score ± s.e. ({len(before.per_item)} posts, {how})")
        for x, score, what in ((0, before, "before"), (len(r), after, "after")):
            ax.annotate(f"{what} {score.mean:.2f}", (x, score.mean), textcoords="offset points", xytext=(6, -14))
    ax.set_xlabel("step")
    ax.set_ylabel("mean team reward")
    ax.set_title("comarl demo: MAGRPO, 2 agents")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(model: str = "tiny", task: str = "writing", steps: int = 0, output_dir: str = "runs/demo",
             seed: int = 0, max_staleness: int = 0) -> list[dict]:
    """Run the demo into a new ``output_dir/<date>-<time>/`` folder (``output_dir/latest`` links to it).

    The headline is the held-out score before and after training (posts never trained on), computed as
    ``comarl eval`` computes its score, so the command the summary prints reproduces it; the training
    curve's first and last ``reward_window`` steps come second. The run folder gets ``final/`` (the
    trained agents) and ``config.yaml`` (this run as a config) beside the logs, the plot and the summary.
    """
    run = new_run_folder(output_dir)
    config = demo_config(model, task, steps, str(run), seed, max_staleness)
    (run / "config.yaml").write_text(f"# comarl demo --model {model} --task {task} --steps "
                                     f"{config['train']['run']['max_steps']} --seed {seed}, as a config (comarl eval "
                                     f"and comarl train read it)\n" + yaml.safe_dump(config, sort_keys=False))
    agents, env, items, cfg = demo_setup(model, task, steps, str(run), seed, max_staleness)
    _, heldout = demo_items(task)
    greedy = demo_greedy(model)
    samples = cfg.run.eval_num_generations
    print(f"comarl demo: 2 agents ({model}), task {task}, {cfg.run.max_steps} steps, K={cfg.rollout.num_generations}, "
          f"batch {cfg.run.batch_size} items, {len(items)} training posts, {len(heldout)} held-out posts, "
          f"output {run}")
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for hint in speed_hints(load_start, usable_cores(), torch.get_num_threads()):
        print(f"note: {hint}")
    t0 = time.perf_counter()
    trainer = Trainer(agents, env, items, cfg)
    print(f"agents built in {time.perf_counter() - t0:.1f}s")
    if model == "tiny":
        print("(the tiny model is random, so its words are gibberish: watch the word counts and the reward)")

    def score(when: str) -> HeldOutScore:
        t = time.perf_counter()
        result = evaluate_agents(trainer.agents, env, heldout, samples, cfg, seed=cfg.run.seed, greedy=greedy)
        s = records_score(result["records"], heldout, greedy)
        print(f"held-out score {when} training: {s}  [{time.perf_counter() - t:.0f}s]")
        return s

    held_before = score("before")
    before = show_samples(trainer, items, "before training")
    history = trainer.train()
    after = show_samples(trainer, items, "after training")
    held_after = score("after")
    final = trainer.save(run / "final")
    r = [m["reward/mean"] for m in history]
    k = reward_window(len(r))
    gain, gain_se = paired_gain(held_before, held_after)
    plot_rewards(history, run / "reward.png", held_before, held_after)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    eval_command = shlex.join(["comarl", "eval", str(run / "config.yaml"), "--checkpoint", str(final)]
                              + (["--greedy"] if greedy else []))
    summary = {"steps": len(r), "window": k, "reward_first_window": float(np.mean(r[:k])),
               "reward_last_window": float(np.mean(r[-k:])), "heldout_before": held_before.to_json(),
               "heldout_after": held_after.to_json(), "heldout_gain": gain, "heldout_gain_stderr": gain_se,
               "seconds": time.perf_counter() - t0, "sample_reward_before": before, "sample_reward_after": after,
               "final": str(final), "eval_command": eval_command, "load_average_start": load_start,
               "load_average_end": load_end, "cores": usable_cores(), "torch_threads": torch.get_num_threads()}
    (run / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nheld-out score ({len(heldout)} posts never trained on): before {held_before.mean:.3f} ± "
          f"{held_before.stderr:.3f} -> after {held_after.mean:.3f} ± {held_after.stderr:.3f} "
          f"(gain {gain:+.3f} ± {gain_se:.3f}, s.e. of the per-post differences)")
    if model == "tiny" and task == "writing" and cfg.run.max_steps == 300:
        print(f"expected (300 steps): {expected_summary()}")
    print(f"training reward (moving mean of {k} steps, as in the plot): first {k} steps "
          f"{summary['reward_first_window']:.3f} -> last {k} steps {summary['reward_last_window']:.3f}  "
          f"({summary['seconds']:.0f}s in all{_load_note(load_start, load_end)})")
    for line in next_steps(run, Path(output_dir), final, eval_command, held_after.mean):
        print(line)
    return history


def next_steps(run: Path, parent: Path, final: Path, eval_command: str, after: float) -> list[str]:
    """The end of the demo's summary: what it wrote and the commands that come next."""
    latest = parent / "latest"
    logs = latest if latest.is_symlink() and latest.resolve() == run.resolve() else run
    checkpoints = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    lines = [f"\nwrote {run}/ ({logs} links to the newest demo):",
             "  final/              the trained agents (agent0/, agent1/: Hugging Face model folders)"]
    if checkpoints:
        lines.append(f"  {checkpoints[-1].name + '/':18s}  the full training state (weights, optimisers, data "
                     f"position) that train.run.resume continues from")
    return lines + [
        "  reward.png          the training reward per step and the held-out score before and after",
        "  metrics.jsonl, samples.jsonl, tensorboard/, demo_summary.json, config.yaml (this run as a config)",
        "next:",
        f"  tensorboard --logdir {logs / 'tensorboard'}   # the curves in a browser",
        f"  {eval_command}",
        f"      # scores the trained agents on the held-out posts again: {after:.3f}, as above",
        f"  comarl train {run / 'config.yaml'} train.run.output_dir=runs/my_demo   # the same run from its config"]


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def speed_hints(load: float | None, cores: int, threads: int) -> list[str]:
    """Why the demo may take longer than its ~2 minutes on 2 idle cores, from the 1-minute load average before it
    starts (None: unknown), the usable cores and torch's intra-op threads; empty when nothing stands out.

    Busy: the load is at least half the cores (other processes hold them). Oversubscribed: torch runs more
    threads than there are cores, or several threads where the load leaves fewer cores free (load + threads >
    cores + 0.5): then the threads take turns.
    """
    hints = []
    if load is not None and load >= cores / 2:
        hints.append(f"load average {load:.1f} on {cores} cores: other processes are using the CPUs, so the demo runs "
                     f"slower than its ~2 minutes on idle cores (measured: 5-7 minutes at load 7-14 on 2 cores with "
                     f"one torch thread)")
    busy_too = threads > 1 and load is not None and load + threads > cores + 0.5
    if threads > cores or busy_too:
        with_load = f" with load {load:.1f}" if busy_too else ""
        hints.append(f"torch runs {threads} threads on {cores} cores{with_load}: they take turns; try "
                     f"OMP_NUM_THREADS=1 comarl demo (measured at load 9-14 on 2 cores: 20 steps in 30 s with one "
                     f"thread, 497 s with two, the same numbers either way)")
    return hints


def _load_note(start: float | None, end: float | None) -> str:
    return "" if start is None or end is None else f", load average {start:.1f} at the start, {end:.1f} at the end"


HELDOUT_SAMPLES = 4
"""Samples per held-out post and agent when not greedy (the tiny model), drawn under the demo's seed."""


EXPECTED_HELDOUT = {0: (0.433, 0.792), 1: (0.399, 0.733), 2: (0.448, 0.819)}
"""``comarl demo`` (tiny agents, writing, 300 steps): the held-out score (before, after) per ``--seed``, measured
2026-12-05 with one torch thread (two gave the same numbers over 20 steps), niced, at load 7-14
on 2 cores, 4.7-6.8 minutes each. README and docs/quickstart.md quote :func:`expected_summary` (tested)."""


def expected_summary() -> str:
    """The demo's expected held-out score in one line, as README and the quickstart quote it."""
    before, after = EXPECTED_HELDOUT[0]
    afters = [a for _, a in EXPECTED_HELDOUT.values()]
    seeds = ", ".join(str(s) for s in EXPECTED_HELDOUT)
    return (f"{before:.3f} -> {after:.3f} with seed 0; after training {min(afters):.3f}-{max(afters):.3f} over "
            f"seeds {seeds} (mean {sum(afters) / len(afters):.3f})")
