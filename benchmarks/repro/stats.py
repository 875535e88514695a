"""The grid's statistics (issue 45): paired differences on a post x seed table, their standard error from a crossed
random-effects model, Student-t intervals and one-sided tests, Holm's correction, and the smallest detectable
difference. Pure functions of numbers; the hand-worked cases are in tests/e2e/test_reproduce_stats.py.

The model. A comparison's table holds one number per (seed s, post p): condition A's score minus condition B's,
each the mean over the post's sampled completions. Posts are grouped in folds (grid v2: a fold's posts share one
trained run per seed; one fold holding every post when there are none):

    d[s, p] = mu + a[p] + b[s] + c[s, fold(p)] + e[s, p]

with independent zero-mean effects of post (a), seed (b), run (c: one training run = one seed x fold) and residual
(e). The mean over the S x P table has variance ``va/P + vb/S + vc/(S F) + ve/(S P)``. With the balanced table's mean
squares over seeds (MS_S), posts within folds (MS_P) and the residual post x seed interaction within folds (MS_E),
``E[MS_S] = ve + n vc + P vb`` (n posts per fold), ``E[MS_P] = ve + S va`` and ``E[MS_E] = ve``, so

    Var(mean) = (max(MS_S - MS_E, 0) + max(MS_P - MS_E, 0) + MS_E) / (S P)

(a component estimated below zero is taken as zero), with Satterthwaite's degrees of freedom for that combination of
mean squares. One seed leaves the seed and run terms unestimated: the standard error is then over posts only, and
the result says so (``seed_term`` False).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


# ---------------------------------------------------------------- Student's t
def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz evaluation)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom (``df`` inf: the normal)."""
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2.0))
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`t_cdf`)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"t_quantile: q must be in (0, 1), got {q}")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------- the crossed model
@dataclass
class Crossed:
    """The mean of a post x seed table with its standard error (the module's model)."""

    mean: float
    se: float
    df: float
    seeds: int
    posts: int
    folds: int
    seed_term: bool
    """False with one seed: the seed and run terms are not estimated (the s.e. is over posts only)."""
    ms: dict


def crossed_mean(table: Mapping[tuple[int, str], float], fold_of: Mapping[str, int] | None = None) -> Crossed:
    """Mean and standard error of a complete ``{(seed, post): value}`` table under the module's model.

    ``fold_of``: post -> fold (None: one fold). Every seed must hold every post and every fold the same number of
    posts (a balanced table); otherwise ValueError names what is missing.
    """
    seeds = sorted({s for s, _ in table})
    posts = sorted({p for _, p in table})
    missing = [(s, p) for s in seeds for p in posts if (s, p) not in table]
    if missing:
        raise ValueError(f"crossed_mean: {len(missing)} (seed, post) cells missing, e.g. {missing[0]}")
    fold_of = {p: (fold_of or {}).get(p, 0) for p in posts}
    folds = sorted(set(fold_of.values()))
    sizes = {f: sum(1 for p in posts if fold_of[p] == f) for f in folds}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"crossed_mean: folds of unequal size {sizes}")
    S, P, F, n = len(seeds), len(posts), len(folds), sizes[folds[0]]
    d = {(s, p): float(table[(s, p)]) for s in seeds for p in posts}
    grand = sum(d.values()) / (S * P)
    seed_m = {s: sum(d[(s, p)] for p in posts) / P for s in seeds}
    post_m = {p: sum(d[(s, p)] for s in seeds) / S for p in posts}
    fold_m = {f: sum(post_m[p] for p in posts if fold_of[p] == f) / n for f in folds}
    cell_m = {(s, f): sum(d[(s, p)] for p in posts if fold_of[p] == f) / n for s in seeds for f in folds}
    df_p = P - F
    ms_p = S * sum((post_m[p] - fold_m[fold_of[p]]) ** 2 for p in posts) / df_p if df_p else 0.0
    if S == 1:
        # posts only: the mean over posts within folds, its variance from the posts' spread
        var = ms_p / (S * P)
        return Crossed(grand, math.sqrt(var), float(df_p), S, P, F, False, {"posts": ms_p})
    ms_s = P * sum((m - grand) ** 2 for m in seed_m.values()) / (S - 1)
    df_e = (S - 1) * (P - F)
    ss_e = sum((d[(s, p)] - cell_m[(s, fold_of[p])] - post_m[p] + fold_m[fold_of[p]]) ** 2
               for s in seeds for p in posts)
    ms_e = ss_e / df_e if df_e else 0.0
    # Var * S P = max(MS_S - MS_E, 0) + max(MS_P - MS_E, 0) + MS_E, as a combination sum(coef * MS) for Satterthwaite
    terms = [(1.0, ms_e, df_e)]
    for ms, df in ((ms_s, S - 1), (ms_p, df_p)):
        if ms > ms_e and df:
            terms += [(1.0, ms, df), (-1.0, ms_e, df_e)]
    total = sum(c * m for c, m, _ in terms)
    by_ms: dict[tuple[float, float], float] = {}
    for c, m, df in terms:  # MS_E may enter with several coefficients: combine them before squaring
        by_ms[(m, df)] = by_ms.get((m, df), 0.0) + c
    denom = sum((c * m) ** 2 / df for (m, df), c in by_ms.items() if df and c)
    dof = total ** 2 / denom if denom > 0 else math.inf
    return Crossed(grand, math.sqrt(max(total, 0.0) / (S * P)), dof, S, P, F, True,
                   {"seeds": ms_s, "posts": ms_p, "residual": ms_e})


# ---------------------------------------------------------------- tests and corrections
def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    ``holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]``: sorted 0.01, 0.03, 0.04 times 3, 2, 1 gives 0.03, 0.06,
    0.04, made non-decreasing."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


@dataclass
class Comparison:
    """A paired difference (A - B) with its interval and the one-sided p-value for A > B (the paper's direction)."""

    diff: float
    se: float
    df: float
    lo: float
    hi: float
    p: float
    cells: int
    seeds: int
    seed_term: bool


def compare(a: Mapping[tuple[int, str], float], b: Mapping[tuple[int, str], float],
            fold_of: Mapping[str, int] | None = None, level: float = 0.95) -> Comparison:
    """A - B paired by (seed, post) over the cells both hold (they must form a complete table)."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("compare: no (seed, post) cell in both tables")
    c = crossed_mean({k: a[k] - b[k] for k in common}, fold_of)
    if c.se > 0:
        q = t_quantile(0.5 + level / 2.0, c.df)
        p = 1.0 - t_cdf(c.mean / c.se, c.df)
    else:
        q, p = 0.0, (0.0 if c.mean > 0 else 1.0)
    return Comparison(c.mean, c.se, c.df, c.mean - q * c.se, c.mean + q * c.se, p, len(common), c.seeds,
                      c.seed_term)


def verdict(c: Comparison, p_holm: float, minimum: float, alpha: float = 0.05) -> str:
    """``holds`` only when the Holm-adjusted one-sided p is below ``alpha``, the interval excludes 0 and the
    difference is at least ``minimum`` (stated before the rows came in); ``reversed`` when the interval lies below
    0 and the difference is at most ``-minimum``; else ``not resolved`` with the first reason."""
    if c.lo > 0 and c.diff >= minimum and p_holm < alpha:
        return "holds"
    if c.hi < 0 and c.diff <= -minimum:
        return "reversed"
    if c.lo <= 0 <= c.hi:
        return "not resolved (interval includes 0)"
    if abs(c.diff) < minimum:
        return f"not resolved (below the minimum {minimum:g})"
    return f"not resolved (Holm p {p_holm:.3f})"


def smallest_detectable(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The difference a one-sided level-``alpha`` t-test with this standard error detects with probability
    ``power``: ``(t_{1-alpha} + t_{power}) * se`` (the usual normal-shift approximation with t quantiles)."""
    return (t_quantile(1.0 - alpha, df) + t_quantile(power, df)) * se
