"""Recompute, from the committed runs of the learning comparison in `benchmarks/results/learning_v2`, the numbers that
correct what docs/learning.md (section 0) and the README first said about it:

1. the plan's pass-rate rule: the base model's pass rate on the training pool, against the rule's 0.10;
2. where each run's "equal tokens" value comes from: the two evaluations it is interpolated between, and how far;
3. what the design could have detected: the effect the paired t test finds with 80% power, at Holm's first step
   over the 10 tests (alpha 0.005) and at an unadjusted 0.05, from the pooled sd of the paired differences;
4. what the mechanism rows show beyond "the code path fired": ADORA's re-weighted share pooled over the mixed
   groups (not averaged over steps), the held-out answers' length before and after training, and its correlation
   with the final held-out avg@4 across the runs;
5. how much of the paired variance the evaluation's own draws can explain.

Prints markdown. Usage: python benchmarks/learning_v2_audit.py [--out benchmarks/results/learning_v2]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from openrlhf_ada.analysis.mechanisms import after_first_visit  # noqa: E402
from openrlhf_ada.analysis.power import detectable_effect  # noqa: E402
from openrlhf_ada.analysis.seed_stats import t_quantile  # noqa: E402

REFERENCE = "grpo"
OTHERS = ("grpo_n8", "grpo_adora", "ada", "ada_est", "ada_adora")
PASS_RATE_RULE = 0.10  # the plan's threshold on the base model's pool pass rate
TESTS = 10  # the plan's family for Holm
POOL, PROMPTS_PER_STEP = 32, 8


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load(out):
    runs = {}
    for folder in sorted(glob.glob(os.path.join(out, "runs", "*_seed*"))):
        name = os.path.basename(folder)
        setting, seed = name.rsplit("_seed", 1)
        with open(os.path.join(folder, "done.json")) as f:
            done = json.load(f)
        runs[(setting, int(seed))] = {"done": done, "rows": _rows(os.path.join(folder, "metrics.jsonl"))}
    return runs


def pass_rate_rule(out, runs):
    base = [r for r in _rows(os.path.join(out, "base", "train_sampled", "metrics.jsonl")) if "eval/accuracy" in r][-1]
    first = min(min(r["time"] for r in run["rows"]) for run in runs.values())
    rate, samples = base["eval/accuracy"], int(base["eval/num_samples"])
    return [
        "**1. The plan's pass-rate rule.** The base model's pass rate on the training pool: "
        f"{rate:.4f} ({round(rate * samples)} of {samples} samples), below the rule's {PASS_RATE_RULE:.2f}; "
        f"the first run's first record came {first - base['time']:.0f} s after it, on the 1-2 digit pool."]


def interpolation(runs):
    evals = {key: run["done"]["evaluations"] for key, run in runs.items()}
    budget = min(ev[-1]["tokens"] for ev in evals.values())
    lines = [f"**2. The equal-tokens axis** (budget {budget:.0f} tokens, the smallest run's count): where each run's "
             "value comes from.", "", "| run | measured at | interpolated between | fraction of the way |",
             "|---|---|---|---|"]
    for (setting, seed), ev in sorted(evals.items()):
        for a, b in zip(ev, ev[1:]):
            if a["tokens"] <= budget <= b["tokens"]:
                if b["tokens"] == budget:
                    lines.append(f"| {setting} seed {seed} | update {b['step']} (measured) | - | - |")
                else:
                    frac = (budget - a["tokens"]) / (b["tokens"] - a["tokens"])
                    lines.append(f"| {setting} seed {seed} | - | updates {a['step']} and {b['step']} | {frac:.2f} |")
                break
    return lines


def paired_differences(runs, setting):
    """The setting's final avg@4 minus GRPO n=4's, per seed."""
    diffs = [runs[(setting, s)]["done"]["evaluations"][-1]["avg_at_k"]
             - runs[(REFERENCE, s)]["done"]["evaluations"][-1]["avg_at_k"]
             for s in (1, 2, 3) if (setting, s) in runs and (REFERENCE, s) in runs]
    return diffs


def detectable(runs):
    sds = {s: statistics.stdev(paired_differences(runs, s)) for s in OTHERS}
    pooled = math.sqrt(statistics.fmean(v * v for v in sds.values()))
    n = 3
    holm_alpha = 0.05 / TESTS
    mde_holm = detectable_effect(pooled, n, holm_alpha, 0.8)
    mde_raw = detectable_effect(pooled, n, 0.05, 0.8)
    half = t_quantile(0.975, n - 1) * pooled / math.sqrt(n)
    lines = ["**3. What the design could have detected** (avg@4 at 24 updates, 3 pairs): sd of the paired "
             "differences " + ", ".join(f"{s} {v:.4f}" for s, v in sds.items())
             + f"; pooled {pooled:.4f}. Holm's first step over {TESTS} tests runs at alpha {holm_alpha:g} "
             f"(t quantile {t_quantile(1 - holm_alpha / 2, n - 1):.1f} with {n - 1} degrees of freedom): the effect "
             f"detected with 80% power is {mde_holm:.3f}; at an unadjusted 0.05, {mde_raw:.3f}. The 95% interval's "
             f"half-width at the pooled sd is {half:.3f}."]
    return lines, pooled


def mechanisms(runs):
    lines = ["**4. ADORA pooled over the mixed groups** (updates 5-24; a step with no mixed group adds nothing, "
             "where the step average counts it as 0), and the held-out answers' length:", ""]
    for (setting, seed), run in sorted(runs.items()):
        if "adora" not in setting:
            continue
        rows = after_first_visit(run["rows"], POOL, PROMPTS_PER_STEP)
        mixed = sum(r["adora/mixed_share"] for r in rows)
        pooled = sum(r["adora/mixed_share"] * r["adora/attenuated_mixed_share"] for r in rows) / mixed
        per_step = statistics.fmean(r["adora/attenuated_mixed_share"] for r in rows)
        lines.append(f"- {setting} seed {seed}: re-weighted {pooled:.3f} of the mixed groups pooled "
                     f"({per_step:.3f} as a mean of the steps' shares)")
    lengths, scores = [], []
    first = None
    for run in runs.values():
        ev_rows = [r for r in run["rows"] if "eval/response_length_mean" in r]
        first = ev_rows[0]["eval/response_length_mean"]
        lengths.append(ev_rows[-1]["eval/response_length_mean"])
        scores.append(run["done"]["evaluations"][-1]["avg_at_k"])
    corr = statistics.correlation(lengths, scores)
    lines += ["", f"Held-out greedy answers: {first:.0f} tokens on average before training, "
              f"{min(lengths):.0f}-{max(lengths):.0f} after 24 updates; across the {len(runs)} runs "
              f"corr(final answer length, final avg@4) = {corr:+.2f}."]
    return lines


def evaluation_noise(runs, pooled_sd):
    base = [run["done"]["evaluations"][0]["avg_at_k"] for run in runs.values()]
    final = [run["done"]["evaluations"][-1]["avg_at_k"] for run in runs.values()]
    p0, p1 = statistics.fmean(base), statistics.fmean(final)
    var_base = statistics.variance(base)
    # the same model evaluated twice: the binomial draw variance scales with p (1 - p); carried from the base
    # model's measured spread to the trained models' mean score
    var_eval_trained = var_base * (p1 * (1 - p1)) / (p0 * (1 - p0))
    share = 2 * var_eval_trained / pooled_sd ** 2
    # the per-run variance of the final score within a setting, pooled over the six settings
    settings = sorted({s for s, _ in runs})
    within = statistics.fmean(statistics.variance([runs[(s, k)]["done"]["evaluations"][-1]["avg_at_k"]
                                                   for k in (1, 2, 3)]) for s in settings)
    rho = 1 - pooled_sd ** 2 / (2 * within)
    return [f"**5. The evaluation's share of the paired variance.** The base model's avg@4 across the {len(base)} "
            f"runs: mean {p0:.4f}, sd {math.sqrt(var_base):.4f}; carried to the trained models' mean {p1:.3f} by "
            f"p (1 - p), one evaluation's draw variance is {var_eval_trained:.6f}, a pair's {2 * var_eval_trained:.6f}: "
            f"{share:.0%} of the pooled paired variance {pooled_sd ** 2:.6f}. The final scores' variance within a "
            f"setting is {within:.6f}, so pairing by seed implies a correlation of {rho:.2f} between the runs "
            "of a seed."]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join("benchmarks", "results", "learning_v2"))
    args = parser.parse_args(argv)
    runs = load(args.out)
    lines = pass_rate_rule(args.out, runs) + [""] + interpolation(runs) + [""]
    found, pooled = detectable(runs)
    lines += found + [""] + mechanisms(runs) + [""] + evaluation_noise(runs, pooled)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
