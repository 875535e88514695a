"""Settings of the preference algorithms (``train.preference``), one docstring line per field."""
from __future__ import annotations

from dataclasses import dataclass

from ..config_io import ConfigError
from .pairs import SELECTIONS

REPLAY = ("none", "last_k", "all", "decay")


@dataclass
class PreferenceSettings:
    beta: float = 0.1
    """DPO beta: the inverse temperature of the joint log-ratio (larger = stay closer to the reference)."""
    pair_selection: str = "reward_gap"
    """reward_gap (largest return gap first) | all (every positive-gap pair) | random."""
    pairs_per_item: int | None = 1
    """Pairs kept per tree node (None = all; must be None with pair_selection=all)."""
    reference_free: bool = False
    """Drop the reference log-probs from the DPO margin (no reference model is built)."""
    pairs_out: str | None = None
    """Append every step's pairs (texts, returns) to this JSONL file (None = keep none)."""
    pairs_in: str | None = None
    """madpo_offline: the pairs JSONL file to train on ({"prompts": [N], "chosen": [N], "rejected": [N]} per line)."""
    rounds: int = 2
    """madpo_iter: rounds of (sample the current policy, build pairs, DPO on them)."""
    round_batches: int = 1
    """madpo_iter: rollout batches (train.batch_size items each) sampled per round."""
    steps_per_round: int = 1
    """madpo_iter: DPO optimizer steps per round, each over the round's whole pair pool."""
    replay: str = "none"
    """madpo_iter: earlier rounds' pairs in the pool: none | last_k | all | decay (weight replay_decay^age)."""
    replay_rounds: int = 1
    """madpo_iter: k of replay=last_k."""
    replay_decay: float = 0.5
    """madpo_iter: weight factor per round of age under replay=decay."""
    reference: str = "current"
    """madpo_iter: DPO reference (the comparator): current (frozen copy of the policy at each round start) | initial."""

    def validate(self) -> None:
        if self.pair_selection not in SELECTIONS:
            raise ConfigError(f"train.preference.pair_selection: must be one of {list(SELECTIONS)}, "
                              f"got {self.pair_selection!r}")
        if self.pair_selection == "all" and self.pairs_per_item is not None:
            raise ConfigError("train.preference.pairs_per_item: must be null with pair_selection=all "
                              "(all keeps every positive-gap pair)")
        if self.pairs_per_item is not None and self.pairs_per_item < 1:
            raise ConfigError(f"train.preference.pairs_per_item: must be >= 1 or null, got {self.pairs_per_item}")
        if self.replay not in REPLAY:
            raise ConfigError(f"train.preference.replay: must be one of {list(REPLAY)}, got {self.replay!r}")
        if self.reference not in ("current", "initial"):
            raise ConfigError(f"train.preference.reference: must be current or initial, got {self.reference!r}")
        for key in ("rounds", "round_batches", "steps_per_round", "replay_rounds"):
            if getattr(self, key) < 1:
                raise ConfigError(f"train.preference.{key}: must be >= 1, got {getattr(self, key)}")
        if not 0 < self.replay_decay <= 1:
            raise ConfigError(f"train.preference.replay_decay: must be in (0, 1], got {self.replay_decay}")
        if not self.beta > 0:
            raise ConfigError(f"train.preference.beta: must be > 0, got {self.beta}")
