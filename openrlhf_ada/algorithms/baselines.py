"""Groups and their baselines: one grouping primitive (each sample's group index) and one table of the group-baseline
estimators OpenRLHF 0.11.2 computes per prompt group, on groups of any size, from the group's own rewards ("group",
upstream's formulas) or from the statistics of the prompt's whole Reinforce-Ada pool ("pool", docs/algorithms.md):

    estimator            group statistics (its N samples)         pool statistics (all samples of the step)
    rloo                 r_i - (sum_g - r_i) / (N_g - 1)          r_i - (pool_sum - r_i) / (pool_count - 1)
    reinforce_baseline   r_i - mean_g                             r_i - pool_mean
    dr_grpo              r_i - mean_g                             r_i - pool_mean
    group_norm           (r_i - mean_g) / (std_g + eps)           (r_i - pool_mean) / (pool_std + eps)

std is the unbiased standard deviation, eps = 1e-9 as upstream. A group is given by each sample's group index
(`group`, [S] ints 0..G-1; the samples of a group need not be contiguous), so one call serves fixed groups of n
(`group_index([n] * P)`), Seq's kept groups with their pools' statistics, and Est's groups of varying size. A group
whose rewards are all equal gets zero advantage, under the pool baseline too (such a group carries no signal, and
the metrics count it so; with shaped rewards the pool mean could otherwise differ), and so does a group of one
sample (it has no baseline to compare with).
"""

from __future__ import annotations

import math
from typing import Tuple

import torch

from openrlhf_ada.algorithms._checks import check_choice

GROUP_BASELINE_ESTIMATORS = ("rloo", "reinforce_baseline", "dr_grpo", "group_norm")
EPS = 1e-9  # group_norm's, as upstream's


def group_index(sizes) -> torch.Tensor:
    """The group of each sample [S] for contiguous groups of the given sizes: [2, 3] -> [0, 0, 1, 1, 1]."""
    s = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1)
    if s.numel() == 0 or (s < 1).any():
        raise ValueError(f"group sizes {s.tolist()} must be >= 1 each")
    return torch.repeat_interleave(torch.arange(s.numel()), s)


def group_sizes(ids) -> list:
    """The sizes of the contiguous groups a per-sample group id names, in order: [7, 7, 9, 4, 4, 4] -> [2, 1, 3].

    A trained step carries each sample's group id (the samples generator stamps it when it builds the step); every
    consumer (the advantages, ADORA, the short-step cut, the metrics) reads the groups from it. A group's samples are
    contiguous, so an id that comes back after another group's samples is an error, not a second group."""
    values = [int(v) for v in torch.as_tensor(ids).reshape(-1).tolist()]
    sizes, seen = [], set()
    for i, value in enumerate(values):
        if i and value == values[i - 1]:
            sizes[-1] += 1
            continue
        if value in seen:
            raise ValueError(f"group id {value} recurs after another group's samples: a group's samples must be "
                             f"contiguous (ids {values})")
        seen.add(value)
        sizes.append(1)
    return sizes


def check_groups(group, count: int) -> Tuple[torch.Tensor, int]:
    """`group` as an int64 vector of `count` entries numbering its groups 0..G-1, each of them used; returns it and G."""
    g = torch.as_tensor(group, dtype=torch.int64).reshape(-1)
    if g.numel() != count:
        raise ValueError(f"group has {g.numel()} entries for {count} samples (group sizes must sum to the samples)")
    if count == 0:
        raise ValueError("no samples to group")
    groups = int(g.max()) + 1
    if int(g.min()) < 0 or (torch.bincount(g, minlength=groups) == 0).any():
        raise ValueError(f"group indices must number the groups 0..G-1, each used; got {g.tolist()}")
    return g, groups


def group_sums(values, group) -> torch.Tensor:
    """Per-group sums [G] of a per-sample vector [S] (float64)."""
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    g, groups = check_groups(group, v.numel())
    return torch.zeros(groups, dtype=torch.float64).index_add_(0, g, v)


def group_std(values, group) -> torch.Tensor:
    """Per-group unbiased standard deviation [G] (float64; 0 for a group of one)."""
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    g, _ = check_groups(group, v.numel())
    count = torch.bincount(g).double()
    mean = group_sums(v, g) / count
    return (group_sums((v - mean[g]) ** 2, g) / (count - 1).clamp(min=1)).sqrt()


def group_firsts(group) -> torch.Tensor:
    """The index of each group's first sample [G] (where a per-group value carried by every sample is read)."""
    g, groups = check_groups(group, torch.as_tensor(group).numel())
    positions = torch.arange(g.numel())
    return torch.full((groups,), g.numel(), dtype=torch.int64).scatter_reduce(0, g, positions, "amin")


def pad_groups(values, sizes, fill=0) -> Tuple[torch.Tensor, torch.Tensor]:
    """A per-sample vector [S] of contiguous groups as a [G, max size] matrix, row g holding group g's samples then
    `fill`, and the mask of real entries: ([1, 2, 3], sizes [1, 2]) -> [[1, fill], [2, 3]], [[True, False], [True,
    True]]."""
    v = torch.as_tensor(values).reshape(-1)
    s = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1)
    g, _ = check_groups(group_index(s), v.numel())
    starts = torch.cumsum(s, 0) - s
    position = torch.arange(v.numel()) - starts[g]
    out = torch.full((s.numel(), int(s.max())), fill, dtype=v.dtype)
    out[g, position] = v
    mask = torch.arange(int(s.max())).unsqueeze(0) < s.unsqueeze(1)
    return out, mask


def _per_group(name: str, value, groups: int) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
    if t.shape[0] != groups:
        raise ValueError(f"{name} has {t.shape[0]} entries; accepted: one per group ({groups})")
    return t


def group_baseline(rewards, group, estimator: str, *, pool_count=None, pool_mean=None, pool_std=None,
                   eps: float = EPS) -> torch.Tensor:
    """Baseline-subtracted rewards [S] (the module's table): from each group's own rewards, or, given the pools'
    statistics (count, mean, unbiased std, each [G]), from the pool of the prompt each group was kept from. In the
    rewards' dtype (float32 at least); computed in float64."""
    check_choice("estimator", estimator, GROUP_BASELINE_ESTIMATORS)
    r_in = torch.as_tensor(rewards)
    dtype = torch.promote_types(r_in.dtype, torch.float32)
    r = r_in.reshape(-1).double()
    g, groups = check_groups(group, r.numel())
    pool = (pool_count, pool_mean, pool_std)
    if any(v is not None for v in pool):
        if any(v is None for v in pool):
            raise ValueError("the pool baseline needs pool_count, pool_mean and pool_std together")
        count = _per_group("pool_count", pool_count, groups)
        mean = _per_group("pool_mean", pool_mean, groups)
        std = _per_group("pool_std", pool_std, groups)
        if estimator == "rloo" and (count < 2).any():
            raise ValueError(f"pool_count={count.tolist()}: rloo needs pools of at least 2 samples")
        total = mean * count
    else:
        count = torch.bincount(g, minlength=groups).double()
        total = group_sums(r, g)
        mean = total / count
        std = None
    if estimator == "rloo":
        out = r - (total[g] - r) / (count - 1).clamp(min=1)[g]  # a group of one: any value, zero below
    else:
        out = r - mean[g]
        if estimator == "group_norm":
            if std is None:
                std = (group_sums((r - mean[g]) ** 2, g) / (count - 1).clamp(min=1)).sqrt()
            out = out / (std[g] + eps)
    lo = torch.full((groups,), math.inf, dtype=torch.float64).scatter_reduce(0, g, r, "amin")
    hi = torch.full((groups,), -math.inf, dtype=torch.float64).scatter_reduce(0, g, r, "amax")
    all_equal = (lo == hi)[g]
    return torch.where(all_equal, torch.zeros_like(out), out).to(dtype)
