"""Worker for tests/distributed/test_sharding.py: FSDP2-sharded training runs, single-process or under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed/fsdp_worker.py OUT --batch-size 2 SCENARIO...                      # 2 ranks x 2 = 4
    python tests/distributed/fsdp_worker.py OUT --batch-size 4 SCENARIO...                   # 1 process, global batch 4

The test runs the single-process side in its own process (``run``, sampling with
``dist_worker.seeded`` as the ranks do) to save a launch.

Scenarios (run one after another in this process; each writes ``OUT/<name>/rank<r>.pt``
with the gathered final weights and the reduced metrics):

* ``two``: a full fine-tuning agent and a LoRA agent, ``sharding=fsdp``, a KL term (a sharded
  reference copy for the full agent, the adapter switched off for the LoRA one), 2 passes per step, 3 steps,
  checkpoint at step 2 (``OUT/two/run/checkpoint-2``), ``trainer.save`` to
  ``OUT/two/final``.
* ``one``: one full agent with a KL term (its frozen reference is sharded too),
  two optimisation passes per step (old log-probs), clipping at 0.1 (active), 3 steps;
  item 4's reward is NaN, so step 2 (item 4 alone, on rank 0) is a non-finite skip
  while rank 1 has no item at all.
* ``resume``: resume ``two`` from ``--from``/two/run/checkpoint-2 (default: OUT's) and run step 3.
* ``hsdp1`` / ``hsdp2``: ``one`` with ``fsdp_shard_size`` 1 (mesh (2, 1)) / 2 (mesh (1, 2)).
* ``bf16``: ``one`` under ``mixed_precision=bf16`` (FSDP's MixedPrecisionPolicy), 1 step.
* ``fp16``: ``one`` under ``mixed_precision=fp16`` (float16 MixedPrecisionPolicy, the sharded loss scaler;
  CPU autocast with the library's CUDA-only check lifted), 3 steps: step 2's NaN skips on both ranks, and
  rank 1, with no item, still joins the scaler's all-reduce.
* ``plain`` / ``from_plain``: ``two`` without sharding (a checkpoint of whole models), then resumed sharded
  from its checkpoint-2.
* ``gc``: ``one`` with ``gradient_checkpointing`` (the same numbers as without it).
* ``agent``: ``fsdp_gather=agent`` (one agent gathered per generate call): the two agents of ``two``,
  MAReMax (greedy runs), 2 turns where odd items end after the first (rank 1 holds odd items in step 1:
  it joins rank 0's second turn with nothing to generate), an evaluation at step 3 over 5 items
  (rank 0 runs 2 batches, rank 1 one).

Sampling is made independent of the split of items over ranks as in
tests/distributed/dist_worker.py (each prompt generated alone, the RNG seeded from (agent,
prompt)). Items: 5, no shuffle, so rank 1 of 2 gets no item in step 2. The full
agents of rank r > 0 start from other random weights on purpose (the broadcast
must fix that); the LoRA base is the same on every rank (only trainable weights
are broadcast).
"""
from __future__ import annotations

import argparse
import faulthandler
import signal
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from comarl import (AgentConfig, FunctionEnv, HardwareConfig, LossConfig, RolloutConfig, RunConfig,  # noqa: E402
                    TrainConfig, Trainer)
from comarl.models.lora import LoraSettings  # noqa: E402
from comarl.compute import distributed as dist  # noqa: E402
from comarl.compute.sharding import full_state_dict  # noqa: E402
from dist_worker import seeded  # noqa: E402  (tests/: the same split-independent sampling)

def reward(responses, item):
    """Depends on the texts' lengths, so the K samples of a group get different rewards."""
    a = len(responses[0])
    b = len(responses[-1])
    return (a % 7) / 7.0 + 0.5 * ((a + b + item["x"]) % 5) / 5.0


def nan_on_item_4(responses, item):
    return float("nan") if item["x"] == 4 else reward(responses, item)


def agent(i: int, lora: bool, rank: int) -> AgentConfig:
    seed = 10 * i + (0 if lora else 100 * rank)
    return AgentConfig(model="tiny", max_new_tokens=8, lr=1e-2, temperature=1.0,
                       lora=LoraSettings(r=4) if lora else None,
                       model_kwargs={"seed": seed, "hidden_size": 32, "num_layers": 2})


def run(name: str, out: Path, batch_size: int, resume_from: str | None) -> None:
    r = int(os.environ.get("RANK", "0"))
    cfg = TrainConfig(rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=batch_size, max_steps=3, shuffle=False, progress_bar=False, report_to=[],
                                    seed=0, output_dir=str(out / name / "run")),
                      hardware=HardwareConfig(micro_batch_size=3, sharding="fsdp", batch_adapters=False))
    if name == "agent":  # one agent gathered at a time, 2 turns that end early for odd items, ReMax greedy runs
        agents = [agent(0, False, r), agent(1, True, r)]
        prompts = [lambda it: f"Say {it['x']} in few words.", lambda it: f"Say {it['x']} at length."]
        env = FunctionEnv(prompts, reward, max_turns=2,
                          transition_fn=lambda st, resp: None if st.item["x"] % 2 else (f"Again {st.item['x']}.",
                                                                                        f"More {st.item['x']}."))
        cfg.hardware.fsdp_gather, cfg.algorithm, cfg.rollout.num_turns, cfg.run.eval_steps = "agent", "maremax", 2, 3
        trainer = Trainer(agents, env, [{"x": x} for x in range(5)], cfg,
                          eval_dataset=[{"x": x} for x in range(5)], generator=seeded)
        _finish(trainer, name, out)
        return
    if name in ("two", "resume", "plain", "from_plain"):
        agents = [agent(0, False, r), agent(1, True, r)]
        prompts = [lambda it: f"Say {it['x']} in few words.", lambda it: f"Say {it['x']} at length."]
        cfg.run.save_steps, cfg.loss.kl_beta, cfg.loss.num_iterations = 2, 0.05, 2
        if name == "resume":
            cfg.run.resume = str(Path(resume_from or out) / "two" / "run" / "checkpoint-2")
        if name == "plain":  # data parallel, unsharded checkpoints
            cfg.hardware.sharding = "none"
        if name == "from_plain":
            cfg.run.resume = str(out / "plain" / "run" / "checkpoint-2")
    else:
        agents = [agent(0, False, r)]
        prompts = [lambda it: f"Say {it['x']} in few words."]
        cfg.loss = LossConfig(kl_beta=0.1, num_iterations=2, max_grad_norm=0.1)
        if name.startswith("hsdp"):
            cfg.hardware.fsdp_shard_size = int(name[-1])
        if name == "bf16":
            cfg.hardware.mixed_precision, cfg.run.max_steps = "bf16", 1
        if name == "fp16":  # fp16 is CUDA-only in the library; CPU autocast runs it here (fp16_on_cpu)
            cfg.hardware.mixed_precision = "fp16"
        if name == "gc":  # activation checkpointing: FSDP re-gathers each block for the recomputation
            cfg.hardware.gradient_checkpointing = True
    score = reward if len(agents) == 2 else nan_on_item_4
    with fp16_on_cpu() if name == "fp16" else contextlib.nullcontext(), record_meta_adds() as meta_adds:
        trainer = Trainer(agents, FunctionEnv(prompts, score), [{"x": x} for x in range(5)], cfg, generator=seeded)
    trainer.meta_adds = meta_adds
    if name == "two":
        trainer.train()
        trainer.save(out / name / "final")
    _finish(trainer, name, out)


def _finish(trainer, name: str, out: Path) -> None:
    """Train (unless done) and write the gathered weights and the history."""
    history = trainer.history or trainer.train()
    weights = [full_state_dict(a.model, keep=True) for a in trainer.agents]
    (out / name).mkdir(parents=True, exist_ok=True)
    torch.save({"weights": weights, "history": history, "world_size": dist.world_size(),
                "sharded": trainer.sharding is not None,
                "scalers": [(s.sharded, s.scale, s.overflows) for s in trainer.scalers.values()],
                "meta_adds": getattr(trainer, "meta_adds", None)},
               out / name / f"rank{dist.rank()}.pt")


@contextlib.contextmanager
def record_meta_adds():
    """Yield a list that gets, for every module sharded inside the block, whether this rank had built it on
    the meta device (rank > 0 never holds an agent whole: rank 0's weights are sent at sharding)."""
    from comarl.compute.sharding import Sharding, shard_target

    real, seen = Sharding.add, []

    def add(self, module, where, by_block=True):
        seen.append(all(p.is_meta for p in shard_target(module).parameters()))
        return real(self, module, where, by_block)

    Sharding.add = add
    try:
        yield seen
    finally:
        Sharding.add = real


@contextlib.contextmanager
def fp16_on_cpu():
    """The trainer's CUDA-only check of fp16 lifted: CPU autocast runs float16 (slowly), enough to test the
    loss scaler's sharded path on gloo."""
    import comarl.training.build as build

    real = build.check_mixed_precision
    build.check_mixed_precision = lambda *a, **k: None
    try:
        yield
    finally:
        build.check_mixed_precision = real


def worker_main(run) -> None:
    """``python WORKER OUT SCENARIO... --batch-size B [--from DIR]``: ``run(name, OUT, B, DIR)`` for each
    scenario, with split-independent sampling (every sharding worker's entry point)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--from", dest="resume_from", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: where a hung rank waits
    for name in args.scenarios:
        run(name, Path(args.out), args.batch_size, args.resume_from)


def main() -> None:
    worker_main(run)


if __name__ == "__main__":
    main()
