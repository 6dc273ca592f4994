"""The checks of a design's rules, fixed in its plan before its runs: each one a pure function of measured numbers
that says whether the rule holds and, when it does not, what to do (the runner stops; the plan is amended in a
commit before the data it judges).

The current learning design (docs/learning.md, "The current design") states six rules; the runner
(`benchmarks/learning_comparison.py`) applies these checks at the points the plan names:

- `pool_rule` (rule 1): the base model's pass rate on the training pool within [low, high], before any training run;
- `aa_rule` (rule 2): the A/A pair (the same setting and seed twice) drew the same step-1 samples (shared draws
  engaged): equal step-1 metrics;
- `time_rule` (rule 5): the A/A runs' measured minutes against the plan's estimate x its tolerance, and the seeds
  that fit the machine time at the measured rate;
- `shared_draws_across` (rule 6): at step 1, Seq's first round and GRPO's samples are the same requests, so one's
  first-round signal share equals one minus the other's zero-advantage group share.

The equal-token design (docs/learning.md, "Seq against GRPO at equal generated tokens") adds:

- `reproduction_rule`: a rerun's values at update 24 equal its committed run's, bit for bit (the Seq A/A run's
  differences are read with it too, without stopping anything);
- `rerun_estimate` and `equal_tokens_time_rule`: each run's minutes estimated from its committed run, and the machine
  time projected from the runs so far.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Tuple


def pool_rule(pass_rate: float, low: float, high: float) -> dict:
    """Rule 1: the base model's pass rate on the training pool must lie in [low, high]."""
    ok = low <= pass_rate <= high
    why = (f"the base model's pass rate on the training pool is {pass_rate:.4f}, "
           + (f"within [{low:g}, {high:g}]" if ok else
              f"outside [{low:g}, {high:g}]: no training run starts; amend the plan in a commit first"))
    return {"ok": ok, "pass_rate": pass_rate, "why": why}


def aa_rule(first: Mapping[str, float], second: Mapping[str, float], keys: Sequence[str]) -> dict:
    """Rule 2: the two runs of the A/A pair must have equal step-1 values of `keys` (a key missing in either run
    counts as a difference)."""
    differ = [k for k in keys if k not in first or k not in second or first[k] != second[k]]
    shown = ", ".join(f"{k} {first.get(k)} and {second.get(k)}" for k in keys)
    why = (f"step 1 of the A/A pair: {shown}: "
           + ("equal, shared draws engaged" if not differ else
              f"{', '.join(differ)} differ: shared draws are not engaged; the design stops, and the plan is amended "
              "before any other run"))
    return {"ok": not differ, "differ": differ, "why": why}


def seeds_that_fit(spent_minutes: float, minutes_per_pair: float, hours: float, done_in_first: float = 0.0) -> int:
    """How many seeds of pairs fit `hours` when `spent_minutes` are spent already and a pair takes
    `minutes_per_pair`, `done_in_first` of which are already done for the first seed: the largest n with
    spent + n x pair - done_in_first <= hours x 60 (0 if none)."""
    left = hours * 60.0 - spent_minutes + done_in_first
    return max(0, math.floor(left / minutes_per_pair + 1e-9)) if minutes_per_pair > 0 else 0


def time_rule(aa_minutes: Sequence[float], estimates: Mapping[str, float], reference: str, tolerance: float,
              hours: float, spent_minutes: float, planned_seeds: int) -> dict:
    """Rule 5: the A/A runs (the `reference` setting's) took `aa_minutes`; the plan estimated `estimates[reference]`
    a run. When their mean exceeds `tolerance` x that estimate, every estimate is scaled by the measured ratio and the
    seeds that fit `hours` are computed (`spent_minutes` so far: base model and A/A; seed 1's reference run is the
    A/A's first); the design stops for an amendment when fewer than `planned_seeds` fit. A design already cut to what
    fits passes."""
    measured = sum(aa_minutes) / len(aa_minutes)
    ratio = measured / estimates[reference]
    scaled = {k: v * max(ratio, 1.0) for k, v in estimates.items()}
    pair = sum(scaled.values())
    fit = seeds_that_fit(spent_minutes, pair, hours, done_in_first=scaled[reference])
    over = ratio > tolerance
    ok = not over or fit >= planned_seeds
    why = (f"the A/A runs took {measured:.1f} min on average against the plan's {estimates[reference]:g} "
           f"(x {ratio:.2f}, tolerance x {tolerance:g})")
    if over:
        why += (f"; at that rate a pair takes {pair:.1f} min and, with {spent_minutes:.1f} min spent, {fit} seeds fit "
                f"{hours:g} hours")
        why += (f": the plan's {planned_seeds} seeds fit" if ok else
                f", fewer than the plan's {planned_seeds}: the design stops; cut the seeds to {fit} in a commit before "
                "seed 2 runs, and the report states the effect the smaller design can detect")
    return {"ok": ok, "ratio": ratio, "measured": measured, "fit": fit, "pair_minutes": pair, "why": why}


def shared_draws_across(first_round_signal_share: Optional[float], zero_adv_group_share: Optional[float],
                        tolerance: float = 1e-9) -> Tuple[Optional[bool], str]:
    """Rule 6's cross-setting check at step 1: Seq's `ada/first_round_signal_share` equals one minus GRPO's
    `zero_adv_group_share` of the same seed when their first samples were the same requests. None when either is
    missing."""
    if first_round_signal_share is None or zero_adv_group_share is None:
        return None, "not logged at step 1"
    ok = abs(first_round_signal_share - (1.0 - zero_adv_group_share)) <= tolerance
    return ok, (f"Seq's first-round signal share {first_round_signal_share:.4f}, GRPO's 1 - zero-advantage share "
                f"{1.0 - zero_adv_group_share:.4f}: " + ("equal" if ok else "different"))


def reproduction_rule(rerun: Optional[Mapping[str, float]], committed: Optional[Mapping[str, float]],
                      keys: Sequence[str]) -> dict:
    """A rerun's values of `keys` at the reproduction point must equal its committed run's exactly (floats as the
    runs' done.json hold them; a missing value counts as a difference). `rerun` None: not evaluated there."""
    if rerun is None or committed is None:
        what = "the rerun" if rerun is None else "the committed run"
        return {"ok": False, "differ": list(keys), "differences": {},
                "why": f"{what} has no evaluation at the reproduction point"}
    differ = [k for k in keys if rerun.get(k) is None or committed.get(k) is None or rerun[k] != committed[k]]
    differences = {k: rerun[k] - committed[k] for k in keys
                   if rerun.get(k) is not None and committed.get(k) is not None}
    shown = ", ".join(f"{k} {rerun.get(k)!r} against {committed.get(k)!r}" for k in keys)
    return {"ok": not differ, "differ": differ, "differences": differences,
            "why": f"{shown}: " + ("equal" if not differ else f"{', '.join(differ)} differ")}


def rerun_estimate(process_seconds: float, eval_seconds: float, tokens: float, late_tokens_per_step: float,
                   late_seconds_per_step: float, budget: float, updates: int, eval_every: int) -> dict:
    """A rerun's machine minutes, from its committed run of `updates` updates (`process_seconds` in all, `tokens`
    generated, an evaluation `eval_seconds` on average, its last updates `late_tokens_per_step` and
    `late_seconds_per_step`): the committed run's time, plus the updates to the first step whose running total
    reaches `budget` at the late rate, plus the evaluations after update `updates` (every `eval_every`-th update
    before that step, and the one there)."""
    extra = max(0, math.ceil((budget - tokens) / late_tokens_per_step))
    crossing = updates + extra
    evaluations = 1 + sum(1 for s in range(updates + 1, crossing) if s % eval_every == 0) if extra else 0
    minutes = (process_seconds + extra * late_seconds_per_step + evaluations * eval_seconds) / 60.0
    return {"crossing": crossing, "extra_steps": extra, "evaluations": evaluations, "minutes": minutes}


def equal_tokens_time_rule(spent_minutes: float, finished: Sequence[Tuple[float, float]], left: Sequence[float],
                           hours: float) -> dict:
    """The machine time before a run: `spent_minutes` so far, the finished runs' (measured, estimated) minutes and
    the estimates of the runs still to come, in their order. Estimates are scaled by measured / estimated over the
    finished runs when that is above 1; the projection is spent + the scaled estimates. Above `hours` the design
    stops, and `fit` says how many of the runs to come fit (in order): the rest are cut in a commit before the next
    run."""
    measured, estimated = sum(m for m, _ in finished), sum(e for _, e in finished)
    ratio = max(1.0, measured / estimated) if estimated > 0 else 1.0
    scaled = [e * ratio for e in left]
    projected = spent_minutes + sum(scaled)
    fit = max(k for k in range(len(scaled) + 1) if spent_minutes + sum(scaled[:k]) <= hours * 60.0 + 1e-9) \
        if spent_minutes <= hours * 60.0 else 0
    ok = projected <= hours * 60.0 + 1e-9
    why = (f"{spent_minutes:.1f} min spent, {len(left)} runs to come estimated at {sum(left):.1f} min (x {ratio:.2f}, "
           f"the finished runs' measured over estimated minutes, at least 1): {projected / 60:.2f} hours in all "
           f"against {hours:g}")
    if not ok:
        why += (f"; only {fit} of the {len(left)} runs to come fit: the design stops; cut the runs after those to "
                "what fits in a commit before the next run")
    return {"ok": ok, "ratio": ratio, "projected_minutes": projected, "fit": fit, "why": why}
