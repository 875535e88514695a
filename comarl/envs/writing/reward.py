"""Level-based writing reward: pure functions, one per level, and their sum.

Notation for one joint action with parts ``y_1 .. y_P`` (P >= 2; the responses
of the N agents, or the marker-split parts of one agent's response):

* ``L_i``  = :func:`words.length_words` of ``y_i`` (whitespace words),
* ``U_i``  = number of distinct content words of ``y_i`` (stop words removed),
* ``C_i``  = set of content words of ``y_i``,
* pairs ``p = (i, i+1)`` for ``i = 1 .. P-1`` (one pair when P = 2).

Levels (each gate must pass to go on; the reward is the sum of what was earned):

0. degenerate: any part empty, blank, or one repeated token -> reward 0, stop.
1. window:  every ``min_words <= L_i <= max_words``  -> ``+ w1``, else stop.
2. length ratio: ``s2 = mean_p band(L_{i+1} / L_i; length_ratio)``; if any pair
   scores 0 stop, else ``+ w2 * s2``.
3. unique ratio: ``s3 = mean_p band(U_{i+1} / U_i; unique_ratio)`` (a pair with
   ``U_i = 0`` scores 0); if any pair scores 0 stop, else ``+ w3 * s3``.
4. style: ``t = min(1, K / transition_target)`` with K the number of distinct
   transition categories in all parts together, ``o = mean_p band(J(C_i,
   C_{i+1}); overlap)`` with J the Jaccard index; ``+ wt * t + wo * o``.

``max_reward = w1 + w2 + w3 + wt + wo`` (3.0 with the defaults); the minimum is 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

from . import words


@dataclass(frozen=True)
class Band:
    """A target band with linear ramps: 1 on ``[low, high]``, 0 at/below
    ``zero_below`` and at/above ``zero_above``, linear in between. In config
    files: ``{low, high, zero_below, zero_above}`` (missing ramps = a step) or
    the list ``[zero_below, low, high, zero_above]`` (ascending).

    ``zero_above`` may be ``inf`` (then every ``x >= low`` scores 1).
    Requires ``zero_below <= low <= high <= zero_above``.
    """

    low: float
    high: float
    zero_below: float
    zero_above: float


def band_score(x: float, band: Band) -> float:
    """Score of ``x`` in ``band`` (see :class:`Band`), in [0, 1].

    Example: band (2, 3, 1, 5): x=1.5 -> 0.5, x=2.5 -> 1, x=4 -> 0.5, x=5 -> 0.
    """
    if band.low <= x <= band.high:
        return 1.0
    if x < band.low:
        if x <= band.zero_below:
            return 0.0
        return (x - band.zero_below) / (band.low - band.zero_below)
    if math.isinf(band.zero_above):
        return 1.0
    if x >= band.zero_above:
        return 0.0
    return (band.zero_above - x) / (band.zero_above - band.high)


@dataclass
class RewardConfig:
    """Every number and word list of the writing reward (``env.args.reward``)."""

    min_words: int = 8                    # level 1: fewest whitespace words per part
    max_words: int = 256                  # level 1: most whitespace words per part
    length_ratio: Band = Band(2.0, 3.0, 1.2, 5.0)   # level 2: band on L_{i+1} / L_i
    unique_ratio: Band = Band(1.5, 3.0, 1.0, 5.0)   # level 3: band on U_{i+1} / U_i
    overlap: Band = Band(0.1, 0.4, 0.0, 0.7)        # level 4: band on Jaccard(C_i, C_{i+1})
    transition_target: int = 3            # level 4: categories needed for full transition score
    weight_level1: float = 0.5            # w1
    weight_level2: float = 1.0            # w2
    weight_level3: float = 0.5            # w3
    weight_transitions: float = 0.4       # wt
    weight_overlap: float = 0.6           # wo
    stop_words: tuple[str, ...] = words.DEFAULT_STOP_WORDS
    transitions: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(words.DEFAULT_TRANSITIONS))


def max_reward(cfg: RewardConfig) -> float:
    """Largest reachable reward: ``w1 + w2 + w3 + wt + wo``."""
    return cfg.weight_level1 + cfg.weight_level2 + cfg.weight_level3 + cfg.weight_transitions + cfg.weight_overlap


def pair_ratios(values: Sequence[float]) -> list[float | None]:
    """``[v[i+1] / v[i]]`` for consecutive pairs; None where ``v[i] == 0``.

    ``[10, 25, 50] -> [2.5, 2.0]``.
    """
    return [b / a if a > 0 else None for a, b in zip(values[:-1], values[1:])]


def level1_window(lengths: Sequence[int], min_words: int, max_words: int) -> bool:
    """Level 1 gate: every part has ``min_words <= L_i <= max_words``."""
    return all(min_words <= n <= max_words for n in lengths)


def pair_band_level(values: Sequence[float], band: Band) -> float:
    """Levels 2 and 3: mean band score of the consecutive-pair ratios of
    ``values``, or 0 when any pair scores 0 (or has a zero denominator).

    ``values=[10, 25], band (2, 3, 1, 5) -> 1.0``; ``[10, 40] -> 0.5``.
    """
    scores = [band_score(r, band) if r is not None else 0.0 for r in pair_ratios(values)]
    if not scores or min(scores) <= 0.0:
        return 0.0
    return sum(scores) / len(scores)


def level4_style(num_categories: int, overlaps: Sequence[float], cfg: RewardConfig) -> tuple[float, float]:
    """Level 4 components ``(t, o)``: ``t = min(1, K / transition_target)``,
    ``o = mean_p band(J_p; overlap)``.

    ``K=2, target 3, overlaps [0.25], band (0.1, 0.4, 0, 0.7) -> (2/3, 1.0)``.
    """
    t = min(1.0, num_categories / cfg.transition_target)
    o = sum(band_score(j, cfg.overlap) for j in overlaps) / len(overlaps) if overlaps else 0.0
    return t, o


def score_parts(parts: Sequence[str], cfg: RewardConfig) -> tuple[float, dict[str, float]]:
    """The reward of one joint action and its metrics.

    Args:
        parts: P >= 2 texts in role order.
        cfg: the reward configuration.

    Returns:
        ``(reward, metrics)``; metrics (all floats, same keys every call):
        ``level`` (levels passed, 0-4), ``level1``..``level4`` (0/1 each; level 4
        passes when its style reward is > 0), ``degenerate`` (0/1),
        ``length_ratio``, ``unique_ratio``, ``overlap`` (means over pairs; 0.0
        where a ratio is undefined), ``transition_categories`` (K).
    """
    if len(parts) < 2:
        raise ValueError(f"the writing reward needs at least 2 parts, got {len(parts)}")
    stop = frozenset(cfg.stop_words)
    lengths = [words.length_words(p) for p in parts]
    content = [words.content_words(p, stop) for p in parts]
    uniques = [len(c) for c in content]
    overlaps = [words.jaccard(a, b) for a, b in zip(content[:-1], content[1:])]
    n_cat = len(words.transition_categories(" ".join(parts), cfg.transitions))

    def mean_defined(rs: list[float | None]) -> float:
        defined = [r for r in rs if r is not None]
        return sum(defined) / len(rs) if rs and len(defined) == len(rs) else 0.0

    metrics = {
        "level": 0.0, "level1": 0.0, "level2": 0.0, "level3": 0.0, "level4": 0.0, "degenerate": 0.0,
        "length_ratio": mean_defined(pair_ratios(lengths)),
        "unique_ratio": mean_defined(pair_ratios(uniques)),
        "overlap": sum(overlaps) / len(overlaps),
        "transition_categories": float(n_cat),
    }
    if any(words.is_degenerate(p) for p in parts):
        metrics["degenerate"] = 1.0
        return 0.0, metrics
    if not level1_window(lengths, cfg.min_words, cfg.max_words):
        return 0.0, metrics
    reward = cfg.weight_level1
    metrics.update(level=1.0, level1=1.0)
    s2 = pair_band_level(lengths, cfg.length_ratio)
    if s2 <= 0.0:
        return reward, metrics
    reward += cfg.weight_level2 * s2
    metrics.update(level=2.0, level2=1.0)
    s3 = pair_band_level(uniques, cfg.unique_ratio)
    if s3 <= 0.0:
        return reward, metrics
    reward += cfg.weight_level3 * s3
    metrics.update(level=3.0, level3=1.0)
    t, o = level4_style(n_cat, overlaps, cfg)
    style = cfg.weight_transitions * t + cfg.weight_overlap * o
    if style > 0.0:
        metrics.update(level=4.0, level4=1.0)
    return reward + style, metrics


# ---------------------------------------------------------------- config parsing

def _band_from(value: Any, key: str) -> Band:
    if isinstance(value, Band):
        band = value
    elif isinstance(value, Mapping):
        unknown = set(value) - {"low", "high", "zero_below", "zero_above"}
        if unknown:
            raise ValueError(f"{key}: unknown key(s) {sorted(unknown)}; a band has low, high, zero_below, zero_above")
        missing = {"low", "high"} - set(value)
        if missing:
            raise ValueError(f"{key}: missing {sorted(missing)}")
        try:
            low, high = float(value["low"]), float(value["high"])
            band = Band(low, high, float(value.get("zero_below", low)), float(value.get("zero_above", high)))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{key}: band values must be numbers ({e})") from None
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 4:
        try:
            zb, low, high, za = (float(v) for v in value)  # ascending: [zero_below, low, high, zero_above]
            band = Band(low, high, zb, za)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{key}: band values must be numbers ({e})") from None
    else:
        raise ValueError(f"{key}: a band is a mapping {{low, high, zero_below, zero_above}} or a list "
                         f"[zero_below, low, high, zero_above], got {value!r}")
    if any(math.isnan(v) for v in (band.low, band.high, band.zero_below, band.zero_above)):
        raise ValueError(f"{key}: band values must not be NaN")
    if band.low > band.high:
        raise ValueError(f"{key}: low {band.low} > high {band.high}")
    if band.zero_below > band.low:
        raise ValueError(f"{key}: zero_below {band.zero_below} > low {band.low}")
    if band.zero_above < band.high:
        raise ValueError(f"{key}: zero_above {band.zero_above} < high {band.high}")
    return band


def reward_config(overrides: Mapping[str, Any] | None, defaults: RewardConfig,
                  key: str = "env.args.reward") -> RewardConfig:
    """``defaults`` with ``overrides`` applied and checked.

    Raises:
        ValueError: naming ``key.<field>`` for an unknown field or a bad value.
    """
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{key}: expected a mapping of reward settings, got {type(overrides).__name__}")
    names = {f.name for f in fields(RewardConfig)}
    unknown = set(overrides) - names
    if unknown:
        raise ValueError(f"{key}: unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(names))}")
    values = {f.name: getattr(defaults, f.name) for f in fields(RewardConfig)}
    for name, value in overrides.items():
        k = f"{key}.{name}"
        if name in ("length_ratio", "unique_ratio", "overlap"):
            values[name] = _band_from(value, k)
        elif name in ("min_words", "max_words", "transition_target"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{k}: expected an integer >= 1, got {value!r}")
            values[name] = value
        elif name.startswith("weight_"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
                raise ValueError(f"{k}: expected a number >= 0, got {value!r}")
            values[name] = float(value)
        elif name == "stop_words":
            if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(w, str) for w in value):
                raise ValueError(f"{k}: expected a list of words")
            values[name] = tuple(w.lower() for w in value)
        elif name == "transitions":
            if not isinstance(value, Mapping) or not value or not all(
                    isinstance(v, Sequence) and not isinstance(v, str) and v and all(isinstance(w, str) for w in v)
                    for v in value.values()):
                raise ValueError(f"{k}: expected a non-empty mapping category -> list of words/phrases")
            values[name] = {str(c): tuple(v) for c, v in value.items()}
    if values["min_words"] > values["max_words"]:
        raise ValueError(f"{key}.min_words: {values['min_words']} > max_words {values['max_words']}")
    return RewardConfig(**values)
