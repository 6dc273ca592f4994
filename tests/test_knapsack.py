"""Knapsack-RL's allocation: the task value, hand-worked allocations (the increments derived in the comments), prompts
at p = 0 or 1 and the leftover, and properties: the budget exact, the bounds, the optimum against a brute force
over every allocation of small cases and against the plain dynamic programme cell by cell on larger ones (the module
merges sorted increments, exact because the value is concave in N). Expected values by hand, never from the code
under test."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.knapsack import KNAPSACK_HELP, allocate_knapsack, task_value
from openrlhf_ada.algorithms.registry import Registry


def value(p: float, n: int) -> float:
    """The paper's task value, written out again here: (1 - p^N - (1 - p)^N) p (1 - p)^2."""
    return (1 - p ** n - (1 - p) ** n) * p * (1 - p) ** 2


def total_value(ps, counts) -> float:
    return sum(value(p, int(n)) for p, n in zip(ps, counts))


def alloc(ps, total, n_min, n_max):
    return allocate_knapsack(torch.tensor(ps, dtype=torch.float64), total, n_min=n_min, n_max=n_max).tolist()


# -- the value -----------------------------------------------------------------------------------------------------
def test_task_value_by_hand():
    # p = 1/2, N = 3: both outcomes with probability 1 - 1/8 - 1/8 = 3/4; gain 1/2 * 1/4 = 1/8; value 3/32
    assert float(task_value(0.5, 3)) == pytest.approx(3 / 32)
    # p = 1/3, N = 2: 1 - 1/9 - 4/9 = 4/9; gain 1/3 * 4/9 = 4/27; value 16/243
    assert float(task_value(1 / 3, 2)) == pytest.approx(16 / 243)
    # no value at p = 0, p = 1, or with one sample (1 - p - (1 - p) = 0: one sample never holds both outcomes)
    assert task_value(torch.tensor([0.0, 1.0, 0.5]), torch.tensor([5, 5, 1])).tolist() == [0.0, 0.0, 0.0]


# -- hand-worked allocations ------------------------------------------------------------------------------------------
# The increment of one more sample at N is v(p, N + 1) - v(p, N) = p (1 - p)^2 (p^N (1 - p) + (1 - p)^N p):
#   p = 0.5: 0.125 * 0.5^N       -> N=2: 0.03125, 3: 0.015625, 4: 0.0078125, 5: 0.00390625
#   p = 0.1: 0.081 (0.9 * 0.1^N + 0.1 * 0.9^N) -> N=2: 0.00729, 3: 0.0059778, ..., 9: 0.0031381
#   p = 0.9: 0.009 (0.1 * 0.9^N + 0.9 * 0.1^N) -> N=2: 0.00081
# and the optimum takes the largest increments (the value is concave in N).
def test_equal_prompts_split_evenly_and_a_tie_goes_to_the_earlier_prompt():
    # [3, 3]: 3/32 + 3/32 = 0.1875 beats [4, 2]: 7/64 + 1/16 = 0.171875
    assert alloc([0.5, 0.5], 6, 2, 4) == [3, 3]
    # one extra sample over three equal prompts: any of them, by the tie rule the first
    assert alloc([0.5, 0.5, 0.5], 7, 2, 4) == [3, 2, 2]
    # no upper bound (n_max None): 9 samples, 1 each, the rest 4 and 3 by increments: [5, 4]
    assert alloc([0.5, 0.5], 9, 1, None) == [5, 4]


def test_increments_decide_the_split():
    # 4 extra samples for p = [0.5, 0.1] from 2 each: 0.03125, 0.015625, 0.0078125 (p = 0.5) and 0.00729 (p = 0.1)
    # beat p = 0.5's next, 0.00390625: [5, 3]
    assert alloc([0.5, 0.1], 8, 2, 8) == [5, 3]
    # 10 extra for p = [0.9, 0.1]: p = 0.1's increments up to N = 9 (>= 0.0031) all beat p = 0.9's first (0.00081),
    # so p = 0.1 reaches n_max = 10 and the 2 left go to p = 0.9: [4, 10]
    assert alloc([0.9, 0.1], 14, 2, 10) == [4, 10]


def test_prompts_at_zero_or_one_get_only_what_no_other_prompt_can_take():
    # p = 0.5 can take 2 extra (to n_max 4); the rest goes to p = 0 first, then p = 1
    assert alloc([0.0, 1.0, 0.5], 7, 2, 4) == [2, 2, 3]
    assert alloc([0.0, 1.0, 0.5], 8, 2, 4) == [2, 2, 4]
    assert alloc([0.0, 1.0, 0.5], 10, 2, 4) == [4, 2, 4]
    assert alloc([0.0, 1.0, 0.5], 12, 2, 4) == [4, 4, 4]
    # the leftover spread evenly over the p = 0 prompts, the odd one to the earlier: p = 0.5 takes 3 (to 4),
    # 5 left -> 3 and 2; 6 left -> 3 and 3; 7 left -> 3, 3 and 1 to p = 1
    assert alloc([0.0, 0.0, 0.5, 1.0], 12, 1, 4) == [4, 3, 4, 1]
    assert alloc([0.0, 0.0, 0.5, 1.0], 13, 1, 4) == [4, 4, 4, 1]
    assert alloc([0.0, 0.0, 0.5, 1.0], 14, 1, 4) == [4, 4, 4, 2]
    # nothing but p = 1: an even split
    assert alloc([1.0, 1.0, 1.0], 8, 2, 4) == [3, 3, 2]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="cannot be split"):
        alloc([0.5, 0.5], 3, 2, 4)  # below 2 x 2
    with pytest.raises(ValueError, match="cannot be split"):
        alloc([0.5, 0.5], 9, 2, 4)  # above 2 x 4
    for bad in ([], [1.5], [-0.1], [float("nan")]):
        with pytest.raises(ValueError, match="p_hat"):
            alloc(bad, 4, 2, 4)
    with pytest.raises(ValueError, match="n_max"):
        alloc([0.5], 2, 2, 1)


def test_it_registers_as_an_allocation_rule_with_ests_signature():
    # the way Est's table holds its rules: name -> fn(p_hat, total, *, n_min, n_max, eps) -> counts
    rules = Registry("allocation rule")
    rules.register("knapsack", KNAPSACK_HELP)(allocate_knapsack)
    rule = rules.get("knapsack", "ada.est_allocation")
    p = torch.tensor([0.5, 0.1], dtype=torch.float64)
    counts = rule(p, 8, n_min=2, n_max=8, eps=0.01)
    assert counts.dtype == torch.int64 and counts.tolist() == [5, 3]  # eps is not used
    assert "knapsack (" in rules.describe()


# -- properties -------------------------------------------------------------------------------------------------------
rates = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 1 / 3]), st.floats(0.001, 0.999))


@st.composite
def small_cases(draw):
    P = draw(st.integers(1, 4))
    n_min = draw(st.integers(1, 3))
    n_max = draw(st.integers(n_min, n_min + 4))
    total = draw(st.integers(P * n_min, P * n_max))
    return draw(st.lists(rates, min_size=P, max_size=P)), total, n_min, n_max


@settings(max_examples=300, deadline=None)
@given(small_cases())
def test_budget_bounds_and_the_optimum_of_every_allocation(case):
    ps, total, n_min, n_max = case
    counts = alloc(ps, total, n_min, n_max)
    assert sum(counts) == total
    assert all(n_min <= n <= n_max for n in counts)
    best = max(total_value(ps, c) for c in itertools.product(range(n_min, n_max + 1), repeat=len(ps))
               if sum(c) == total)
    assert total_value(ps, counts) >= best - 1e-12


def plain_programme(ps, total, n_min, n_max):
    """The knapsack's dynamic programme cell by cell, f_i(w) = max_k f_(i-1)(w - k) + v(p_i, n_min + k): the best
    summed value using exactly `total` samples (no concavity assumed)."""
    capacity, extra_max = total - n_min * len(ps), n_max - n_min
    best = [0.0] + [float("-inf")] * capacity
    for p in ps:
        best = [max(best[w - k] + value(p, n_min + k) for k in range(min(extra_max, w) + 1)) for w in range(capacity + 1)]
    return best[capacity]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_optimum_matches_the_plain_programme_on_larger_cases(data):
    P = data.draw(st.integers(1, 12))
    n_min = data.draw(st.integers(1, 4))
    n_max = data.draw(st.integers(n_min, n_min + 20))
    total = data.draw(st.integers(P * n_min, P * n_max))
    ps = data.draw(st.lists(rates, min_size=P, max_size=P))
    counts = alloc(ps, total, n_min, n_max)
    assert sum(counts) == total and all(n_min <= n <= n_max for n in counts)
    assert total_value(ps, counts) == pytest.approx(plain_programme(ps, total, n_min, n_max), abs=1e-12)


def test_a_large_step_is_fast_enough_to_run_every_step():
    # 512 prompts of 16 samples within [2, 128]: exact budget and bounds (its cost is a sort per prompt)
    ps = torch.rand(512, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts = allocate_knapsack(ps, 512 * 16, n_min=2, n_max=128)
    assert int(counts.sum()) == 512 * 16 and int(counts.min()) >= 2 and int(counts.max()) <= 128


@settings(max_examples=200, deadline=None)
@given(small_cases())
def test_prompts_at_zero_or_one_wait_for_the_others_to_be_full(case):
    ps, total, n_min, n_max = case
    counts = alloc(ps, total, n_min, n_max)
    inner_full = all(n == n_max for p, n in zip(ps, counts) if 0 < p < 1)
    zeros_full = all(n == n_max for p, n in zip(ps, counts) if p == 0)
    for p, n in zip(ps, counts):
        if p == 0 and n > n_min:
            assert inner_full
        if p == 1 and n > n_min:
            assert inner_full and zeros_full
    zeros = [n for p, n in zip(ps, counts) if p == 0]
    assert not zeros or max(zeros) - min(zeros) <= 1  # spread evenly
