"""Reinforce-Ada: adaptive multi-round sampling per prompt.

Each prompt of a step is sampled round after round (the first round may have its own size) until its pool of
scored samples meets the exit rule (`--ada.mode`, one registered function each), or until max_rounds:

    balance:  #positive >= floor(n/2)  and  #negative >= n - floor(n/2)
    pos:      #positive >= 1

A new exit rule is one function decorated with `@register_exit_rule(name, help)` (see registry.py).

The trained group of n is then picked from the whole pool (k_pos = min(floor(n/2), #pos) positives, k_neg =
min(n - k_pos, #neg) negatives, topped up with remaining positives first, then negatives; earliest generated first
or uniformly at random from a seeded generator), and its baseline uses the statistics of the whole pool.

`PromptPool` is one prompt's state during a step; the OpenRLHF samples generator, the single-machine trainer and
`simulate` (tests, benchmarks) all drive it, so the decision logic lives here once. Pure python/torch.

Two options beyond the authors' algorithm (both off by default; off, everything is exactly as above):

- **cancel** (`--ada.cancel`): a round's samples are fed one at a time as they finish (`start_round`,
  `add_sample`, `end_round`); the exit rule is checked after each, and once it holds `add_sample` returns True:
  the prompt's outstanding requests of the round should be cancelled. Rounds stay the budget cap and the schedule.
  Samples enter the pool in the order they arrive (`cancel_order="arrival"`), or in the order the requests were
  made (`"request"`: the rule is checked on the longest run of finished requests from the round's first); the
  length bias this trades against the tokens saved is explained in docs/algorithms.md. Samples still arriving
  after the stop are `discarded` (they cost tokens but do not enter the pool), and the tokens the cancelled
  requests had generated count as generated.
- **history** (`--ada.history`, see `history.py`): a prompt can get its own first round size from what it showed
  in earlier epochs (`PromptPool(first_round=...)`; the rest of the cap is spread over the remaining rounds), or be
  skipped.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Union

from openrlhf_ada.algorithms._checks import check_choice, check_finite, check_int
from openrlhf_ada.algorithms.baselines import GROUP_BASELINE_ESTIMATORS
from openrlhf_ada.algorithms.estimate import EST_PRESETS, PROMPT_WEIGHTS, EstConfig
from openrlhf_ada.algorithms.history import HistoryConfig, round_schedule
from openrlhf_ada.algorithms.registry import Registry

SELECTION_POLICIES = ("first", "random")
UNRESOLVED_POLICIES = ("keep", "drop")
BASELINES = ("pool", "group")
SCHEDULES = ("async", "sync")
CANCEL_ORDERS = ("arrival", "request")


#: Exit rules by name (`--ada.mode`): fn(num_pos, num_neg, n) -> bool, on the prompt's whole pool.
EXIT_RULES = Registry("exit rule")
register_exit_rule = EXIT_RULES.register


@register_exit_rule("balance", ">= floor(n/2) correct and >= n - floor(n/2) wrong")
def balance_rule(num_pos: int, num_neg: int, n: int) -> bool:
    """Enough of each class for the balanced group of n: floor(n/2) positives and n - floor(n/2) negatives."""
    return num_pos >= n // 2 and num_neg >= n - n // 2


@register_exit_rule("pos", ">= 1 correct")
def pos_rule(num_pos: int, num_neg: int, n: int) -> bool:
    """At least one positive."""
    return num_pos >= 1


def exit_reached(num_pos: int, num_neg: int, *, mode: str, n: int) -> bool:
    """The exit rule `mode` on a pool with `num_pos` positives and `num_neg` negatives, for final group size n."""
    rule = EXIT_RULES.get(mode, "mode")
    check_int("n", n, 2)
    check_int("num_pos", num_pos, 0)
    check_int("num_neg", num_neg, 0)
    return bool(rule(num_pos, num_neg, n))


def make_rng(seed: int, *keys) -> random.Random:
    """A generator that depends only on (seed, keys), e.g. (seed, step, prompt id): per-prompt randomness that does
    not depend on the other prompts or on the order in which rounds complete."""
    return random.Random(":".join(str(k) for k in (seed, *keys)))


def select_group(
    is_positive: Sequence[bool], n: int, *, policy: str = SELECTION_POLICIES[0], rng: Union[random.Random, int, None] = None
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
class Seq:
    """Reinforce-Ada-Seq's settings (--ada.*, --ada.strategy seq), built once from the parsed flags: rounds until the
    exit rule holds, a group of n kept. n is --rollout.n_samples_per_prompt. Est's settings are `Est`'s, not these."""

    n: int
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
    cancel: bool = False  # check the exit rule after every sample and cancel the rest of the round once it holds
    cancel_order: str = "arrival"  # samples enter the pool as they arrive, or in request order (no length bias)
    history: bool = False  # per-prompt first round size and skips from earlier epochs (history.py)
    history_target: float = HistoryConfig.target  # 0: no first-round sizing (measured to cost tokens; history.py)
    history_skip: float = HistoryConfig.skip
    history_window: int = HistoryConfig.window
    # the explicit per-prompt weight of the log objective, on each group's advantages after the pool baseline
    prompt_weight: str = "auto"  # auto: none (the paper's Seq weight is inv_pass_rate, asked for by name)
    prompt_weight_eps: float = 0.01
    prompt_weight_cap: float = 10.0

    def __post_init__(self):
        check_int("n (--rollout.n_samples_per_prompt)", self.n, 2)
        check_choice("ada.mode", self.mode, EXIT_RULES.names())
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
        _check_bools(self, "cancel", "history")
        check_choice("ada.cancel_order", self.cancel_order, CANCEL_ORDERS)
        _ = self.history_config  # checks ada.history_target, ada.history_skip, ada.history_window
        _check_prompt_weight(self)
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
        """The per-prompt cap of samples (history-sized first rounds keep it)."""
        return self.m_first + self.m * (self.max_rounds - 1)

    @property
    def requests_per_prompt(self) -> int:
        """The most requests one prompt has out at once: its largest round (a history-sized first one: the cap)."""
        history_sized = self.history and self.history_target > 0
        return self.max_samples if history_sized else max(self.m_first, self.m)

    @property
    def history_config(self) -> HistoryConfig:
        return HistoryConfig(target=self.history_target, skip=self.history_skip, window=self.history_window)

    def exit_rule_holds(self, num_pos: int, num_neg: int) -> bool:
        """The exit rule of --ada.mode on a pool of `num_pos` positives and `num_neg` negatives."""
        return exit_reached(num_pos, num_neg, mode=self.mode, n=self.n)

    def kept(self, scores: Sequence[float], rng: Optional[random.Random]) -> List[int]:
        """Pool indices of the group of n a done pool keeps (select_group under --ada.selection)."""
        flags = [s > self.positive_threshold for s in scores]
        return select_group(flags, self.n, policy=self.selection, rng=rng)

    def advantage_baseline(self, estimator: str) -> Optional[str]:
        """The group baseline the trained groups get under `estimator` (--algo.advantage.estimator): "pool" (each kept
        group against its prompt's whole pool, `--ada.baseline pool` on a group estimator) or None (upstream's
        advantages on the groups)."""
        return "pool" if self.baseline == "pool" and estimator in GROUP_BASELINE_ESTIMATORS else None

    @property
    def weight_kind(self) -> str:
        """The --ada.prompt_weight in force (auto: none)."""
        return "none" if self.prompt_weight == "auto" else self.prompt_weight


def _check_bools(config, *names: str) -> None:
    for name in names:
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"ada.{name}={getattr(config, name)!r} is invalid; accepted values: True, False")


def _check_prompt_weight(config) -> None:
    check_choice("ada.prompt_weight", config.prompt_weight, ("auto",) + PROMPT_WEIGHTS)
    check_finite("ada.prompt_weight_eps", config.prompt_weight_eps, minimum=0.0)
    check_finite("ada.prompt_weight_cap", config.prompt_weight_cap, minimum=1.0)


@dataclass(frozen=True)
class FixedN:
    """One round of n samples, every sample kept as the prompt's group (n may be 1): sampling with a fixed n
    (Reinforce-Ada off), and each Est prompt's pool with its allocated count. The prompt is "resolved" when a sample
    is correct. A `PromptPool` reads from it what it reads from a `Seq`; what a single round fixes is a
    constant here (no later round, no cancel, no history, nothing dropped, no prompt weight, upstream's advantages)."""

    n: int
    seed: int = Seq.seed
    positive_threshold: float = Seq.positive_threshold
    # what one round of n fixes (class constants, not fields)
    max_rounds = 1
    unresolved = "keep"
    cancel = False
    cancel_order = "arrival"
    history = False
    schedule = "async"
    weight_kind = "none"

    def __post_init__(self):
        check_int("n", self.n, 1)
        check_finite("positive_threshold", self.positive_threshold)
        check_int("seed", self.seed, 0)

    @property
    def m(self) -> int:
        return self.n

    m_first = m
    max_samples = m
    requests_per_prompt = m

    @property
    def history_config(self) -> HistoryConfig:
        """No history of its own (--ada.skip greso may keep one: skip_rules.py)."""
        return HistoryConfig()

    def advantage_baseline(self, estimator: str) -> None:
        """Upstream's advantages."""
        return None

    def exit_rule_holds(self, num_pos: int, num_neg: int) -> bool:
        """Resolved once a sample is correct."""
        return num_pos >= 1

    def kept(self, scores: Sequence[float], rng: Optional[random.Random]) -> List[int]:
        """Every sample, in generation order."""
        return list(range(len(scores)))


@dataclass(frozen=True)
class Est:
    """Reinforce-Ada-Est's settings (--ada.strategy est), built once from the parsed flags: one pass per step, each
    prompt's count allocated from its estimated pass rate (estimate.py), every sample kept. n is the budget
    (--rollout.n_samples_per_prompt, the mean count). The preset (`--ada.est_preset`) gives every allocation setting
    left None (`--ada.est_*` unset); `resolved` is the result. Each prompt's pool is a `FixedN` of its count; what
    one pass fixes is a constant here (no later round, no cancel, no first-round sizing)."""

    n: int
    preset: str = "paper"  # estimate.EST_PRESETS
    allocation: Optional[str] = None  # --ada.est_allocation
    n_min: Optional[int] = None  # --ada.est_min
    n_max: Optional[int] = None  # --ada.est_max
    decay: Optional[float] = None  # --ada.est_decay
    alpha: Optional[float] = None  # --ada.est_alpha
    beta: Optional[float] = None  # --ada.est_beta
    eps: Optional[float] = None  # --ada.est_eps
    positive_threshold: float = Seq.positive_threshold
    seed: int = Seq.seed
    history: bool = False  # --ada.history: skip prompts saturated in earlier epochs (the estimate is kept regardless)
    history_skip: float = HistoryConfig.skip
    history_window: int = HistoryConfig.window
    prompt_weight: str = "auto"  # auto: the preset's (paper: inv_sqrt_pass_rate, authors: none)
    prompt_weight_eps: float = Seq.prompt_weight_eps
    prompt_weight_cap: float = Seq.prompt_weight_cap
    # what one pass fixes (class constants, not fields)
    max_rounds = 1
    schedule = "async"
    cancel = False
    history_target = 0.0

    def __post_init__(self):
        check_int("n (--rollout.n_samples_per_prompt)", self.n, 2)
        check_finite("ada.positive_threshold", self.positive_threshold)
        check_int("ada.seed", self.seed, 0)
        _check_bools(self, "history")
        _ = self.history_config  # checks ada.history_skip, ada.history_window, ada.est_decay
        _check_prompt_weight(self)
        _ = self.resolved  # checks the preset and the --ada.est_* values

    @property
    def resolved(self) -> EstConfig:
        """The estimator, allocation and advantage in force: the preset's values, each one set here in their place."""
        return EstConfig.from_preset(self.preset, self.n, allocation=self.allocation, n_min=self.n_min,
                                     n_max=self.n_max, decay=self.decay, alpha=self.alpha, beta=self.beta,
                                     eps=self.eps)

    @property
    def max_samples(self) -> int:
        """The most samples one prompt gets (the allocation's bound; none: every prompt's share of the budget)."""
        return self.resolved.n_max or self.n

    @property
    def requests_per_prompt(self) -> int:
        """Room for a step's requests per prompt: twice the budget n. The step sends exactly n per prompt in all,
        but the counts vary by prompt and the engines are balanced by requests at each dispatch of one count, so
        one engine can get well above its even share."""
        return 2 * self.n

    @property
    def history_config(self) -> HistoryConfig:
        """The history keeps the Ada-EMA counts (and the records --ada.history's skip reads)."""
        return HistoryConfig(skip=self.history_skip, window=self.history_window, ema=True,
                             ema_decay=self.resolved.decay)

    def advantage_baseline(self, estimator: str) -> str:
        """The preset's: "group" (each group against its own samples) or "authors" (the authors' GRPO advantage)."""
        return self.resolved.baseline

    @property
    def weight_kind(self) -> str:
        """The --ada.prompt_weight in force (auto: the preset's)."""
        return EST_PRESETS[self.preset].prompt_weight if self.prompt_weight == "auto" else self.prompt_weight


@dataclass
class _Round:
    """A round in flight (per-sample feeding): which requests came back, those waiting for their turn (request
    order, or every one while cancel is off), and whether the prompt stopped in it."""

    size: int
    arrived: set = field(default_factory=set)
    waiting: dict = field(default_factory=dict)  # request index -> (score, reward, item, length)
    next_index: int = 0  # request order: the first request not yet in the pool
    valid: List[float] = field(default_factory=list)  # rewards of this round's samples that entered the pool
    stopped: bool = False  # the exit rule held mid-round: the rest is cancelled


@dataclass
class PromptPool:
    """One prompt's samples during one training step.

    Feed it rounds with `add_round(scores, rewards, items)`; it keeps the pool in generation order together with
    opaque `items` (e.g. OpenRLHF Experiences), and the running count, sum and sum of squares of the rewards.
    A sample whose reward is None (a reward function that failed) is counted in `failed`, never enters the pool,
    and the round still completes.

    Per-sample feeding (what `--ada.cancel` needs): `size = start_round()`, then `add_sample(index, ...)` for each
    of the round's requests as it comes back (index = its position 0..size-1 in the round's requests); a True return
    means: cancel this prompt's outstanding requests. Then `end_round(cancelled_tokens)` once every request came back
    or was cancelled. With config.cancel off this gives exactly what `add_round` gives with the samples in request
    order. `first_round` (history) replaces the configured schedule by `round_schedule(first_round, cap, max_rounds)`.
    """

    config: Union[Seq, FixedN]  # Seq's rounds, or one round of n (fixed n, each Est prompt)
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
    first_round: Optional[int] = None  # this prompt's own first round size (history); None: the configured one
    cancelled: int = 0  # requests cancelled (started, never came back)
    cancelled_tokens: int = 0  # tokens those requests had generated (included in `tokens`)
    discarded: int = 0  # samples that came back after the stop, or beyond the request-order run: not in the pool
    _open: Optional[_Round] = None
    _schedule: Optional[List[int]] = None
    _selected: Optional[List[int]] = None
    _sum: float = 0.0
    _sumsq: float = 0.0

    # -- feeding ------------------------------------------------------------------------------------------------
    def next_round_size(self) -> int:
        """Requests of the next round (0: the per-prompt cap is used up)."""
        if self.first_round is None:
            return self.config.m_first if self.rounds == 0 else self.config.m
        if self._schedule is None:
            self._schedule = round_schedule(self.first_round, self.config.max_samples, self.config.max_rounds)
        return self._schedule[self.rounds] if self.rounds < len(self._schedule) else 0

    def add_round(
        self, scores: Sequence, rewards: Sequence, items: Optional[Sequence] = None, lengths: Optional[Sequence] = None
    ) -> None:
        """A whole round at once, samples in request order; the exit rule is checked after it."""
        if self.done:
            raise ValueError("add_round on a prompt that is already done (resolved or out of rounds)")
        if self._open is not None:
            raise ValueError("add_round while a round fed sample by sample is open; call end_round first")
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
        valid = [r for r in (self._admit(s, r, it, L) for s, r, it, L in zip(scores, rewards, items, lengths))
                 if r is not None]
        self._close_round(valid)

    def start_round(self) -> int:
        """Open the next round for per-sample feeding; returns how many requests to send."""
        if self._open is not None:
            raise ValueError("start_round while a round is open; call end_round first")
        if self.done:
            raise ValueError("start_round on a prompt that is already done (resolved or out of rounds)")
        size = self.next_round_size()
        self.rounds += 1
        self.samples += size
        self._open = _Round(size)
        return size

    def add_sample(self, index: int, score, reward, item: Any = None, length: int = 0) -> bool:
        """One sample of the open round came back (request `index` of the round; failed: reward None). Returns True
        when this prompt's outstanding requests of the round should be cancelled (config.cancel and the exit rule
        holds; from then on every late sample is discarded and True is returned again)."""
        rnd = self._open
        if rnd is None:
            raise ValueError("add_sample without an open round; call start_round first")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < rnd.size or index in rnd.arrived:
            raise ValueError(f"add_sample: index={index!r} is invalid; accepted values: request indices 0..{rnd.size - 1} "
                             f"of this round not yet returned (returned: {sorted(rnd.arrived)})")
        rnd.arrived.add(index)
        self.tokens += int(length)
        if rnd.stopped:
            self.discarded += 1
            return True
        rnd.waiting[index] = (score, reward, item, int(length))
        if not self.config.cancel:
            return False  # admitted in request order by end_round
        if self.config.cancel_order == "arrival":
            self._admit_checked(rnd, index)
        else:
            while rnd.next_index in rnd.waiting and not rnd.stopped:
                self._admit_checked(rnd, rnd.next_index)
                rnd.next_index += 1
        if rnd.stopped:
            self.discarded += len(rnd.waiting)  # finished beyond the request-order run: not in the pool
            rnd.waiting.clear()
        return rnd.stopped

    def end_round(self, cancelled_tokens: int = 0) -> None:
        """Close the open round: every request came back, or the prompt stopped and the rest were cancelled, having
        generated `cancelled_tokens` tokens between them (counted as generated)."""
        rnd = self._open
        if rnd is None:
            raise ValueError("end_round without an open round")
        missing = rnd.size - len(rnd.arrived)
        if missing and not rnd.stopped:
            raise ValueError(f"end_round: {missing} of the round's {rnd.size} requests never came back and the prompt "
                             "did not stop; report each request (a failed one with reward None) before end_round")
        check_int("cancelled_tokens", cancelled_tokens, 0)
        if cancelled_tokens and not missing:
            raise ValueError(f"end_round: cancelled_tokens={cancelled_tokens} but no request was cancelled")
        for index in sorted(rnd.waiting):  # cancel off: the whole round in request order
            self._admit_into(rnd, index)
        rnd.waiting.clear()
        self.cancelled += missing
        self.cancelled_tokens += cancelled_tokens
        self.tokens += cancelled_tokens
        self._open = None
        self._close_round(rnd.valid)

    @property
    def should_cancel(self) -> bool:
        """The open round's outstanding requests should be cancelled (the prompt stopped in it)."""
        return self._open is not None and self._open.stopped

    def _admit(self, s, r, it, L) -> Optional[float]:
        """Put one sample into the pool (a failed one only into `failed`); its reward, or None when failed."""
        if r is None or s is None or not math.isfinite(float(r)) or not math.isfinite(float(s)):
            self.failed += 1
            return None
        s, r = float(s), float(r)
        self.scores.append(s)
        self.rewards.append(r)
        self.items.append(it)
        self.lengths.append(L)
        self.num_pos += s > self.config.positive_threshold
        self._sum += r
        self._sumsq += r * r
        return r

    def _admit_into(self, rnd: _Round, index: int) -> None:
        r = self._admit(*rnd.waiting.pop(index))
        if r is not None:
            rnd.valid.append(r)

    def _admit_checked(self, rnd: _Round, index: int) -> None:
        """Admit a sample mid-round (cancel on) and stop the round when the prompt is now resolved."""
        self._admit_into(rnd, index)
        if self.round_resolved is None and self.exit_rule_holds and self.can_form_group:
            self.round_resolved = self.rounds
            rnd.stopped = True

    def _close_round(self, valid: List[float]) -> None:
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
        return self.config.exit_rule_holds(self.num_pos, self.num_neg)

    @property
    def resolved(self) -> bool:
        return self.round_resolved is not None

    @property
    def done(self) -> bool:
        """No more rounds: resolved, or max_rounds (or the per-prompt cap) used; never while a round is open."""
        if self._open is not None:
            return False
        return self.resolved or self.rounds >= self.config.max_rounds or (
            self.first_round is not None and self.next_round_size() == 0)

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
            self._selected = self.config.kept(self.scores, self.rng)
        return list(self._selected)


def pool_metrics(pools: Sequence[PromptPool], max_rounds: int, skipped: int = 0) -> dict:
    """The Reinforce-Ada metrics of one step, from the pools of every prompt processed in it (dropped and failed
    prompts included). A kept group has non-zero advantage unless its rewards are all equal; eta is the share of
    generated tokens that belong to kept samples of such groups (tokens of cancelled requests included).
    With --ada.cancel or --ada.history on, also: cancelled requests and their tokens, discarded samples, and
    `skipped` (prompts the history skipped this step; they have no pool)."""
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
    if any(pool.config.cancel or pool.config.history for pool in pools):
        metrics["ada/cancelled_requests"] = float(sum(pool.cancelled for pool in pools))
        metrics["ada/cancelled_tokens"] = float(sum(pool.cancelled_tokens for pool in pools))
        metrics["ada/discarded_samples"] = float(sum(pool.discarded for pool in pools))
        metrics["ada/skipped_prompts"] = float(skipped)
        metrics["ada/skipped_share"] = skipped / (skipped + P)
    return metrics
