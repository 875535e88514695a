"""One TRL ``GRPOTrainer`` run on the single-agent workload (d).

Runs inside ``benchmarks/.venvs/trl`` and must not import comarl. Writes the
JSON record of ``workloads.write_result``.

Settings made equal to comarl's GRPO (MAGRPO with one agent):
- ``beta=0`` (no KL, no reference model), ``num_iterations=1`` (one update per
  generation batch, so the importance ratio is 1 and clipping never acts);
- ``loss_type="grpo"``: per-sequence mean over completion tokens, then mean
  over sequences (original GRPO normalisation);
- ``scale_rewards="group"``: advantage = (r - group mean) / group std;
- ``--batch-size B`` items -> ``per_device_train_batch_size = B*K``
  completions, ``gradient_accumulation_steps=1``: one optimiser step per B items;
- sampling: ``temperature`` from the workload, ``top_p=1``, ``top_k=0``;
  ``max_completion_length = max_new_tokens``; no vLLM; CPU; float32
  (``bf16=False``; TRL defaults to bf16); ``gradient_checkpointing=False``
  (TRL defaults to True); constant learning rate, no warm-up;
  ``shuffle_dataset=False``; no logging / saving / reporting.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import workloads as W  # noqa: E402


def main(argv=None) -> dict:
    args = W.runner_args(argv)
    wl = W.get_workload(args.workload)
    if wl.num_agents != 1:
        raise SystemExit(f"workload {wl.name} has {wl.num_agents} agents; TRL GRPOTrainer is single-agent")
    n_items = args.items or wl.num_items
    W.seed_everything(args.seed)
    counter = W.WorkCounter().install()

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def reward_func(prompts, completions, **kwargs):
        return [W.reward([c]) for c in completions]

    items = [{"prompt": W.format_agent(it, 0, 1)} for it in W.make_items(n_items)]
    k = wl.num_generations
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GRPOConfig(
            output_dir=tmp,
            num_train_epochs=wl.epochs,
            learning_rate=wl.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            per_device_train_batch_size=args.batch_size * k,
            gradient_accumulation_steps=1,
            num_generations=k,
            max_completion_length=wl.max_new_tokens,
            temperature=wl.temperature,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            num_iterations=1,
            loss_type="grpo",
            scale_rewards="group",
            use_vllm=False,
            use_cpu=True,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            shuffle_dataset=False,
            report_to="none",
            logging_strategy="no",
            save_strategy="no",
            disable_tqdm=True,
            log_completions=False,
            dataloader_num_workers=0,
            seed=args.seed,
        )
        t0 = time.perf_counter()
        trainer = GRPOTrainer(model=args.model, reward_funcs=reward_func, args=cfg,
                              train_dataset=Dataset.from_list(items))
        setup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        trainer.train()
        wall_s = time.perf_counter() - t0
    return W.record_run(args, "trl", wl, n_items, counter, setup_s, wall_s)


if __name__ == "__main__":
    print(main())
