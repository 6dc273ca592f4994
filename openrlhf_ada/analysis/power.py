"""What a paired comparison could have detected: the power of the two-sided paired t test, and the effect it finds
with a given power.

A "no difference shown" says little on its own: a design with few seeds, or a test at a small alpha (Holm's first
step over m tests runs at alpha / m), misses large effects as often as not. The honest statement is the effect the
design would have detected with 80% power. For n paired differences with standard deviation ``sd``, a true mean
difference ``effect`` gives the test statistic a noncentral t distribution with n - 1 degrees of freedom and
noncentrality ``effect x sqrt(n) / sd``; the test rejects when |T| exceeds t(1 - alpha / 2, n - 1).

The noncentral t tail is computed here without scipy, from its definition T = (Z + delta) / (S / sqrt(df)) with
Z ~ N(0, 1) and S ~ chi(df): P(T > c) = E_S[P(Z > c S / sqrt(df) - delta)], the expectation taken by the
trapezoid rule over S's density. With few pairs the observed sd is itself uncertain: `sd_interval` gives its 95%
interval from the chi-square distribution of (n - 1) s^2 / sigma^2, so a report can say what the design detects over
the sds the data allow, not only at the one it observed. Pure functions: no files.
"""

from __future__ import annotations

import math

import numpy as np

from openrlhf_ada.analysis.seed_stats import bisect_increasing, t_quantile

_QUADRATURE_POINTS = 20001


def _normal_sf(x: np.ndarray) -> np.ndarray:
    """P(Z > x) for a standard normal Z, elementwise."""
    return 0.5 * np.frompyfunc(math.erfc, 1, 1)(x / math.sqrt(2.0)).astype(float)


def noncentral_t_sf(c: float, df: float, delta: float) -> float:
    """P(T > c) for a noncentral t with `df` degrees of freedom and noncentrality `delta`."""
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    # S = sqrt(V) has the chi density s^(df - 1) exp(-s^2 / 2) / (2^(df/2 - 1) Gamma(df / 2)), finite at 0 for
    # df >= 1; beyond sqrt(df) + 12 its mass is below 1e-30.
    s = np.linspace(0.0, math.sqrt(df) + 12.0, _QUADRATURE_POINTS)
    k = df / 2.0
    positive = s > 0  # at s = 0, s^(df - 1) is 1 for df = 1 and 0 above
    log_power = np.where(positive, (df - 1.0) * np.log(np.where(positive, s, 1.0)), 0.0 if df == 1 else -np.inf)
    density = np.exp(log_power - s * s / 2.0 - (k - 1.0) * math.log(2.0) - math.lgamma(k))
    inner = _normal_sf(c * s / math.sqrt(df) - delta)
    return min(1.0, max(0.0, float(np.trapezoid(density * inner, s))))


def paired_t_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """The probability that the two-sided paired t test at level `alpha` rejects, with `n` pairs whose differences
    have mean `effect` and standard deviation `sd`."""
    if n < 2:
        raise ValueError(f"a paired t test needs at least 2 pairs, got {n}")
    if sd <= 0 or not 0 < alpha < 1:
        raise ValueError(f"need sd > 0 and 0 < alpha < 1, got sd={sd}, alpha={alpha}")
    df = n - 1
    c = t_quantile(1.0 - alpha / 2.0, df)
    delta = abs(effect) * math.sqrt(n) / sd
    return noncentral_t_sf(c, df, delta) + (1.0 - noncentral_t_sf(-c, df, delta))


def detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest mean difference that the two-sided paired t test at `alpha` with `n` pairs of standard deviation
    `sd` rejects with probability `power` (by bisection on `paired_t_power`)."""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if paired_t_power(0.0, sd, n, alpha) >= power:
        return 0.0
    return bisect_increasing(lambda effect: paired_t_power(effect, sd, n, alpha), power, 0.0, sd, rel_tol=1e-9,
                             steps=100)


def pairs_needed(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, most: int = 10000) -> int:
    """The fewest pairs with which the two-sided paired t test at `alpha` detects `effect` with `power`."""
    for n in range(2, most + 1):
        if paired_t_power(effect, sd, n, alpha) >= power:
            return n
    raise ValueError(f"more than {most} pairs needed for effect {effect} at sd {sd}")


def chi_square_cdf(x: float, df: float) -> float:
    """P(V <= x) for V chi-square with `df` degrees of freedom: the regularized lower incomplete gamma P(df/2, x/2),
    by its power series sum_j y^j / (k (k + 1) ... (k + j)) times y^k exp(-y) / Gamma(k), with y = x / 2, k = df / 2
    (every term positive, so the sum converges for every y)."""
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    if x <= 0:
        return 0.0
    k, y = df / 2.0, x / 2.0
    term = total = 1.0 / k
    j = 0
    while term > 1e-17 * total:
        j += 1
        term *= y / (k + j)
        total += term
        if j > 100000:
            raise ValueError(f"chi-square CDF did not converge at x={x}, df={df}")
    return min(1.0, math.exp(k * math.log(y) - y - math.lgamma(k)) * total)


def chi_square_quantile(p: float, df: float) -> float:
    """The x with P(V <= x) = p for V chi-square with `df` degrees of freedom (by bisection on `chi_square_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    return bisect_increasing(lambda x: chi_square_cdf(x, df), p, 0.0, max(1.0, 2.0 * df), rel_tol=1e-12)


def sd_interval(sd: float, n: int, level: float = 0.95) -> tuple:
    """The `level` interval for the standard deviation of normal differences whose sample sd over `n` values is
    `sd`: sd sqrt((n - 1) / q) for q the chi-square quantiles (1 + level) / 2 (the low end) and (1 - level) / 2 (the
    high end), with n - 1 degrees of freedom."""
    if n < 2 or sd <= 0 or not 0 < level < 1:
        raise ValueError(f"need n >= 2, sd > 0 and 0 < level < 1, got n={n}, sd={sd}, level={level}")
    df = n - 1
    return (sd * math.sqrt(df / chi_square_quantile((1.0 + level) / 2.0, df)),
            sd * math.sqrt(df / chi_square_quantile((1.0 - level) / 2.0, df)))
