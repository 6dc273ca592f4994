"""Statistics over seeds for comparing settings: 95% intervals of a mean, and curves on a common token grid.

A setting run with several seeds gives one value per seed (a metric at the end of each run, or at a number of
generated tokens). Two intervals of the mean of such values are offered:

- ``t``: mean +- t(0.975, n - 1) x sd / sqrt(n), sd with n - 1 in the denominator: the Student t interval, exact when
  the per-seed values are normal, the usual choice for a handful of seeds;
- ``bootstrap``: the 2.5th and 97.5th percentiles of the means of seeds resampled with replacement (a seeded
  generator, so the same numbers come back every time); assumes nothing about the distribution, but with few seeds
  it is too narrow (it cannot see spread that the seeds it has do not show).

A paired difference is the same interval over the per-seed differences of two settings. One seed gives no interval.
The t quantile is computed here (no scipy): the t distribution's CDF from the regularized incomplete beta function,
inverted by bisection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

INTERVALS = ("t", "bootstrap")
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """The mean of n values and its interval [low, high]; low and high are None when n < 2 (no interval)."""

    mean: float
    low: Optional[float]
    high: Optional[float]
    n: int
    method: str

    @property
    def excludes_zero(self) -> Optional[bool]:
        """Whether the interval lies wholly above or below zero; None without an interval."""
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class IntervalMethod:
    """How intervals are computed: ``t`` or ``bootstrap`` (with its number of resamples and generator seed)."""

    name: str = "t"
    resamples: int = 10000
    seed: int = 0

    def describe(self) -> str:
        if self.name == "t":
            return "95% Student t interval over seeds (n - 1 degrees of freedom)"
        return f"95% percentile bootstrap over seeds ({self.resamples} resamples, generator seed {self.seed})"


# -- the t quantile --------------------------------------------------------------------------------------------------
def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df degrees of freedom (0 < p < 1), by bisection on the CDF."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    return bisect_increasing(lambda t: t_cdf(t, df), p, 0.0, 1.0, rel_tol=1e-12, floor=1.0)


def bisect_increasing(f: Callable[[float], float], target: float, low: float, high: float, rel_tol: float,
                      floor: float = 0.0, steps: int = 200) -> float:
    """The x >= low where the increasing function f reaches `target`: `high` doubled until f(high) >= target, then
    bisection until the bracket is narrower than rel_tol x max(floor, high), or `steps` halvings."""
    while f(high) < target:
        high *= 2.0
    for _ in range(steps):
        mid = 0.5 * (low + high)
        if f(mid) < target:
            low = mid
        else:
            high = mid
        if high - low < rel_tol * max(floor, high):
            break
    return 0.5 * (low + high)


# -- intervals -------------------------------------------------------------------------------------------------------
def mean_interval(values: Sequence[float], method: IntervalMethod = IntervalMethod()) -> Interval:
    """The mean of the values (one per seed) and its 95% interval by `method` (see the module docstring)."""
    if not values:
        raise ValueError("mean_interval needs at least one value")
    means, lows, highs = band(np.asarray(values, dtype=float).reshape(-1, 1), method)
    return Interval(float(means[0]), lows[0], highs[0], len(values), method.name)


def band(values: np.ndarray, method: IntervalMethod = IntervalMethod()) -> Tuple[List[float], List[Optional[float]],
                                                                              List[Optional[float]]]:
    """Mean and 95% interval per column of `values` (rows: seeds, columns: points of a curve); lows and highs are
    None with a single seed. The bootstrap resamples whole rows, the same resamples for every column."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[0] < 1:
        raise ValueError(f"band needs a 2-d array with at least one row, got shape {values.shape}")
    n = values.shape[0]
    means = values.mean(axis=0)
    if n < 2:
        return means.tolist(), [None] * values.shape[1], [None] * values.shape[1]
    if method.name == "t":
        half = t_quantile(0.5 + LEVEL / 2.0, n - 1) * values.std(axis=0, ddof=1) / math.sqrt(n)
        return means.tolist(), (means - half).tolist(), (means + half).tolist()
    if method.name == "bootstrap":
        if method.resamples < 1:
            raise ValueError(f"bootstrap needs at least 1 resample, got {method.resamples}")
        rng = np.random.default_rng(method.seed)
        picks = rng.integers(0, n, size=(method.resamples, n))
        resampled = values[picks].mean(axis=1)  # (resamples, columns)
        tail = 100.0 * (1.0 - LEVEL) / 2.0
        low, high = np.percentile(resampled, [tail, 100.0 - tail], axis=0)
        return means.tolist(), low.tolist(), high.tolist()
    raise ValueError(f"unknown interval {method.name!r}; one of {', '.join(INTERVALS)}")


# -- curves on a common grid -----------------------------------------------------------------------------------------
def common_range(curves: Sequence[Tuple[Sequence[float], Sequence[float]]]) -> Optional[Tuple[float, float]]:
    """The x range every curve covers, [largest first x, smallest last x]; None when they share no range (or a
    curve is empty)."""
    if not curves or any(len(xs) == 0 for xs, _ in curves):
        return None
    low = max(min(xs) for xs, _ in curves)
    high = min(max(xs) for xs, _ in curves)
    return (low, high) if high >= low else None


def grid(low: float, high: float, points: int) -> List[float]:
    """`points` evenly spaced values from low to high, both included (one point when low == high)."""
    if points < 2 or high == low:
        return [float(high)]
    return np.linspace(low, high, points).tolist()


def interpolate(xs: Sequence[float], ys: Sequence[float], at: Sequence[float]) -> List[float]:
    """The curve (xs, ys) linearly interpolated at `at` (inside the curve's range). Several points at the same x (a
    step that generated no tokens) keep the last."""
    last = {}
    for x, y in zip(xs, ys):
        last[float(x)] = float(y)
    px = sorted(last)
    return np.interp(np.asarray(at, dtype=float), px, [last[x] for x in px]).tolist()


def curve_mean(at: Sequence[float], ys: Sequence[float]) -> float:
    """The mean of a curve over its x range (trapezoid area / width); the single value for a one-point grid."""
    if len(at) < 2:
        return float(ys[0])
    area = sum((at[i + 1] - at[i]) * (ys[i] + ys[i + 1]) / 2.0 for i in range(len(at) - 1))
    return area / (at[-1] - at[0])
