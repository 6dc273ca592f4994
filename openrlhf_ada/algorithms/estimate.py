"""Reinforce-Ada-Est: each prompt's samples for the step allocated from an online estimate of its pass rate, one
generation pass, every sample trained; and the explicit per-prompt weights of the log objective.

The estimator (Ada-EMA) keeps two discounted counts per prompt, updated each time the prompt is sampled with n_t
samples of which k_t were correct:

    N_total <- decay * N_total + n_t        N_pos <- decay * N_pos + k_t
    p_hat    = (N_pos + alpha) / (N_total + alpha + beta)         (a Beta(alpha, beta) prior; unseen: the prior mean)

The counts live in the per-prompt history (`PromptHistory`, history.py), so they are checkpointed with it.

The allocation gives prompt x a real share proportional to w_x = 1 / sqrt(p_hat_x) + eps, clipped to
[n_min, n_max], scaled so that the shares sum to the step's budget (budget x prompts), then rounded to integers by
largest remainder so that the total is exactly the budget (the trained batch has a fixed size). It is monotone: a
prompt with a lower p_hat never gets fewer samples than one with a higher p_hat (`allocate`).

Every sample is trained, so groups have different sizes: `ragged_baseline` is each group-baseline estimator's
formula on groups given by their sizes (contiguous samples), and `prompt_weights` the explicit weight of the log
objective, w = min(cap, p^-k + eps) with k = 1 (`inv_pass_rate`, Seq's 1/p_hat) or 1/2 (`inv_sqrt_pass_rate`,
Est's advantage (r - r_bar) (1/sqrt(r_bar) + eps)); a group with p = 0 gets the cap (its centred rewards are zero
for 0/1 rewards anyway). `allocation_metrics` gives the spread of the allocation and Cov(N_x, r_x).
Pure torch: no Ray, no vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import torch

from openrlhf_ada.algorithms._checks import check_choice, check_finite, check_int

STRATEGIES = ("seq", "est")
PROMPT_WEIGHTS = ("none", "inv_pass_rate", "inv_sqrt_pass_rate")
RAGGED_ESTIMATORS = ("rloo", "reinforce_baseline", "dr_grpo", "group_norm")
EPS = 1e-9  # group_norm's, as upstream's


@dataclass(frozen=True)
class EstConfig:
    """Reinforce-Ada-Est's estimator and allocation (--ada.est_*)."""

    budget: int  # mean samples per prompt (--rollout.n_samples_per_prompt); a step generates budget x prompts
    n_min: int = 2  # fewest samples a prompt gets (a group baseline needs 2)
    n_max: int = 32  # most samples a prompt gets
    decay: float = 0.9  # Ada-EMA's discount of a prompt's earlier counts, per time it is sampled
    alpha: float = 1.0  # Beta prior on the pass rate
    beta: float = 1.0
    eps: float = 0.01  # allocation weight 1 / sqrt(p_hat) + eps

    def __post_init__(self):
        check_int("ada.est_min", self.n_min, 2)
        check_int("ada.est_max", self.n_max, self.n_min)
        check_int("budget (--rollout.n_samples_per_prompt)", self.budget, 1)
        if not self.n_min <= self.budget <= self.n_max:
            raise ValueError(f"the budget --rollout.n_samples_per_prompt={self.budget} must lie in "
                             f"[ada.est_min, ada.est_max] = "
                             f"[{self.n_min}, {self.n_max}]: otherwise no allocation within the bounds meets it")
        check_finite("ada.est_decay", self.decay, minimum=0.0)
        if float(self.decay) > 1.0:
            raise ValueError(f"ada.est_decay={self.decay!r} is invalid; accepted values: numbers in [0, 1]")
        check_finite("ada.est_alpha", self.alpha, minimum=1e-9)
        check_finite("ada.est_beta", self.beta, minimum=1e-9)
        check_finite("ada.est_eps", self.eps, minimum=0.0)


# -- the estimator -----------------------------------------------------------------------------------------------
def ema_update(n_total: float, n_pos: float, n_t: int, k_t: int, decay: float) -> Tuple[float, float]:
    """One Ada-EMA update: the discounted counts after a visit with n_t samples, k_t of them correct."""
    check_int("n_t", n_t, 0)
    check_int("k_t", k_t, 0)
    if k_t > n_t:
        raise ValueError(f"k_t={k_t} correct samples out of n_t={n_t}: accepted values: k_t <= n_t")
    check_finite("decay", decay, minimum=0.0)
    return float(decay) * float(n_total) + n_t, float(decay) * float(n_pos) + k_t


def pass_rate_estimate(n_total, n_pos, alpha: float, beta: float) -> torch.Tensor:
    """p_hat = (N_pos + alpha) / (N_total + alpha + beta), elementwise (float64)."""
    check_finite("alpha", alpha, minimum=1e-12)
    check_finite("beta", beta, minimum=1e-12)
    total = torch.as_tensor(n_total, dtype=torch.float64)
    pos = torch.as_tensor(n_pos, dtype=torch.float64)
    if (pos < 0).any() or (pos > total + 1e-9).any():
        raise ValueError("pass_rate_estimate: counts must satisfy 0 <= N_pos <= N_total")
    return (pos + alpha) / (total + alpha + beta)


# -- the allocation ----------------------------------------------------------------------------------------------
def allocation_weights(p_hat, eps: float) -> torch.Tensor:
    """w = 1 / sqrt(p_hat) + eps (float64), p_hat in (0, 1]."""
    p = torch.as_tensor(p_hat, dtype=torch.float64).reshape(-1)
    if p.numel() == 0 or not torch.isfinite(p).all() or (p <= 0).any() or (p > 1).any():
        raise ValueError(f"p_hat must be a non-empty vector of numbers in (0, 1]; got {p.tolist()}")
    check_finite("eps", eps, minimum=0.0)
    return p.rsqrt() + float(eps)


def allocate(p_hat, total: int, n_min: int, n_max: int, eps: float = 0.0) -> torch.Tensor:
    """Integer samples per prompt [P] (int64): within [n_min, n_max], summing to exactly `total`, proportional to
    1 / sqrt(p_hat) + eps up to the clipping and the rounding, and monotone (lower p_hat, never fewer samples).

    The real shares are clip(c w, n_min, n_max) with the scale c that makes them sum to `total` (found by bisection:
    the sum is continuous and non-decreasing in c). They are rounded down, and the samples still missing go one each
    to the prompts with the largest fractional parts (ties: larger w, then earlier prompt)."""
    w = allocation_weights(p_hat, eps)
    check_int("n_min", n_min, 1)
    check_int("n_max", n_max, n_min)
    check_int("total", total, 0)
    P = w.numel()
    if not P * n_min <= total <= P * n_max:
        raise ValueError(f"total={total} samples cannot be split over {P} prompts within [{n_min}, {n_max}] "
                         f"(accepted: {P * n_min}..{P * n_max})")
    lo_c, hi_c = 0.0, float(n_max) / float(w.min())
    for _ in range(200):
        mid = (lo_c + hi_c) / 2
        if float((mid * w).clamp(n_min, n_max).sum()) < total:
            lo_c = mid
        else:
            hi_c = mid
    x = (hi_c * w).clamp(n_min, n_max)
    counts = torch.floor(x + 1e-9).clamp(n_min, n_max).to(torch.int64)
    frac = x - counts.double()
    missing = total - int(counts.sum())
    index = list(range(P))
    if missing > 0:
        order = sorted((i for i in index if counts[i] < n_max), key=lambda i: (-float(frac[i]), -float(w[i]), i))
        for i in order[:missing]:
            counts[i] += 1
    elif missing < 0:
        order = sorted((i for i in index if counts[i] > n_min), key=lambda i: (float(frac[i]), float(w[i]), -i))
        for i in order[:-missing]:
            counts[i] -= 1
    if int(counts.sum()) != total:  # only if the bisection were off by more than a sample per prompt
        raise RuntimeError(f"allocate: {int(counts.sum())} samples allocated for a budget of {total}")
    return counts


# -- groups of varying size --------------------------------------------------------------------------------------
def _sizes(sizes, count: int) -> torch.Tensor:
    s = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1)
    if s.numel() == 0 or (s < 1).any() or int(s.sum()) != count:
        raise ValueError(f"group sizes {s.tolist()} must be >= 1 each and sum to the {count} samples")
    return s


def group_index(sizes) -> torch.Tensor:
    """The group of each sample [S] for contiguous groups of the given sizes: [2, 3] -> [0, 0, 1, 1, 1]."""
    s = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1)
    return torch.repeat_interleave(torch.arange(s.numel()), s)


def group_sums(values: torch.Tensor, sizes) -> torch.Tensor:
    """Per-group sums [P] of a per-sample vector [S] (float64)."""
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    s = _sizes(sizes, v.numel())
    return torch.zeros(s.numel(), dtype=torch.float64).index_add_(0, group_index(s), v)


def ragged_baseline(rewards, sizes, estimator: str, *, eps: float = EPS) -> torch.Tensor:
    """Baseline-subtracted rewards [S] for contiguous groups of the given sizes (each >= 2), with each estimator's
    group formula on the group's own samples (all of a prompt's samples under Est):

        rloo                 r_i - (sum_g - r_i) / (N_g - 1)
        reinforce_baseline   r_i - mean_g
        dr_grpo              r_i - mean_g
        group_norm           (r_i - mean_g) / (std_g + eps)    (std unbiased)

    A group whose rewards are all equal gets exactly zero. Returned in the rewards' dtype (float32 at least)."""
    check_choice("estimator", estimator, RAGGED_ESTIMATORS)
    r_in = torch.as_tensor(rewards)
    dtype = torch.promote_types(r_in.dtype, torch.float32)
    r = r_in.reshape(-1).double()
    s = _sizes(sizes, r.numel())
    if (s < 2).any():
        raise ValueError(f"group sizes {s.tolist()}: a group baseline needs at least 2 samples per group")
    g = group_index(s)
    count = s.double()
    total = group_sums(r, s)
    mean = total / count
    if estimator == "rloo":
        out = r - (total[g] - r) / (count[g] - 1)
    else:
        out = r - mean[g]
        if estimator == "group_norm":
            var = group_sums((r - mean[g]) ** 2, s) / (count - 1)
            out = out / (var.sqrt()[g] + eps)
    lo = torch.full_like(total, math.inf).scatter_reduce(0, g, r, "amin")
    hi = torch.full_like(total, -math.inf).scatter_reduce(0, g, r, "amax")
    all_equal = (lo == hi)[g]
    return torch.where(all_equal, torch.zeros_like(out), out).to(dtype)


def prompt_weights(pass_rate, kind: str, *, eps: float, cap: float) -> torch.Tensor:
    """The explicit weight of each group [P] (float64): `none` 1; `inv_pass_rate` min(cap, 1/p + eps);
    `inv_sqrt_pass_rate` min(cap, 1/sqrt(p) + eps); p = 0 gets the cap."""
    check_choice("ada.prompt_weight", kind, PROMPT_WEIGHTS)
    check_finite("ada.prompt_weight_eps", eps, minimum=0.0)
    check_finite("ada.prompt_weight_cap", cap, minimum=1.0)
    p = torch.as_tensor(pass_rate, dtype=torch.float64).reshape(-1)
    if not torch.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"pass rates must be numbers in [0, 1]; got {p.tolist()}")
    if kind == "none":
        return torch.ones_like(p)
    power = 1.0 if kind == "inv_pass_rate" else 0.5
    safe = p.clamp(min=1e-300)
    w = torch.where(p > 0, safe.pow(-power) + float(eps), torch.full_like(p, math.inf))
    return w.clamp(max=float(cap))


def allocation_metrics(samples: Sequence[int], reward_means: Sequence[float]) -> Dict[str, float]:
    """The allocation's spread (min, median (the lower middle value for an even count), max samples per prompt) and Cov(N_x, r_x) over the step's prompts
    (population covariance of samples and mean reward per prompt). Cov(N_x, r_x) = (r_batch - r_prompt) x mean(N_x),
    with r_batch the mean over samples and r_prompt the mean over prompts: a positive value says the allocation
    sampled easy prompts more, a negative one hard prompts (what Est does on purpose)."""
    n = torch.as_tensor(samples, dtype=torch.float64).reshape(-1)
    r = torch.as_tensor(reward_means, dtype=torch.float64).reshape(-1)
    if n.numel() == 0 or n.numel() != r.numel():
        raise ValueError(f"allocation_metrics: {n.numel()} sample counts for {r.numel()} reward means")
    cov = float(((n - n.mean()) * (r - r.mean())).mean())
    return {
        "ada/alloc_min": float(n.min()),
        "ada/alloc_median": float(n.median()),
        "ada/alloc_max": float(n.max()),
        "ada/alloc_cov_n_r": cov,
    }
