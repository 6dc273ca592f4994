"""Knapsack-RL's allocation (arXiv 2509.25849): a step's sample budget split across its prompts so that the summed
task value is the largest possible, solved exactly by dynamic programming.

Each prompt is an item whose value for N samples, at pass rate p, is the paper's task value

    v(p, N) = (1 - p^N - (1 - p)^N) * p * (1 - p)^2

the probability that N samples hold both outcomes (GRPO's gradient is not zero) times the paper's information gain
p (1 - p)^2. Prompt x gets N_x samples with n_min <= N_x <= n_max and sum N_x = total (exactly: the trained batch has
a fixed size), and sum v(p_x, N_x) is maximised.

How it is solved (`allocate_knapsack`):

- every prompt first gets n_min; the remaining R = total - P n_min samples are the knapsack's capacity;
- prompts with 0 < p < 1 are the items: a dynamic programme over them (prompt by prompt, for every used capacity
  w = 0..R, the best summed value f_i(w) = max_k f_(i-1)(w - k) + v(p_i, n_min + k)) gives each one extra k in
  [0, n_max - n_min] samples; the programme fills the capacity exactly, so the optimum is over allocations that use
  the whole budget. v(p, N) is concave in N (its increment p (1 - p)^2 (p^N (1 - p) + (1 - p)^N p) falls with N),
  so every stage's table is concave and the programme's maximum is a merge of sorted increments (`_solve`): the
  exact optimum at a sort's cost instead of the plain table's O(P x R x (n_max - n_min)) (the tests check it
  against that plain table and a brute force over every allocation);
- a prompt whose p is exactly 0 or 1 has value 0 for every N: it stays at n_min as long as another prompt can still
  take a sample (v(p, N) strictly increases in N for 0 < p < 1, so a sample given to it is never worth less);
- what the items cannot take (every one of them at n_max) is spread evenly over the prompts at p = 0 first (the
  unsolved ones, where more samples may find a first success: the authors' choice), then over those at p = 1, each
  up to n_max; a remainder goes one each to the earlier prompts.

Ties (equal increments): the earlier prompt takes the sample, so of two equal prompts the earlier one gets more.

Where this departs from the authors' code (liziniu/KnapsackRL, verl/trainer/ppo/exploration_utils.py):

- their programme values an item that gets no extra sample at 0 instead of v(p, n_min), which favours giving every
  item at least one extra; here the summed value is the stated objective, exactly;
- their "fallback" first estimates what each item needs (the N at which both outcomes show with probability 0.9,
  log(0.1) / log(max(p, 1 - p)), capped at n_max) and, when the sum is below the budget, moves the difference to the
  prompts at p = 0 (or, without any, to the other prompts outside the knapsack) before the programme runs; here the
  items keep every sample that adds value, and only what no item can take goes to p = 0 and p = 1;
- their programme fills its table cell by cell (O(P x R x (n_max - n_min)), numba when large); here the same
  recurrence through the merge of increments, which the values' concavity makes exact;
- their p = 0 and p = 1 prompts get their own counts (negative_n, positive_n; n_min in their script); here n_min;
- their prompts with fewer than 8 samples of history get the plain n outside the knapsack; this function sees only
  pass rates, so the caller decides an unseen prompt's p (Est's estimator gives it the prior mean);
- their p is the last epoch's share of correct samples (the last 16 rewards when the epoch had fewer); Est gives
  its posterior mean, which is never exactly 0 or 1 (a prior Beta(alpha, beta) with alpha, beta > 0): under Est a
  prompt that was always wrong is an item of small value (v ~ p_hat for a small p_hat) and the rule for p = 0
  never acts, where their code would give it n_min and the leftover.

`allocate_knapsack` has the signature of Est's allocation rules, fn(p_hat, total, *, n_min, n_max, eps) -> counts
(eps is not used; n_max None: no upper bound but the budget). `KNAPSACK_HELP` is its one-line description.
Pure torch: no Ray, no vLLM.
"""

from __future__ import annotations

from typing import Optional

import torch

from openrlhf_ada.algorithms._checks import check_int

KNAPSACK_HELP = ("Knapsack-RL's: the budget split exactly within [est_min, est_max] to maximise the summed "
                 "(1 - p^N - (1 - p)^N) p (1 - p)^2 by dynamic programming; eps unused")


def _value(p, n):
    return (1.0 - p ** n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def task_value(p, n) -> torch.Tensor:
    """v(p, N) = (1 - p^N - (1 - p)^N) p (1 - p)^2, elementwise (float64), N >= 1; 0 at p = 0, p = 1 or N = 1."""
    p = torch.as_tensor(p, dtype=torch.float64)
    return _value(p, torch.as_tensor(n, dtype=torch.float64))


def _check(p_hat, total: int, n_min: int, n_max: Optional[int]) -> torch.Tensor:
    p = torch.as_tensor(p_hat, dtype=torch.float64).reshape(-1)
    if p.numel() == 0 or not torch.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"p_hat must be a non-empty vector of numbers in [0, 1]; got {p.tolist()}")
    check_int("n_min", n_min, 1)
    if n_max is not None:
        check_int("n_max", n_max, n_min)
    check_int("total", total, 0)
    P = p.numel()
    if total < P * n_min or (n_max is not None and total > P * n_max):
        upper = P * n_max if n_max is not None else "any"
        raise ValueError(f"total={total} samples cannot be split over {P} prompts within [{n_min}, {n_max}] "
                         f"(accepted: {P * n_min}..{upper})")
    return p


def _increments(p: torch.Tensor, n_min: int, count: int) -> torch.Tensor:
    """v(p, N + 1) - v(p, N) = p (1 - p)^2 (p^N (1 - p) + (1 - p)^N p) for N = n_min .. n_min + count - 1, in closed
    form (no cancellation), so they are positive and non-increasing in floating point too."""
    n = n_min + torch.arange(count, dtype=torch.float64)
    return p * (1.0 - p) ** 2 * (p ** n * (1.0 - p) + (1.0 - p) ** n * p)


def _solve(p: torch.Tensor, n_min: int, extra_max: int, capacity: int) -> torch.Tensor:
    """Extra samples [m] (int64) for items of pass rates p [m] (0 < p < 1), each in [0, extra_max], summing to
    exactly `capacity` (<= m x extra_max), maximising sum v(p, n_min + extra).

    The programme over the items, f_i(w) = max_k f_{i-1}(w - k) + v(p_i, n_min + k), keeps each stage's table as its
    increments f_i(w + 1) - f_i(w), largest first, each labelled with the item whose sample it is. Every g_i(k) =
    v(p_i, n_min + k) is concave and so is every f_i, and the maximum over k of a sum of two concave tables takes
    the w largest of their increments together (exchanging a smaller one for a larger one never lowers the sum):
    stage i is the merge of stage i - 1 with item i's increments, the capacity's worth kept. Ties keep the earlier
    stage's increments first (a stable sort), so an earlier prompt wins a tie. Time O(m x (capacity + extra_max)
    log), memory O(capacity + extra_max)."""
    m = p.numel()
    if m == 0 or capacity == 0:
        return torch.zeros(m, dtype=torch.int64)
    count = min(extra_max, capacity)
    steps = torch.empty(0, dtype=torch.float64)  # the stage's increments, largest first
    owner = torch.empty(0, dtype=torch.int64)  # the item each one is a sample of
    for i in range(m):
        values = torch.cat([steps, _increments(p[i], n_min, count)])
        owners = torch.cat([owner, torch.full((count,), i, dtype=torch.int64)])
        order = torch.sort(values, descending=True, stable=True).indices[:capacity]
        steps, owner = values.index_select(0, order), owners.index_select(0, order)
    return torch.bincount(owner, minlength=m)  # f_m(capacity): the capacity's largest increments


def _spread(counts: torch.Tensor, index: torch.Tensor, amount: int, cap: int) -> int:
    """Give `amount` samples as evenly as possible to the prompts `index` (batch order), each up to `cap`; the
    remainder one each to the earlier ones. Returns what did not fit."""
    while amount > 0 and index.numel() > 0:
        room = index[counts[index] < cap]
        if room.numel() == 0:
            break
        each, rest = divmod(amount, room.numel())
        give = torch.full((room.numel(),), each, dtype=torch.int64)
        give[:rest] += 1
        give = torch.minimum(give, cap - counts[room])
        counts[room] += give
        amount -= int(give.sum())
    return amount


def allocate_knapsack(p_hat, total: int, *, n_min: int, n_max: Optional[int], eps: float = 0.0) -> torch.Tensor:
    """Samples per prompt [P] (int64) within [n_min, n_max] summing to exactly `total`, maximising
    sum v(p_hat_x, N_x) (module docstring: the programme, prompts at 0 or 1, the leftover, ties). `eps` is not used
    (Est's rules share one signature); n_max None: no bound but the budget."""
    p = _check(p_hat, total, n_min, n_max)
    P = p.numel()
    cap = n_max if n_max is not None else total - (P - 1) * n_min
    counts = torch.full((P,), n_min, dtype=torch.int64)
    capacity = total - P * n_min
    items = torch.nonzero((p > 0) & (p < 1)).reshape(-1)
    used = min(capacity, items.numel() * (cap - n_min))
    counts[items] += _solve(p[items], n_min, cap - n_min, used)
    left = capacity - used
    left = _spread(counts, torch.nonzero(p == 0).reshape(-1), left, cap)
    left = _spread(counts, torch.nonzero(p == 1).reshape(-1), left, cap)
    if left != 0 or int(counts.sum()) != total:  # the bounds were checked: everything fits
        raise RuntimeError(f"knapsack: {int(counts.sum())} samples allocated for a budget of {total}")
    return counts
