"""Evaluation: roll out without training and summarise.

Each item gets ``num_generations`` aligned joint responses (and the full tree
when ``num_turns`` > 1); with a team graph (``comarl/core/stages.py``) the first stage
writes ``num_generations`` samples and every later agent one per branch, so an
item still has ``num_generations`` leaves per turn, and the metrics add each
stage's (``stage<s>/spread``, ``route/<agent>``, ``tree/leaves``). Metrics are the rollout's (reward per turn, return,
environment metrics); the environment may add a task summary (pass@k, reward
levels, ROUGE...) through an optional ``summarize(records) -> dict`` method.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..compute import distributed as dist
from ..generation.team import generate_for_agents
from ..rollout import RolloutSettings, collect_rollout, join_rollout, rollout_metrics


@torch.no_grad()
def evaluate_agents(agents: Sequence, env, items: Sequence[dict], num_generations: int, config,
                    batch_size: int | None = None, shard: bool = False, lockstep=None,
                    generator=None, seed: int | None = None, greedy: bool = False) -> dict[str, Any]:
    """Returns ``{"metrics": mean metrics, "summary": env summary or {}, "records": EvalRecords}``.

    ``lockstep``: sharded agents gathered one at a time (``RolloutSettings.lockstep``); a rank with fewer
    batches joins the others' generation. ``seed``: sample inside a forked RNG seeded with it, so two calls on
    the same weights give the same numbers and the caller's random stream (a training run's) is untouched
    (``comarl eval`` and the demo pass ``train.run.seed``); None: the current stream. ``greedy``: every agent
    decodes greedily (one sample per item is then enough)."""
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return evaluate_agents(agents, env, items, num_generations, config, batch_size, shard, lockstep,
                                   generator, None, greedy)
    if greedy:
        generator = _greedy(generator or generate_for_agents)
    items = list(items)
    if shard:
        items = dist.shard(items)
    settings = RolloutSettings.from_train_config(config, num_generations=num_generations, joint_mode="aligned",
                                                 keep_records=True, lockstep=lockstep, generator=generator,
                                                 successor_generations=1)  # a team graph: n leaves per item
    bs = batch_size or config.run.batch_size
    n_batches = -(-len(items) // bs)
    n_rollouts = lockstep.max(n_batches) if lockstep is not None else n_batches  # (a collective: first)
    rollouts, records = [], []
    for s in range(0, len(items), bs):
        r = collect_rollout(agents, env, items[s:s + bs], settings)
        rollouts.append(r)
        records += r.records
    for _ in range(n_rollouts - n_batches):
        join_rollout(agents, settings, env)
    mean, counts = rollout_metrics(rollouts)  # per-node metrics weighted by their nodes, the rest by items
    mean["reward/mean"] = mean.get("reward/turn0", float("nan"))
    if shard:
        mean = dist.reduce_metrics(mean, weight=len(items), key_weights=counts)
    summary = env.summarize(records) if hasattr(env, "summarize") and records else {}
    return {"metrics": mean, "summary": summary, "records": records}


def _greedy(team_generator):
    """``team_generator`` (``generation/team.py`` contract) decoding greedily whatever its caller asks."""
    def greedy_generator(*args, greedy: bool = False, **kwargs):
        return team_generator(*args, greedy=True, **kwargs)

    return greedy_generator


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


def flatten_numbers(summary: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested summary dict, keyed by their dotted path (``rouge.rouge1``); lists and
    per-task breakdowns (``per_task``) are left out."""
    out: dict[str, float] = {}
    for k, v in summary.items():
        key = f"{prefix}{k}"
        if k == "per_task":
            continue
        if isinstance(v, dict):
            out.update(flatten_numbers(v, key + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def comparison_table(columns: Sequence[tuple[str, dict, dict]]) -> str:
    """One plain-text table of several evaluations side by side.

    ``columns``: (label, metrics, env summary) each. Rows: every metric, then every numeric leaf of the
    summaries (``summary.<path>``), in sorted order; "-" where a column lacks the row."""
    cols = [{**m, **{f"summary.{k}": v for k, v in flatten_numbers(s or {}).items()}} for _, m, s in columns]
    keys = sorted({k for c in cols for k in c}, key=lambda k: (k.startswith("summary."), k))
    header = ["metric"] + [label for label, _, _ in columns]
    rows = [[k] + [f"{c[k]:.4f}" if k in c else "-" for c in cols] for k in keys]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    def line(r):
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


__all__ = ["comparison_table", "evaluate_agents", "flatten_numbers", "records_to_json"]
