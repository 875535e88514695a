"""Settings of the preference algorithms (``train.preference``), one docstring line per field."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..core.config_io import ConfigError, Moved, aliased
from .marlhf import RewardModelSettings
from .pairs import SELECTIONS

REPLAY = ("none", "last_k", "all", "decay", "decay_sample")
COMPARATORS = ("none", "current", "checkpoint", "model", "helper")
REFITS = ("fresh", "continue")


@dataclass
class PairSettings:
    """``train.preference.pairs``: which (chosen, rejected) joint pairs a step or round keeps, and the pair files."""

    pair_selection: str = "reward_gap"
    """reward_gap (largest return gap first) | all (every positive-gap pair) | random."""
    pairs_per_item: int | None = 1
    """Pairs kept per tree node (None = all; must be None with pair_selection=all)."""
    pairs_out: str | None = None
    """Append every step's pairs (texts, returns) to this JSONL file (None = keep none)."""
    pairs_in: str | None = None
    """madpo_offline: the pairs JSONL file to train on ({"prompts": [N], "chosen": [N], "rejected": [N]} per line)."""


@dataclass
class DPOSettings:
    """``train.preference.dpo``: the joint DPO loss."""

    beta: float = 0.1
    """DPO beta: the inverse temperature of the joint log-ratio (larger = stay closer to the reference)."""
    reference_free: bool = False
    """Drop the reference log-probs from the DPO margin (no reference model is built)."""


@dataclass
class IterativeSettings:
    """``train.preference.iterative``: the rounds of madpo_iter and marlhf_iter: schedule, replay, reference
    refresh, comparator, reward model."""

    rounds: int = 2
    """madpo_iter, marlhf_iter: rounds of (sample the current policy, build pairs, train on them)."""
    round_batches: int = 1
    """madpo_iter, marlhf_iter: rollout batches (train.run.batch_size items each) sampled per round for its pairs."""
    steps_per_round: int = 1
    """Training steps per round: madpo_iter DPO steps on the whole pool; marlhf_iter RL steps on the RM's score."""
    replay: str = "none"
    """madpo_iter, marlhf_iter: earlier rounds' pairs: none | last_k | all | decay (weight replay_decay^age) |
    decay_sample (CoMLRL's lambda_decay: replay_sample_size pairs drawn, round r with p ~ replay_decay^age)."""
    replay_rounds: int = 1
    """k of replay=last_k."""
    replay_decay: float = 0.5
    """Factor per round of age: decay (a pair's weight, in (0, 1]); decay_sample (CoMLRL's lambda, in [0, 1])."""
    replay_sample_size: int | None = None
    """replay=decay_sample: pairs drawn per round (None: as many as the round made, else the newest that made any)."""
    reference: str = "current"
    """madpo_iter: DPO reference: current (frozen copy of the policy at each round start) | initial."""
    comparator: str = "none"
    """Iterative rounds: who writes the other side of each pair: none (another of the policy's own candidates) |
    current (a second sample of the policy as it is at the round's start) | checkpoint | model | helper (a helper
    model of helpers:, local or a hosted endpoint, writes every agent's side; docs/helpers.md)."""
    comparator_rounds_back: int = 1
    """comparator=checkpoint: the policy as it was this many rounds earlier (the starting policy before that)."""
    comparator_path: str | None = None
    """comparator=checkpoint: a fixed checkpoint or final/ folder (agent<i>/ inside) instead of an earlier round."""
    comparator_model: str | None = None
    """comparator=model: hub id, local model folder or "tiny" for every agent (each keeps its generation settings)."""
    comparator_helper: str | None = None
    """comparator=helper: the name of the helper (helpers.<name>: a local model or a hosted endpoint) that writes
    every agent's side of the round's pairs."""
    rl_algorithm: str = "magrpo"
    """marlhf_iter: the on-policy algorithm run on the reward model's score (magrpo, marloo, maremax, iac, maac...)."""
    reward_model: RewardModelSettings | None = None
    """marlhf_iter: the joint reward model fitted each round on the pool (its pairs key stays null)."""
    reward_model_refit: str = "fresh"
    """marlhf_iter: fresh (a new reward model each round) | continue (go on training last round's)."""


@aliased
@dataclass
class PreferenceSettings:
    """``train.preference``: pairs, the DPO loss, and the rounds of the iterative algorithms. The keys written
    flat before the sections (``beta`` for ``dpo.beta``) are deprecated names of their section's keys until
    comarl 0.2, in YAML, overrides, keyword arguments and attributes."""

    pairs: PairSettings = field(default_factory=PairSettings)
    """Which pairs are kept, and the pair files."""
    dpo: DPOSettings = field(default_factory=DPOSettings)
    """The joint DPO loss."""
    iterative: IterativeSettings = field(default_factory=IterativeSettings)
    """Rounds of madpo_iter and marlhf_iter."""

    ALIASES: ClassVar[dict[str, str]] = {}
    """Old key -> its path (filled by ``aliased`` from the ``Moved`` names below)."""

    # The keys written flat before the sections, deprecated until comarl 0.2: each reads and sets its section's
    # key, with a warning.
    pair_selection = Moved[str]("pairs.pair_selection")
    pairs_per_item = Moved[int | None]("pairs.pairs_per_item")
    pairs_out = Moved[str | None]("pairs.pairs_out")
    pairs_in = Moved[str | None]("pairs.pairs_in")
    beta = Moved[float]("dpo.beta")
    reference_free = Moved[bool]("dpo.reference_free")
    rounds = Moved[int]("iterative.rounds")
    round_batches = Moved[int]("iterative.round_batches")
    steps_per_round = Moved[int]("iterative.steps_per_round")
    replay = Moved[str]("iterative.replay")
    replay_rounds = Moved[int]("iterative.replay_rounds")
    replay_decay = Moved[float]("iterative.replay_decay")
    replay_sample_size = Moved[int | None]("iterative.replay_sample_size")
    reference = Moved[str]("iterative.reference")
    comparator = Moved[str]("iterative.comparator")
    comparator_rounds_back = Moved[int]("iterative.comparator_rounds_back")
    comparator_path = Moved[str | None]("iterative.comparator_path")
    comparator_model = Moved[str | None]("iterative.comparator_model")
    rl_algorithm = Moved[str]("iterative.rl_algorithm")
    reward_model = Moved[RewardModelSettings | None]("iterative.reward_model")
    reward_model_refit = Moved[str]("iterative.reward_model_refit")

    def validate(self) -> None:
        p, it = self.pairs, self.iterative
        if p.pair_selection not in SELECTIONS:
            raise ConfigError(f"train.preference.pairs.pair_selection: must be one of {list(SELECTIONS)}, "
                              f"got {p.pair_selection!r}")
        if p.pair_selection == "all" and p.pairs_per_item is not None:
            raise ConfigError("train.preference.pairs.pairs_per_item: must be null with pair_selection=all "
                              "(all keeps every positive-gap pair)")
        if p.pairs_per_item is not None and p.pairs_per_item < 1:
            raise ConfigError(f"train.preference.pairs.pairs_per_item: must be >= 1 or null, got {p.pairs_per_item}")
        if it.replay not in REPLAY:
            raise ConfigError(f"train.preference.iterative.replay: must be one of {list(REPLAY)}, got {it.replay!r}")
        if it.reference not in ("current", "initial"):
            raise ConfigError(f"train.preference.iterative.reference: must be current or initial, got {it.reference!r}")
        for key in ("rounds", "round_batches", "steps_per_round", "replay_rounds"):
            if getattr(it, key) < 1:
                raise ConfigError(f"train.preference.{key}: must be >= 1, got {getattr(it, key)}")
        if it.replay == "decay_sample" and not 0 <= it.replay_decay <= 1:
            raise ConfigError(f"train.preference.iterative.replay_decay: must be in [0, 1] with replay=decay_sample, "
                              f"got {it.replay_decay}")
        if it.replay != "decay_sample" and not 0 < it.replay_decay <= 1:
            raise ConfigError(f"train.preference.iterative.replay_decay: must be in (0, 1], got {it.replay_decay}")
        if it.replay_sample_size is not None and (it.replay != "decay_sample" or it.replay_sample_size < 1):
            raise ConfigError(f"train.preference.iterative.replay_sample_size: must be null, or >= 1 with "
                              f"replay=decay_sample (replay is {it.replay!r}), got {it.replay_sample_size}")
        if not self.dpo.beta > 0:
            raise ConfigError(f"train.preference.dpo.beta: must be > 0, got {self.dpo.beta}")
        if it.comparator not in COMPARATORS:
            raise ConfigError(f"train.preference.iterative.comparator: must be one of {list(COMPARATORS)}, "
                              f"got {it.comparator!r}")
        if it.comparator_rounds_back < 1:
            raise ConfigError("train.preference.iterative.comparator_rounds_back: must be >= 1, "
                              f"got {it.comparator_rounds_back}")
        if it.comparator == "model" and not it.comparator_model:
            raise ConfigError("train.preference.iterative.comparator_model: comparator=model needs a model "
                              "(hub id, local folder or tiny)")
        if it.comparator_model and it.comparator != "model":
            raise ConfigError(f"train.preference.iterative.comparator_model: only read with comparator=model "
                              f"(comparator is {it.comparator!r})")
        if it.comparator == "helper" and not it.comparator_helper:
            raise ConfigError("train.preference.iterative.comparator_helper: comparator=helper needs the name of a "
                              "helper (helpers.<name>; docs/helpers.md)")
        if it.comparator_helper and it.comparator != "helper":
            raise ConfigError(f"train.preference.iterative.comparator_helper: only read with comparator=helper "
                              f"(comparator is {it.comparator!r})")
        if it.comparator_path and it.comparator != "checkpoint":
            raise ConfigError(f"train.preference.iterative.comparator_path: only read with comparator=checkpoint "
                              f"(comparator is {it.comparator!r})")
        if it.reward_model_refit not in REFITS:
            raise ConfigError(f"train.preference.iterative.reward_model_refit: must be one of {list(REFITS)}, "
                              f"got {it.reward_model_refit!r}")
        if it.reward_model is not None:
            it.reward_model.validate("train.preference.iterative.reward_model", needs_pairs=False)
