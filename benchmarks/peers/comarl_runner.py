"""One comarl training run on a benchmark workload (runs in the project's venv).

Same CLI and JSON record as the peer runners. Settings chosen to match the peers:
``scale_advantages=True`` (both peers divide by the group std),
``loss_normalization="sequence"`` (TRL ``loss_type="grpo"``),
``shuffle=False`` (peers go through items in order), no chat template (the
benchmark tokenizer has none anyway), no logging, progress bar or checkpoints.
``--batch-size B`` is comarl's ``batch_size``: B items per training step, all
of a turn's prompts (B items x K samples) in one ``generate`` call per agent,
one optimiser step per agent per training step.

``main(argv)`` is also what the fast test calls (workload "a", ``--items 1``).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repo root: comarl without installing
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import workloads as W  # noqa: E402


def build_trainer(wl: W.Workload, model: str, batch_size: int, n_items: int, seed: int = 0):
    """A ``comarl.Trainer`` set up for workload ``wl`` on the model folder ``model``."""
    import comarl

    def transition(state, responses):
        return W.next_prompts(state.prompts, responses)

    env = comarl.FunctionEnv(
        formatters=W.formatters(wl.num_agents),
        reward_fn=lambda responses, item: W.reward(responses, item),
        transition_fn=transition if wl.num_turns > 1 else None,
        max_turns=wl.num_turns)
    agents = [comarl.AgentConfig(model=model, max_new_tokens=wl.max_new_tokens, temperature=wl.temperature,
                                 top_p=1.0, top_k=0, lr=wl.lr, chat_template=False)
              for _ in range(wl.num_agents)]
    cfg = comarl.TrainConfig(algorithm="magrpo",
                             rollout=comarl.RolloutConfig(num_generations=wl.num_generations, joint_mode=wl.joint_mode,
                                                          num_turns=wl.num_turns),
                             run=comarl.RunConfig(batch_size=batch_size, epochs=wl.epochs, seed=seed, shuffle=False,
                                                  output_dir=None, save_steps=0, report_to=[], progress_bar=False,
                                                  log_samples_steps=0, logging_steps=10**9),
                             loss=comarl.LossConfig(scale_advantages=True, loss_normalization="sequence",
                                                    num_iterations=1))
    return comarl.Trainer(agents=agents, env=env, train_dataset=W.make_items(n_items), config=cfg)


def main(argv=None) -> dict:
    args = W.runner_args(argv)
    wl = W.get_workload(args.workload)
    n_items = args.items or wl.num_items
    W.seed_everything(args.seed)
    counter = W.WorkCounter().install()
    try:
        t0 = time.perf_counter()
        trainer = build_trainer(wl, args.model, args.batch_size, n_items, args.seed)
        setup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        trainer.train()
        wall_s = time.perf_counter() - t0
    finally:
        counter.uninstall()
    own = dict(getattr(getattr(trainer, "state", None), "counters", {}) or {})
    return W.record_run(args, "comarl", wl, n_items, counter, setup_s, wall_s, own_counters=own)


if __name__ == "__main__":
    print(main())
