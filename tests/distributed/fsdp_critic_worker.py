"""Worker for tests/distributed/test_sharding_critic.py: actor-critic runs (iac, maac) under FSDP2, 1 process or
torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed/fsdp_critic_worker.py OUT --batch-size 2 SCENARIO...               # 2 ranks x 2 = 4
    python tests/distributed/fsdp_critic_worker.py OUT --batch-size 4 SCENARIO...            # 1 process, global batch 4

Scenarios (each writes ``OUT/<name>/rank<r>.pt``: gathered agent and critic
weights, reduced metrics, whether the critic's parameters were DTensors):

* ``iac``: a full agent and a LoRA agent with Q value heads on their own
  models, 2 passes per step, 3 steps, checkpoint at step 2
  (``OUT/iac/run/checkpoint-2``). 4 Q inputs per rank and micro-batch 3: 2
  critic micro-batches on each rank, then (step 2) 1 on rank 0 and none on
  rank 1.
* ``maac``: the same agents and one central separate tiny critic (hidden 32,
  2 layers, other random weights on rank 1: the broadcast must fix that),
  clipping at 0.1; item 4's reward is NaN, so step 2 (item 4 alone, on rank 0)
  has a non-finite value loss on rank 0 and nothing on rank 1: every rank skips.
* ``dp_maac``: ``maac`` under plain data parallelism (``sharding=none``): the
  skip must be agreed over ranks there too.
* ``iac_agent``: ``iac`` under ``fsdp_gather: agent`` (2 ranks only; compared with ``iac`` of one process).
* ``resume``: resume ``iac`` from ``--from``/iac/run/checkpoint-2 (default: OUT's) and run step 3.
* ``bf16``: ``maac`` under ``mixed_precision=bf16`` (FSDP's MixedPrecisionPolicy on the critic too), 1 step.

Sampling as in tests/distributed/fsdp_worker.py (independent of the split of items over ranks).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from comarl import (AgentConfig, FunctionEnv, HardwareConfig, LossConfig, RolloutConfig, RunConfig,  # noqa: E402
                    TrainConfig, Trainer)
from comarl.critics import CriticSettings  # noqa: E402
from comarl.compute import distributed as dist  # noqa: E402
from comarl.compute.sharding import full_state_dict  # noqa: E402
from dist_worker import seeded  # noqa: E402
from fsdp_worker import agent, nan_on_item_4, reward, worker_main  # noqa: E402


def critic_settings(name: str, rank: int) -> CriticSettings:
    if name in ("iac", "resume", "iac_agent"):
        return CriticSettings(lr=1e-2, critic_type="q")
    model = AgentConfig(model="tiny", chat_template=False,
                        model_kwargs={"seed": 7 + 100 * rank, "hidden_size": 32, "num_layers": 2})
    return CriticSettings(model=model, lr=1e-2)


def run(name: str, out: Path, batch_size: int, resume_from: str | None) -> None:
    r = int(os.environ.get("RANK", "0"))
    cfg = TrainConfig(rollout=RolloutConfig(num_generations=2), loss=LossConfig(num_iterations=2),
                      run=RunConfig(batch_size=batch_size, max_steps=3, shuffle=False, progress_bar=False, report_to=[],
                                    seed=0, output_dir=str(out / name / "run")),
                      hardware=HardwareConfig(micro_batch_size=3, sharding="fsdp", batch_adapters=False))
    if name in ("iac", "resume", "iac_agent"):
        cfg.algorithm, cfg.run.save_steps = "iac", 2
        if name == "iac_agent":  # one agent gathered at a time: rollout, then each value head with its agent
            cfg.hardware.fsdp_gather = "agent"
        if name == "resume":
            cfg.run.resume = str(Path(resume_from or out) / "iac" / "run" / "checkpoint-2")
    else:
        cfg.algorithm, cfg.loss.max_grad_norm = "maac", 0.1
        cfg.hardware.sharding = "none" if name == "dp_maac" else "fsdp"
        if name == "bf16":
            cfg.hardware.mixed_precision, cfg.run.max_steps = "bf16", 1
    cfg.critic = critic_settings(name, r)
    prompts = [lambda it: f"Say {it['x']} in few words.", lambda it: f"Say {it['x']} at length."]
    score = reward if cfg.algorithm == "iac" else nan_on_item_4
    trainer = Trainer([agent(0, False, r), agent(1, True, r)], FunctionEnv(prompts, score),
                      [{"x": x} for x in range(5)], cfg, generator=seeded)
    history = trainer.train()
    from torch.distributed.tensor import DTensor

    weights = [full_state_dict(a.model, keep=True) for a in trainer.agents]
    critic = [full_state_dict(vm.trained_module(), keep=True) for vm in trainer.critic.models]
    (out / name).mkdir(parents=True, exist_ok=True)
    torch.save({"weights": weights, "critic": critic, "history": history, "world_size": dist.world_size(),
                "critic_dtensor": [isinstance(p, DTensor) for vm in trainer.critic.models for p in vm.parameters()],
                "sharded": trainer.sharding is not None}, out / name / f"rank{dist.rank()}.pt")


def main() -> None:
    worker_main(run)


if __name__ == "__main__":
    main()
