"""Group baselines for the estimators OpenRLHF 0.11.2 computes per prompt group, from the kept group's own rewards
("group", upstream's behaviour) or from the whole Reinforce-Ada pool of the prompt ("pool", docs/algorithms.md):

    estimator            group statistics (kept n)              pool statistics (all samples of the step)
    rloo                 r_i - (sum_n - r_i) / (n - 1)          r_i - (pool_sum - r_i) / (pool_count - 1)
    reinforce_baseline   r_i - mean_n                           r_i - pool_mean
    dr_grpo              r_i - mean_n                           r_i - pool_mean
    group_norm           (r_i - mean_n) / (std_n + eps)         (r_i - pool_mean) / (pool_std + eps)

std is the unbiased standard deviation, eps = 1e-9 as upstream. Inputs are [P, n] rewards and [P] pool statistics.
A kept group whose rewards are all equal gets zero advantage under the pool baseline too (such a group carries no
signal, and the metrics count it so); with shaped rewards the pool mean could otherwise differ.
"""

from __future__ import annotations

import torch

from openrlhf_ada.algorithms._checks import as_matrix, check_choice

GROUP_BASELINE_ESTIMATORS = ("rloo", "reinforce_baseline", "dr_grpo", "group_norm")
EPS = 1e-9


def _rewards(rewards) -> torch.Tensor:
    r = as_matrix("rewards", rewards, torch.float32)
    if r.shape[1] < 2:
        raise ValueError(f"rewards has n={r.shape[1]} samples per prompt; a group baseline needs n >= 2")
    return r


def group_baseline(rewards, estimator: str, *, eps: float = EPS) -> torch.Tensor:
    """Baseline-subtracted rewards [P, n] from the statistics of the kept group itself (upstream's formulas)."""
    check_choice("estimator", estimator, GROUP_BASELINE_ESTIMATORS)
    r = _rewards(rewards)
    n = r.shape[1]
    if estimator == "rloo":
        return r - (r.sum(-1, keepdim=True) - r) / (n - 1)
    centred = r - r.mean(-1, keepdim=True)
    if estimator == "group_norm":
        return centred / (r.std(-1, keepdim=True) + eps)
    return centred


def pool_baseline(rewards, estimator: str, *, pool_count, pool_mean, pool_std, eps: float = EPS) -> torch.Tensor:
    """Baseline-subtracted rewards [P, n] from each prompt's pool statistics (count, mean, unbiased std, all [P])."""
    check_choice("estimator", estimator, GROUP_BASELINE_ESTIMATORS)
    r = _rewards(rewards)
    P = r.shape[0]
    stats = {}
    for name, value in (("pool_count", pool_count), ("pool_mean", pool_mean), ("pool_std", pool_std)):
        t = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
        if t.shape[0] != P:
            raise ValueError(f"{name} has {t.shape[0]} entries; accepted: one per prompt ({P})")
        stats[name] = t.unsqueeze(-1)
    count, mean, std = stats["pool_count"], stats["pool_mean"], stats["pool_std"]
    if estimator == "rloo":
        if (count < 2).any():
            raise ValueError(f"pool_count={count.squeeze(-1).tolist()}: rloo needs pools of at least 2 samples")
        out = r.double() - (mean * count - r.double()) / (count - 1)
    else:
        out = r.double() - mean
        if estimator == "group_norm":
            out = out / (std + eps)
    all_equal = (r == r[:, :1]).all(-1, keepdim=True)
    return torch.where(all_equal, torch.zeros_like(out), out).to(r.dtype)
