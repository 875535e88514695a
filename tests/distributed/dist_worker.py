"""Worker for tests/distributed/test_distributed.py: 3 training steps of 2 tiny agents, single-process or under
torchrun.

    python tests/distributed/dist_worker.py OUT --batch-size 4                                  # 1 rank, global batch 4
    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed/dist_worker.py OUT --batch-size 2                                     # 2 ranks x 2 = 4

5 items, no shuffle: the batches are items [0-3], [4], [0-3], so under 2 ranks
rank 1 gets no item in step 2. Each rank writes ``OUT/rank<r>.pt`` with its
final weights, its first sampling draw, its per-step item counts and the
(reduced) metrics.

Determinism: sampling is made independent of how items are split over ranks
by generating each prompt alone with the global RNG seeded from (agent, prompt
ids) -- a "seeded per-prompt sampling generator" for this test only. The
models of rank r > 0 are initialised with another seed on purpose, so equal
final weights also prove that rank 0's start weights were broadcast.
"""
from __future__ import annotations

import argparse
import os
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from comarl import AgentConfig, FunctionEnv, HardwareConfig, RolloutConfig, RunConfig, TrainConfig, Trainer  # noqa: E402
from comarl.generation import Completions, generate  # noqa: E402
from comarl.generation.team import generate_for_agents  # noqa: E402
from comarl.compute import distributed as dist  # noqa: E402


def per_prompt_generate(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
    """Each prompt alone, with the RNG seeded from (agent, prompt): the same samples however items are sharded."""
    ids, trunc, texts = [], [], []
    for p in prompt_ids:
        torch.manual_seed(zlib.crc32(repr((agent.name, p)).encode()))
        c = generate(agent, [p], k, greedy=greedy, share_prefix=share_prefix)
        ids += c.ids
        trunc += c.truncated
        texts += c.texts
    return Completions(prompt_ids, ids, trunc, texts, k)


def seeded(agents, prompt_ids, k, **kw):
    """The team generator of the distributed tests: every agent's prompts through :func:`per_prompt_generate`."""
    return generate_for_agents(agents, prompt_ids, k, **kw, generate_one=per_prompt_generate)


def reward(responses, item):
    """Depends on both texts' lengths, so the K samples of a group get different rewards."""
    a, b = (len(r) for r in responses)
    return (a % 7) / 7.0 + 0.5 * ((a + b + item["x"]) % 5) / 5.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    r = int(os.environ.get("RANK", "0"))
    agents = [AgentConfig(model="tiny", max_new_tokens=8, lr=1e-2, temperature=1.0,
                          model_kwargs={"seed": 10 * i + 100 * r, "hidden_size": 32, "num_layers": 1})
              for i in range(2)]
    env = FunctionEnv([lambda it: f"Say {it['x']} in few words.", lambda it: f"Say {it['x']} at length."], reward)
    items = [{"x": x} for x in range(5)]
    cfg = TrainConfig(rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=args.batch_size, max_steps=args.steps, shuffle=False, progress_bar=False,
                                    report_to=[], seed=0, output_dir=None), hardware=HardwareConfig(micro_batch_size=3))
    trainer = Trainer(agents, env, items, cfg, generator=seeded)
    first_draw = float(torch.rand(()))  # the sampling stream right after init: must differ per rank
    counts = []
    real_step = trainer.update.step

    def counting_step(team, batch, step):  # the items each step trains on, on this rank
        counts.append(len(batch.items))
        return real_step(team, batch, step)

    trainer.update.step = counting_step
    history = trainer.train()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"weights": [{k: v.detach().cpu() for k, v in a.model.state_dict().items()} for a in trainer.agents],
                "first_draw": first_draw, "counts": counts, "history": history, "world_size": dist.world_size()},
               out / f"rank{dist.rank()}.pt")


if __name__ == "__main__":
    main()
