"""Per-rank memory of parameters + gradients + optimiser states: unsharded vs FSDP2-sharded agents.

    python benchmarks/fsdp_memory.py                        # launches itself: 2 gloo ranks on the CPU
    python benchmarks/fsdp_memory.py --hidden 512 --layers 8 --lora
    python benchmarks/fsdp_memory.py --critic               # maac: + a central critic of the agent's size

Each configuration (``train.hardware.sharding: none`` and ``fsdp``) trains one agent
(a random Qwen2 model, ``--hidden`` x ``--layers``) for one MAGRPO step under
``torchrun --nproc_per_node 2`` in a fresh launch. Right after the optimiser
step (gradients not yet cleared, AdamW moments allocated) each rank counts the
bytes it holds: parameters (a DTensor counts its local shard; frozen LoRA base
included), gradients and optimiser state tensors. These are tensor sizes, not
RSS, so they do not depend on machine load. Prints one JSON line per
configuration and the ratio sharded / unsharded of the largest rank.
``--critic`` trains ``maac`` instead, with a separate central critic of the
same shape, and counts the critic's bytes (after its own AdamW step) too.

``--rollout`` measures what ``train.hardware.fsdp_gather`` changes instead: a team of
``--agents`` full agents, sharded, one step with ``fsdp_gather: team`` and one
with ``agent``; at every generate call each rank counts the parameter bytes
it holds for the whole team (a gathered agent whole, the others as shards),
and the peak over the calls is reported.

    python benchmarks/fsdp_memory.py --rollout --agents 3
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(args) -> None:
    """One launch's rank: build, one step, report the bytes held after the optimiser step (rank 0 prints)."""
    import torch

    from comarl import AgentConfig, FunctionEnv, HardwareConfig, RolloutConfig, RunConfig, TrainConfig, Trainer
    from comarl.critics import CriticSettings
    from comarl.models.lora import LoraSettings
    from comarl.compute import distributed as dist
    from comarl.compute.sharding import local_bytes, root_module

    torch.set_num_threads(1)
    agent = AgentConfig(model="tiny", max_new_tokens=8, lr=1e-3, lora=LoraSettings(r=8) if args.lora else None,
                        model_kwargs={"hidden_size": args.hidden, "num_layers": args.layers})
    env = FunctionEnv([lambda it: f"Say {it['x']}."], lambda responses, item: float(len(responses[0]) % 3))
    cfg = TrainConfig(rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=1, max_steps=1, progress_bar=False, report_to=[]),
                      hardware=HardwareConfig(sharding=args.sharding))
    if args.critic:  # maac: one central critic model of the agent's shape (+ a value head)
        cfg.algorithm = "maac"
        cfg.critic = CriticSettings(model=AgentConfig(model="tiny", chat_template=False, model_kwargs={
            "hidden_size": args.hidden, "num_layers": args.layers}))
    trainer = Trainer([agent], env, [{"x": x} for x in range(4)], cfg)
    seen: dict[str, int] = {}

    def count_after_step(prefix, params, module, opt):
        """``params``: what the rank holds (a LoRA agent's frozen base included); ``module``: what trains."""
        real_step = opt.step

        def step(*a, **k):
            out = real_step(*a, **k)
            trainable = [p for p in module.parameters() if p.requires_grad]
            states = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
            seen.update({prefix + "params": local_bytes(params()), prefix + "grads": local_bytes(
                p.grad for p in trainable), prefix + "optim": local_bytes(states)})
            return out

        opt.step = step

    model = trainer.agents[0].model
    count_after_step("", lambda: root_module(model).parameters(), model, trainer.optimizers[0])
    if args.critic:
        critic = trainer.critic.models[0].trained_module()  # its backbone and value head
        count_after_step("critic_", critic.parameters, critic, trainer.critic.optimizers[0])
    trainer.train()
    per_rank = [None] * dist.world_size()
    torch.distributed.all_gather_object(per_rank, seen)
    if dist.is_main():
        totals = [sum(r.values()) for r in per_rank]
        print("RESULT " + json.dumps({"sharding": args.sharding, "lora": args.lora, "critic": args.critic,
                                      "hidden": args.hidden, "layers": args.layers, "world_size": dist.world_size(),
                                      "per_rank_mb": [{k: round(v / 2 ** 20, 3) for k, v in r.items()}
                                                      for r in per_rank],
                                      "max_rank_total_mb": round(max(totals) / 2 ** 20, 3)}), flush=True)


def measure_rollout(args) -> None:
    """One launch's rank: a sharded team, one step; the peak parameter bytes held during generate calls."""
    import torch

    import comarl.generation.team as rollout  # its generate is what each agent's rollout calls
    from comarl import AgentConfig, FunctionEnv, HardwareConfig, RolloutConfig, RunConfig, TrainConfig, Trainer
    from comarl.compute import distributed as dist
    from comarl.compute.sharding import local_bytes

    torch.set_num_threads(1)
    agents = [AgentConfig(model="tiny", max_new_tokens=8, lr=1e-3,
                          model_kwargs={"hidden_size": args.hidden, "num_layers": args.layers, "seed": i})
              for i in range(args.agents)]
    env = FunctionEnv([lambda it, i=i: f"Agent {i}: say {it['x']}." for i in range(args.agents)],
                      lambda responses, item: float(len(responses[0]) % 3))
    cfg = TrainConfig(rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=1, max_steps=1, progress_bar=False, report_to=[]),
                      hardware=HardwareConfig(sharding="fsdp", fsdp_gather=args.gather))
    trainer = Trainer(agents, env, [{"x": x} for x in range(4)], cfg)
    team = [a.model for a in trainer.agents]
    peak = [0]
    real = rollout.generate

    def counting_generate(*a, **k):
        peak[0] = max(peak[0], local_bytes(p for m in team for p in m.parameters()))
        return real(*a, **k)

    rollout.generate = counting_generate
    trainer.train()
    sharded = local_bytes(p for m in team for p in m.parameters())
    per_rank = [None] * dist.world_size()
    torch.distributed.all_gather_object(per_rank, (peak[0], sharded))
    if dist.is_main():
        print("RESULT " + json.dumps({"fsdp_gather": args.gather, "agents": args.agents, "hidden": args.hidden,
                                      "layers": args.layers, "world_size": dist.world_size(),
                                      "team_shards_mb": round(max(s for _, s in per_rank) / 2 ** 20, 3),
                                      "peak_during_generate_mb": round(max(p for p, _ in per_rank) / 2 ** 20, 3)}),
              flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--lora", action="store_true")
    ap.add_argument("--critic", action="store_true", help="maac with a central critic of the agent's shape")
    ap.add_argument("--rollout", action="store_true", help="peak parameter bytes in generation: fsdp_gather team/agent")
    ap.add_argument("--agents", type=int, default=3, help="--rollout: agents in the team")
    ap.add_argument("--sharding", default=None, help="internal: the configuration this launch measures")
    ap.add_argument("--gather", default=None, help="internal: the fsdp_gather this --rollout launch measures")
    args = ap.parse_args()
    if args.gather is not None:
        measure_rollout(args)
        return 0
    if args.sharding is not None:
        measure(args)
        return 0
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT))
    if args.rollout:
        return compare_rollout(args, env)
    totals = {}
    for sharding in ("none", "fsdp"):
        result = launch(env, ["--sharding", sharding, "--hidden", str(args.hidden), "--layers", str(args.layers)]
                        + (["--lora"] if args.lora else []) + (["--critic"] if args.critic else []))
        if result is None:
            return 1
        totals[sharding] = result["max_rank_total_mb"]
    print(f"sharded / unsharded (largest rank): {totals['fsdp'] / totals['none']:.3f}")
    return 0


def compare_rollout(args, env) -> int:
    """``--rollout``: one launch per fsdp_gather setting; prints both and the ratio agent / team."""
    peaks = {}
    for gather in ("team", "agent"):
        result = launch(env, ["--gather", gather, "--agents", str(args.agents), "--hidden", str(args.hidden),
                              "--layers", str(args.layers)])
        if result is None:
            return 1
        peaks[gather] = result["peak_during_generate_mb"]
    print(f"peak parameter bytes during generation, agent / team: {peaks['agent'] / peaks['team']:.3f}")
    return 0


def launch(env, flags: list[str]) -> dict | None:
    """This script on 2 gloo ranks with ``flags``: prints and returns rank 0's RESULT (None, with the
    output on stderr, when the launch fails)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__, *flags]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not lines:
        print(out.stdout[-2000:] + out.stderr[-4000:], file=sys.stderr)
        return None
    print(lines[0], flush=True)
    return json.loads(lines[0][7:])


if __name__ == "__main__":
    sys.exit(main())
