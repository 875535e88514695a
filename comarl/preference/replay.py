"""The pool an iterative round trains on: its own pairs and earlier rounds' (``train.preference.iterative.replay``).

Two rules for the older rounds:

- weighted (``last_k``, ``all``, ``decay``): every pair of every replayed round is in the pool, with the
  weight ``pairs.replay_weights`` gives its round (``decay``: ``replay_decay ** (current - r)``), so a round's
  share of the loss grows with its number of pairs;
- sampled (``decay_sample``, CoMLRL 1.4.3's ``lambda_decay``): a fixed number of pairs is drawn, each from
  round r with probability proportional to ``(1 - lambda) * lambda ** age`` over the rounds that hold pairs,
  whatever their sizes; every drawn pair weighs 1.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Callable

from .pairs import replay_weights

if TYPE_CHECKING:
    from .settings import IterativeSettings


def sampled_round_probabilities(sizes: dict[int, int], decay: float) -> dict[int, float]:
    """``decay_sample``: the probability that one drawn pair comes from round r.

    Only rounds holding pairs take part (CoMLRL keeps no shard for a round without pairs), and a round's
    age counts those rounds only: 0 for the newest, 1 for the one before it, ... Then::

        p_r = (1 - decay) decay^age_r / sum_r' (1 - decay) decay^age_r'  =  decay^age_r / sum_r' decay^age_r'

    ``decay`` = 1: uniform over the rounds (CoMLRL's ``all_history`` draw); 0: the newest round only
    (``0 ** 0 = 1``). Rounds without pairs are left out of the result.
    Args: ``sizes``: round -> its number of pairs; ``decay`` in [0, 1].
    """
    held = sorted((r for r, n in sizes.items() if n > 0), reverse=True)  # newest first
    raw = {r: decay ** age for age, r in enumerate(held)}
    total = sum(raw.values())
    return {r: w / total for r, w in sorted(raw.items())}


def replay_sample_size(current: int, sizes: dict[int, int], setting: int | None) -> int:
    """How many pairs ``decay_sample`` draws: ``setting`` if given, else as many as round ``current`` made,
    else (it made none) as many as the newest round that made any (0 when none did), as CoMLRL."""
    if setting is not None:
        return int(setting)
    for r in sorted(sizes, reverse=True):
        if r <= current and sizes[r] > 0:
            return sizes[r]
    return 0


def sample_replay(pairs_by_round: dict[int, list], size: int, decay: float, rng: random.Random) -> list:
    """``size`` pairs drawn by :func:`sampled_round_probabilities`, as CoMLRL draws them.

    Each of the ``size`` draws picks a round; a round picked c times gives c of its n pairs: without
    replacement when c <= n, else every pair once per whole pass (shuffled) and the rest without replacement.
    The result is shuffled. ``rng`` makes it repeatable (a resumed round draws the same pool).
    """
    probs = sampled_round_probabilities({r: len(p) for r, p in pairs_by_round.items()}, decay)
    if size <= 0 or not probs:
        return []
    rounds = list(probs)
    counts = dict.fromkeys(rounds, 0)
    for r in rng.choices(rounds, weights=[probs[r] for r in rounds], k=size):
        counts[r] += 1
    out: list = []
    for r in rounds:
        pairs, c = list(pairs_by_round[r]), counts[r]
        while c >= len(pairs) > 0:
            out += rng.sample(pairs, k=len(pairs))
            c -= len(pairs)
        out += rng.sample(pairs, k=c)
    rng.shuffle(out)
    return out


def replay_pool(current: int, pairs_of: Callable[[int], list], settings: IterativeSettings,
                seed: int) -> tuple[list, list[float]]:
    """Round ``current``'s pool and each pair's weight under ``settings`` (``train.preference.iterative``).

    ``pairs_of(r)``: round r's pairs (r <= current). ``decay_sample`` draws with a stream seeded by
    (``seed``, ``current``), so every rank and a resumed run draw the same pool.
    """
    if settings.replay == "decay_sample":
        by_round = {r: pairs_of(r) for r in range(current + 1)}
        size = replay_sample_size(current, {r: len(p) for r, p in by_round.items()}, settings.replay_sample_size)
        pool = sample_replay(by_round, size, settings.replay_decay, random.Random(seed * 1_000_003 + current))
        return pool, [1.0] * len(pool)
    pool, weights = [], []
    for past, w in sorted(replay_weights(current, settings.replay, settings.replay_rounds,
                                         settings.replay_decay).items()):
        got = pairs_of(past)
        pool += got
        weights += [w] * len(got)
    return pool, weights
