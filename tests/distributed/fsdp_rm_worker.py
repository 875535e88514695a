"""Worker for tests/distributed/test_sharding_rm.py: MARLHF's joint reward model sharded like the agents.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed/fsdp_rm_worker.py OUT --batch-size 2 SCENARIO...                   # 2 ranks x 2 = 4
    python tests/distributed/fsdp_rm_worker.py OUT --batch-size 4 SCENARIO...                # 1 process, global batch 4

Scenarios (each writes ``OUT/<name>/rank<r>.pt``: the agents' and the reward
model's gathered final weights, the reduced metrics, whether the reward model's
parameters were DTensors):

* ``iter``: ``marlhf_iter`` with ``rl_algorithm: magrpo``, a full and a LoRA agent, ``sharding=fsdp``,
  2 rounds x 2 steps, the policy of one round back as the comparator (its snapshot gathered from the
  shards), the reward model continued across rounds on a decay-replayed pool, a checkpoint after every step.
  Round 1 fits 5 pairs (2 of its pool of 7 held out) in batches of 2, so in the last batch rank 1 has no
  pair (its zero-loss forward/backward joins the collectives).
* ``iter_resume``: resume ``iter`` in its folder ``--from``/iter/run (default: OUT's) from checkpoint-3
  (inside round 1: the round's pairs come from its file, its reward model from the checkpoint's
  ``reward_model/dcp``) and run step 4 (rewriting checkpoint-4).
* ``iter_ddp`` / ``rlhf_ddp``: ``iter`` / ``rlhf`` without sharding (plain data parallelism: the reward
  model's gradients all-reduced); their single-process side is ``iter`` / ``rlhf``'s.
* ``rlhf``: MARLHF with ``env.reward_model`` through ``experiment._reward_model_env`` (the config path: the
  process group and the run's mesh exist before the trainer, the model is sharded before it is fitted) on
  ``OUT/pairs.jsonl`` (the test writes it), then 2 MAGRPO steps on its score.

Sampling is made independent of the split of items over ranks as in tests/distributed/fsdp_worker.py.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from comarl import FunctionEnv, HardwareConfig, RolloutConfig, RunConfig, TrainConfig, Trainer  # noqa: E402
from comarl.config import EnvConfig, ExperimentConfig  # noqa: E402
from comarl.experiment import _reward_model_env  # noqa: E402
from comarl.preference import IterativeSettings, PreferenceSettings  # noqa: E402
from comarl.preference.marlhf import RewardModelSettings  # noqa: E402
from comarl.compute import distributed as dist  # noqa: E402
from comarl.compute.sharding import full_state_dict, is_sharded  # noqa: E402
from dist_worker import seeded  # noqa: E402
from fsdp_worker import agent, reward, worker_main  # noqa: E402  (tests/: the same agents and sampling)

PROMPTS = [lambda it: f"Say {it['x']} in few words.", lambda it: f"Say {it['x']} at length."]


def write_pairs(path: Path, n: int = 12) -> None:
    """``n`` preference pairs for ``rlhf``: a short answer pair preferred to a long rambling one."""
    import json

    lines = []
    for x in range(n):
        prompts = [f(dict(x=x)) for f in PROMPTS]
        chosen = [f"{x}.", f"The number is {x}, said plainly."]
        rejected = [f"{x} " * (3 + x % 4), "well " * (2 + x % 3)]
        lines.append(json.dumps({"prompts": prompts, "chosen": chosen, "rejected": rejected}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def run(name: str, out: Path, batch_size: int, resume_from: str | None) -> None:
    r = int(os.environ.get("RANK", "0"))
    scenario, ddp = name.removesuffix("_ddp"), name.endswith("_ddp")
    train = TrainConfig(rollout=RolloutConfig(num_generations=2),
                        run=RunConfig(batch_size=batch_size, shuffle=False, progress_bar=False, report_to=[], seed=0,
                                      output_dir=str(out / name / "run")),
                        hardware=HardwareConfig(micro_batch_size=3, sharding="none" if ddp else "fsdp",
                                                batch_adapters=False))
    agents = [agent(0, False, r), agent(1, True, r)]
    env = FunctionEnv(PROMPTS, reward)
    if scenario in ("iter", "iter_resume"):
        rm = RewardModelSettings(model="tiny", epochs=2, batch_size=2, lr=1e-4, held_out=0.25)
        train.algorithm, train.run.save_steps, train.run.save_total_limit = "marlhf_iter", 1, 4
        train.preference = PreferenceSettings(iterative=IterativeSettings(
            rounds=2, steps_per_round=2, replay="decay", reward_model=rm, reward_model_refit="continue",
            comparator="checkpoint"))
        if name == "iter_resume":  # in iter's own folder, which holds the rounds' pair files
            run_dir = Path(resume_from or out) / "iter" / "run"
            train.run.output_dir, train.run.resume = str(run_dir), str(run_dir / "checkpoint-3")
        trainer = Trainer(agents, env, [{"x": x} for x in range(8)], train, generator=seeded)
        history = trainer.train()
        rm_model = trainer.source.reward_model.model
    elif scenario == "rlhf":
        train.run.max_steps = 2
        cfg = ExperimentConfig(env=EnvConfig(reward_model=RewardModelSettings(
            model="tiny", pairs=str(out / "pairs.jsonl"), held_out=0.25, epochs=1, batch_size=4, lr=1e-3)),
            train=train)
        trainer = Trainer(agents, _reward_model_env(env, cfg), [{"x": x} for x in range(8)], cfg.train,
                          generator=seeded)
        history = trainer.train()
        rm_model = trainer.env.reward_model.model
        if trainer.sharding is not None:  # the reward model, sharded before the trainer, is on the agents' mesh
            assert trainer.env.reward_model.parallel.sharding.mesh is trainer.sharding.mesh
    else:
        raise SystemExit(f"unknown scenario {name}")
    rm_sharded = is_sharded(rm_model)
    weights = [full_state_dict(a.model, keep=True) for a in trainer.agents]
    (out / name).mkdir(parents=True, exist_ok=True)
    torch.save({"weights": weights, "rm": full_state_dict(rm_model, keep=True), "history": history,
                "world_size": dist.world_size(), "sharded": trainer.sharding is not None, "rm_sharded": rm_sharded},
               out / name / f"rank{dist.rank()}.pt")


def main() -> None:
    worker_main(run)


if __name__ == "__main__":
    main()
