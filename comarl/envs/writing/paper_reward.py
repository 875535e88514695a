"""The ``paper`` preset's writing reward: the MAGRPO paper's level reward, number for number.

Two parts ``y1`` (concise / background) and ``y2`` (detailed / method). The
levels, as the reference computes them (``docs/writing.md`` lists each quirk):

1. **Words**: ``min_words <= len(y.split()) <= max_words`` for both -> +0.5, else 0, stop.
2. **Length ratio in characters** ``len(y2) / len(y1)`` (whitespace and
   punctuation count): ``length_band`` score ``s`` -> ``+ 1.0 * s``; a ratio
   outside the outer edges stops (a ratio exactly on an outer edge scores 0
   and goes on).
3. **Unique words** ``u(y) = |set(re.findall(r"\\b\\w+\\b", y.lower()))|``, stop
   words *included*; ``u(y2) / u(y1)`` on ``unique_band`` -> ``+ 0.5 * s``;
   ``u(y1) = 0`` or outside the outer edges stops.
4. **Style**: ``0.4 * t + 0.6 * min(J, cap) / cap`` where ``t = 0.4 + 0.05 (n - 1)``
   (0 when n = 0, at most 1) for ``n`` transition categories with any phrase
   occurring as a *substring* of the lower-cased checked text (``y2`` for
   TL;DR, ``y1 + y2`` with no separator for arXiv), and ``J`` the Jaccard index
   of the two texts' word sets without stop words (1.0 when both are empty).

There is no degenerate-text check: ``"ok ok ok ok ok ok ok ok"`` passes level 1.
Maximum 3.0, minimum 0.0.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from .paper_words import PAPER_STOP_WORDS, PAPER_TRANSITIONS

_WORD = re.compile(r"\b\w+\b")

W_LEVEL1, W_LEVEL2, W_LEVEL3 = 0.5, 1.0, 0.5
W_TRANSITIONS, W_JACCARD = 0.4, 0.6
MAX_REWARD = W_LEVEL1 + W_LEVEL2 + W_LEVEL3 + W_TRANSITIONS + W_JACCARD


@dataclass(frozen=True)
class Ramp:
    """A score on ``x``: 1 on ``[low, high]``, linear to 0 at ``zero_below`` and
    ``zero_above``; ``x`` outside ``[zero_below, zero_above]`` is out (the level stops).

    ``zero_above = inf`` means "1 for every ``x >= low``".
    """

    zero_below: float
    low: float
    high: float
    zero_above: float


@dataclass(frozen=True)
class PaperRewardConfig:
    """The numbers that differ between the TL;DR and arXiv reference rewards."""

    min_words: int
    max_words: int
    length_band: Ramp
    unique_band: Ramp
    jaccard_cap: float
    transitions_in: str  # "second": y2 only (TL;DR); "joined": y1 + y2 (arXiv)


TLDR = PaperRewardConfig(8, 256, Ramp(1.1, 1.6, 3.2, 5.0), Ramp(1.3, 2.0, math.inf, math.inf), 0.03, "second")
ARXIV = PaperRewardConfig(128, 256, Ramp(0.8, 1.3, 1.6, 2.0), Ramp(0.5, 0.7, 1.3, 1.7), 0.23, "joined")


def ramp_score(x: float, r: Ramp) -> float | None:
    """Score of ``x`` on ``r`` in [0, 1], or None when ``x`` is outside ``[zero_below, zero_above]``.

    ``ramp_score(1.35, Ramp(1.1, 1.6, 3.2, 5.0)) == 0.5``; ``ramp_score(1.0, ...) is None``.
    """
    if r.low <= x <= r.high:
        return 1.0
    if r.zero_below <= x < r.low:
        return (x - r.zero_below) / (r.low - r.zero_below)
    if r.high < x <= r.zero_above:
        return 1.0 - (x - r.high) / (r.zero_above - r.high)
    return None


def whitespace_words(text: str) -> int:
    """``len(text.split())``."""
    return len(text.split())


def word_set(text: str, drop_stop_words: bool) -> set[str]:
    """Distinct lower-cased ``\\w+`` runs between word boundaries (``x_y`` and ``2024`` are words)."""
    found = _WORD.findall(text.lower())
    return {w for w in found if w not in PAPER_STOP_WORDS} if drop_stop_words else set(found)


def jaccard(a: str, b: str) -> float:
    """Jaccard index of the stop-word-free word sets; 1.0 when both are empty."""
    s1, s2 = word_set(a, True), word_set(b, True)
    if not s1 and not s2:
        return 1.0
    return len(s1 & s2) / len(s1 | s2)


def transition_categories(text: str) -> int:
    """Number of categories with a phrase occurring anywhere in ``text.lower()`` (substring match)."""
    low = text.lower()
    return sum(any(p in low for p in phrases) for phrases in PAPER_TRANSITIONS.values())


def transition_score(n: int) -> float:
    """``0.4 + 0.05 (n - 1)`` for ``n >= 1`` (at most 1.0), 0 for ``n = 0``."""
    if n <= 0:
        return 0.0
    return min(0.4 + min((n - 1) * 0.05, 0.6), 1.0)


def score_pair(y1: str, y2: str, cfg: PaperRewardConfig) -> tuple[float, dict[str, float]]:
    """The reference reward of one joint response and its metrics (see module docstring).

    Returns ``(reward, metrics)``; metric keys are the same for every input:
    ``level`` (0-4), ``level1``..``level4``, ``length_ratio`` (characters; 0 if
    ``y1`` is empty), ``unique_ratio``, ``overlap`` (raw Jaccard; 0 when level 4
    is not reached), ``transition_categories``.
    """
    m = {"level": 0.0, "level1": 0.0, "level2": 0.0, "level3": 0.0, "level4": 0.0,
         "length_ratio": 0.0, "unique_ratio": 0.0, "overlap": 0.0, "transition_categories": 0.0}
    if not all(cfg.min_words <= whitespace_words(y) <= cfg.max_words for y in (y1, y2)):
        return 0.0, m
    reward = W_LEVEL1
    m["level"] = m["level1"] = 1.0
    if not y1:  # unreachable after level 1 (min_words >= 1), kept for min_words = 0
        return reward, m
    m["length_ratio"] = ratio = len(y2) / len(y1)
    s2 = ramp_score(ratio, cfg.length_band)
    if s2 is None:
        return reward, m
    reward += W_LEVEL2 * s2
    m["level"], m["level2"] = 2.0, 1.0
    u1, u2 = len(word_set(y1, False)), len(word_set(y2, False))
    if u1 == 0:
        return reward, m
    m["unique_ratio"] = u2 / u1
    s3 = ramp_score(u2 / u1, cfg.unique_band)
    if s3 is None:
        return reward, m
    reward += W_LEVEL3 * s3
    m["level"], m["level3"] = 3.0, 1.0
    n = transition_categories(y2 if cfg.transitions_in == "second" else y1 + y2)
    j = jaccard(y1, y2)
    reward += W_TRANSITIONS * transition_score(n) + W_JACCARD * min(j, cfg.jaccard_cap) / cfg.jaccard_cap
    m["level"], m["level4"] = 4.0, 1.0
    m["overlap"], m["transition_categories"] = j, float(n)
    return reward, m


def score_parts(parts: Sequence[str], cfg: PaperRewardConfig) -> tuple[float, dict[str, float]]:
    """``score_pair`` for a two-part joint response (the reference tasks have exactly two agents)."""
    if len(parts) != 2:
        raise ValueError(f"the paper writing reward scores exactly 2 parts, got {len(parts)}")
    return score_pair(parts[0], parts[1], cfg)
