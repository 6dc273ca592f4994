"""The learning comparison's statistics: paired differences by seed, the primary tests and their verdicts, the
evaluation's own noise, a sign test, and the seeds a spread asks for.

`benchmarks/learning_comparison.py` runs the designs of `benchmarks/learning_designs.py`; this module holds what its
report computes from the finished runs' values, as pure functions over numbers (no files, no Ray):

- `paired`: the per-seed differences of a setting from the reference, their mean, 95% t interval and paired t p;
- `primary_test`: the current design's one primary test: the paired t test with its interval, p, and the effect the
  test detects with 80% power at the observed sd (`openrlhf_ada.analysis.power`), and its verdict rule;
  `planned_power`: a plan's power statement at a planning sd and over a range of sds; `observed_power`: the same
  over the observed sd's own 95% interval (few pairs leave the sd itself uncertain);
- `paired_vs_unpaired`: whether pairing by seed tightened the interval (the paired sd against the sd two
  independent runs' difference would have, from each setting's sd over seeds);
- `primary_verdicts`: the last design's rule over its family of tests, Holm-corrected;
- `sign_test_p`, `evaluation_noise`, `verdict`, `half_width`;
- `paired_half_width`, `seeds_needed`, `earlier_spread`, `sizing`: seeds and machine time from a spread;
- `crossing_step`, `budget_evaluation`, `interpolated_at`: the equal-token design's reading of a run at its token
  budget (measured at the step that crosses it) and at another run's training time (interpolated, a secondary).
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from openrlhf_ada.analysis.mechanisms import holm, paired_t_p
from openrlhf_ada.analysis.power import detectable_effect, paired_t_power, sd_interval
from openrlhf_ada.analysis.seed_stats import LEVEL, mean_interval, t_quantile


def paired(values_by_seed: Mapping[str, Mapping[int, float]], name: str, reference: str) -> Optional[dict]:
    """The setting's per-seed differences from the reference (seeds both have), their mean, 95% t interval and the
    paired t test's two-sided p; None without a shared seed."""
    mine, ref = values_by_seed.get(name, {}), values_by_seed.get(reference, {})
    seeds = sorted(set(mine) & set(ref))
    if not seeds:
        return None
    diffs = [mine[s] - ref[s] for s in seeds]
    interval = mean_interval(diffs)
    return {"n": len(seeds), "mean": interval.mean, "low": interval.low, "high": interval.high,
            "p": paired_t_p(diffs), "values": dict(zip(seeds, diffs))}


def primary_test(differences: Sequence[float], planned: int, alpha: float = 0.05, power: float = 0.8,
                 blocked: Optional[str] = None) -> dict:
    """The current design's primary test over the per-seed differences d_s: mean, sd, 95% t interval, two-sided
    paired t p and the effect detected with `power` at the observed sd (n >= 2 and sd > 0). Verdict: helps (p <= alpha, mean > 0), hurts (p <= alpha, mean < 0), else no
    difference shown; no verdict with fewer pairs than `planned`, or when `blocked` (a reason: a mechanism that did
    not engage, a failed control) is given."""
    n = len(differences)
    out = {"n": n, "planned": planned, "mean": None, "sd": None, "low": None, "high": None, "p": None,
           "detectable": None}
    if n:
        interval = mean_interval(list(differences))
        out.update(mean=interval.mean, low=interval.low, high=interval.high)
    if n >= 2:
        out["sd"] = statistics.stdev(differences)
        out["p"] = paired_t_p(list(differences))
        if out["sd"] > 0:
            out["detectable"] = detectable_effect(out["sd"], n, alpha, power)
    if blocked:
        out["verdict"] = f"no verdict: {blocked}"
    elif n < planned:
        out["verdict"] = f"no verdict: {n} of {planned} pairs"
    elif out["p"] is not None and out["p"] <= alpha:
        out["verdict"] = "helps" if out["mean"] > 0 else "hurts"
    else:
        out["verdict"] = "no difference shown"
    return out


def power_at(effect: float, sd: float, n: int, alpha: float = 0.05) -> Optional[float]:
    """The paired t test's power at `effect` (None below 2 pairs or at sd 0)."""
    return paired_t_power(effect, sd, n, alpha) if n >= 2 and sd > 0 else None


def planned_power(effect: float, sd: float, sd_range: Tuple[float, float], n: int, alpha: float = 0.05,
                  power: float = 0.8) -> dict:
    """What a plan states before its runs: the paired t test's power at `effect` with `n` pairs at the planning
    `sd`, the effect it detects with `power`, and the power at `effect` over `sd_range` (the power at its high end
    first: the lower one)."""
    return {"power": power_at(effect, sd, n, alpha), "detectable": detectable_effect(sd, n, alpha, power),
            "range": (power_at(effect, sd_range[1], n, alpha), power_at(effect, sd_range[0], n, alpha))}


def observed_power(effect: float, sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> Optional[dict]:
    """What the test could detect over the observed sd's own 95% interval (`openrlhf_ada.analysis.power.sd_interval`):
    that interval, the power at `effect` from its high end to its low end, and the effect detected with `power` from
    its low end to its high end. None below 2 pairs or at sd 0."""
    if n < 2 or sd <= 0:
        return None
    low, high = sd_interval(sd, n)
    return {"sd_interval": (low, high), "power": (power_at(effect, high, n, alpha), power_at(effect, low, n, alpha)),
            "detectable": (detectable_effect(low, n, alpha, power), detectable_effect(high, n, alpha, power))}


def paired_vs_unpaired(a: Mapping[int, float], b: Mapping[int, float]) -> Optional[dict]:
    """Did pairing by seed tighten the interval? The sd of the paired differences a_s - b_s over the shared seeds,
    against sqrt(sd(a)^2 + sd(b)^2), the sd of a difference of two independent runs (each setting's sd over the same
    seeds), and the correlation between the two settings' runs of a seed that the two imply: var(a - b) = var(a) +
    var(b) - 2 cov(a, b), so corr = (var(a) + var(b) - var(a - b)) / (2 sd(a) sd(b)). None below 2 shared seeds."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    xa, xb = [a[s] for s in seeds], [b[s] for s in seeds]
    va, vb = statistics.variance(xa), statistics.variance(xb)
    vd = statistics.variance([x - y for x, y in zip(xa, xb)])
    corr = (va + vb - vd) / (2 * math.sqrt(va * vb)) if va > 0 and vb > 0 else None
    return {"n": len(seeds), "paired_sd": math.sqrt(vd), "unpaired_sd": math.sqrt(va + vb), "correlation": corr}


def half_width(stats: Mapping) -> Optional[float]:
    return None if stats["low"] is None else (stats["high"] - stats["low"]) / 2.0


def verdict(diff: Mapping, planned: Optional[int] = None, target: Optional[float] = None) -> str:
    """The earlier designs' interval rule: helps when the paired 95% interval lies above 0, hurts when below, else no
    difference larger than the interval; no verdict without an interval (one paired seed). A half-width above
    `target` is reported as short of it. With fewer pairs than the design plans, the verdict is marked interim."""
    if diff["low"] is None:
        return f"no verdict ({diff['n']} paired seed)"
    if diff["low"] > 0:
        rule = "helps"
    elif diff["high"] < 0:
        rule = "hurts"
    else:
        rule = "no difference larger than the interval"
    if target is not None and half_width(diff) > target:
        rule += f"; short of the {target:g} target"
    if planned is not None and diff["n"] < planned:
        rule += f" (interim: {diff['n']} of {planned} pairs)"
    return rule


def primary_verdicts(tests: Mapping[tuple, dict], engaged: Mapping[str, Optional[bool]], planned: int,
                     family: Sequence[tuple], alpha: float = 0.05) -> Dict[tuple, dict]:
    """The last design's verdict rule, for its whole `family` of tests ((setting, axis) pairs). `tests[key]` holds
    the paired test's `n`, `mean` and `p` (None with one pair); `engaged[setting]` whether the setting's mechanism
    engaged in every run (None: unread). Holm's correction over the whole family at `alpha`, a test not run yet or
    without a p counted at p = 1: Holm's adjusted p values never fall when another test's p rises, so an adjusted p
    can only fall as tests come in. Helps or hurts (the sign of the mean) when rejected, else no difference shown; no
    verdict where the mechanism did not engage or could not be read, and none before every test of the family has
    `planned` pairs. Returns {key: {"adjusted", "rule"}} for the tests that ran."""
    corrected = holm({k: (tests[k]["p"] if k in tests and tests[k]["p"] is not None else 1.0) for k in family}, alpha)
    ready = sum(k in tests and tests[k]["p"] is not None and tests[k]["n"] >= planned for k in family)
    out = {}
    for key, t in tests.items():
        c, state = corrected[key], engaged.get(key[0])
        if state is False:
            rule = "no verdict: its mechanism did not engage (table above)"
        elif state is None:
            rule = "no verdict: its mechanism could not be read (table above)"
        elif t["p"] is None:
            rule = f"no verdict ({t['n']} paired seed)"
        elif ready < len(family):
            rule = f"interim, no verdict: {ready} of {len(family)} tests have {planned} pairs"
        elif c["reject"]:
            rule = "helps" if t["mean"] > 0 else "hurts"
        else:
            rule = "no difference shown"
        out[key] = {"adjusted": c["adjusted"] if t["p"] is not None else None, "rule": rule}
    return out


def sign_test_p(values: Sequence[float]) -> float:
    """Two-sided exact sign test of "the median difference is 0": with k of the n nonzero differences on the rarer
    side, p = min(1, 2 x P(Binomial(n, 1/2) <= k)). It assumes nothing about the differences' distribution."""
    signs = [v for v in values if v != 0]
    n = len(signs)
    if n == 0:
        return 1.0
    k = min(sum(v > 0 for v in signs), sum(v < 0 for v in signs))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def evaluation_noise(runs: Sequence[Mapping], key: str) -> Optional[dict]:
    """The evaluation's own noise, measured: every run evaluates the same base model on the same held-out problems
    before its first step, so the spread of those step-0 values over runs is the evaluation's sampling alone. Returns
    n, mean, sd, min, max of `key` at step 0, and sqrt(2) x sd: the standard deviation of the difference of two
    evaluations of one model, the part of a paired difference that pairing cannot remove. None below 2 runs."""
    values = [r["evaluations"][0][key] for r in runs
              if r["evaluations"] and r["evaluations"][0].get("step") == 0 and r["evaluations"][0].get(key) is not None]
    if len(values) < 2:
        return None
    sd = statistics.stdev(values)
    return {"n": len(values), "mean": statistics.fmean(values), "sd": sd, "min": min(values), "max": max(values),
            "difference_sd": math.sqrt(2) * sd}


# -- seeds from a spread ---------------------------------------------------------------------------------------------
#: the earliest comparison of docs/learning.md's history (measured 2026-11-30, 8000 tokens, greedy accuracy on 200
#: held-out problems at the budget, seeds 1 and 2): the spread `sizing` starts from
EARLIER_GREEDY = {"grpo": (0.170, 0.205), "grpo_adora": (0.150, 0.095), "ada": (0.205, 0.140),
                  "ada_adora": (0.200, 0.120)}
EARLIER_EVAL_SIZE = 200


def paired_half_width(sd_difference: float, seeds: int) -> float:
    """The expected half-width of the paired 95% t interval over `seeds` per-seed differences of spread
    `sd_difference`."""
    return t_quantile(0.5 + LEVEL / 2.0, seeds - 1) * sd_difference / math.sqrt(seeds)


def seeds_needed(sd_difference: float, target: float, most: int = 200) -> Optional[int]:
    """The fewest seeds (>= 2) whose expected paired half-width is at most `target`; None beyond `most`."""
    return next((n for n in range(2, most + 1) if paired_half_width(sd_difference, n) <= target), None)


def earlier_spread(earlier: Mapping[str, Tuple[float, ...]] = EARLIER_GREEDY,
                   eval_size: int = EARLIER_EVAL_SIZE) -> dict:
    """The seed spread of an earlier comparison: the pooled variance within settings, the mean binomial variance of
    one evaluation on its held-out problems (p (1 - p) / (problems - 1)), and what is left of the first for
    training (the seed-to-seed spread an evaluation without noise would still show)."""
    pooled = statistics.fmean(statistics.variance(values) for values in earlier.values())
    evaluation = statistics.fmean(p * (1 - p) / (eval_size - 1) for values in earlier.values() for p in values)
    return {"pooled_sd": math.sqrt(pooled), "eval_se": math.sqrt(evaluation),
            "train_sd": math.sqrt(max(pooled - evaluation, 0.0)), "df": sum(len(v) - 1 for v in earlier.values())}


def pilot_numbers(summary: Mapping) -> dict:
    """From a pilot run's done.json: its machine time split into training steps, evaluations and the rest (start-up,
    checkpoints), and its avg@k (greedy where no avg@k) at the end with its standard error."""
    evals = summary["evaluations"]
    eval_seconds = sum(p.get("eval_seconds") or 0.0 for p in evals)
    last = evals[-1]
    avg = last.get("avg_at_k") is not None
    return {"run_seconds": summary["process_seconds"], "train_seconds": summary["train_seconds"],
            "eval_seconds": eval_seconds, "evaluations": len(evals),
            "eval_avg_seconds": sum(p.get("eval_avg_seconds") or 0.0 for p in evals),
            "other_seconds": summary["process_seconds"] - summary["train_seconds"] - eval_seconds,
            "metric": "avg@k" if avg else "greedy accuracy",
            "value": last["avg_at_k"] if avg else last["accuracy"],
            "se": last["avg_at_k_se"] if avg else last["accuracy_se"], "steps": summary["steps"],
            "tokens": summary["tokens"], "setting": summary["setting"], "seed": summary["seed"],
            "load_mean": summary.get("load_mean")}


def sizing(summary: Mapping, target: float = 0.03, hours: float = 5.0, designs=(6, 3, 2)) -> dict:
    """Seeds and machine time for the paired half-width `target` on a pilot run's metric. Assumptions: the training
    part of the seed spread is the earlier comparison's; one run's evaluation noise is the pilot's standard error;
    two settings' runs of one seed are uncorrelated; every run takes the pilot's time; the base model's measurement
    takes two of the pilot's start-ups and first evaluations."""
    pilot, spread = pilot_numbers(summary), earlier_spread()
    run_sd = math.sqrt(spread["train_sd"] ** 2 + pilot["se"] ** 2)
    sd_difference = math.sqrt(2.0) * run_sd
    run_hours = pilot["run_seconds"] / 3600
    first_eval = (summary["evaluations"][0].get("eval_seconds") or 0.0)
    base_hours = 2 * (pilot["other_seconds"] + first_eval) / 3600
    needed = seeds_needed(sd_difference, target)
    rows = []
    for settings in designs:
        fit = max((n for n in range(2, 201) if base_hours + settings * n * run_hours <= hours), default=None)
        for seeds in sorted({6, needed or 6, fit or 2}):
            rows.append({"settings": settings, "seeds": seeds, "runs": settings * seeds,
                         "hours": base_hours + settings * seeds * run_hours,
                         "half_width": paired_half_width(sd_difference, seeds), "fits": fit is not None and
                         seeds <= fit})
    sensitivity = {}
    for factor in (0.5, 1.5):  # the training part of the spread, which two seeds per setting pin down poorly
        sd = math.sqrt(2.0 * ((factor * spread["train_sd"]) ** 2 + pilot["se"] ** 2))
        sensitivity[factor] = {"sd_difference": sd, "seeds_needed": seeds_needed(sd, target)}
    return {"pilot": pilot, "spread": spread, "run_sd": run_sd, "sd_difference": sd_difference,
            "sensitivity": sensitivity, "run_hours": run_hours, "base_hours": base_hours, "seeds_needed": needed,
            "target": target, "hours": hours, "designs": rows}


def values_at_step(runs: Sequence[Mapping], key: str, step: int) -> Dict[str, Dict[int, float]]:
    """{setting: {seed: value}}: each run's held-out `key` at its evaluation after update `step` (runs without one
    left out)."""
    out: Dict[str, Dict[int, float]] = {}
    for r in runs:
        at = [e for e in r["evaluations"] if e["step"] == step and e.get(key) is not None]
        if at:
            out.setdefault(r["setting"], {})[r["seed"]] = at[-1][key]
    return out


def values_at_tokens(runs: Sequence[Mapping], key: str, budget: float) -> Tuple[Dict[str, Dict[int, float]],
                                                                              List[tuple]]:
    """Each run's held-out `key` measured at the evaluation after the step at which its generated tokens first
    reached `budget` (train_local's --local.eval_at_tokens): the first evaluation of a trained step whose running
    total is at least `budget`. Returns ({setting: {seed: value}}, [(setting, seed) of runs that never reached it]).
    Nothing is interpolated."""
    out: Dict[str, Dict[int, float]] = {}
    missing: List[tuple] = []
    for r in runs:
        at = [e for e in r["evaluations"] if e["step"] > 0 and e["tokens"] >= budget and e.get(key) is not None]
        if at:
            out.setdefault(r["setting"], {})[r["seed"]] = min(at, key=lambda e: e["step"])[key]
        else:
            missing.append((r["setting"], r["seed"]))
    return out, missing


def crossing_step(totals: Sequence[Tuple[int, float]], budget: float) -> Optional[int]:
    """The first step whose running total of generated tokens is at least `budget`, from (step, running total) of
    each trained step; None when no step reaches it."""
    return next((step for step, total in sorted(totals) if total >= budget), None)


def budget_evaluation(run: Mapping, budget: float) -> dict:
    """A run's evaluation at its token budget, from its done.json: the run must have stopped at its crossing step
    (`crossing_step`, the first step whose running total reached `budget`, which the runner records from the run's
    metrics) and been evaluated there. Returns {"ok", "step", "evaluation", "why"}; nothing is interpolated."""
    step = run.get("crossing_step")
    last = run["evaluations"][-1] if run.get("evaluations") else None
    if step is None:
        why = (f"never reached {budget:.0f} tokens (stopped after step {run.get('steps')} at "
               f"{run.get('tokens', 0.0):.0f})")
    elif step != run.get("steps"):
        why = f"crossed {budget:.0f} tokens at step {step} but ran to step {run.get('steps')}"
    elif last is None or last["step"] != step or last["tokens"] < budget:
        why = f"not evaluated at its crossing step {step}"
    else:
        return {"ok": True, "step": step, "evaluation": last,
                "why": f"step {step}, {last['tokens']:.0f} tokens >= {budget:.0f}: evaluated there, and stopped"}
    return {"ok": False, "step": step, "evaluation": None, "why": why}


def interpolated_at(evaluations: Sequence[Mapping], x_key: str, x: float, key: str) -> Optional[dict]:
    """`key` at `x` of `x_key` (e.g. train_seconds), linear between the two trained evaluations around it (the
    measured value where one is at `x`); None outside the evaluations' range. Returns the value and both points."""
    points = sorted(((e[x_key], e[key]) for e in evaluations if e["step"] > 0 and e.get(key) is not None))
    exact = next((p for p in points if p[0] == x), None)
    if exact is not None:
        return {"value": exact[1], "below": exact, "above": exact}
    for (x0, v0), (x1, v1) in zip(points, points[1:]):
        if x0 < x < x1:
            return {"value": v0 + (v1 - v0) * (x - x0) / (x1 - x0), "below": (x0, v0), "above": (x1, v1)}
    return None
