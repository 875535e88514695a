"""``comarl demo``: two agents learn a cooperative writing task, offline, on a CPU.

Agent 1 writes a short summary, agent 2 a longer one; the team reward comes
from their length ratio and distinct-word checks (``envs/demo_writing.py``),
or from the TL;DR environment with ``--task tldr``. The tiny model is random,
so its words are gibberish: what it learns is *how much* each agent writes.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from .agents import AgentConfig
from .config import TrainConfig
from .envs.registry import get_env
from .generation import generate
from .training.loop import Trainer


def demo_setup(model: str = "tiny", task: str = "writing", steps: int = 0, output_dir: str | None = "runs/demo",
               seed: int = 0):
    """(agents, env, items, TrainConfig) of the demo; the tests reuse this."""
    if model == "tiny":
        agents = [AgentConfig(model="tiny", max_new_tokens=24, lr=2e-3, temperature=1.0,
                              model_kwargs={"seed": seed + i}) for i in range(2)]
        steps = steps or 300
    elif model == "smollm2":  # a real model writes real sentences: wider word windows, one item per step
        agents = [AgentConfig(model="smollm2", max_new_tokens=40, lr=5e-6, temperature=0.9)
                  for _ in range(2)]
        steps = steps or 30
    else:
        raise ValueError(f"--model must be tiny or smollm2, got {model!r}")
    if task == "writing":
        entry = get_env("demo_writing")
        windows = {"short_max": 24, "long_max": 80} if model == "smollm2" else {}
        env, items = entry.build(2, **windows), entry.load_items(None, None, None)
    elif task == "tldr":
        from .envs.writing.tldr import demo_items

        env, items = get_env("tldr").build(2), demo_items()
    else:
        raise ValueError(f"--task must be writing or tldr, got {task!r}")
    cfg = TrainConfig(algorithm="magrpo", num_generations=4, batch_size=4 if model == "tiny" else 1,
                      max_steps=steps, seed=seed,
                      output_dir=output_dir, log_samples_steps=20, report_to=["jsonl", "tensorboard"],
                      save_steps=0)
    return agents, env, items, cfg


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


def plot_rewards(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = np.array([m["reward/mean"] for m in history])
    w = max(1, len(r) // 10)
    smooth = np.convolve(r, np.ones(w) / w, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(1, len(r) + 1), r, alpha=0.35, label="reward per step")
    ax.plot(np.arange(w, len(r) + 1), smooth, label=f"moving mean ({w} steps)")
    ax.set_xlabel("step")
    ax.set_ylabel("mean team reward")
    ax.set_title("comarl demo: MAGRPO, 2 agents")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(model: str = "tiny", task: str = "writing", steps: int = 0, output_dir: str = "runs/demo",
             seed: int = 0) -> list[dict]:
    """Run the demo into a new ``output_dir/<date>-<time>/`` folder (``output_dir/latest`` links to it)."""
    output_dir = str(new_run_folder(output_dir))
    agents, env, items, cfg = demo_setup(model, task, steps, output_dir, seed)
    print(f"comarl demo: 2 agents ({model}), task {task}, {cfg.max_steps} steps, K={cfg.num_generations}, "
          f"batch {cfg.batch_size} items, output {output_dir}")
    t0 = time.perf_counter()
    trainer = Trainer(agents, env, items, cfg)
    print(f"agents built in {time.perf_counter() - t0:.1f}s")
    if model == "tiny":
        print("(the tiny model is random, so its words are gibberish: watch the word counts and the reward)")
    before = show_samples(trainer, items, "before training")
    history = trainer.train()
    after = show_samples(trainer, items, "after training")
    r = [m["reward/mean"] for m in history]
    k = max(1, len(r) // 10)
    out = Path(output_dir)
    plot_rewards(history, out / "reward.png")
    summary = {"steps": len(r), "reward_first_10pct": float(np.mean(r[:k])), "reward_last_10pct": float(np.mean(r[-k:])),
               "seconds": time.perf_counter() - t0, "sample_reward_before": before, "sample_reward_after": after}
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nmean reward: first {k} steps {summary['reward_first_10pct']:.3f} -> last {k} steps "
          f"{summary['reward_last_10pct']:.3f}  ({summary['seconds']:.0f}s)")
    print(f"wrote {out / 'metrics.jsonl'}, {out / 'samples.jsonl'}, {out / 'reward.png'}")
    return history
