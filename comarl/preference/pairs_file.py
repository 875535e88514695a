"""``madpo_offline``'s StepSource: global batches of a pairs JSONL file, and the file's reading and checks."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..compute import distributed as dist
from ..core.config_io import ConfigError
from ..core.steps import PairBatch
from ..data.paths import resolve_source
from ..sources import EpochCursor, Plain
from .rollout_pairs import check_text_pairs, text_pairs_to_ids

if TYPE_CHECKING:
    from ..core.seams import TeamView


def read_pairs(path: Path) -> list[dict]:
    """A pairs JSONL file (what ``pairs_out`` and the rounds write)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def load_pairs_file(path: str | None, key: str = "train.preference.pairs.pairs_in") -> list[dict]:
    """The pairs of ``path`` (a file, or ``fixture:NAME`` / ``package:MODULE/PATH``), checked before any model is
    built: named, present, not empty."""
    if not path:
        raise ConfigError(f"{key}: madpo_offline trains on a pairs JSONL file; name it")
    try:
        p = Path(resolve_source(path))
    except FileNotFoundError as e:
        raise ConfigError(f"{key}: {e}") from e
    if not p.exists():
        raise ConfigError(f"{key}: {p} does not exist")
    pairs = read_pairs(p)
    if not pairs:
        raise ConfigError(f"{key}: {p} holds no pairs")
    return pairs


class PairsFile(Plain):
    """Global batches of a pairs file (``madpo_offline``): its epochs, schedule and resume position count
    pairs, reshuffled each epoch; no sampling. Each rank takes its share of every batch."""

    def __init__(self, pairs: list[dict], path: str, env: Any, global_batch: int, seed: int, shuffle: bool,
                 epochs: int, max_steps: int = 0):
        self.pairs, self.path, self.env = pairs, path, env
        self.cursor = EpochCursor(len(pairs), global_batch, seed, shuffle)
        self.to_ids = text_pairs_to_ids  # (agents, pairs) -> [AgentPairs]; a test may watch it
        self.total_steps = max_steps or self.cursor.steps_per_epoch * epochs

    def next(self, step: int, team: "TeamView") -> PairBatch:
        batch = [self.pairs[i] for i in self.cursor.next_indices()]
        mine = dist.shard(batch)
        try:
            check_text_pairs(batch, len(team.agents))  # every rank checks the whole batch: all fail together
            agents = self.to_ids(team.agents, mine)
        except ValueError as e:
            raise ConfigError(f"train.preference.pairs.pairs_in ({self.path}): {e}") from e
        return PairBatch(agents, torch.ones(len(mine)), {"pref/pairs": float(len(batch))})
