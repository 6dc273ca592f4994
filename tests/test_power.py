"""The paired t test's power and detectable effect (openrlhf_ada/analysis/power.py), checked against values from
an independent implementation (scipy.stats.nct, computed outside the project and written here), against a seeded
simulation of the test itself, and against the normal approximation where it is exact in the limit; the chi-square
CDF and quantile behind the sd's interval against their closed forms, and the interval's coverage by simulation."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.analysis.power import (
    chi_square_cdf,
    chi_square_quantile,
    detectable_effect,
    noncentral_t_sf,
    paired_t_power,
    pairs_needed,
    sd_interval,
)
from openrlhf_ada.analysis.seed_stats import t_quantile


@pytest.mark.parametrize("c, df, delta, expected", [
    # scipy.stats.nct.sf(c, df, delta)
    (4.302652729911275, 2, 3.0, 0.38738935018017756),
    (2.0, 1, 1.0, 0.3771280355397183),
    (2.262157162740992, 9, 2.8, 0.703296723268719),
])
def test_noncentral_t_tail_matches_an_independent_implementation(c, df, delta, expected):
    assert noncentral_t_sf(c, df, delta) == pytest.approx(expected, abs=1e-6)


def test_central_case_is_the_t_distribution():
    # delta 0: P(T > t(0.975, 4)) is 0.025 by the quantile's definition
    assert noncentral_t_sf(t_quantile(0.975, 4), 4, 0.0) == pytest.approx(0.025, abs=1e-6)


def test_power_matches_an_independent_implementation():
    # scipy: nct.sf(c, 8, d) + nct.cdf(-c, 8, d), c = t.ppf(0.975, 8), d = 0.04 sqrt(9) / 0.0455
    assert paired_t_power(0.04, 0.0455, 9) == pytest.approx(0.6385421812820733, abs=1e-6)
    # no effect: the test's level
    assert paired_t_power(0.0, 1.0, 6, alpha=0.05) == pytest.approx(0.05, abs=1e-6)


def test_power_matches_a_simulation_of_the_test():
    rng = np.random.default_rng(0)
    n, effect, sd, trials = 5, 1.0, 1.0, 20000
    diffs = rng.normal(effect, sd, size=(trials, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / math.sqrt(n))
    simulated = float(np.mean(np.abs(t) > t_quantile(0.975, n - 1)))
    se = math.sqrt(simulated * (1 - simulated) / trials)
    assert abs(paired_t_power(effect, sd, n) - simulated) < 4 * se


def test_detectable_effect_of_a_three_pair_design_at_holms_first_step():
    # 3 pairs, sd 0.0455, alpha 0.05 / 10: scipy's power at 0.47116 is 0.8000 (to 1e-6)
    assert detectable_effect(0.0455, 3, alpha=0.005) == pytest.approx(0.47116, abs=2e-4)


def test_detectable_effect_approaches_the_normal_formula_for_many_pairs():
    # (z_0.975 + z_0.8) sd / sqrt(n), the limit as the t distribution becomes normal
    n = 4000
    normal = (1.959963984540054 + 0.8416212335729143) / math.sqrt(n)
    assert detectable_effect(1.0, n) == pytest.approx(normal, rel=2e-3)


def test_pairs_needed_is_the_first_n_with_enough_power():
    n = pairs_needed(0.04, 0.0455)
    assert paired_t_power(0.04, 0.0455, n) >= 0.8 > paired_t_power(0.04, 0.0455, n - 1)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        paired_t_power(0.1, 0.1, 1)
    with pytest.raises(ValueError):
        detectable_effect(0.1, 3, power=1.0)


def _chi2_closed(df):
    """The chi-square CDF in closed form for 2, 4 and 5 degrees of freedom."""
    return {2: lambda x: 1 - math.exp(-x / 2),
            4: lambda x: 1 - math.exp(-x / 2) * (1 + x / 2),
            5: lambda x: math.erf(math.sqrt(x / 2)) - math.sqrt(2 * x / math.pi) * math.exp(-x / 2) * (1 + x / 3)}[df]


@pytest.mark.parametrize("df", [2, 4, 5])
def test_chi_square_cdf_and_quantile_against_closed_forms(df):
    closed = _chi2_closed(df)
    for x in (0.01, 0.4844, 1.0, 3.3567, 7.0, 11.1433, 30.0):
        assert chi_square_cdf(x, df) == pytest.approx(closed(x), abs=1e-12)
    for p in (0.025, 0.5, 0.975):
        low, high = 0.0, 200.0
        for _ in range(200):
            mid = (low + high) / 2
            low, high = (mid, high) if closed(mid) < p else (low, mid)
        assert chi_square_quantile(p, df) == pytest.approx(low, rel=1e-9)
    # the textbook table's values for 4 degrees of freedom
    assert chi_square_quantile(0.975, 4) == pytest.approx(11.1433, abs=1e-4)
    assert chi_square_quantile(0.025, 4) == pytest.approx(0.4844, abs=1e-4)


@given(df=st.integers(1, 60), p=st.floats(0.001, 0.999))
@settings(max_examples=60, deadline=None)
def test_chi_square_quantile_inverts_the_cdf(df, p):
    assert chi_square_cdf(chi_square_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_sd_interval_covers_the_true_sd_95_percent_of_the_time():
    """Seeded simulation: 5 normal values with sd 1, 20,000 times; the interval holds 1 in 95% of them (binomial
    standard error 0.0015)."""
    rng = np.random.default_rng(0)
    draws = rng.normal(0.0, 1.0, size=(20000, 5))
    sds = draws.std(axis=1, ddof=1)
    low_factor, high_factor = sd_interval(1.0, 5)
    covered = np.mean((sds * low_factor <= 1.0) & (1.0 <= sds * high_factor))
    assert covered == pytest.approx(0.95, abs=0.006)
    with pytest.raises(ValueError):
        sd_interval(0.01, 1)
    with pytest.raises(ValueError):
        chi_square_quantile(1.0, 4)
