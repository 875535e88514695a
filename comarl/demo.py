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
from .heldout import HeldOutScore, heldout_score, paired_gain
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


def demo_setup(model: str = "tiny", task: str = "writing", steps: int = 0, output_dir: str | None = "runs/demo",
               seed: int = 0):
    """(agents, env, training items, TrainConfig) of the demo; the tests reuse this."""
    if model == "tiny":
        agents = [AgentConfig(model="tiny", max_new_tokens=24, lr=2e-3, temperature=1.0,
                              model_kwargs={"seed": seed + i}) for i in range(2)]
        steps, batch = steps or 300, 4
    elif model == "smollm2":  # a real model writes real sentences: wider word windows
        agents = [AgentConfig(model="smollm2", max_new_tokens=40, lr=SMOLLM2_LR, temperature=0.9)
                  for _ in range(2)]
        steps, batch = steps or SMOLLM2_STEPS, SMOLLM2_BATCH
    else:
        raise ValueError(f"--model must be tiny or smollm2, got {model!r}")
    train, _ = demo_items(task)
    if task == "writing":
        windows = {"short_max": 24, "long_max": 80} if model == "smollm2" else {}
        env = get_env("demo_writing").build(2, **windows)
    else:
        env = get_env("tldr").build(2)
    # the flat keys are @aliased's (config_io), which mypy cannot see
    cfg = TrainConfig(algorithm="magrpo", num_generations=4, batch_size=batch,  # type: ignore[call-arg]
                      max_steps=steps, seed=seed,
                      output_dir=output_dir, log_samples_steps=20, report_to=["jsonl", "tensorboard"],
                      save_steps=0)
    return agents, env, train, cfg


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
             seed: int = 0) -> list[dict]:
    """Run the demo into a new ``output_dir/<date>-<time>/`` folder (``output_dir/latest`` links to it).

    The headline is the held-out score before and after training (posts never trained on); the training
    curve's first and last ``reward_window`` steps come second.
    """
    output_dir = str(new_run_folder(output_dir))
    agents, env, items, cfg = demo_setup(model, task, steps, output_dir, seed)
    _, heldout = demo_items(task)
    greedy = model != "tiny"  # a random tiny model decoded greedily repeats itself: score its samples instead
    print(f"comarl demo: 2 agents ({model}), task {task}, {cfg.run.max_steps} steps, K={cfg.rollout.num_generations}, "
          f"batch {cfg.run.batch_size} items, {len(items)} training posts, {len(heldout)} held-out posts, "
          f"output {output_dir}")
    t0 = time.perf_counter()
    trainer = Trainer(agents, env, items, cfg)
    print(f"agents built in {time.perf_counter() - t0:.1f}s")
    if model == "tiny":
        print("(the tiny model is random, so its words are gibberish: watch the word counts and the reward)")

    def score(when: str) -> HeldOutScore:
        t = time.perf_counter()
        s = heldout_score(trainer.agents, env, heldout, samples=HELDOUT_SAMPLES, greedy=greedy, seed=seed,
                          generator=trainer.generator)
        print(f"held-out score {when} training: {s}  [{time.perf_counter() - t:.0f}s]")
        return s

    held_before = score("before")
    before = show_samples(trainer, items, "before training")
    history = trainer.train()
    after = show_samples(trainer, items, "after training")
    held_after = score("after")
    r = [m["reward/mean"] for m in history]
    k = reward_window(len(r))
    gain, gain_se = paired_gain(held_before, held_after)
    out = Path(output_dir)
    plot_rewards(history, out / "reward.png", held_before, held_after)
    summary = {"steps": len(r), "window": k, "reward_first_window": float(np.mean(r[:k])),
               "reward_last_window": float(np.mean(r[-k:])), "heldout_before": held_before.to_json(),
               "heldout_after": held_after.to_json(), "heldout_gain": gain, "heldout_gain_stderr": gain_se,
               "seconds": time.perf_counter() - t0, "sample_reward_before": before, "sample_reward_after": after}
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nheld-out score ({len(heldout)} posts never trained on): before {held_before.mean:.3f} ± "
          f"{held_before.stderr:.3f} -> after {held_after.mean:.3f} ± {held_after.stderr:.3f} "
          f"(gain {gain:+.3f} ± {gain_se:.3f}, s.e. of the per-post differences)")
    print(f"training reward (moving mean of {k} steps, as in the plot): first {k} steps "
          f"{summary['reward_first_window']:.3f} -> last {k} steps {summary['reward_last_window']:.3f}  "
          f"({summary['seconds']:.0f}s in all)")
    print(f"wrote {out / 'metrics.jsonl'}, {out / 'samples.jsonl'}, {out / 'reward.png'}, {out / 'demo_summary.json'}")
    return history


HELDOUT_SAMPLES = 4
"""Samples per held-out post and agent when not greedy (the tiny model), drawn under the demo's seed."""
