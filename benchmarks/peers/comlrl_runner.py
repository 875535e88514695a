"""One CoMLRL (``comlrl==1.4.3``) MAGRPO training run on a benchmark workload.

Runs inside ``benchmarks/.venvs/comlrl`` and must not import comarl. Writes
the JSON record of ``workloads.write_result``.

How CoMLRL is made to do the workload (read from comlrl/trainers/reinforce/magrpo.py):
- its train loader always takes one item per step (batch_size=1 hard-coded);
  ``--batch-size B`` becomes ``rollout_buffer_size = train_batch_size = B``:
  each agent's optimiser steps once per B buffered rollout nodes;
- ``early_termination_threshold=None`` so the 2-turn tree is always expanded
  (its default -0.2 stops expanding a branch whose mean reward is above -0.2);
- ``top_p=1.0, top_k=0`` (its defaults are 0.6 / 50) to sample like the others;
- ``advantage_normalization`` stays at its default (True), ``advantage_mode="mean"``;
- no eval (eval_interval=0), no wandb, no reference KL;
- multi-turn prompts come from ``workloads.next_prompts`` through its
  ``external_transition`` with ``external_prompt_passthrough=True``.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import workloads as W  # noqa: E402


def main(argv=None) -> dict:
    args = W.runner_args(argv)
    wl = W.get_workload(args.workload)
    if wl.num_agents < 2:
        raise SystemExit(f"workload {wl.name} has {wl.num_agents} agent; CoMLRL runs the multi-agent workloads")
    n_items = args.items or wl.num_items
    W.seed_everything(args.seed)
    counter = W.WorkCounter().install()

    from datasets import Dataset
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    def reward_func(*agent_completions, batch_items=None):
        # CoMLRL passes one list per agent, each holding one completion.
        return [W.reward([c[0] for c in agent_completions], batch_items[0] if batch_items else None)]

    def transition(prompt, agent_completions, num_agents, prompt_history_per_agent,
                   response_history_per_agent):
        prev = [h[-1] for h in prompt_history_per_agent]
        return W.next_prompts(prev, list(agent_completions))

    cfg = MAGRPOConfig(
        num_train_epochs=wl.epochs,
        agent_learning_rate=wl.lr,
        num_agents=wl.num_agents,
        num_generations=wl.num_generations,
        max_new_tokens=wl.max_new_tokens,
        temperature=wl.temperature,
        top_p=1.0,
        top_k=0,
        num_turns=wl.num_turns,
        joint_mode=wl.joint_mode,
        early_termination_threshold=None,
        external_prompt_passthrough=True,
        eval_interval=0,
        eval_num_samples=0,
        rollout_buffer_size=args.batch_size,
        train_batch_size=args.batch_size,
        advantage_mode="mean",
        logging_steps=10**9,
    )
    t0 = time.perf_counter()
    trainer = MAGRPOTrainer(
        agent_model=args.model,
        num_agents=wl.num_agents,
        train_dataset=Dataset.from_list(W.make_items(n_items)),
        reward_func=reward_func,
        formatters=W.formatters(wl.num_agents),
        external_transition=transition if wl.num_turns > 1 else None,
        wandb_config=None,
        args=cfg,
    )
    trainer.verbose = False
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trainer.train()
    wall_s = time.perf_counter() - t0
    return W.record_run(args, "comlrl", wl, n_items, counter, setup_s, wall_s)


if __name__ == "__main__":
    print(main())
