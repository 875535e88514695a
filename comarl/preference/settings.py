"""Settings of the preference algorithms (``train.preference``), one docstring line per field."""
from __future__ import annotations

from dataclasses import dataclass

from ..config_io import ConfigError
from .pairs import SELECTIONS


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

    def validate(self) -> None:
        if self.pair_selection not in SELECTIONS:
            raise ConfigError(f"train.preference.pair_selection: must be one of {list(SELECTIONS)}, "
                              f"got {self.pair_selection!r}")
        if self.pair_selection == "all" and self.pairs_per_item is not None:
            raise ConfigError("train.preference.pairs_per_item: must be null with pair_selection=all "
                              "(all keeps every positive-gap pair)")
        if self.pairs_per_item is not None and self.pairs_per_item < 1:
            raise ConfigError(f"train.preference.pairs_per_item: must be >= 1 or null, got {self.pairs_per_item}")
        if not self.beta > 0:
            raise ConfigError(f"train.preference.beta: must be > 0, got {self.beta}")
