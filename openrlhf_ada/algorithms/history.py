"""Per-prompt history for Reinforce-Ada (`--ada.history`): what each prompt showed in earlier epochs, and what the
sampler decides from it.

A prompt is known by a stable key, the sha256 of its text (`prompt_key`; Python's `hash` changes between
processes). For every epoch in which a prompt was sampled, its record holds that epoch's number of correct and
wrong samples. Two per-prompt decisions are made from the record, both pure and seeded:

- **skip** (`skip_decision`): a prompt whose last `window` records are all saturated (every sample correct, or
  every sample wrong) is skipped with probability `skip`, drawn from a generator keyed by (seed, epoch, key). A
  skipped prompt generates nothing and trains nothing; the sampler counts it and takes the next prompt. Keeping the
  probability below 1 re-probes saturated prompts, so a prompt that the policy starts to solve (or forgets) is seen
  again.
- **first round size** (`first_round_for`): the pass rate gets a Beta posterior (prior Beta(prior_a, prior_b) plus
  the record's counts, older epochs discounted by `decay` per epoch of age), and the first round is the smallest
  k in [n, cap] for which k samples hold both classes with probability >= `target` under the posterior
  (`signal_probability`). A prompt without an earlier record, a target of 0, or a posterior under which even the
  cap does not reach the target (a prompt that will take several rounds whatever its first one) keeps the
  configured first round.

Measured (benchmarks/sampling_efficiency.py, multi-epoch model): skipping cuts generated tokens per trained group
with signal wherever prompts saturate, at the price of some prompts that would have shown signal again; sizing the
first round lowers the mean rounds per prompt but costs tokens (a larger round overshoots without --ada.cancel), so
it is off unless a target is given.

`round_schedule` turns a first round into the prompt's whole schedule: the rest of the per-prompt cap is spread
as evenly as possible over the remaining rounds, so the cap and the number of rounds stay those configured (and a
first round equal to the configured one gives the configured schedule).

With `ema` on (Reinforce-Ada-Est, `--ada.strategy est`), every record also updates the prompt's Ada-EMA counts
(estimate.py), which are saved and resumed with the rest.

`PromptHistory` is the store: a dict from key to records, serialisable to and from a plain dict (checkpoints).
Pure python (hashlib for the key).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from openrlhf_ada.algorithms._checks import check_finite, check_int
from openrlhf_ada.algorithms.estimate import ema_update

HISTORY_FORMAT = 1  # version of the dict written by PromptHistory.to_dict


def prompt_key(text: str) -> str:
    """Stable key of a prompt: the hex sha256 of its UTF-8 text (the same in every process and run)."""
    if not isinstance(text, str):
        raise ValueError(f"prompt_key needs the prompt text as a str; got {type(text).__name__}")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class HistoryConfig:
    """How the history is read. `target`, `skip` and `window` are flags (--ada.history_*); the prior, the decay
    and how many epochs are kept per prompt are fixed here."""

    target: float = 0.0  # P(both classes in the first round) it is sized for, e.g. 0.9; 0: the configured rounds
    skip: float = 0.5  # probability of skipping a prompt saturated in its last `window` records
    window: int = 1  # records (most recent sampled epochs) that must all be saturated for a skip
    prior_a: float = 1.0  # Beta prior on the pass rate: uniform
    prior_b: float = 1.0
    decay: float = 0.5  # weight of a record one epoch older than the last (pass rates move while training)
    keep: int = 4  # records kept per prompt
    # Reinforce-Ada-Est's estimator (estimate.py): discounted counts per prompt, updated at every record
    ema: bool = False
    ema_decay: float = 0.9

    def __post_init__(self):
        check_finite("ada.history_target", self.target, minimum=0.0)
        if not 0.0 <= float(self.target) < 1.0:
            raise ValueError(f"ada.history_target={self.target!r} is invalid; accepted values: numbers in [0, 1) "
                             "(0: no sizing)")
        check_finite("ada.history_skip", self.skip, minimum=0.0)
        if float(self.skip) > 1.0:
            raise ValueError(f"ada.history_skip={self.skip!r} is invalid; accepted values: numbers in [0, 1]")
        check_int("ada.history_window", self.window, 1)
        check_finite("history prior_a", self.prior_a, minimum=1e-9)
        check_finite("history prior_b", self.prior_b, minimum=1e-9)
        check_finite("history decay", self.decay, minimum=0.0)
        check_int("history keep", self.keep, 1)
        if self.keep < self.window:
            raise ValueError(f"history keep={self.keep} < ada.history_window={self.window}: the window must fit")
        check_finite("ada.est_decay", self.ema_decay, minimum=0.0)
        if float(self.ema_decay) > 1.0:
            raise ValueError(f"ada.est_decay={self.ema_decay!r} is invalid; accepted values: numbers in [0, 1]")


@dataclass(frozen=True)
class EpochRecord:
    """What one prompt showed in one epoch: correct and wrong samples (failed ones not counted)."""

    epoch: int
    num_pos: int
    num_neg: int

    @property
    def saturated(self) -> bool:
        """All correct or all wrong (and at least one sample)."""
        return self.num_pos + self.num_neg > 0 and (self.num_pos == 0 or self.num_neg == 0)


# -- the decisions ---------------------------------------------------------------------------------------------------
def posterior(records: Sequence[EpochRecord], epoch: int, config: HistoryConfig) -> Tuple[float, float]:
    """Beta(a, b) posterior of the pass rate at `epoch` from the records of earlier epochs: the prior plus each
    record's counts weighted by decay ** (epoch - record.epoch - 1) (the last epoch counts fully). Records of
    `epoch` itself or later are ignored (a decision never reads the present)."""
    a, b = float(config.prior_a), float(config.prior_b)
    for r in records:
        if r.epoch < epoch:
            w = float(config.decay) ** (epoch - r.epoch - 1)
            a += w * r.num_pos
            b += w * r.num_neg
    return a, b


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def signal_probability(k: int, a: float, b: float) -> float:
    """P(k fresh samples hold both classes) when the pass rate is Beta(a, b): 1 - E[p^k] - E[(1-p)^k], with
    E[p^k] = B(a + k, b) / B(a, b)."""
    check_int("k", k, 0)
    check_finite("a", a, minimum=1e-12)
    check_finite("b", b, minimum=1e-12)
    if k == 0:
        return 0.0
    all_pos = math.exp(_log_beta(a + k, b) - _log_beta(a, b))
    all_neg = math.exp(_log_beta(a, b + k) - _log_beta(a, b))
    return max(0.0, 1.0 - all_pos - all_neg)


def first_round_for(records: Sequence[EpochRecord], epoch: int, *, config: HistoryConfig, n: int, cap: int
                    ) -> Optional[int]:
    """The prompt's first round size from its history: the smallest k in [n, cap] with signal_probability >=
    config.target under the posterior. None (keep the configured first round) without an earlier record, with
    target 0, or when not even the cap reaches the target."""
    check_int("n", n, 2)
    check_int("cap", cap, n)
    if config.target <= 0.0 or not any(r.epoch < epoch for r in records):
        return None
    a, b = posterior(records, epoch, config)
    for k in range(n, cap + 1):
        if signal_probability(k, a, b) >= config.target:
            return k
    return None


def skip_decision(records: Sequence[EpochRecord], epoch: int, key: str, *, config: HistoryConfig, seed: int) -> bool:
    """Skip the prompt this epoch? Only when its last `window` earlier records are all saturated; then with
    probability config.skip, from a generator keyed by (seed, epoch, key) alone (the same whatever the other
    prompts do or the order they come in)."""
    earlier = [r for r in records if r.epoch < epoch][-config.window:]
    if len(earlier) < config.window or not all(r.saturated for r in earlier):
        return False
    if config.skip <= 0.0:
        return False
    return random.Random(f"ada-skip:{seed}:{epoch}:{key}").random() < config.skip


def round_schedule(first: int, cap: int, max_rounds: int) -> List[int]:
    """Round sizes for a prompt whose first round is `first` (clipped to the cap): the remaining cap - first samples
    spread over the other max_rounds - 1 rounds as evenly as possible, larger rounds first; empty rounds left out.
    round_schedule(8, 32, 4) == [8, 8, 8, 8] (the authors'); (5, 32, 4) -> [5, 9, 9, 9]; (32, 32, 4) -> [32]."""
    check_int("first", first, 1)
    check_int("cap", cap, 1)
    check_int("max_rounds", max_rounds, 1)
    first = min(first, cap)
    rest, later = cap - first, max_rounds - 1
    if later == 0:
        return [first]
    base, extra = divmod(rest, later)
    return [first] + [s for s in ([base + 1] * extra + [base] * (later - extra)) if s > 0]


@dataclass(frozen=True)
class Plan:
    """What the sampler does with one prompt this epoch."""

    skip: bool
    first_round: Optional[int]  # None: the configured first round
    posterior: Optional[Tuple[float, float]]  # Beta(a, b); None without history


# -- the store -------------------------------------------------------------------------------------------------------
@dataclass
class PromptHistory:
    """Records per prompt key (most recent last, at most config.keep each). Feed it with `record` once a prompt's
    pool is done; ask it with `plan`. `to_dict` / `from_dict` round-trip through plain python (json-safe)."""

    config: HistoryConfig = field(default_factory=HistoryConfig)
    records: Dict[str, List[EpochRecord]] = field(default_factory=dict)
    # with config.ema: Ada-EMA's (N_total, N_pos) per key, one update per `record` call (estimate.ema_update)
    ema: Dict[str, Tuple[float, float]] = field(default_factory=dict)

    def get(self, key: str) -> List[EpochRecord]:
        return list(self.records.get(key, ()))

    def record(self, key: str, epoch: int, num_pos: int, num_neg: int) -> None:
        """Add a prompt's outcome for `epoch` (added to that epoch's counts when the prompt was already seen in it)."""
        check_int("epoch", epoch, 0)
        check_int("num_pos", num_pos, 0)
        check_int("num_neg", num_neg, 0)
        entries = self.records.setdefault(key, [])
        if entries and entries[-1].epoch == epoch:
            last = entries[-1]
            entries[-1] = EpochRecord(epoch, last.num_pos + num_pos, last.num_neg + num_neg)
        elif entries and entries[-1].epoch > epoch:
            raise ValueError(f"record for epoch {epoch} after one for epoch {entries[-1].epoch}: epochs only go up")
        else:
            entries.append(EpochRecord(epoch, num_pos, num_neg))
        del entries[: -self.config.keep]
        if self.config.ema:
            total, pos = self.ema.get(key, (0.0, 0.0))
            self.ema[key] = ema_update(total, pos, num_pos + num_neg, num_pos, self.config.ema_decay)

    def ema_counts(self, key: str) -> Tuple[float, float]:
        """Ada-EMA's discounted (N_total, N_pos) of a prompt; (0, 0) for one never recorded."""
        return self.ema.get(key, (0.0, 0.0))

    def plan(self, key: str, epoch: int, *, n: int, cap: int, seed: int) -> Plan:
        """Skip this prompt, or sample it with which first round (see the module docstring)."""
        records = self.get(key)
        if skip_decision(records, epoch, key, config=self.config, seed=seed):
            return Plan(True, None, None)
        first = first_round_for(records, epoch, config=self.config, n=n, cap=cap)
        post = posterior(records, epoch, self.config) if any(r.epoch < epoch for r in records) else None
        return Plan(False, first, post)

    def to_dict(self) -> dict:
        out = {"format": HISTORY_FORMAT,
               "prompts": {k: [[r.epoch, r.num_pos, r.num_neg] for r in v] for k, v in self.records.items()}}
        if self.config.ema:
            out["ema"] = {k: [total, pos] for k, (total, pos) in self.ema.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict, config: Optional[HistoryConfig] = None) -> "PromptHistory":
        if not isinstance(data, dict) or data.get("format") != HISTORY_FORMAT or not isinstance(data.get("prompts"), dict):
            raise ValueError(f"not a prompt history of format {HISTORY_FORMAT}: expected "
                             "{'format': 1, 'prompts': {key: [[epoch, num_pos, num_neg], ...]}}")
        history = cls(config or HistoryConfig())
        for key, rows in data["prompts"].items():
            for row in rows:
                if len(row) != 3:
                    raise ValueError(f"prompt history entry {key!r}: {row!r} is not [epoch, num_pos, num_neg]")
                history.record(str(key), *(int(x) for x in row))
        if history.config.ema and "ema" in data:  # else: the records replayed, one update each
            saved = data["ema"]
            if not isinstance(saved, dict) or any(not isinstance(v, (list, tuple)) or len(v) != 2 or
                                                  not 0 <= float(v[1]) <= float(v[0]) for v in saved.values()):
                raise ValueError("prompt history 'ema': expected {key: [N_total, N_pos]} with 0 <= N_pos <= N_total")
            history.ema = {str(k): (float(v[0]), float(v[1])) for k, v in saved.items()}
        return history

    def __len__(self) -> int:
        return len(self.records)
