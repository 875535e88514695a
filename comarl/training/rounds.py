"""Iterative MADPO (``madpo_iter``): an outer loop of rounds around the same pieces as online MADPO.

Round r: (1) the DPO reference becomes a frozen copy of the current policy
(``train.preference.reference: current``; ``initial`` keeps the starting
policy); (2) the current policy samples ``round_batches`` rollout batches and
the environment's returns pick the winners (``preference.tree_pairs``); (3)
the pairs are written to ``<output_dir>/round-<r>/pairs.jsonl``; (4)
``steps_per_round`` DPO steps on the pool of this round's pairs plus the
replayed earlier rounds' (``replay``, weights from ``replay_weights``); (5) a
checkpoint and ``rounds.json`` record the round as done. A killed run started
again with ``train.resume=latest`` resumes after the last finished round.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from ..config_io import ConfigError
from ..preference.pairs import replay_weights
from ..rollout import collect_rollout
from . import distributed as dist
from .dpo import dpo_step, step_pairs, text_pairs_to_ids
from .logging import MetricsLogger
from .placement import place_references


def _text_pairs(rollouts, chunk_pairs, step: int) -> list[dict]:
    return [{"step": step, "prompts": r.tree.prompts[p.group],
             "chosen": [r.agents[i].texts[s] for i, s in enumerate(p.chosen_samples)],
             "rejected": [r.agents[i].texts[s] for i, s in enumerate(p.rejected_samples)], "gap": p.gap}
            for r, pairs in zip(rollouts, chunk_pairs) for p in pairs]


def read_pairs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_rounds(trainer) -> list[dict]:
    """Run the remaining rounds of ``trainer`` (a madpo_iter Trainer); returns one metrics dict per DPO step."""
    cfg, pref = trainer.config, trainer.config.preference
    if not cfg.output_dir:
        raise ConfigError("train.output_dir: madpo_iter writes each round's pairs and checkpoints there; set it")
    if pref.reference == "current" and any(r is not None and r.adapter_off for r in trainer.references):
        raise ConfigError("train.preference.reference: 'current' needs a frozen copy of the policy; LoRA agents' "
                          "reference is the base with the adapter off (use reference: initial)")
    out = Path(cfg.output_dir)
    progress = out / "rounds.json"
    done = json.loads(progress.read_text()) if progress.exists() else {"rounds_done": 0, "checkpoint": None}
    # after a kill, train.resume=latest has loaded the last round's checkpoint; rounds_done says where to go on
    logger = MetricsLogger(cfg.output_dir, cfg.report_to, enabled=dist.is_main())
    try:
        for r in range(done["rounds_done"], pref.rounds):
            if pref.reference == "current" and not pref.reference_free:
                trainer.references = place_references(trainer._build_references(), cfg.reference_device,
                                                      trainer.agents)
            rollouts = [collect_rollout(trainer.agents, trainer.env, trainer.next_batch(), trainer.settings)
                        for _ in range(pref.round_batches)]
            pairs = _text_pairs(rollouts, step_pairs(rollouts, cfg, random.Random(cfg.seed * 7919 + r)),
                                trainer.state.step)
            folder = out / f"round-{r}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
            pool, weights = [], []
            for past, w in sorted(replay_weights(r, pref.replay, pref.replay_rounds, pref.replay_decay).items()):
                got = pairs if past == r else read_pairs(out / f"round-{past}" / "pairs.jsonl")
                pool += got
                weights += [w] * len(got)
            reward = sum(ro.metrics.get("reward/turn0", 0.0) for ro in rollouts) / len(rollouts)
            trainer.state.counters["completions"] += sum(ro.num_completions for ro in rollouts)
            data = text_pairs_to_ids(trainer.agents, pool) if pool else []
            for _ in range(pref.steps_per_round):
                metrics = dpo_step(trainer, data, torch.tensor(weights)) if pool else {}
                trainer.state.step += 1
                metrics.update({"round": r, "pref/pairs": float(len(pairs)), "pref/pool": float(len(pool)),
                                "reward/mean": reward})
                metrics.update({f"count/{k}": v for k, v in trainer.state.counters.items()})
                trainer.history.append(metrics)
                logger.log(trainer.state.step, metrics)
            path = trainer.save_checkpoint()
            if dist.is_main():
                progress.write_text(json.dumps({"rounds_done": r + 1, "checkpoint": str(path)}))
    finally:
        logger.close()
    return trainer.history


def run_offline(trainer) -> list[dict]:
    """Offline MADPO (``madpo_offline``): DPO on the pairs of ``train.preference.pairs_in`` (JSONL, the format
    ``pairs_out`` and the rounds write), ``batch_size`` pairs per step, reshuffled each epoch; no sampling."""
    cfg, pref = trainer.config, trainer.config.preference
    if not pref.pairs_in:
        raise ConfigError("train.preference.pairs_in: madpo_offline trains on a pairs JSONL file; name it")
    path = Path(pref.pairs_in)
    if not path.exists():
        raise ConfigError(f"train.preference.pairs_in: {path} does not exist")
    pairs = read_pairs(path)
    if not pairs:
        raise ConfigError(f"train.preference.pairs_in: {path} holds no pairs")
    per_epoch = -(-len(pairs) // cfg.batch_size)
    total = cfg.max_steps or per_epoch * cfg.epochs
    logger = MetricsLogger(cfg.output_dir, cfg.report_to, enabled=dist.is_main())
    try:
        while trainer.state.step < total:
            epoch, b = divmod(trainer.state.step, per_epoch)
            g = torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)
            order = torch.randperm(len(pairs), generator=g).tolist() if cfg.shuffle else list(range(len(pairs)))
            batch = [pairs[i] for i in order[b * cfg.batch_size:(b + 1) * cfg.batch_size]]
            try:
                data = text_pairs_to_ids(trainer.agents, batch)
            except ValueError as e:
                raise ConfigError(f"train.preference.pairs_in ({path}): {e}") from e
            metrics = dpo_step(trainer, data, torch.ones(len(batch)))
            trainer.state.step += 1
            metrics.update({"pref/pairs": float(len(batch)), "epoch": epoch})
            trainer.history.append(metrics)
            logger.log(trainer.state.step, metrics)
        if cfg.output_dir:
            trainer.save_checkpoint()
    finally:
        logger.close()
    return trainer.history
