"""Evaluation: roll out without training and summarise.

Each item gets ``num_generations`` aligned joint responses (and the full tree
when ``num_turns`` > 1). Metrics are the rollout's (reward per turn, return,
environment metrics); the environment may add a task summary (pass@k, reward
levels, ROUGE...) through an optional ``summarize(records) -> dict`` method.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from .rollout import RolloutSettings, collect_rollout
from .training import distributed as dist


@torch.no_grad()
def evaluate_agents(agents: Sequence, env, items: Sequence[dict], num_generations: int, config,
                    batch_size: int | None = None, shard: bool = False) -> dict[str, Any]:
    """Returns ``{"metrics": mean metrics, "summary": env summary or {}, "records": EvalRecords}``."""
    items = list(items)
    if shard:
        items = dist.shard(items)
    settings = RolloutSettings.from_train_config(config, num_generations=num_generations, joint_mode="aligned",
                                                 keep_records=True)
    bs = batch_size or config.batch_size
    metrics, records = [], []
    for s in range(0, len(items), bs):
        r = collect_rollout(agents, env, items[s:s + bs], settings)
        metrics.append((r.metrics, len(items[s:s + bs])))
        records += r.records
    keys = {k for m, _ in metrics for k in m}
    mean = {k: float(np.average([m[k] for m, _ in metrics if k in m], weights=[w for m, w in metrics if k in m]))
            for k in keys}
    mean["reward/mean"] = mean.get("reward/turn0", float("nan"))
    if shard:
        mean = dist.reduce_metrics(mean, weight=len(items))
    summary = env.summarize(records) if hasattr(env, "summarize") and records else {}
    return {"metrics": mean, "summary": summary, "records": records}


def records_to_json(records) -> list[dict]:
    """EvalRecords -> JSON-able dicts (item, responses, rewards, metrics)."""
    out = []
    for r in records:
        out.append({"item": {k: v for k, v in r.item.items() if isinstance(v, (str, int, float, bool, type(None)))},
                    "responses": [list(x) for x in r.responses],
                    "rewards": [t.reward if isinstance(t.reward, float) else list(t.reward.values)
                                for t in r.transitions],
                    "metrics": [dict(t.metrics) for t in r.transitions]})
    return out


__all__ = ["evaluate_agents", "records_to_json"]
