"""Did each algorithm's mechanism engage? Read from a run's metrics.jsonl rows, before any verdict on its learning.

A learning comparison can only judge an algorithm whose mechanism did something in the runs compared. Each one
claims a specific effect, and the trainer logs the metric of that claim (docs/metrics.md):

- Reinforce-Ada Seq (rounds until a prompt's group holds both outcomes): more trained groups with a non-zero
  advantage than GRPO would have had on the same prompts. ``1 - zero_adv_group_share`` is the share of its trained
  groups with unequal rewards; ``ada/first_round_signal_share`` the share whose first round alone had them: what
  GRPO with the round's n would have trained on the same prompts in the same step. Engaged: the first exceeds the
  second by at least ``SEQ_MIN_GAIN`` on average over the steps read.
- Reinforce-Ada Est (samples allocated from each prompt's estimated pass rate): it needs prompts seen before.
  ``ada/est_seen_share`` (the share of a step's prompts sampled before), ``ada/est_p_hat_mean`` (0.5, the prior,
  until something is learned), ``ada/alloc_min`` / ``ada/alloc_max`` (the allocation's spread) and
  ``ada/alloc_cov_n_r`` (Cov(N_x, r_x): negative when hard prompts got more samples). Engaged: prompts were seen
  before, the estimate moved off the prior by at least ``EST_MIN_P_HAT_SHIFT``, and the allocation was not uniform.
- ADORA (a weight per group from the lengths of its right and wrong answers): ``adora/mixed_share`` (groups with
  both outcomes: the only ones a group baseline gives an advantage), ``adora/attenuated_mixed_share`` (the share of
  them weighted below the boost: what ADORA re-weighted), ``adora/length_gap_mixed`` (their longest correct minus
  mean wrong length, what the rule reads). Engaged: it re-weighted at least ``ADORA_MIN_ATTENUATED`` of the mixed
  groups and at most ``1 - ADORA_MIN_ATTENUATED`` of them (a rule that weights every group alike is a constant
  learning-rate factor, not a re-weighting).

Each check reads the steps after the first visit (`after_first_visit`: from the step where prompts repeat on), so
that Est is judged where it can act. It returns the numbers, the verdict ``engaged`` (True, False, or None when the
run logged none of the metric) and a sentence that says why. ``holm`` is the correction for the design's several
pre-stated tests, ``paired_t_p`` the two-sided p of one paired difference. Pure functions: no files, no Ray.
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from openrlhf_ada.analysis.seed_stats import t_cdf

SEQ_MIN_GAIN = 0.05  # trained non-zero-advantage share above the first round's, averaged over the steps read
EST_MIN_P_HAT_SHIFT = 0.02  # |mean p_hat - 0.5| somewhere in the steps read
ADORA_MIN_ATTENUATED = 0.05  # share of mixed groups re-weighted, averaged over the steps read


def trained_rows(rows: Iterable[Mapping]) -> List[Mapping]:
    """The rows of training steps (an evaluation-only row has no reward_mean), in step order."""
    return sorted((r for r in rows if r.get("reward_mean") is not None), key=lambda r: r["step"])


def after_first_visit(rows: Sequence[Mapping], pool_size: int, prompts_per_step: int) -> List[Mapping]:
    """The training rows from the first step whose prompts can have been seen before: a pool of `pool_size` prompts
    drawn `prompts_per_step` a step is first used up after ceil(pool / per step) steps. Empty when the run never
    got there (no prompt could repeat)."""
    if pool_size < 1 or prompts_per_step < 1:
        raise ValueError(f"pool_size and prompts_per_step must be >= 1, got {pool_size}, {prompts_per_step}")
    first_epoch = math.ceil(pool_size / prompts_per_step)
    return [r for r in trained_rows(rows) if r["step"] > first_epoch]


def _mean(rows: Sequence[Mapping], key: str) -> Optional[float]:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def nonzero_adv_share(rows: Sequence[Mapping]) -> Optional[float]:
    """The mean share of trained groups with a non-zero advantage (1 - zero_adv_group_share) over the rows."""
    zero = _mean(rows, "zero_adv_group_share")
    return None if zero is None else 1.0 - zero


def seq_mechanism(rows: Sequence[Mapping], min_gain: float = SEQ_MIN_GAIN) -> dict:
    """Reinforce-Ada Seq: its trained non-zero-advantage share against its first round's (GRPO's on the same
    prompts, same step)."""
    trained, first = nonzero_adv_share(rows), _mean(rows, "ada/first_round_signal_share")
    out = {"steps": len(rows), "nonzero_share": trained, "first_round_share": first, "gain": None, "engaged": None}
    if trained is None or first is None:
        out["why"] = "no zero_adv_group_share / ada/first_round_signal_share in the steps read"
        return out
    out["gain"] = trained - first
    out["engaged"] = out["gain"] >= min_gain
    out["why"] = (f"trained groups with a non-zero advantage {trained:.3f} against {first:.3f} from the first round "
                  f"alone (GRPO's on the same prompts): {out['gain']:+.3f}, "
                  f"{'at least' if out['engaged'] else 'below'} {min_gain:g}")
    return out


def est_mechanism(rows: Sequence[Mapping], min_shift: float = EST_MIN_P_HAT_SHIFT) -> dict:
    """Reinforce-Ada Est: prompts seen before, the estimate off its prior, a non-uniform allocation, and how the
    allocation followed the reward (Cov(N_x, r_x))."""
    seen = _mean(rows, "ada/est_seen_share")
    shifts = [abs(float(r["ada/est_p_hat_mean"]) - 0.5) for r in rows if r.get("ada/est_p_hat_mean") is not None]
    spreads = [float(r["ada/alloc_max"]) - float(r["ada/alloc_min"]) for r in rows
               if r.get("ada/alloc_max") is not None and r.get("ada/alloc_min") is not None]
    out = {"steps": len(rows), "seen_share": seen, "p_hat_shift": max(shifts) if shifts else None,
           "alloc_spread": statistics.fmean(spreads) if spreads else None, "cov_n_r": _mean(rows, "ada/alloc_cov_n_r"),
           "engaged": None}
    if seen is None or not shifts or not spreads:
        out["why"] = "no ada/est_seen_share, ada/est_p_hat_mean or ada/alloc_* in the steps read (not an Est run, " \
                     "or no step after the first visit)"
        return out
    reasons = []
    if seen <= 0:
        reasons.append("no prompt was seen before (ada/est_seen_share 0)")
    if out["p_hat_shift"] < min_shift:
        reasons.append(f"the estimate stayed at the prior (|p_hat - 0.5| at most {out['p_hat_shift']:.3f})")
    if out["alloc_spread"] <= 0:
        reasons.append("every prompt got the same count (max - min 0)")
    out["engaged"] = not reasons
    cov = "-" if out["cov_n_r"] is None else f"{out['cov_n_r']:+.3f}"
    out["why"] = (f"prompts seen before {seen:.2f}, |p_hat - 0.5| up to {out['p_hat_shift']:.3f}, allocation "
                  f"max - min {out['alloc_spread']:.2f} samples, Cov(N_x, r_x) {cov}"
                  + ("" if not reasons else ": not engaged, " + "; ".join(reasons)))
    return out


def adora_mechanism(rows: Sequence[Mapping], min_share: float = ADORA_MIN_ATTENUATED) -> dict:
    """ADORA: the share of mixed groups it re-weighted, and the length gap it read."""
    mixed, attenuated = _mean(rows, "adora/mixed_share"), _mean(rows, "adora/attenuated_mixed_share")
    out = {"steps": len(rows), "mixed_share": mixed, "attenuated_mixed_share": attenuated,
           "length_gap": _mean(rows, "adora/length_gap_mixed"), "attenuated_share": _mean(rows, "adora/attenuated_share"),
           "engaged": None}
    if mixed is None or attenuated is None:
        out["why"] = "no adora/mixed_share / adora/attenuated_mixed_share in the steps read"
        return out
    out["engaged"] = mixed > 0 and min_share <= attenuated <= 1.0 - min_share
    gap = "-" if out["length_gap"] is None else f"{out['length_gap']:+.1f}"
    out["why"] = (f"mixed groups {mixed:.3f} of all, {attenuated:.3f} of them re-weighted (engaged between "
                  f"{min_share:g} and {1 - min_share:g}); longest correct minus mean wrong length {gap} tokens")
    return out


#: which check reads a setting's claim, by the setting's flags
def mechanisms_of(flags: Sequence[str]) -> List[str]:
    """The mechanisms a setting's train_local flags switch on: "seq", "est", "adora" (none for plain GRPO)."""
    flags = list(flags)
    out = []
    if "--ada.enable" in flags:
        est = "--ada.strategy" in flags and flags[flags.index("--ada.strategy") + 1] == "est"
        out.append("est" if est else "seq")
    if "--adora.enable" in flags:
        out.append("adora")
    return out


CHECKS = {"seq": seq_mechanism, "est": est_mechanism, "adora": adora_mechanism}


def engagement(flags: Sequence[str], rows: Sequence[Mapping]) -> Dict[str, dict]:
    """Each mechanism of a setting checked on the rows: {mechanism: check result}."""
    return {m: CHECKS[m](rows) for m in mechanisms_of(flags)}


def engaged(checks: Mapping[str, dict]) -> Optional[bool]:
    """A setting's mechanisms all engaged (True), one did not (False), or one could not be read (None); a setting
    without a mechanism (the reference) counts as engaged."""
    values = [c["engaged"] for c in checks.values()]
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


# -- statistics of the pre-stated tests --------------------------------------------------------------------------
def paired_t_p(values: Sequence[float]) -> Optional[float]:
    """The two-sided p of the paired t test "the mean difference is 0" over per-seed differences; None with fewer
    than two; 1 when every difference is 0, 0 when they are all equal and not 0."""
    n = len(values)
    if n < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(n))
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(t), n - 1)))


def holm(pvalues: Mapping[str, Optional[float]], alpha: float = 0.05) -> Dict[str, dict]:
    """Holm's step-down correction of m tests: sort the p values ascending, p_(i) adjusted to
    max_{j <= i} min(1, (m - j + 1) p_(j)); a test is rejected when its adjusted p is at most `alpha` (which is
    rejecting p_(1..k) for the first i = k + 1 where p_(i) > alpha / (m - i + 1)). Tests without a p (None: too
    few seeds) are not counted in m and reject nothing. Returns {name: {"p", "adjusted", "reject"}}."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    counted = sorted(((p, name) for name, p in pvalues.items() if p is not None), key=lambda x: (x[0], x[1]))
    m = len(counted)
    out = {name: {"p": None, "adjusted": None, "reject": False} for name, p in pvalues.items() if p is None}
    running = 0.0
    for i, (p, name) in enumerate(counted):
        if not 0 <= p <= 1:
            raise ValueError(f"p value of {name!r} out of [0, 1]: {p}")
        running = max(running, min(1.0, (m - i) * p))
        out[name] = {"p": p, "adjusted": running, "reject": running <= alpha}
    return out
