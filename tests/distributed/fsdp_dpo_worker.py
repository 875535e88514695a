"""Worker for tests/distributed/test_sharding_dpo.py: the DPO family trained FSDP2-sharded, single-process or
under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed/fsdp_dpo_worker.py OUT --batch-size 2 SCENARIO...                  # 2 ranks x 2 = 4
    python tests/distributed/fsdp_dpo_worker.py OUT --batch-size 4 SCENARIO...               # 1 process, global batch 4

Scenarios (each writes ``OUT/<name>/rank<r>.pt``: gathered final weights, metrics):

* ``madpo``: a full agent (its frozen reference copy sharded too) and a LoRA agent (reference: the
  adapter off), 2 passes per step, 3 steps on 5 items: step 3 has item 4 alone, so rank 1 has no
  pair and runs idle backwards. Cross joints (J=4) with ``pair_selection: random``, 2 pairs per node: the
  picks must not depend on the ranks.
* ``iter``: ``madpo_iter`` with two full agents, ``reference: current``, replay of every round,
  2 rounds of 2 steps; a checkpoint at step 3 (inside round 1, so it holds the round's references).
* ``iter_agent``: ``iter`` under ``fsdp_gather: agent`` (2 ranks only; in round 1 rank 1 has no item and
  joins rank 0's per-agent gathers).
* ``iter_resume``: resume ``iter`` from its checkpoint-3 in the same folder (the rounds' pairs live
  there; ``--from``: another OUT's ``iter``) and run step 4.
* ``iter_ckpt``: ``madpo_iter`` (one full agent) against the policy of the round before (``comparator: checkpoint``: its
  snapshot gathered from the shards; in round 0 the starting policy), ``reference: initial``, 1 round of 1 step;
  ``pair_selection: random`` (which of the 2 candidate pairs per item: the same on any number of ranks).
* ``iter_ckpt_lora``: ``iter_ckpt`` with a full and a LoRA agent (the snapshot: a model folder and an adapter
  folder, which rank 1 builds on meta). Only its pair files are compared: the LoRA agent's first DPO gradient
  is ~0 (B = 0, margin 0), and Adam turns that noise into weight differences of up to 9e-4.
* ``iter_model``: ``madpo_iter`` (one full agent) against a fixed comparator model (``comparator: model``, tiny),
  sharded like the agents; ``fsdp_gather: agent`` (the comparator gathered per generate call), 2 rounds of 1 step.
* ``offline``: ``madpo_offline`` (a full and a LoRA agent) on ``OUT/pairs.jsonl`` (the test writes it),
  3 steps of ``batch_size`` pairs per rank; the run's last checkpoint is sharded.
* ``central``: ``madpo`` with the centralised actor (one agent writing both roles), 2 steps; step 2's DPO loss
  is made NaN (:func:`nan_loss_on_call`): rank 0 (item 4's pair) backpropagates it, rank 1 (no item) runs idle
  passes, and both skip the step together.

Sampling is independent of the split of items over ranks (``dist_worker.seeded``).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402

from comarl import FunctionEnv, HardwareConfig, LossConfig, RolloutConfig, RunConfig, TrainConfig, Trainer  # noqa: E402
from comarl.preference import (CentralizedEnv, IterativeSettings, PairSettings, ParseError,  # noqa: E402
                               PreferenceSettings)
from comarl.compute import distributed as dist  # noqa: E402
from comarl.compute.sharding import full_state_dict  # noqa: E402
from dist_worker import seeded  # noqa: E402
from fsdp_worker import agent, record_meta_adds, reward, worker_main  # noqa: E402

PROMPTS = [lambda it: f"Say {it['x']} in few words.", lambda it: f"Say {it['x']} at length."]


def first_chars(completion, n):
    """Role i's response is the completion's i-th character (a parser random tiny models satisfy)."""
    t = completion.strip()
    if len(t) < n:
        raise ParseError(f"{len(t)} characters for {n} roles")
    return list(t[:n])


def char_reward(responses, item):
    """Depends on the roles' characters (the centralised actor's responses are one character each)."""
    return (sum(map(ord, "".join(responses))) + item["x"]) % 11 / 11.0


def nan_loss_on_call(update, k: int) -> None:
    """The update's DPO losses of the k-th call (0-based, one call per step and pass on every rank) made NaN."""
    real, calls = update.joint_loss, [0]

    def loss(*args):
        losses, z = real(*args)
        calls[0] += 1
        return (losses * float("nan"), z) if calls[0] == k + 1 else (losses, z)

    update.joint_loss = loss


def write_pairs(path: Path, n: int = 5) -> None:
    """``n`` two-agent text pairs of different lengths (what ``madpo_offline`` reads)."""
    import json

    rows = [{"prompts": [PROMPTS[0]({"x": k}), PROMPTS[1]({"x": k})],
             "chosen": [f"{k} it is", "the number " * (k + 1)], "rejected": ["no" * (k + 1), f"{k}?"]}
            for k in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run(name: str, out: Path, batch_size: int, resume_from: Path | None = None) -> None:
    r = int(os.environ.get("RANK", "0"))
    cfg = TrainConfig(rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=batch_size, max_steps=3, shuffle=False, progress_bar=False, report_to=[],
                                    seed=0, output_dir=str(out / name / "run")),
                      hardware=HardwareConfig(micro_batch_size=1, sharding="fsdp", batch_adapters=False))
    agents = [agent(0, False, r), agent(1, True, r)]
    env = FunctionEnv(PROMPTS, reward)
    if name == "madpo":
        cfg.algorithm = "madpo"
        cfg.loss = LossConfig(num_iterations=2, max_grad_norm=0.5)
        cfg.rollout.joint_mode = "cross"
        cfg.preference = PreferenceSettings(pairs=PairSettings(pairs_out=str(out / name / "pairs_out.jsonl"),
                                                               pair_selection="random", pairs_per_item=2))
    elif name == "iter_agent":  # madpo_iter gathering one agent at a time (round sampling and steps)
        agents = [agent(0, False, r), agent(1, False, r)]
        cfg.algorithm, cfg.run.max_steps, cfg.hardware.fsdp_gather = "madpo_iter", 0, "agent"
        cfg.preference = PreferenceSettings(iterative=IterativeSettings(reference="current", rounds=2,
                                                                        steps_per_round=2, replay="all"))
    elif name in ("iter", "iter_resume"):
        agents = [agent(0, False, r), agent(1, False, r)]
        folder = Path(resume_from or out) / "iter" / "run"
        cfg.algorithm, cfg.run.max_steps, cfg.run.save_steps, cfg.run.output_dir = "madpo_iter", 0, 3, str(folder)
        cfg.preference = PreferenceSettings(iterative=IterativeSettings(reference="current", rounds=2,
                                                                        steps_per_round=2, replay="all"))
        if name == "iter_resume":
            cfg.run.resume = str(folder / "checkpoint-3")
    elif name in ("iter_ckpt", "iter_ckpt_lora"):
        if name == "iter_ckpt":
            agents, env = [agent(0, False, r)], FunctionEnv(PROMPTS[:1], reward)
        cfg.algorithm, cfg.run.max_steps = "madpo_iter", 0
        cfg.preference = PreferenceSettings(iterative=IterativeSettings(reference="initial", comparator="checkpoint",
                                                                        rounds=1, steps_per_round=1),
                                            pairs=PairSettings(pair_selection="random"))
    elif name == "iter_model":  # a fixed comparator model, sharded like the agents; one agent gathered at a time
        # lr 1e-3: at 1e-2 Adam turned float noise in near-zero gradients (3e-6 relative in the grad norm) into
        # 2e-4 weight differences by step 2; the pair files are byte-identical either way
        agents, env = [dataclasses.replace(agent(0, False, r), lr=1e-3)], FunctionEnv(PROMPTS[:1], reward)
        cfg.algorithm, cfg.run.max_steps, cfg.hardware.fsdp_gather = "madpo_iter", 0, "agent"
        cfg.preference = PreferenceSettings(iterative=IterativeSettings(reference="initial", comparator="model",
                                                                        comparator_model="tiny", rounds=2,
                                                                        steps_per_round=1))
    elif name == "offline":
        cfg.algorithm, cfg.run.shuffle = "madpo_offline", True
        cfg.preference = PreferenceSettings(pairs=PairSettings(pairs_in=str(out / "pairs.jsonl")))
    elif name == "central":
        agents = [agent(0, False, r)]
        env = CentralizedEnv(FunctionEnv(PROMPTS, char_reward), parser=first_chars, failure_reward=0.0)
        cfg.algorithm, cfg.run.max_steps = "madpo", 2
    else:
        raise SystemExit(f"unknown scenario {name}")
    trainer = Trainer(agents, env, [{"x": x} for x in range(5)], cfg, generator=seeded)
    if name == "central":
        nan_loss_on_call(trainer.update, 1)
    with record_meta_adds() as later:
        history = trainer.train()  # later: modules sharded during training (a comparator model)
    weights = [full_state_dict(a.model, keep=True) for a in trainer.agents]
    sampler = getattr(trainer.source, "sampler", None)
    fixed = getattr(sampler.comparator, "held", None) if sampler is not None else None  # comparators.FixedModel
    (out / name).mkdir(parents=True, exist_ok=True)
    torch.save({"weights": weights, "history": history, "world_size": dist.world_size(),
                "sharded": trainer.sharding is not None,
                "comparator_sharded": fixed is not None and any(isinstance(m, FSDPModule)
                                                                for m in fixed[0].model.modules()),
                "meta_adds_in_training": later},
               out / name / f"rank{dist.rank()}.pt")


def main() -> None:
    worker_main(run)


if __name__ == "__main__":
    main()
