"""Reinforce-Ada-Est: each prompt's samples for the step allocated from an online estimate of its pass rate, one
generation pass, every sample trained; and the explicit per-prompt weights of the log objective.

The estimator (Ada-EMA) keeps two discounted counts per prompt, updated each time the prompt is sampled with n_t
samples of which k_t were correct:

    N_total <- decay * N_total + n_t        N_pos <- decay * N_pos + k_t
    p_hat    = (N_pos + alpha) / (N_total + alpha + beta)         (a Beta(alpha, beta) prior; unseen: the prior mean)

The counts live in the per-prompt history (`PromptHistory`, history.py), so they are checkpointed with it.

The allocation is a registered rule (`ALLOCATION_RULES`, `--ada.est_allocation`; one decorated function each, as
the exit rules and ADORA rules are), fn(p_hat, total, *, n_min, n_max, eps) -> int64 counts summing to `total`:

- `inv_sqrt` (the paper's text, `allocate`): prompt x gets a real share proportional to w_x = 1 / sqrt(p_hat_x) + eps,
  clipped to [n_min, n_max], scaled so that the shares sum to the step's budget (budget x prompts), then rounded to
  integers by largest remainder so that the total is exactly the budget (the trained batch has a fixed size). It is
  monotone: a prompt with a lower p_hat never gets fewer samples than one with a higher p_hat.
- `authors` (the authors' code, `allocate_authors`): n_min (their 1) each, the rest split in proportion to
  w_x = 1 / max(p_hat_x, 1e-6), each share rounded down, and the samples still missing one each to the largest
  fractional parts (ties: batch order); no upper bound, eps unused.
- `knapsack` (Knapsack-RL, knapsack.py `allocate_knapsack`): the counts within [n_min, n_max] that maximise the
  summed task value (1 - p^N - (1 - p)^N) p (1 - p)^2 exactly; eps unused, n_max None: no bound but the budget.

A preset (`EST_PRESETS`, `--ada.est_preset`) names a whole setting: `paper` (the defaults above, the explicit weight
1/sqrt) or `authors` (their prior Beta(1, 16), decay 0.9, their allocation, no explicit weight, their advantage
`authors_baseline`); `EstConfig.from_preset` builds the frozen config from a preset and the flags that override it.

Every sample is trained, so groups have different sizes (one sample, under the authors' rule): their baseline is
`baselines.group_baseline` (each estimator's formula on any groups; a group of one gets zero), or
`authors_baseline`, the authors' GRPO advantage (a group of one keeps its reward), and `prompt_weights` the explicit weight of the log
objective, w = min(cap, p^-k + eps) with k = 1 (`inv_pass_rate`, Seq's 1/p_hat) or 1/2 (`inv_sqrt_pass_rate`,
Est's advantage (r - r_bar) (1/sqrt(r_bar) + eps)); a group with p = 0 gets the cap (its centred rewards are zero
for 0/1 rewards anyway). `allocation_metrics` gives the spread of the allocation and Cov(N_x, r_x); `SeenWatch`
says when the estimator has (almost) no history to estimate from.
Pure torch: no Ray, no vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from openrlhf_ada.algorithms._checks import check_choice, check_finite, check_int
from openrlhf_ada.algorithms.baselines import check_groups
from openrlhf_ada.algorithms.knapsack import KNAPSACK_HELP, allocate_knapsack
from openrlhf_ada.algorithms.registry import Registry

STRATEGIES = ("seq", "est")
PROMPT_WEIGHTS = ("none", "inv_pass_rate", "inv_sqrt_pass_rate")
EST_BASELINES = ("group", "authors")  # each estimator's formula on the group; the authors' GRPO (authors_baseline)
AUTHORS_EPS = 1e-6  # the authors' GRPO epsilon (std clamp and divisor)
AUTHORS_P_FLOOR = 1e-6  # the authors' floor on p_hat in their weight 1 / p_hat

#: Allocation rules by name (`--ada.est_allocation`): fn(p_hat [P] float64, total, *, n_min, n_max, eps) -> counts
#: [P] int64 summing to `total`.
ALLOCATION_RULES = Registry("allocation rule")
register_allocation_rule = ALLOCATION_RULES.register


@dataclass(frozen=True)
class EstPreset:
    """A named Est setting (`--ada.est_preset`): the value of every --ada.est_* flag left unset, and what the
    advantage is. `about` says where it comes from (the flag's help)."""

    allocation: str
    n_min: int
    n_max: Optional[int]  # None: no upper bound (a rule that has none)
    decay: float
    alpha: float
    beta: float
    eps: float
    prompt_weight: str  # what --ada.prompt_weight auto means
    baseline: str  # EST_BASELINES
    about: str


EST_PRESETS: Dict[str, EstPreset] = {
    "paper": EstPreset(
        allocation="inv_sqrt", n_min=2, n_max=32, decay=0.9, alpha=1.0, beta=1.0, eps=0.01,
        prompt_weight="inv_sqrt_pass_rate", baseline="group",
        about="the paper's v3 text (Algorithm 1) with the project's values: Beta(1, 1), decay 0.9, N_x proportional to "
              "1/sqrt(p_hat) + 0.01 within [2, 32], the weight 1/sqrt(p) on each estimator's own baseline"),
    "authors": EstPreset(
        allocation="authors", n_min=1, n_max=None, decay=0.9, alpha=1.0, beta=16.0, eps=0.0,
        prompt_weight="none", baseline="authors",
        about="the authors' code (RLHFlow/Reinforce-Ada, branch hanze, verl/trainer/ppo/ray_trainer_ema.py): "
              "Beta(1, 16), decay 0.9, 1 sample each and the rest in proportion to 1/p_hat (no upper bound), no "
              "explicit weight, GRPO's advantage r - (share of correct samples), a one-sample group keeping r "
              "(with dr_grpo; group_norm divides by their std + 1e-6)"),
}


@dataclass(frozen=True)
class EstConfig:
    """Reinforce-Ada-Est's estimator, allocation and advantage (--ada.est_*); defaults: the `paper` preset."""

    budget: int  # mean samples per prompt (--rollout.n_samples_per_prompt); a step generates budget x prompts
    n_min: int = 2  # fewest samples a prompt gets (a group baseline needs 2; the authors' allocation: 1)
    n_max: Optional[int] = 32  # most samples a prompt gets (None: no bound, the authors' allocation)
    decay: float = 0.9  # Ada-EMA's discount of a prompt's earlier counts, per time it is sampled
    alpha: float = 1.0  # Beta prior on the pass rate
    beta: float = 1.0
    eps: float = 0.01  # allocation weight 1 / sqrt(p_hat) + eps
    allocation: str = "inv_sqrt"  # ALLOCATION_RULES
    baseline: str = "group"  # EST_BASELINES

    def __post_init__(self):
        check_int("budget (--rollout.n_samples_per_prompt)", self.budget, 1)
        check_choice("ada.est_allocation", self.allocation, ALLOCATION_RULES.names())
        check_choice("est baseline", self.baseline, EST_BASELINES)
        # a group baseline needs two samples; the authors' advantage takes a one-sample group as it is
        check_int("ada.est_min", self.n_min, 2 if self.baseline == "group" else 1)
        if self.n_max is not None:
            check_int("ada.est_max", self.n_max, self.n_min)
        if not self.n_min <= self.budget <= (self.n_max if self.n_max is not None else self.budget):
            raise ValueError(f"the budget --rollout.n_samples_per_prompt={self.budget} must lie in "
                             f"[ada.est_min, ada.est_max] = "
                             f"[{self.n_min}, {self.n_max}]: otherwise no allocation within the bounds meets it")
        check_finite("ada.est_decay", self.decay, minimum=0.0)
        if float(self.decay) > 1.0:
            raise ValueError(f"ada.est_decay={self.decay!r} is invalid; accepted values: numbers in [0, 1]")
        check_finite("ada.est_alpha", self.alpha, minimum=1e-9)
        check_finite("ada.est_beta", self.beta, minimum=1e-9)
        check_finite("ada.est_eps", self.eps, minimum=0.0)

    @classmethod
    def from_preset(cls, preset: str, budget: int, **overrides) -> "EstConfig":
        """The preset's values, each replaced by its override when that is not None (a flag left unset)."""
        check_choice("ada.est_preset", preset, tuple(EST_PRESETS))
        base = EST_PRESETS[preset]
        names = [f.name for f in fields(cls) if f.name != "budget"]
        unknown = set(overrides) - set(names)
        if unknown:
            raise ValueError(f"EstConfig.from_preset: unknown settings {sorted(unknown)}; accepted: {names}")
        values = {k: getattr(base, k) for k in names}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(budget=budget, **values)

    def allocate(self, p_hat, prompts: int) -> List[int]:
        """Samples per prompt for one step of `prompts` prompts (budget x prompts in all), by the rule in force."""
        rule = ALLOCATION_RULES.get(self.allocation, "ada.est_allocation")
        p = torch.as_tensor(p_hat, dtype=torch.float64).reshape(-1)
        counts = rule(p, self.budget * prompts, n_min=self.n_min, n_max=self.n_max, eps=self.eps)
        counts = torch.as_tensor(counts, dtype=torch.int64).reshape(-1)
        if counts.numel() != p.numel() or int(counts.sum()) != self.budget * prompts or (counts < 1).any():
            raise ValueError(f"allocation rule {self.allocation!r} returned {counts.tolist()} for {p.numel()} prompts; "
                             f"accepted: one count >= 1 per prompt, summing to {self.budget * prompts}")
        return counts.tolist()


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
    """p_hat = (alpha + N_pos) / (alpha + beta + N_total), elementwise (float64, summed in this order: the authors'
    arithmetic to the last bit, so their allocation's rounding is reproduced exactly)."""
    check_finite("alpha", alpha, minimum=1e-12)
    check_finite("beta", beta, minimum=1e-12)
    total = torch.as_tensor(n_total, dtype=torch.float64)
    pos = torch.as_tensor(n_pos, dtype=torch.float64)
    if (pos < 0).any() or (pos > total + 1e-9).any():
        raise ValueError("pass_rate_estimate: counts must satisfy 0 <= N_pos <= N_total")
    return (float(alpha) + pos) / ((float(alpha) + float(beta)) + total)


# -- the allocation ----------------------------------------------------------------------------------------------
def allocation_weights(p_hat, eps: float) -> torch.Tensor:
    """w = 1 / sqrt(p_hat) + eps (float64), p_hat in (0, 1]."""
    p = torch.as_tensor(p_hat, dtype=torch.float64).reshape(-1)
    if p.numel() == 0 or not torch.isfinite(p).all() or (p <= 0).any() or (p > 1).any():
        raise ValueError(f"p_hat must be a non-empty vector of numbers in (0, 1]; got {p.tolist()}")
    check_finite("eps", eps, minimum=0.0)
    return p.rsqrt() + float(eps)


@register_allocation_rule("inv_sqrt", "the paper's: proportional to 1/sqrt(p_hat) + eps within [est_min, est_max], "
                                      "largest remainder")
def _inv_sqrt_rule(p_hat, total: int, *, n_min: int, n_max: Optional[int], eps: float) -> torch.Tensor:
    if n_max is None:
        raise ValueError("the inv_sqrt allocation needs an upper bound: set --ada.est_max")
    return allocate(p_hat, total, n_min, n_max, eps)


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


@register_allocation_rule("authors", "the authors' code: est_min each, the rest in proportion to 1/p_hat, rounded "
                                     "down, the missing ones to the largest fractions; no upper bound, eps unused")
def allocate_authors(p_hat, total: int, *, n_min: int = 1, n_max: Optional[int] = None, eps: float = 0.0
                     ) -> torch.Tensor:
    """The authors' allocation (RLHFlow/Reinforce-Ada, branch hanze, verl/trainer/ppo/ray_trainer_ema.py,
    `_generate_multi_round_adaptive_downsampling`), in their arithmetic (Python floats, in their order): every prompt
    gets n_min (their 1); the remaining R = total - n_min x P are split by w = 1 / max(p_hat, 1e-6) as
    R x (w / sum(w)), each rounded down; the samples still missing go one each to the prompts in decreasing order of
    their fractional parts (a stable sort: ties keep the batch order). No upper bound; `n_max` and `eps` are not used
    (the caller refuses them when set). Their guard that trims an overshoot never acts (the floors never exceed R)."""
    p = torch.as_tensor(p_hat, dtype=torch.float64).reshape(-1)
    if p.numel() == 0 or not torch.isfinite(p).all() or (p <= 0).any() or (p > 1).any():
        raise ValueError(f"p_hat must be a non-empty vector of numbers in (0, 1]; got {p.tolist()}")
    check_int("n_min", n_min, 1)
    check_int("total", total, 0)
    P = p.numel()
    if total < P * n_min:
        raise ValueError(f"total={total} samples cannot give {P} prompts {n_min} each (accepted: >= {P * n_min})")
    remaining = total - n_min * P
    weights = [1.0 / max(float(x), AUTHORS_P_FLOOR) for x in p.tolist()]
    weight_sum = sum(weights)
    shares = [remaining * (w / weight_sum) for w in weights]
    floors = [int(math.floor(v)) for v in shares]
    counts = [n_min + f for f in floors]
    by_fraction = sorted(range(P), key=lambda i: shares[i] - floors[i], reverse=True)  # stable: ties in batch order
    for i in range(remaining - sum(floors)):
        counts[by_fraction[i % P]] += 1
    return torch.tensor(counts, dtype=torch.int64)


#: Knapsack-RL's allocation (knapsack.py): the budget split exactly within [est_min, est_max] to maximise the summed
#: task value; eps is not used (the caller refuses an explicit --ada.est_eps with it).
register_allocation_rule("knapsack", KNAPSACK_HELP)(allocate_knapsack)


# -- the authors' advantage -----------------------------------------------------------------------------------------
def authors_baseline(rewards, group, positive, *, norm_by_std: bool = False) -> torch.Tensor:
    """The authors' Est advantage [S] (RLHFlow/Reinforce-Ada, branch hanze, verl/trainer/ppo/core_algos.py,
    `compute_grpo_outcome_advantage` with global_stat_est, `_compute_with_global_stats`), on the groups of `group`
    (each sample's group index, baselines.group_index): from the group's counts of correct (`positive`, bool [S]) and
    wrong samples,

        a group of one    mean 0, std 1                 (its advantage is r itself)
        otherwise         mean = #correct / size,  std = max(unbiased std of [1] x #correct + [0] x #wrong, 1e-6)
        advantage         r - mean,  or (r - mean) / (std + 1e-6) with norm_by_std (their grpo with
                          norm_adv_by_std_in_grpo; their script turns it off)

    The mean is the share of correct samples, not the mean reward (the same for 0/1 rewards). In float32, as theirs."""
    r = torch.as_tensor(rewards).reshape(-1).float()
    g, groups = check_groups(group, r.numel())
    pos = torch.as_tensor(positive).reshape(-1).bool()
    if pos.numel() != r.numel():
        raise ValueError(f"positive has {pos.numel()} entries for {r.numel()} rewards")
    sizes = torch.bincount(g, minlength=groups)
    count = sizes.float()
    n_pos = torch.zeros(groups, dtype=torch.float32).index_add_(0, g, pos.float())
    single = sizes <= 1
    mean = torch.where(single, torch.zeros_like(count), n_pos / count)
    out = r - mean[g]
    if norm_by_std:
        # unbiased std of n_pos ones and the rest zeros: sqrt(n_pos (1 - mean)^2 + n_neg mean^2) / (size - 1)
        var = (n_pos * (1 - mean) ** 2 + (count - n_pos) * mean ** 2) / (count - 1).clamp(min=1)
        std = torch.where(single, torch.ones_like(count), var.sqrt().clamp(min=AUTHORS_EPS))
        out = out / (std[g] + AUTHORS_EPS)
    return out


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


# -- is Est estimating? -------------------------------------------------------------------------------------------
@dataclass
class SeenWatch:
    """Counts Est steps in a row in which (almost) no prompt had been sampled before (a share of seen prompts at most
    `below`), and after `steps` of them returns a warning once: the allocation then follows the prior alone, i.e.
    every prompt gets the same count (a single pass over a large dataset is the usual cause)."""

    steps: int = 10
    below: float = 0.05
    run: int = 0
    warned: bool = False

    def observe(self, seen: int, prompts: int, dataset_size: Optional[int] = None) -> Optional[str]:
        """This step's prompts with history (`seen`) of `prompts`; a warning the first time the run reaches `steps`."""
        if prompts <= 0:
            return None
        self.run = self.run + 1 if seen / prompts <= self.below else 0
        if self.warned or self.run < self.steps:
            return None
        self.warned = True
        data = (f" The data hold {dataset_size} prompts, {prompts} per step: a prompt comes back after about "
                f"{math.ceil(dataset_size / prompts)} steps." if dataset_size else "")
        return (f"--ada.strategy est: for {self.run} steps in a row at most {self.below:.0%} of each step's prompts had "
                f"been sampled before (this step: {seen} of {prompts}), so the estimator has nothing to estimate "
                f"from and every prompt gets the prior's count (plain GRPO with n = the budget).{data} Est needs each "
                "prompt to come back: train for several epochs (--train.num_episodes) over a smaller prompt set, or "
                "use --ada.strategy seq, which adapts within the step")
