"""Reinforce-Ada: adaptive multi-round sampling per prompt (spec section 2).

Each prompt of a step is sampled round after round (the first round may have its own size) until its pool of
scored samples meets the exit rule, or until max_rounds:

    balance:  #positive >= floor(n/2)  and  #negative >= n - floor(n/2)
    pos:      #positive >= 1

The trained group of n is then picked from the whole pool (k_pos = min(floor(n/2), #pos) positives, k_neg =
min(n - k_pos, #neg) negatives, topped up with remaining positives first, then negatives; earliest generated first
or uniformly at random from a seeded generator), and its baseline uses the statistics of the whole pool.

`PromptPool` is one prompt's state during a step; the OpenRLHF samples generator, the single-machine trainer and
`simulate` (tests, benchmarks) all drive it, so the decision logic lives here once. Pure python/torch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Union

from openrlhf_ada.algorithms._checks import check_choice, check_finite, check_int

MODES = ("balance", "pos")
SELECTION_POLICIES = ("first", "random")
UNRESOLVED_POLICIES = ("keep", "drop")
BASELINES = ("pool", "group")
SCHEDULES = ("async", "sync")


def exit_reached(num_pos: int, num_neg: int, *, mode: str, n: int) -> bool:
    """The exit rule on a pool with `num_pos` positives and `num_neg` negatives, for final group size n."""
    check_choice("mode", mode, MODES)
    check_int("n", n, 2)
    check_int("num_pos", num_pos, 0)
    check_int("num_neg", num_neg, 0)
    if mode == "pos":
        return num_pos >= 1
    return num_pos >= n // 2 and num_neg >= n - n // 2


def make_rng(seed: int, *keys) -> random.Random:
    """A generator that depends only on (seed, keys), e.g. (seed, step, prompt id): per-prompt randomness that does
    not depend on the other prompts or on the order in which rounds complete."""
    return random.Random(":".join(str(k) for k in (seed, *keys)))


def select_group(
    is_positive: Sequence[bool], n: int, *, policy: str = "first", rng: Union[random.Random, int, None] = None
) -> List[int]:
    """Indices (into the pool, in generation order) of the n samples to train on, returned in ascending order.

    policy "first": the earliest generated of each class; "random": uniform without replacement, drawn from `rng`
    (a random.Random, or an int seed; None means seed 0).
    """
    check_int("n", n, 2)
    check_choice("policy", policy, SELECTION_POLICIES)
    flags = [bool(p) for p in is_positive]
    if len(flags) < n:
        raise ValueError(f"is_positive has {len(flags)} samples; accepted: a pool of at least n={n} samples")
    pos = [i for i, p in enumerate(flags) if p]
    neg = [i for i, p in enumerate(flags) if not p]
    if policy == "random":
        if not isinstance(rng, random.Random):
            rng = random.Random(0 if rng is None else rng)
        rng.shuffle(pos)
        rng.shuffle(neg)
    k_pos = min(n // 2, len(pos))
    k_neg = min(n - k_pos, len(neg))
    short = n - k_pos - k_neg
    extra_pos = min(short, len(pos) - k_pos)
    extra_neg = short - extra_pos
    chosen = pos[: k_pos + extra_pos] + neg[: k_neg + extra_neg]
    return sorted(chosen)


@dataclass(frozen=True)
class AdaConfig:
    """Reinforce-Ada settings, built once from the parsed flags (--ada.*). n is --rollout.n_samples_per_prompt."""

    n: int
    enable: bool = True
    mode: str = "balance"
    round_size: Optional[int] = None  # M, default 2n
    first_round_size: Optional[int] = None  # default round_size
    max_rounds: int = 4  # N
    positive_threshold: float = 0.5
    unresolved: str = "keep"
    selection: str = "first"
    baseline: str = "pool"
    schedule: str = "async"
    seed: int = 42

    def __post_init__(self):
        check_int("n (--rollout.n_samples_per_prompt)", self.n, 2)
        check_choice("ada.mode", self.mode, MODES)
        if self.round_size is not None:
            check_int("ada.round_size", self.round_size, 1)
        if self.first_round_size is not None:
            check_int("ada.first_round_size", self.first_round_size, 1)
        check_int("ada.max_rounds", self.max_rounds, 1)
        check_finite("ada.positive_threshold", self.positive_threshold)
        check_choice("ada.unresolved", self.unresolved, UNRESOLVED_POLICIES)
        check_choice("ada.selection", self.selection, SELECTION_POLICIES)
        check_choice("ada.baseline", self.baseline, BASELINES)
        check_choice("ada.schedule", self.schedule, SCHEDULES)
        check_int("ada.seed", self.seed, 0)
        if self.max_samples < self.n:
            raise ValueError(
                f"ada.first_round_size + ada.round_size x (ada.max_rounds - 1) = {self.max_samples} samples per prompt "
                f"at most, fewer than n={self.n}: no group of n could ever be formed; raise ada.round_size or "
                f"ada.max_rounds"
            )

    @property
    def m(self) -> int:
        """Samples per round after the first."""
        return self.round_size if self.round_size is not None else 2 * self.n

    @property
    def m_first(self) -> int:
        return self.first_round_size if self.first_round_size is not None else self.m

    @property
    def max_samples(self) -> int:
        return self.m_first + self.m * (self.max_rounds - 1)


@dataclass
class PromptPool:
    """One prompt's samples during one training step.

    Feed it rounds with `add_round(scores, rewards, items)`; it keeps the pool in generation order together with
    opaque `items` (e.g. OpenRLHF Experiences), and the running count, sum and sum of squares of the rewards.
    A sample whose reward is None (a reward function that failed) is counted in `failed`, never enters the pool,
    and the round still completes.
    """

    config: AdaConfig
    rng: Optional[random.Random] = None  # used by selection "random"; see make_rng
    scores: List[float] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)
    items: List[Any] = field(default_factory=list)
    rounds: int = 0
    samples: int = 0  # drawn, failed ones included
    failed: int = 0
    num_pos: int = 0
    round_resolved: Optional[int] = None  # the round (1-based) after which the exit rule first held
    tokens: int = 0  # generated tokens, failed samples included (when lengths are given)
    lengths: List[int] = field(default_factory=list)  # generated tokens of each pool sample
    first_round_signal: Optional[bool] = None  # did round 1 alone hold unequal rewards (what GRPO would see)?
    _selected: Optional[List[int]] = None
    _sum: float = 0.0
    _sumsq: float = 0.0

    # -- feeding ------------------------------------------------------------------------------------------------
    def next_round_size(self) -> int:
        return self.config.m_first if self.rounds == 0 else self.config.m

    def add_round(
        self, scores: Sequence, rewards: Sequence, items: Optional[Sequence] = None, lengths: Optional[Sequence] = None
    ) -> None:
        if self.done:
            raise ValueError("add_round on a prompt that is already done (resolved or out of rounds)")
        if len(scores) != len(rewards) or (items is not None and len(items) != len(scores)):
            raise ValueError(
                f"add_round: scores ({len(scores)}), rewards ({len(rewards)}) and items "
                f"({'-' if items is None else len(items)}) must have the same length"
            )
        items = list(items) if items is not None else [None] * len(scores)
        lengths = [int(x) for x in lengths] if lengths is not None else [0] * len(scores)
        self.rounds += 1
        self.samples += len(scores)
        self.tokens += sum(lengths)
        valid = []
        for s, r, it, L in zip(scores, rewards, items, lengths):
            if r is None or s is None or not math.isfinite(float(r)) or not math.isfinite(float(s)):
                self.failed += 1
                continue
            s, r = float(s), float(r)
            valid.append(r)
            self.scores.append(s)
            self.rewards.append(r)
            self.items.append(it)
            self.lengths.append(L)
            self.num_pos += s > self.config.positive_threshold
            self._sum += r
            self._sumsq += r * r
        if self.rounds == 1:
            self.first_round_signal = len(set(valid)) > 1
        # A pool that meets the rule but holds fewer than n samples (pos mode with a small first round, or failed
        # samples) cannot form a group yet: it stays active.
        if self.round_resolved is None and self.exit_rule_holds and self.can_form_group:
            self.round_resolved = self.rounds

    # -- state --------------------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.rewards)

    @property
    def num_neg(self) -> int:
        return self.count - self.num_pos

    @property
    def exit_rule_holds(self) -> bool:
        return exit_reached(self.num_pos, self.num_neg, mode=self.config.mode, n=self.config.n)

    @property
    def resolved(self) -> bool:
        return self.round_resolved is not None

    @property
    def done(self) -> bool:
        """No more rounds: resolved, or max_rounds used."""
        return self.resolved or self.rounds >= self.config.max_rounds

    @property
    def can_form_group(self) -> bool:
        return self.count >= self.config.n

    @property
    def outcome(self) -> str:
        """After `done`: "resolved", "kept" (unresolved, kept), "dropped" (unresolved with unresolved="drop"), or
        "failed" (fewer than n samples with a reward: no group can be formed)."""
        if not self.done:
            return "active"
        if not self.can_form_group:
            return "failed"
        if self.resolved:
            return "resolved"
        return "kept" if self.config.unresolved == "keep" else "dropped"

    @property
    def mean(self) -> float:
        """Pool mean of rewards; 0 for a pool of fewer than two samples (no baseline information)."""
        return self._sum / self.count if self.count >= 2 else 0.0

    @property
    def std(self) -> float:
        """Unbiased pool standard deviation of rewards; 1 for a pool of fewer than two samples."""
        if self.count < 2:
            return 1.0
        var = (self._sumsq - self._sum * self._sum / self.count) / (self.count - 1)
        return math.sqrt(max(var, 0.0))

    @property
    def sum(self) -> float:
        return self._sum

    # -- selection ----------------------------------------------------------------------------------------------
    def select(self) -> List[int]:
        """Pool indices of the kept group (see select_group); [] for a dropped or failed prompt."""
        if self.outcome not in ("resolved", "kept"):
            return []
        if self._selected is None:  # once: a second call must not draw again from rng
            flags = [s > self.config.positive_threshold for s in self.scores]
            self._selected = select_group(flags, self.config.n, policy=self.config.selection, rng=self.rng)
        return list(self._selected)


def step_metrics(pools: Sequence[PromptPool], max_rounds: int) -> dict:
    """Spec section 3 metrics for one step, from the pools of every prompt processed in it (dropped and failed
    prompts included). A kept group has non-zero advantage unless its rewards are all equal; eta is the share of
    generated tokens that belong to kept samples of such groups."""
    if not pools:
        return {}
    P = len(pools)
    kept_groups = [pool for pool in pools if pool.select()]
    kept_signal = [pool for pool in kept_groups if len({pool.rewards[i] for i in pool.select()}) > 1]
    total_tokens = sum(pool.tokens for pool in pools)
    useful_tokens = sum(sum(pool.lengths[i] for i in pool.select()) for pool in kept_signal)
    outcomes = [pool.outcome for pool in pools]
    valid = sum(pool.count for pool in pools)
    metrics = {
        "ada/reward_mean_generated": sum(pool.sum for pool in pools) / valid if valid else 0.0,
        "ada/pass_rate_generated": sum(pool.num_pos for pool in pools) / valid if valid else 0.0,
        "ada/prompts": float(P),
        "ada/samples_generated": float(sum(pool.samples for pool in pools)),
        "ada/tokens_generated": float(total_tokens),
        "ada/samples_per_prompt_mean": sum(pool.samples for pool in pools) / P,
        "ada/samples_per_prompt_max": float(max(pool.samples for pool in pools)),
        "ada/rounds_mean": sum(pool.rounds for pool in pools) / P,
        "ada/resolved_share": outcomes.count("resolved") / P,
        "ada/unresolved_kept": float(outcomes.count("kept")),
        "ada/unresolved_dropped": float(outcomes.count("dropped")),
        "ada/failed_prompts": float(outcomes.count("failed")),
        "ada/failed_samples": float(sum(pool.failed for pool in pools)),
        "ada/nonzero_adv_group_share": len(kept_signal) / len(kept_groups) if kept_groups else 0.0,
        "ada/first_round_signal_share": sum(bool(pool.first_round_signal) for pool in pools) / P,
        "ada/eta": useful_tokens / total_tokens if total_tokens else 0.0,
    }
    for k in range(1, max_rounds + 1):
        metrics[f"ada/resolved_at_round_{k}"] = sum(pool.round_resolved == k for pool in pools) / P
    return metrics


@dataclass(frozen=True)
class SimResult:
    """What `simulate` reports for one prompt. `kept` indexes the prompt's reward stream (generation order)."""

    samples: int
    rounds: int
    resolved: bool
    kept: List[int]
    pool_mean: float
    pool_std: float
    outcome: str
    num_pos: int
    num_neg: int
    round_resolved: Optional[int]


def simulate(
    reward_streams: Sequence[Sequence[float]],
    *,
    n: int,
    round_size: int,
    max_rounds: int,
    mode: str,
    positive_threshold: float = 0.5,
    first_round_size: Optional[int] = None,
    unresolved: str = "keep",
    selection: str = "first",
    seed: int = 0,
) -> List[SimResult]:
    """Run the per-prompt procedure on given reward sequences (stream p = the rewards prompt p would produce, in
    generation order; each round takes the next round-size values; rewards double as scores). Drives PromptPool.
    A stream too short for the rounds the prompt needs is a ValueError."""
    config = AdaConfig(
        n=n,
        mode=mode,
        round_size=round_size,
        first_round_size=first_round_size,
        max_rounds=max_rounds,
        positive_threshold=positive_threshold,
        unresolved=unresolved,
        selection=selection,
        seed=seed,
    )
    results = []
    for p, stream in enumerate(reward_streams):
        pool = PromptPool(config, rng=make_rng(seed, p))
        pos = 0
        while not pool.done:
            size = pool.next_round_size()
            chunk = list(stream[pos : pos + size])
            if len(chunk) < size:
                raise ValueError(
                    f"reward_streams[{p}] has {len(stream)} rewards; round {pool.rounds + 1} needs {pos + size}"
                )
            pool.add_round(chunk, chunk, items=range(pos, pos + size))
            pos += size
        results.append(
            SimResult(
                samples=pool.samples,
                rounds=pool.rounds,
                resolved=pool.resolved,
                kept=[pool.items[i] for i in pool.select()],
                pool_mean=pool.mean,
                pool_std=pool.std,
                outcome=pool.outcome,
                num_pos=pool.num_pos,
                num_neg=pool.num_neg,
                round_resolved=pool.round_resolved,
            )
        )
    return results
