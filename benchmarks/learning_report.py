"""The learning comparison's reports: the markdown each design's report writes between its markers in
docs/learning.md, from the finished runs in its folder.

`report(a, base, train, heldout)` writes the report of `a.design`: `report_v2` for the last design (its per-run
table, the mechanism table, the ten primary tests with Holm's correction, compare's statistics, the evaluation's
noise, plots and commands), `report_seq_vs_grpo` for the current one (the plan's rules as they were met, the
mechanism per run, the primary paired test, the secondaries), `report_equal_tokens` for the equal-token design (the
committed runs it reuses, its reproduction check, the primary test at equal generated tokens, the secondaries and
the plot of avg@k against tokens; with the inputs its runner's checks share: `committed_runs`, `budgets`,
`reproduction_checks`, `time_check`). The numbers come from
`openrlhf_ada.analysis.learning_stats`, `openrlhf_ada.analysis.plan_rules`, `openrlhf_ada.analysis.mechanisms` and
`compare`; this module only lays them out.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
from types import SimpleNamespace
from typing import Dict, List, Optional

import learning_designs as designs
from _report import machine, update_section
from learning_designs import PROMPTS_PER_STEP, REPO, TRAINED_PER_UPDATE
from learning_runs import difficulty_counts, finished_runs, read_rows, run_dir, step_row

from openrlhf_ada.analysis import learning_stats as stats
from openrlhf_ada.analysis import plan_rules
from openrlhf_ada.analysis.power import detectable_effect

ALPHA = 0.05  # the family-wise error rate of the last design's primary tests (Holm)


def _labels(a):
    """(label, name) of the design's settings, in its order."""
    return [(s.label, s.name) for s in a.design.settings]


def report(a, base: Optional[dict], train: str, heldout: str) -> str:
    """The report of `a.design`, written between its markers in --doc; returns its body."""
    if a.design.kind == "seq_vs_grpo":
        return report_seq_vs_grpo(a, base, train, heldout)
    if a.design.kind == "equal_tokens":
        return report_equal_tokens(a, train, heldout)
    return report_v2(a, base, train, heldout)


def sizing_text(s: dict) -> str:
    p, e = s["pilot"], s["spread"]
    lines = [
        f"Pilot: {designs.V2.setting(p['setting']).label}, seed {p['seed']}: {p['steps']} steps, {p['tokens']:.0f} tokens, "
        f"{p['run_seconds'] / 60:.1f} min of machine time ({p['train_seconds'] / 60:.1f} training steps, "
        f"{p['eval_seconds'] / 60:.1f} in {p['evaluations']} evaluations of which {p['eval_avg_seconds'] / 60:.1f} "
        f"avg@k, {p['other_seconds'] / 60:.1f} start-up and the rest; mean load {p['load_mean']:.1f}); "
        f"{p['metric']} at the end {p['value']:.3f}, standard error {p['se']:.4f}.",
        f"Earlier comparison (greedy accuracy at 8000 tokens, {len(stats.EARLIER_GREEDY)} settings x 2 seeds): pooled "
        f"seed-to-seed sd {e['pooled_sd']:.4f} ({e['df']} degrees of freedom), of which one evaluation's binomial "
        f"standard error {e['eval_se']:.4f}; training part sqrt({e['pooled_sd']:.4f}^2 - {e['eval_se']:.4f}^2) = "
        f"{e['train_sd']:.4f}.",
        f"One run's sd on the pilot's metric: sqrt({e['train_sd']:.4f}^2 + {p['se']:.4f}^2) = {s['run_sd']:.4f}; a "
        f"paired difference of uncorrelated runs: sqrt(2) x {s['run_sd']:.4f} = {s['sd_difference']:.4f}; expected "
        f"half-width t(0.975, n - 1) x {s['sd_difference']:.4f} / sqrt(n).",
        f"Seeds for a half-width of {s['target']}: {s['seeds_needed']}"
        + "".join(f"; with the training part x {factor:g}: {v['seeds_needed']} (sd of a difference "
                  f"{v['sd_difference']:.4f})" for factor, v in s["sensitivity"].items())
        + f". One run {s['run_hours'] * 60:.1f} min, the base model {s['base_hours'] * 60:.1f} min (estimated).",
        "",
        "| settings | seeds | runs | machine hours | expected paired half-width | within " f"{s['hours']:g} h |",
        "|---|---|---|---|---|---|",
    ]
    for r in s["designs"]:
        lines.append(f"| {r['settings']} | {r['seeds']} | {r['runs']} | {r['hours']:.1f} | {r['half_width']:.4f} | "
                     f"{'yes' if r['fits'] else 'no'} |")
    return "\n".join(lines)



# -- statistics: compare's ------------------------------------------------------------------------------------------

def label(a, name: str) -> str:
    return a.design.setting(name).label


def settings_statistics(a, runs: List[dict]) -> tuple:
    """compare's settings comparison of the finished runs (their metrics.jsonl and config.json): each setting a
    group, paired by seed against GRPO n=4, 95% Student t intervals; returns (result, settings, notes). Settings
    sharing no seed with GRPO n=4 (a part of the design in progress) are left out, with a note; (None, [], notes)
    without a finished GRPO n=4 run."""
    from openrlhf_ada.analysis import compare, compare_settings
    from openrlhf_ada.analysis.seed_stats import IntervalMethod
    from openrlhf_ada.trainer.heldout import ACCURACY, AVG_AT_K

    by_setting: Dict[str, List[dict]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        by_setting.setdefault(r["setting"], []).append(r)
    notes = []
    if a.design.reference not in by_setting:
        return None, [], [f"no finished {label(a, a.design.reference)} run yet: no paired differences"]
    ref_seeds = {r["seed"] for r in by_setting[a.design.reference]}
    explicit = []
    for name in a.design.names:
        mine = by_setting.get(name, [])
        if not mine:
            continue
        if name != a.design.reference and not ref_seeds & {r["seed"] for r in mine}:
            notes.append(f"{label(a, name)}: no seed shared with {label(a, a.design.reference)} yet; left out of the statistics")
            continue
        explicit.append((label(a, name), tuple(run_dir(a, name, r["seed"]) for r in mine)))
    options = compare_settings.SettingsOptions(explicit=tuple(explicit), reference=label(a, a.design.reference),
                                               method=IntervalMethod("t"), grid_points=a.grid_points,
                                               metrics=(AVG_AT_K, ACCURACY))
    loaded = compare.load_runs([source for _, sources in explicit for source in sources])
    settings = compare_settings.build_settings(loaded, options)
    result = compare_settings.compare_settings(settings, options)
    return result, settings, notes + result["notes"]


def point_of(result: dict, metric: str, at: str) -> Optional[dict]:
    entry = next((e for e in result["metrics"] if e["metric"] == metric), None)
    return None if entry is None else next((p for p in entry["points"] if p["at"] == at), None)


def tokens_range(result: dict, metric: str) -> Optional[List[float]]:
    entry = next((e for e in result["metrics"] if e["metric"] == metric), None)
    return None if entry is None else entry["tokens_range"]





def noise_lines(result: dict, runs: List[dict], metric: str, key: str, what: str) -> List[str]:
    """A paragraph that sets each setting's paired differences at the budget beside the evaluation's own noise:
    their standard deviation, how many lie below 0, and the sign test's p."""
    noise = stats.evaluation_noise(runs, key)
    at_budget = point_of(result, metric, "tokens")
    if noise is None or at_budget is None:
        return []
    lines = [f"The evaluation's own noise ({what}): every run evaluates the same base model on the same problems "
             f"before training. Over the {noise['n']} runs those values have mean {noise['mean']:.4f} and standard "
             f"deviation {noise['sd']:.4f} ({noise['min']:.3f} to {noise['max']:.3f}), so two evaluations of one "
             f"model differ with a standard deviation of about sqrt(2) x {noise['sd']:.4f} = "
             f"{noise['difference_sd']:.4f}, a part of every paired difference that pairing by seed cannot remove. "
             "The paired differences at the budget, beside it:", ""]
    for name, diff in at_budget["differences"].items():
        values = list(diff["values"].values())
        if len(values) < 2:
            continue
        below = sum(v < 0 for v in values)
        lines.append(f"- {name}: standard deviation {statistics.stdev(values):.4f} over {len(values)} pairs; "
                     f"{below} of {len(values)} below 0 (two-sided sign test p = {stats.sign_test_p(values):.3f})")
    lines.append("")
    return lines



def _ci(stats: dict, digits: int = 3, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if stats["low"] is None:
        return f"{stats['mean']:{sign}.{digits}f} (no interval)"
    return f"{stats['mean']:{sign}.{digits}f} [{stats['low']:{sign}.{digits}f}, {stats['high']:{sign}.{digits}f}]"


def statistics_table(result: dict, metric: str, what: str, planned: Optional[int] = None,
                     with_verdict: bool = True, target: Optional[float] = None) -> List[str]:
    """One table of a metric at the budget and as the curve mean: each setting's mean [95% interval], its paired
    difference from GRPO n=4 [95% interval], the half-width and, for a primary metric (`with_verdict`), the verdict
    (interim below `planned` pairs). Section 1 reports the secondary metrics without a verdict."""
    at_budget, curve = point_of(result, metric, "tokens"), point_of(result, metric, "curve")
    if at_budget is None or curve is None:
        return [f"{what}: not logged by every run of the reference, or no common token range; see "
                "`<out>/compare/settings.md`.", ""]
    covered = tokens_range(result, metric)
    ref = result["reference"]
    tail = "half-width, verdict." if with_verdict else "half-width (a secondary metric: no verdict)."
    columns = ["at budget", f"minus {ref}", "half-width"] + (["verdict"] if with_verdict else [])
    columns += ["curve mean", f"minus {ref}", "half-width"] + (["verdict"] if with_verdict else [])
    lines = [f"{what} at the budget ({covered[1]:.0f} tokens, the largest count every run reaches) and its mean over "
             f"the evaluation points (the curve over {covered[0]:.0f}..{covered[1]:.0f} tokens), per setting: mean "
             f"over seeds [95% interval]; minus {ref}: paired by seed, mean [95% interval], {tail}", "",
             "| setting | seeds | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for name, own_stats in at_budget["settings"].items():
        cells = [name, str(own_stats["n"])]
        for point in (at_budget, curve):
            own = point["settings"][name]
            diff = point["differences"].get(name)
            if diff is None:
                cells += [_ci(own), "reference", "-"] + (["-"] if with_verdict else [])
            else:
                hw = stats.half_width(diff)
                cells += [_ci(own), f"{_ci(diff, signed=True)} ({diff['n']} pair{'s' if diff['n'] != 1 else ''})",
                          "-" if hw is None else f"{hw:.3f}"]
                if with_verdict:
                    cells.append(stats.verdict(diff, planned, target))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


# -- plots -------------------------------------------------------------------------------------------------------
def band_plots(a, result: dict, settings, compare_dir: str, img_dir: str) -> List[str]:
    """compare's band plots (mean and 95% interval over seeds against generated tokens) of avg@k and greedy
    accuracy, copied into img_dir as <prefix>_avg_at_k.png and <prefix>_accuracy.png (not the names of the
    earlier comparisons' images, which the page keeps)."""
    from openrlhf_ada.analysis import compare_settings

    os.makedirs(img_dir, exist_ok=True)
    written = compare_settings.plot_bands(result, settings, compare_dir)
    names = []
    for source, target in (("settings_eval_avg_at_k.png", f"{a.design.image_prefix}_avg_at_k.png"),
                           ("settings_eval_accuracy.png", f"{a.design.image_prefix}_accuracy.png")):
        if source in written:
            shutil.copyfile(os.path.join(compare_dir, source), os.path.join(img_dir, target))
            names.append(target)
    return names


def time_plot(a, runs: List[dict], img_dir: str) -> str:
    """Held-out avg@k (greedy accuracy where a run has none) against training wall time, each seed a line: the
    machine-dependent axis. Written as <prefix>_time.png (learning_time.png, learning_powered_time.png: the
    earlier designs')."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(img_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    avg = all(p.get("avg_at_k") is not None for r in runs for p in r["evaluations"])
    key = "avg_at_k" if avg else "accuracy"
    for text, name in _labels(a):
        mine = sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"])
        for i, r in enumerate(mine):
            ax.plot([p["train_seconds"] / 60 for p in r["evaluations"]], [p[key] for p in r["evaluations"]],
                    marker="o", markersize=3, color=a.design.setting(name).color, alpha=0.6, linewidth=1,
                    label=f"{text} ({len(mine)} seeds)" if i == 0 else None)
    ax.set_xlabel("training wall time (min; steps only, load-dependent)")
    ax.set_ylabel("held-out avg@k" if avg else "held-out greedy accuracy")
    ax.set_title("held-out accuracy vs training wall time (each line one seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(img_dir, f"{a.design.image_prefix}_time.png"), dpi=110)
    plt.close(fig)
    return f"{a.design.image_prefix}_time.png"



# -- mechanisms and the two axes -------------------------------------------------------------------------------------
def mechanism_checks(a, runs: List[dict]) -> Dict[tuple, dict]:
    """Per finished run (setting, seed): its mechanisms checked on the updates after the first visit of the pool
    (`openrlhf_ada.analysis.mechanisms`), and its share of trained groups with a non-zero advantage there."""
    from openrlhf_ada.analysis import mechanisms

    out = {}
    for r in runs:
        rows = mechanisms.after_first_visit(read_rows(run_dir(a, r["setting"], r["seed"])), a.train_size,
                                            a.design.setting(r["setting"]).prompts_per_step)
        out[(r["setting"], r["seed"])] = {"steps": len(rows), "nonzero_share": mechanisms.nonzero_adv_share(rows),
                                          "checks": mechanisms.engagement(a.design.setting(r["setting"]).flags, rows)}
    return out


def setting_engaged(checks: Dict[tuple, dict], name: str) -> Optional[bool]:
    """Every run of the setting engaged its mechanisms (True), one did not (False), or one could not be read."""
    from openrlhf_ada.analysis import mechanisms

    values = [mechanisms.engaged(c["checks"]) for (n, _), c in checks.items() if n == name]
    if not values or any(v is None for v in values):
        return None
    return all(values)



def mechanism_lines(a, runs: List[dict], checks: Dict[tuple, dict]) -> List[str]:
    """The mechanism table (each run's checks, stated before any verdict) and the non-zero-advantage share after
    the first visit, paired by seed against GRPO n=4."""
    if not runs:
        return []
    lines = [f"**Did each mechanism engage?** Read from each run's metrics over the updates after the first visit of "
             f"the pool (from update {math.ceil(a.train_size / PROMPTS_PER_STEP) + 1} on; GRPO n=8's pool takes "
             f"{math.ceil(a.train_size / 4)} updates), by `openrlhf_ada.analysis.mechanisms` (its thresholds are "
             "stated there). A setting gets a verdict below only if its mechanism engaged in every run.", "",
             "| setting | seed | updates read | non-zero-adv. groups | mechanism | engaged | what was measured |",
             "|---|---|---|---|---|---|---|"]
    for text, name in _labels(a):
        for (n, seed), c in sorted(checks.items(), key=lambda kv: kv[0][1]):
            if n != name:
                continue
            rows = list(c["checks"].items()) or [("-", {"engaged": True, "why": "none: the reference's sampling"})]
            for mech, check in rows:
                flag = {True: "yes", False: "**no**", None: "unread"}[check["engaged"]]
                lines.append(f"| {text} | {seed} | {c['steps']} | {_num(c['nonzero_share'])} | {mech} | {flag} | "
                             f"{check['why']} |")
    lines.append("")
    shares = {}
    for (n, seed), c in checks.items():
        if c["nonzero_share"] is not None:
            shares.setdefault(n, {})[seed] = c["nonzero_share"]
    diffs = [(name, stats.paired(shares, name, a.design.reference)) for name in a.design.names if name != a.design.reference]
    diffs = [(name, d) for name, d in diffs if d is not None]
    if diffs:
        lines.append(f"Trained groups with a non-zero advantage after the first visit, minus {label(a, a.design.reference)}'s "
                     "(paired by seed: the same prompts in the same order), mean [95% t interval]:")
        lines.append("")
        for name, d in diffs:
            lines.append(f"- {label(a, name)}: {_ci(d, signed=True)} ({d['n']} pair{'s' if d['n'] != 1 else ''})")
        lines.append("")
    return lines



def sizing_from_runs(a, runs: List[dict]) -> Optional[dict]:
    """The seeds the finished runs' spread asks for (the plan's internal pilot): the largest standard deviation s of
    a setting's paired differences from GRPO n=4 at the last update (settings with at least 2 pairs), the fewest
    seeds whose expected paired half-width t(0.975, n - 1) x s / sqrt(n) is at most --target-half-width, and how
    many seeds of every setting the comparison covers (those with finished runs and those --settings names, so the
    line does not change with the subset one invocation runs) fit in --hours at the runs' mean machine time. None
    below 2 pairs."""
    key = "avg_at_k" if a.avg_k else "accuracy"
    axis1 = stats.values_at_step(runs, key, a.updates)
    sds = {}
    for name in a.design.names:
        d = stats.paired(axis1, name, a.design.reference) if name != a.design.reference else None
        if d is not None and d["n"] >= 2:
            sds[name] = statistics.stdev(d["values"].values())
    timed = [r["process_seconds"] for r in runs if r.get("process_seconds")]
    if not sds or not timed:
        return None
    sd = max(sds.values())
    run_hours = statistics.fmean(timed) / 3600
    covered = len(set(a.settings) | {r["setting"] for r in runs})
    fit = max((n for n in range(2, 201) if covered * n * run_hours <= a.hours), default=None)
    return {"sds": sds, "sd": sd, "needed": stats.seeds_needed(sd, a.target_half_width), "run_hours": run_hours,
            "fit": fit, "settings": covered}


def sizing_lines(a, runs: List[dict]) -> List[str]:
    s = sizing_from_runs(a, runs)
    if s is None:
        return []
    spread = ", ".join(f"{label(a, n)} {v:.4f}" for n, v in s["sds"].items())
    needed = "more than 200" if s["needed"] is None else str(s["needed"])
    fit = "fewer than 2" if s["fit"] is None else str(s["fit"])
    return [f"**Seeds from these runs' spread** (the plan's internal pilot): standard deviation of the paired "
            f"differences at update {a.updates}: {spread}; the largest, {s['sd']:.4f}, asks for {needed} seeds for "
            f"a paired half-width of {a.target_half_width:g}; at {s['run_hours'] * 60:.1f} min a run, {fit} seeds of "
            f"the {s['settings']} settings fit in {a.hours:g} hours.", ""]

def family(design) -> List[tuple]:
    """The last design's primary tests: both axes for every setting besides the reference (10 tests)."""
    return [(name, axis) for name in design.names if name != design.reference for axis in ("updates", "tokens")]



def verdict_lines(a, runs: List[dict], checks: Dict[tuple, dict], result: dict, metric: str) -> List[str]:
    """The primary tests stated before the runs: per setting, held-out avg@k paired against GRPO n=4 at the last
    update (axis 1) and at the generated tokens every run reaches (axis 2, compare's value), with the verdicts of
    `primary_verdicts` (Holm over the design's 10 tests) and a row for each test not run yet."""
    from openrlhf_ada.analysis.mechanisms import paired_t_p

    key = "avg_at_k" if a.avg_k else "accuracy"
    axis1 = stats.values_at_step(runs, key, a.updates)
    at_tokens = point_of(result, metric, "tokens") if result else None
    tests = {}
    for name in a.design.names:
        if name == a.design.reference:
            continue
        d1 = stats.paired(axis1, name, a.design.reference)
        if d1 is not None:
            tests[(name, "updates")] = d1
        d2 = at_tokens["differences"].get(label(a, name)) if at_tokens else None
        if d2 is not None:
            tests[(name, "tokens")] = {**d2, "p": paired_t_p(list(d2["values"].values()))}
    if not tests:
        return []
    verdicts = stats.primary_verdicts(tests, {name: setting_engaged(checks, name) for name in a.design.names},
                                      len(a.seeds), family(a.design), ALPHA)
    m = len(family(a.design))
    covered = tokens_range(result, metric) if result else None
    what = f"held-out avg@{a.avg_k}" if a.avg_k else "held-out greedy accuracy"
    lines = [f"**Primary tests** (stated before the runs): {what} minus {label(a, a.design.reference)}'s, paired by seed, at "
             f"update {a.updates} (axis 1: equal updates, equal trained batch) and at "
             + (f"{covered[1]:.0f} generated tokens" if covered else "the largest token count every run reaches")
             + f" (axis 2: equal generated tokens); mean [95% t interval], the paired t test's p, Holm-adjusted over "
             f"the design's {m} tests (family-wise {ALPHA:g}; a test not run yet or with one pair counted at p = 1). "
             f"Verdict: helps or hurts when the adjusted p is at most {ALPHA:g} (by the sign of the mean), else no "
             f"difference shown; none where the mechanism did not engage, and none before all {m} tests have "
             f"{len(a.seeds)} pairs.", "",
             "| setting | axis | difference | p | Holm-adjusted p | verdict |", "|---|---|---|---|---|---|"]
    for name, axis in family(a.design):
        axis_text = f"{a.updates} updates" if axis == "updates" else "equal tokens"
        t = tests.get((name, axis))
        if t is None:
            lines.append(f"| {label(a, name)} | {axis_text} | not run yet | 1 (counted) | - | - |")
            continue
        v = verdicts[(name, axis)]
        lines.append(f"| {label(a, name)} | {axis_text} | {_ci(t, signed=True)} ({t['n']}) | {_num(t['p'])} | "
                     f"{_num(v['adjusted'])} | {v['rule']} |")
    lines.append("")
    return lines

# -- report ------------------------------------------------------------------------------------------------------
def _num(x: Optional[float], fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def report_v2(a, base: Optional[dict], train: str, heldout: str) -> str:
    """The last design's report (ten tests, Holm), written between its markers in --doc."""
    runs = finished_runs(a)
    lines = []
    lines.append(f"Machine: {machine()}. Measured with this script on this machine; the numbers below are from "
                 f"`{os.path.relpath(a.out, REPO)}`.")
    lines.append("")
    question = (designs.TEMPLATES[a.format] or "What is {expression}? Answer with just the number.").format(
        expression="43 - 7 + 12")
    t = a.design.task(a.max_digits)
    lines.append(f"Task: reasoning-gym `chain_sum`, {t['min_terms']}-{t['max_terms']} terms of "
                 f"{t['min_digits']}-{t['max_digits']} digits (\"{question}\", at most {a.max_new_tokens} new "
                 f"tokens), scored by `openrlhf_ada/rewards/gym.py`. {a.train_size} training problems "
                 f"{difficulty_counts(train)}; {a.eval_size} held-out problems {difficulty_counts(heldout)}, "
                 "written with another seed, none of them a training problem (checked).")
    lines.append("")
    if base:
        s, g = base.get("sampled", {}), base.get("greedy", {})
        t = base.get("train_sampled")
        if t:
            lines.append(f"Base model on the {a.train_size} training prompts, 8 samples each at T = 1.0: pass rate "
                         f"{t.get('eval/accuracy', math.nan):.3f}, pass@8 {t.get('eval/pass_at_8', math.nan):.3f} (so "
                         f"{1 - t.get('eval/pass_at_8', math.nan):.3f} of the prompts had no correct sample of 8).")
            lines.append("")
        lines.append("Base model (SmolLM2-135M-Instruct) on the held-out problems, before any training:")
        lines.append("")
        lines.append("| difficulty | problems | greedy accuracy | sampled pass rate (T = 1.0) | pass@4 (T = 1.0) |")
        lines.append("|---|---|---|---|---|")
        counts = difficulty_counts(heldout)
        for source in counts:
            lines.append(f"| {source} | {counts[source]} | {g.get(f'eval/{source}_pass1', math.nan):.3f} | "
                         f"{s.get(f'eval/{source}_pass1', math.nan):.3f} | {s.get(f'eval/{source}_pass4', math.nan):.3f} |")
        lines.append(f"| all | {sum(counts.values())} | {g.get('eval/accuracy', math.nan):.3f} | "
                     f"{s.get('eval/accuracy', math.nan):.3f} | {s.get('eval/pass_at_4', math.nan):.3f} |")
        lines.append("")
    avg = (f"and avg@{a.avg_k} ({a.avg_k} samples per problem at temperature {a.avg_temperature}, "
           f"`--eval.avg_seed {a.avg_seed}`)" if a.avg_k else "(no avg@k: --avg-k 0)")
    lines.append(f"Each run: {a.updates} updates of {TRAINED_PER_UPDATE} trained samples (prompts per step x n), "
                 f"{'no token budget' if not a.budget else f'or {a.budget} generated tokens'}; evaluated on the "
                 f"{a.eval_size} held-out problems, greedily {avg}, before training, every "
                 f"{max(1, math.ceil(a.updates / a.eval_points))} updates and at the end.")
    lines.append("")
    lines.append("| setting | seed | steps | tokens | samples / prompt | zero-adv. groups | train min | run min | "
                 "greedy before | greedy after | avg@k before | avg@k after (SE) | mean load (max) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for text, name in _labels(a):
        for r in sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"]):
            e = r["evaluations"]
            lines.append(f"| {text} | {r['seed']} | {r['steps']} | {r['tokens']:.0f} | {r['samples_per_prompt']:.2f} | "
                         f"{r['zero_adv_group_share']:.2f} | {r['train_seconds'] / 60:.1f} | "
                         f"{r.get('process_seconds', math.nan) / 60:.1f} | {e[0]['accuracy']:.3f} | "
                         f"{e[-1]['accuracy']:.3f} | {_num(e[0].get('avg_at_k'))} | {_num(e[-1].get('avg_at_k'))} "
                         f"({_num(e[-1].get('avg_at_k_se'))}) | {r['load_mean']:.1f} ({r['load_max']:.1f}) |")
    lines.append("")
    if runs:
        hours = sum(r.get("process_seconds", 0.0) for r in runs) / 3600
        lines.append(f"Machine time of these {len(runs)} runs: {hours:.2f} hours (each run's train_local processes, "
                     "start-up and evaluations included; the base model's measurement not).")
        lines.append("")
    checks = mechanism_checks(a, runs)
    lines.extend(mechanism_lines(a, runs, checks))
    from openrlhf_ada.analysis.compare import CompareError

    try:
        result, settings, notes = settings_statistics(a, runs) if runs else (None, [], [])
    except CompareError as e:  # e.g. runs evaluated on other held-out problems: say so, keep the rest of the report
        result, settings, notes = None, [], [f"compare refused these runs: {e}"]
    from openrlhf_ada.trainer.heldout import ACCURACY, AVG_AT_K

    if runs:
        lines.extend(verdict_lines(a, runs, checks, result, AVG_AT_K if a.avg_k else ACCURACY))
        lines.extend(sizing_lines(a, runs))
    if result is not None:
        compare_dir = os.path.join(a.out, "compare")
        from openrlhf_ada.analysis import compare_settings

        compare_settings.write_files(result, compare_dir)
        lines.append(f"Axis 2 in full, by `compare` (`openrlhf_ada.analysis.compare_settings`): "
                     f"{result['interval_description']}; differences paired by seed (setting minus "
                     f"{result['reference']}); no verdicts here (they are the Holm-corrected tests above). Target "
                     f"half-width: {a.target_half_width}. All of compare's numbers: "
                     f"`{os.path.relpath(compare_dir, REPO)}/settings.md`.")
        lines.append("")
        lines.extend(statistics_table(result, AVG_AT_K, f"Held-out avg@{a.avg_k}", len(a.seeds), with_verdict=False))
        lines.extend(noise_lines(result, runs, AVG_AT_K, "avg_at_k", f"held-out avg@{a.avg_k}"))
        lines.append("Secondary, reported without a verdict (section 1): held-out greedy accuracy.")
        lines.append("")
        lines.extend(statistics_table(result, ACCURACY, "Held-out greedy accuracy", len(a.seeds), with_verdict=False))
    for note in notes:
        lines.append(f"- note: {note}")
    if notes:
        lines.append("")
    if runs:
        images = (band_plots(a, result, settings, os.path.join(a.out, "compare"), a.img_dir) if result else [])
        images.append(time_plot(a, runs, a.img_dir))
        rel = os.path.relpath(a.img_dir, os.path.dirname(os.path.abspath(a.doc)))
        for image in images:
            lines.append(f"![{image}]({rel}/{image})")
        lines.append("")
    lines.append("Commands (`--out` relative to the repository):")
    lines.append("")
    lines.append("```bash")
    log = os.path.join(a.out, "invocations.log")
    if os.path.isfile(log):
        with open(log, encoding="utf-8") as f:
            seen = []
            for line in f:
                entry = json.loads(line)
                if entry["command"] not in seen:
                    seen.append(entry["command"])
            lines.extend(seen)
    lines.append("```")
    lines.append("")
    example = {}
    for name in a.design.names:
        path = os.path.join(run_dir(a, name, min([r["seed"] for r in runs if r["setting"] == name] or [0])),
                            "command.txt")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                example[name] = f.readline().strip().replace(REPO + os.sep, "")
    if example:
        lines.append("Each run's train_local command (first seed; `<run>/command.txt` has every run's):")
        lines.append("")
        lines.append("```bash")
        lines.extend(example.values())
        lines.append("```")
    body = "\n".join(lines)
    update_section(a.doc, a.design.section, body)
    return body


# -- the current design: one question ------------------------------------------------------------------------------
def _pairs(n: int) -> str:
    return f"{n} pair{'s' if n != 1 else ''}"


def _gap_line(tag: str, k: int, where: str, gaps: Dict[str, Dict[int, float]], first: str, second: str,
              labels: Dict[str, str], extra: str = "") -> str:
    """A descriptive line (added after the runs) on greedy accuracy minus avg@k, the part of a difference in avg@k that
    is the sampling policy's spread rather than the greedy answer: each side's mean over its seeds, and the second's
    minus the first's, paired by seed. `gaps` is {side: {seed: greedy - avg@k}}."""
    diff = stats.paired(gaps, second, first)
    means = ", ".join(f"{labels[n]} {statistics.mean(gaps[n].values()):.4f}" for n in (first, second) if gaps[n])
    return (f"- ({tag}) greedy accuracy minus avg@{k} {where} (descriptive, added after the runs): {means}{extra}; "
            f"{labels[second]}'s minus {labels[first]}'s, paired by seed: "
            + (f"{_ci(diff, 4, True)} ({_pairs(diff['n'])})" if diff else "no pair yet") + ".")


def run_order_seen(a, runs: List[dict]) -> List[tuple]:
    """The finished runs in the order they were started (each run's first attempt, `wall_seconds.jsonl`)."""
    starts = []
    for r in runs:
        path = os.path.join(run_dir(a, r["setting"], r["seed"]), "wall_seconds.jsonl")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                first = min((json.loads(line)["start"] for line in f if line.strip()), default=math.inf)
            starts.append((first, r["setting"], r["seed"]))
    return [(name, seed) for _, name, seed in sorted(starts)]


def seq_checks(a, runs: List[dict]) -> Dict[int, dict]:
    """Rule 6 per run of the Seq setting: `mechanisms.seq_mechanism` over the updates after the first visit."""
    from openrlhf_ada.analysis import mechanisms

    setting = a.design.setting(a.design.rules.seq_setting)
    out = {}
    for r in runs:
        if r["setting"] == setting.name:
            rows = mechanisms.after_first_visit(read_rows(run_dir(a, r["setting"], r["seed"])), a.train_size,
                                                setting.prompts_per_step)
            out[r["seed"]] = mechanisms.seq_mechanism(rows)
    return out


def _projection(a, runs: List[dict], ref: str, other: str, spent_hours: float, budget_hours: float) -> str:
    """The design's machine time if each run still to come takes its setting's mean so far (the reference's mean
    counts the A/A repeat)."""
    minutes: Dict[str, List[float]] = {ref: [], other: []}
    for r in runs:
        name = ref if r["setting"] in a.design.extra_settings else r["setting"]
        if name in minutes and r.get("process_seconds"):
            minutes[name].append(r["process_seconds"] / 60)
    done = {(r["setting"], r["seed"]) for r in runs}
    todo = [(n, s) for s in a.seeds for n in (ref, other) if (n, s) not in done]
    if not todo:
        return ""
    if any(not minutes[n] for n, _ in todo):
        return " No run of each setting yet to project the rest from."
    left = sum(statistics.fmean(minutes[n]) for n, _ in todo) / 60
    means = ", ".join(f"{label(a, n)} {statistics.fmean(m):.1f} min" for n, m in minutes.items())
    return (f" At each setting's mean run so far ({means}), the {len(todo)} runs to come take {left:.2f} hours: "
            f"{spent_hours + left:.2f} in all, against the plan's {budget_hours:g}.")


def _seeds_text(a, rules) -> str:
    """Rule 3's seeds as planned and as rule 5 left them, and what that many pairs detect at the planning sd."""
    design = len(a.design.seeds)
    text = (f"{rules.planned_seeds} planned, cut to {design} {rules.cut}"
            if design < rules.planned_seeds else f"{design} planned")
    listed = ", ".join(map(str, a.seeds))
    text += f" ({listed})" if tuple(a.seeds) == tuple(a.design.seeds) else f"; this report reads seeds {listed}"
    n = len(a.seeds)
    if n >= 2:
        text += (f"; at the planning sd {rules.planning_sd:g}, {n} pairs detect "
                 f"{detectable_effect(rules.planning_sd, n, rules.alpha, rules.power):.4f} with "
                 f"{rules.power:.0%} power, and have power {stats.power_at(0.04, rules.planning_sd, n, rules.alpha):.2f}"
                 " at +0.04")
    return text


def _header(a, train: str, heldout: str) -> List[str]:
    """The machine, the folder and the task of a one-question design's report."""
    t = a.design.task(a.max_digits)
    return [f"Machine: {machine()}. Measured with this script on this machine; the numbers below are from "
            f"`{os.path.relpath(a.out, REPO)}`.", "",
            f"Task: reasoning-gym `chain_sum`, {t['min_terms']}-{t['max_terms']} terms of {t['min_digits']}-"
            f"{t['max_digits']} digits, at most {a.max_new_tokens} new tokens. {a.train_size} training problems "
            f"(seed 0) {difficulty_counts(train)}; {a.eval_size} held-out problems (seed 1) "
            f"{difficulty_counts(heldout)}, none of them a training problem (checked).", ""]


def _commands(a) -> List[str]:
    """The invocations that ran the design (`<out>/invocations.log`), each once, as a fenced block."""
    lines = ["Commands (`--out` relative to the repository):", "", "```bash"]
    log = os.path.join(a.out, "invocations.log")
    if os.path.isfile(log):
        with open(log, encoding="utf-8") as f:
            lines.extend(dict.fromkeys(json.loads(line)["command"] for line in f if line.strip()))
    return lines + ["```"]


def report_seq_vs_grpo(a, base: Optional[dict], train: str, heldout: str) -> str:
    """The current design's report: the plan's rules as met, each run, the primary test and the secondaries."""
    d, rules = a.design, a.design.rules
    ref, other = d.reference, next(n for n in d.names if n not in (d.reference, *d.extra_settings))
    runs = finished_runs(a)
    k = a.avg_k
    lines = _header(a, train, heldout)
    # the rules, in the plan's order
    lines += ["**The plan's rules, as met:**", ""]
    pool = base.get("train_sampled") if base else None
    if pool:
        check = plan_rules.pool_rule(pool["eval/accuracy"], *rules.pool_pass_rate)
        pass8 = pool.get("eval/pass_at_8")
        lines.append(f"1. Pool: {check['why']}" + (f" (pass@8 {pass8:.3f})" if pass8 is not None else "") + ".")
    else:
        lines.append("1. Pool: the base model's pass rate on the training pool is not measured yet.")
    held = base.get("heldout") if base else None
    if held:
        lines.append(f"   Base model on the held-out problems, measured once: greedy accuracy "
                     f"{held['eval/accuracy']:.3f}, avg@{k} {_num(held.get('eval/avg_at_k'))} (SE "
                     f"{_num(held.get('eval/avg_at_k_se'))}).")
    starts = [r["evaluations"][0].get("avg_at_k") for r in runs
              if r["evaluations"] and r["evaluations"][0]["step"] == 0]
    starts = [v for v in starts if v is not None]
    if starts:
        same = "all equal: the evaluation's draws are shared" if max(starts) == min(starts) else "not all equal"
        lines.append(f"   Every run evaluates the base model again before training (train_local's step 0): avg@{k} "
                     f"{min(starts):.4f} to {max(starts):.4f} over {len(starts)} runs ({same}).")
    first, repeat = rules.aa_pair
    by = {(r["setting"], r["seed"]): r for r in runs}
    aa_runs = [by.get((name, rules.aa_seed)) for name in rules.aa_pair]
    aa_ok = None
    if None in aa_runs:
        lines.append(f"2. A/A control: {label(a, first)} seed {rules.aa_seed} twice: not finished yet.")
    else:
        rows = [step_row(a, name, rules.aa_seed, 1) for name in rules.aa_pair]
        check = plan_rules.aa_rule(rows[0], rows[1], rules.aa_keys)
        aa_ok = check["ok"]
        ends = [_end(r, "avg_at_k") for r in aa_runs]
        residual = (f"; final avg@{k} {ends[0]:.4f} and {ends[1]:.4f}, a difference of {ends[1] - ends[0]:+.4f} (the "
                    f"residual nondeterminism of a {label(a, first)} run; only this setting had an A/A pair)"
                    if None not in ends else "")
        lines.append(f"2. A/A control: {check['why']}{residual}.")
    pairs = sorted(set(s for (n, s) in by if n == ref) & set(s for (n, s) in by if n == other))
    lines.append(f"3. Seeds: {_seeds_text(a, rules)}; {_pairs(len(pairs))} finished.")
    seen = run_order_seen(a, runs)
    if seen:
        lines.append("4. Order, as run: " + ", ".join(f"{n} {s}" for n, s in seen) + ".")
    if None not in aa_runs:
        minutes = [r["process_seconds"] / 60 for r in aa_runs]
        spent = sum(minutes) + sum(p.get("seconds", 0.0) for p in (base or {}).values()) / 60
        timing = plan_rules.time_rule(minutes, dict(rules.minutes), ref, rules.tolerance, rules.hours, spent,
                                      len(a.seeds))
        lines.append(f"5. Machine time: {timing['why']}.")
    if runs:
        hours = sum(r.get("process_seconds", 0.0) for r in runs) / 3600
        base_hours = sum(p.get("seconds", 0.0) for p in (base or {}).values()) / 3600
        lines.append(f"   The {len(runs)} finished runs took {hours:.2f} hours, the base model {base_hours:.2f}."
                     + _projection(a, runs, ref, other, hours + base_hours, rules.hours))
    seq = seq_checks(a, runs)
    engaged = [c["engaged"] for c in seq.values()]
    lines.append(f"6. Mechanism: Seq engaged in {sum(e is True for e in engaged)} of {len(engaged)} finished "
                 f"{label(a, other)} runs (`mechanisms.seq_mechanism`, updates after the first visit; table below).")
    lines.append("")
    # each run
    lines += ["| setting | seed | steps | tokens | run min | Seq: trained vs first-round signal groups | "
              f"step 1: shared draws with {label(a, ref)} | greedy at {a.updates} | avg@{k} at "
              f"{a.eval_at_tokens} tokens (step) | avg@{k} at {a.updates} (SE) | mean load (max) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    at_budget, _ = stats.values_at_tokens(runs, "avg_at_k", a.eval_at_tokens) if a.eval_at_tokens else ({}, [])
    for text, name in _labels(a):
        for r in sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"]):
            mech, shared = "-", "-"
            if name == other:
                c = seq[r["seed"]]
                flag = {True: "engaged", False: "**not engaged**", None: "unread"}[c["engaged"]]
                mech = f"{_num(c['nonzero_share'])} vs {_num(c['first_round_share'])}: {flag}"
                ok, why = plan_rules.shared_draws_across(
                    step_row(a, name, r["seed"], 1).get("ada/first_round_signal_share"),
                    step_row(a, ref, r["seed"], 1).get("zero_adv_group_share")) if (ref, r["seed"]) in by else (
                    None, "no finished reference run")
                shared = {True: "equal", False: "**different**", None: "-"}[ok] + f" ({why})"
            crossing = next((e for e in r["evaluations"] if e["step"] > 0 and e["tokens"] >= a.eval_at_tokens),
                            None) if a.eval_at_tokens else None
            cross = (f"{_num(crossing.get('avg_at_k'))} ({crossing['step']})" if crossing else "not reached")
            last = r["evaluations"][-1]
            lines.append(f"| {text} | {r['seed']} | {r['steps']} | {r['tokens']:.0f} | "
                         f"{r.get('process_seconds', math.nan) / 60:.1f} | {mech} | {shared} | "
                         f"{_num(_end(r, 'accuracy'))} | {cross} | {_num(_end(r, 'avg_at_k'))} "
                         f"({_num(last.get('avg_at_k_se'))}) | {_num(r.get('load_mean'), '.1f')} "
                         f"({_num(r.get('load_max'), '.1f')}) |")
    lines.append("")
    # the primary test
    finals = stats.values_at_step(runs, "avg_at_k", a.updates)
    diff = stats.paired(finals, other, ref)
    values = [diff["values"][s] for s in sorted(diff["values"])] if diff else []
    blocked = None
    if aa_ok is False:
        blocked = "the A/A control failed (rule 2)"
    elif any(e is not True for e in engaged) or len(engaged) < len(values):
        blocked = "Seq did not engage, or could not be read, in every run (rule 6)"
    test = stats.primary_test(values, len(a.seeds), rules.alpha, rules.power, blocked)
    lines += [f"**Primary test** (stated before the runs): d_s = avg@{k}({label(a, other)}, seed s) - "
              f"avg@{k}({label(a, ref)}, seed s) after update {a.updates}; the paired t test, two-sided, alpha "
              f"{rules.alpha:g}.", ""]
    if not values:
        lines += ["No finished pair yet.", ""]
    else:
        lines.append("- per seed: " + ", ".join(f"{s}: {v:+.4f}" for s, v in sorted(diff["values"].items())))
        interval = (f"[{test['low']:+.4f}, {test['high']:+.4f}] (95% t interval, {_pairs(test['n'])})"
                    if test["low"] is not None else f"(no interval from {_pairs(test['n'])})")
        lines.append(f"- mean {test['mean']:+.4f} {interval}, p "
                     f"{_num(test['p'], '.4f')}, sd of the differences {_num(test['sd'], '.4f')}")
        if test["detectable"] is not None:
            power = stats.power_at(0.04, test["sd"], test["n"], rules.alpha)
            lines.append(f"- the effect this test detects with {rules.power:.0%} power at the observed sd: "
                         f"{test['detectable']:.4f} avg@{k}; its power at +0.04: {power:.2f}")
        lines.append(f"- **verdict: {test['verdict']}**")
        lines.append("")
    # the secondaries
    lines += ["**Secondary, without verdicts.**", ""]
    if a.eval_at_tokens:
        measured, missing = stats.values_at_tokens(runs, "avg_at_k", a.eval_at_tokens)
        d2 = stats.paired(measured, other, ref)
        text = (f"{_ci(d2, 4, True)} ({_pairs(d2['n'])})" if d2 else "no pair yet")
        gone = [f"{label(a, n)} seed {s}" for n, s in missing if n in (ref, other)]
        lines.append(f"- (a) Equal generated tokens: avg@{k} measured at the evaluation after the step where a run "
                     f"first reached {a.eval_at_tokens} tokens, {label(a, other)} minus {label(a, ref)}: {text}"
                     + (f"; no value there (never reached): {', '.join(gone)}" if gone else "") + ".")
    greedy = stats.paired(stats.values_at_step(runs, "accuracy", a.updates), other, ref)
    lines.append(f"- (b) Greedy accuracy at {a.updates} updates, {label(a, other)} minus {label(a, ref)}: "
                 + (f"{_ci(greedy, 4, True)} ({_pairs(greedy['n'])})" if greedy else "no pair yet") + ".")
    spread = stats.paired_vs_unpaired(finals.get(other, {}), finals.get(ref, {}))
    if spread:
        corr = "-" if spread["correlation"] is None else f"{spread['correlation']:.2f}"
        lines.append(f"- (c) Pairing: sd of the paired differences {spread['paired_sd']:.4f}; the same runs analysed "
                     f"as if unpaired, {spread['unpaired_sd']:.4f} (the two settings' sds over the {spread['n']} "
                     f"seeds combined; no unpaired design was run); implied correlation of a seed's two runs {corr}.")
    else:
        lines.append("- (c) Pairing: fewer than 2 pairs.")
    greedy24, avg24 = stats.values_at_step(runs, "accuracy", a.updates), finals
    gaps = {n: {s: greedy24[n][s] - avg24[n][s] for s in greedy24.get(n, {}) if s in avg24.get(n, {})}
            for n in (other, ref)}
    lines.append(_gap_line("d", k, f"at {a.updates} updates", gaps, other, ref,
                           {n: label(a, n) for n in (other, ref)}))
    lines.append("")
    lines += _commands(a)
    body = "\n".join(lines)
    update_section(a.doc, d.section, body)
    return body


def _end(run: dict, key: str) -> Optional[float]:
    """The run's value of `key` at its last evaluation."""
    return run["evaluations"][-1].get(key) if run["evaluations"] else None



# -- the equal-token design: the committed runs it reuses, its checks and its report ---------------------------------
def _committed_args(a):
    """The committed folder as `finished_runs` and `run_dir` read it."""
    return SimpleNamespace(out=a.reuse, design=designs.SEQ_VS_GRPO)


def committed_runs(a) -> Dict[tuple, dict]:
    """{(setting, seed): done.json} of the committed runs the design reuses."""
    return {(r["setting"], r["seed"]): r for r in finished_runs(_committed_args(a))}


def budgets(a) -> Dict[int, float]:
    """Each seed's token budget: the generated tokens of its committed Seq run (its done.json's `tokens`)."""
    rules, committed = a.design.rules, committed_runs(a)
    missing = [s for s in a.seeds if (rules.seq_setting, s) not in committed]
    if missing:
        raise SystemExit(f"[learning] {a.reuse}: no finished {rules.seq_setting} run of seed(s) {missing}: the "
                         "design's token budgets are read from them")
    return {s: committed[(rules.seq_setting, s)]["tokens"] for s in a.seeds}


def point_at(run: Optional[dict], step: int) -> Optional[dict]:
    """A run's evaluation after update `step` (None without one)."""
    return next((e for e in run["evaluations"] if e["step"] == step), None) if run else None


def reproduction_checks(a, committed: Dict[tuple, dict]) -> Dict[int, dict]:
    """Each finished GRPO rerun against its committed run at update `a.updates` (`plan_rules.reproduction_rule`)."""
    rules = a.design.rules
    return {r["seed"]: plan_rules.reproduction_rule(point_at(r, a.updates),
                                                    point_at(committed.get((rules.rerun, r["seed"])), a.updates),
                                                    rules.reproduced)
            for r in finished_runs(a) if r["setting"] == rules.rerun}


def run_estimates(a, committed: Dict[tuple, dict]) -> Dict[tuple, dict]:
    """Each run's estimated minutes, from its committed run: the Seq A/A takes its committed run's; a GRPO rerun
    `plan_rules.rerun_estimate` of its committed run (its last `late_steps` updates' tokens and seconds a step)."""
    rules = a.design.rules
    aa = committed[(rules.seq_setting, rules.aa_seed)]
    out = {(rules.aa_setting, rules.aa_seed): {"minutes": aa["process_seconds"] / 60.0, "crossing": a.updates,
                                               "evaluations": 0, "extra_steps": 0}}
    for seed, budget in budgets(a).items():
        run = committed[(rules.rerun, seed)]
        rows = [r for r in read_rows(run_dir(_committed_args(a), rules.rerun, seed))
                if r.get("reward_mean") is not None][-rules.late_steps:]
        eval_seconds = statistics.fmean(e["eval_seconds"] for e in run["evaluations"])
        out[(rules.rerun, seed)] = plan_rules.rerun_estimate(
            run["process_seconds"], eval_seconds, run["tokens"], statistics.fmean(r["generated_tokens"] for r in rows),
            statistics.fmean(r["timing/step"] for r in rows), budget, a.updates, math.ceil(a.updates / a.eval_points))
    return out


def time_check(a, committed: Dict[tuple, dict]) -> dict:
    """The time rule now: this design's finished runs' minutes, and the estimates of those to come, in order. A run
    the design lists as not having had the machine alone (`not_alone`) counts its estimate as measured."""
    runs = {(r["setting"], r["seed"]): r for r in finished_runs(a)}
    estimates = run_estimates(a, committed)
    order = designs.equal_tokens_order(a.design, a.seeds)
    alone = set(map(tuple, a.design.rules.not_alone))
    finished = [(estimates[k]["minutes"] if k in alone else runs[k]["process_seconds"] / 60.0, estimates[k]["minutes"])
                for k in order if k in runs]
    return plan_rules.equal_tokens_time_rule(sum(m for m, _ in finished), finished,
                                             [estimates[k]["minutes"] for k in order if k not in runs],
                                             a.design.rules.hours)


def tokens_plot(a, runs: List[dict], base_avg: Optional[float], img_dir: str) -> str:
    """avg@k against generated tokens at every evaluation of every run (the base model at 0 tokens), each run a
    thin line: the committed Seq runs and the GRPO reruns, the Seq A/A dashed. Written as <prefix>_tokens.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(img_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    seen = set()
    for r in sorted(runs, key=lambda r: (r["label"], r["seed"])):
        points = ([(0.0, base_avg)] if base_avg is not None else []) + [
            (e["tokens"], e["avg_at_k"]) for e in r["evaluations"] if e.get("avg_at_k") is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=3, linewidth=0.8, alpha=0.7,
                color=r["color"], linestyle="--" if r.get("dashed") else "-",
                label=r["label"] if r["label"] not in seen else None)
        seen.add(r["label"])
    ax.set_xlabel("generated tokens (all rounds, all samples)")
    ax.set_ylabel(f"held-out avg@{a.avg_k}")
    ax.set_title(f"held-out avg@{a.avg_k} against generated tokens (each line one seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"{a.design.image_prefix}_tokens.png"
    fig.savefig(os.path.join(img_dir, name), dpi=110)
    plt.close(fig)
    return name


def _minutes(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def report_equal_tokens(a, train: str, heldout: str) -> str:
    """The equal-token design's report: the committed runs it reuses, the Seq A/A, each GRPO rerun's reproduction and
    crossing, the primary test at equal generated tokens, the secondaries and the plot; every number from the runs'
    done.json (the time estimates also from the committed runs' metrics)."""
    d, rules, k = a.design, a.design.rules, a.avg_k
    committed = committed_runs(a)
    runs = finished_runs(a)
    by = {(r["setting"], r["seed"]): r for r in runs}
    seq_label, ref_label = designs.SEQ_VS_GRPO.setting(rules.seq_setting).label, label(a, rules.rerun)
    lines = _header(a, train, heldout)
    lines += [f"Reused as they are: the committed runs in `{os.path.relpath(a.reuse, REPO)}` ({seq_label} at update "
              f"{a.updates}: the primary's {seq_label} side and each seed's token budget; {ref_label} at update "
              f"{a.updates}: what each rerun must reproduce). Same flags and problems (checked before any run: config "
              "and data files equal).", "", "**The plan's rules, as met:**", ""]
    # 1. the Seq A/A
    aa = by.get((rules.aa_setting, rules.aa_seed))
    if aa is None:
        lines.append(f"1. Seq A/A ({seq_label} seed {rules.aa_seed} again): not finished yet.")
    else:
        check = plan_rules.reproduction_rule(point_at(aa, a.updates),
                                             point_at(committed.get((rules.seq_setting, rules.aa_seed)), a.updates),
                                             rules.reproduced)
        shown = ", ".join(f"{key} {v:+.4f}" for key, v in check["differences"].items())
        lines.append(f"1. Seq A/A ({seq_label} seed {rules.aa_seed} again) against its committed run at update "
                     f"{a.updates}: {check['why']}; the residual nondeterminism of a Seq run: {shown or '-'} (stated, "
                     "no rule acts on it).")
    # 2. reproduction
    checks = reproduction_checks(a, committed)
    failed = sorted(s for s, c in checks.items() if not c["ok"])
    lines.append(f"2. Reproduction: {len(checks) - len(failed)} of {len(checks)} finished {ref_label} reruns equal "
                 f"their committed runs at update {a.updates} ({', '.join(rules.reproduced)}, bit for bit)"
                 + (f"; **not reproduced: seed(s) {', '.join(map(str, failed))}**: the runner stopped there, and the "
                    "primary test gets no verdict" if failed else "") + ".")
    for s in failed:
        lines.append(f"   Seed {s}: {checks[s]['why']}.")
    # 3. the crossing
    seeds_budget = budgets(a)
    crossings = {r["seed"]: stats.budget_evaluation(r, seeds_budget[r["seed"]]) for r in runs
                 if r["setting"] == rules.rerun}
    bad = sorted(s for s, c in crossings.items() if not c["ok"])
    lines.append(f"3. Crossing: {len(crossings) - len(bad)} of {len(crossings)} reruns stopped at the first step "
                 "whose running total reached their Seq run's tokens, and were evaluated there"
                 + "".join(f"; seed {s}: {crossings[s]['why']}" for s in bad) + ".")
    seen = run_order_seen(a, runs)
    lines.append("4. Order, as run: " + (", ".join(f"{n} {s}" for n, s in seen) or "no run yet") + ".")
    timing = time_check(a, committed)
    lines.append(f"5. Machine time: {timing['why']}.")
    lines.append("")
    # each seed
    lines += [f"| seed | budget: {seq_label}'s tokens | {ref_label} at {a.updates}, committed: avg@{k} / greedy / "
              "tokens | rerun | crossing step (tokens) | avg@" f"{k}: {seq_label} at {a.updates} | {ref_label} at "
              f"crossing | difference | greedy: {seq_label} / {ref_label} | training min: {seq_label} / "
              f"{ref_label} at crossing | rerun min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    diffs = {}
    # {what: {"seq": {seed: value}, "ref": {seed: value}}}: greedy at equal tokens, avg@k and greedy at equal time
    second = {what: {"seq": {}, "ref": {}} for what in ("greedy", "avg_time", "greedy_time")}
    gaps, gaps_ref24 = {"seq": {}, "ref": {}}, {}  # greedy - avg@k: Seq at 24, the rerun at its crossing; committed at 24
    for s in a.seeds:
        seq, ref, rerun = committed.get((rules.seq_setting, s)), committed.get((rules.rerun, s)), by.get((rules.rerun,
                                                                                                           s))
        ref24 = point_at(ref, a.updates)
        cells = [str(s), f"{seeds_budget[s]:.0f}",
                 f"{_num(ref24 and ref24['avg_at_k'], '.4f')} / {_num(ref24 and ref24['accuracy'])} / "
                 f"{_num(ref24 and ref24['tokens'], '.0f')}"]
        seq24 = point_at(seq, a.updates)
        if rerun is None:
            lines.append("| " + " | ".join(cells + ["not run yet"] + ["-"] * 7) + " |")
            continue
        c, cross = checks[s], crossings[s]
        cells.append("equal" if c["ok"] else "**" + ", ".join(c["differ"]) + " differ**")
        e = cross["evaluation"]
        cells.append(f"{cross['step']} ({e['tokens']:.0f})" if e else f"**{cross['why']}**")
        cells.append(_num(seq24["avg_at_k"], ".4f"))
        if e:
            diffs[s] = seq24["avg_at_k"] - e["avg_at_k"]
            second["greedy"]["seq"][s], second["greedy"]["ref"][s] = seq24["accuracy"], e["accuracy"]
            gaps["seq"][s], gaps["ref"][s] = seq24["accuracy"] - seq24["avg_at_k"], e["accuracy"] - e["avg_at_k"]
            if ref24:
                gaps_ref24[s] = ref24["accuracy"] - ref24["avg_at_k"]
        cells += [_num(e and e["avg_at_k"], ".4f"), f"{diffs[s]:+.4f}" if s in diffs else "-",
                  f"{_num(seq24['accuracy'])} / {_num(e and e['accuracy'])}",
                  f"{_minutes(seq['train_seconds'])} / {_minutes(e and e['train_seconds'])}",
                  _minutes(rerun.get("process_seconds"))]
        lines.append("| " + " | ".join(cells) + " |")
        for key, what in (("avg_at_k", "avg_time"), ("accuracy", "greedy_time")):
            point = stats.interpolated_at(rerun["evaluations"], "train_seconds", seq["train_seconds"], key)
            if point is not None:
                second[what]["seq"][s], second[what]["ref"][s] = seq24[key], point["value"]
    lines.append("")
    # the primary test
    values = [diffs[s] for s in sorted(diffs)]
    blocked = None
    if failed:
        blocked = f"the reproduction check failed (seed(s) {', '.join(map(str, failed))})"
    elif bad:
        blocked = f"a rerun has no measured value at its budget (seed(s) {', '.join(map(str, bad))})"
    elif len(a.seeds) < rules.min_pairs:
        blocked = f"{len(a.seeds)} seeds, fewer than the plan's {rules.min_pairs}"
    test = stats.primary_test(values, len(a.seeds), rules.alpha, rules.power, blocked)
    plan = stats.planned_power(rules.effect, rules.planning_sd, rules.sd_interval, rules.planned_seeds, rules.alpha,
                               rules.power)
    cut = ""
    if len(a.seeds) != rules.planned_seeds:  # what the pairs as run detect at the planning sd
        left = stats.planned_power(rules.effect, rules.planning_sd, rules.sd_interval, len(a.seeds), rules.alpha,
                                   rules.power)
        why = f"cut {rules.cut}" if tuple(a.seeds) == tuple(a.design.seeds) else "the seeds of --seeds"
        cut = (f" As run: {_pairs(len(a.seeds))}, seeds {', '.join(map(str, a.seeds))} ({why}): power "
               f"{left['power']:.2f} at +{rules.effect:g}, {left['detectable']:.4f} detected with {rules.power:.0%} "
               f"power, {left['range'][0]:.2f} to {left['range'][1]:.2f} over the sd's interval.")
    lines += [f"**Primary test** (stated before the runs): d_s = avg@{k}({seq_label}, seed s, update {a.updates}; "
              f"committed) - avg@{k}({ref_label}, seed s, at the first step whose running total reached the tokens of "
              f"seed s's Seq run; measured there); the paired t test, two-sided, alpha {rules.alpha:g}. Planned: "
              f"{_pairs(rules.planned_seeds)}; at the planning sd {rules.planning_sd:g}, power {plan['power']:.2f} at "
              f"+{rules.effect:g}, {plan['detectable']:.4f} detected with {rules.power:.0%} power; over the sd's "
              f"interval [{rules.sd_interval[0]:g}, {rules.sd_interval[1]:g}], power {plan['range'][0]:.2f} to "
              f"{plan['range'][1]:.2f}.{cut}", ""]
    if not values:
        lines += ["No measured pair yet.", ""]
    else:
        lines.append("- per seed: " + ", ".join(f"{s}: {v:+.4f}" for s, v in sorted(diffs.items())))
        interval = (f"[{test['low']:+.4f}, {test['high']:+.4f}] (95% t interval, {_pairs(test['n'])})"
                    if test["low"] is not None else f"(no interval from {_pairs(test['n'])})")
        lines.append(f"- mean {test['mean']:+.4f} {interval}, p {_num(test['p'], '.4f')}, sd of the differences "
                     f"{_num(test['sd'], '.4f')}")
        if test["detectable"] is not None:
            lines.append(f"- the effect this test detects with {rules.power:.0%} power at the observed sd: "
                         f"{test['detectable']:.4f} avg@{k}; its power at +{rules.effect:g}: "
                         f"{stats.power_at(rules.effect, test['sd'], test['n'], rules.alpha):.2f}")
            seen = stats.observed_power(rules.effect, test["sd"], test["n"], rules.alpha, rules.power)
            lines.append(f"- over the observed sd's own 95% interval [{seen['sd_interval'][0]:.4f}, "
                         f"{seen['sd_interval'][1]:.4f}] (chi-square, {test['n'] - 1} degrees of freedom): power at "
                         f"+{rules.effect:g} from {seen['power'][0]:.2f} to {seen['power'][1]:.2f}, the effect detected "
                         f"with {rules.power:.0%} power from {seen['detectable'][0]:.4f} to {seen['detectable'][1]:.4f}")
        lines.append(f"- **verdict: {test['verdict']}**")
        lines.append("")
    # the secondaries
    lines += ["**Secondary, without verdicts.**", ""]
    for tag, what, key in (
            ("a", f"avg@{k} at {seq_label}'s training time (the sum of its steps' seconds, `train_seconds`: no "
                  f"evaluations, no start-up), {ref_label}'s interpolated linearly in its own training seconds "
                  "between the two evaluations around it", "avg_time"),
            ("b", f"greedy accuracy at equal generated tokens ({seq_label} at {a.updates}, {ref_label} at its "
                  "crossing step)", "greedy"),
            ("c", f"greedy accuracy at {seq_label}'s training time (interpolated as in (a))", "greedy_time")):
        diff = stats.paired(second[key], "seq", "ref")
        lines.append(f"- ({tag}) {what}, {seq_label} minus {ref_label}: "
                     + (f"{_ci(diff, 4, True)} ({_pairs(diff['n'])})" if diff else "no pair yet") + ".")
    plotted = [{**r, "label": f"{seq_label} (committed)", "color": designs.SEQ_VS_GRPO.setting(rules.seq_setting).color}
               for (n, s), r in committed.items() if n == rules.seq_setting and s in a.seeds]
    plotted += [{**r, "label": label(a, r["setting"]), "color": d.setting(r["setting"]).color,
                 "dashed": r["setting"] == rules.aa_setting} for r in runs]
    base = os.path.join(a.reuse, "base", "heldout", "done.json")
    base_avg = None
    if os.path.isfile(base):
        with open(base) as f:
            base_avg = json.load(f).get("eval/avg_at_k")
    if runs:
        image = tokens_plot(a, plotted, base_avg, a.img_dir)
        lines.append(f"- (d) avg@{k} against generated tokens at every evaluation of every run (the base model at 0 "
                     "tokens; each line one seed):")
        lines += ["", f"![{image}](img/{image})"]
    if diffs:
        lines += ["", _gap_line("e", k, f"at equal generated tokens ({seq_label} at {a.updates}, {ref_label} at its "
                                "crossing step)", gaps, "seq", "ref", {"seq": seq_label, "ref": ref_label},
                                f" (at {a.updates}, committed: {statistics.mean(gaps_ref24.values()):.4f})"
                                if gaps_ref24 else "")]
    lines.append("")
    lines += _commands(a)
    body = "\n".join(lines)
    update_section(a.doc, d.section, body)
    return body
