"""Settings in ``compare``: runs grouped by setting, paired by seed, each headline metric with a 95% interval.

A setting is one configuration run with several seeds. Runs are grouped

- by config keys (``--group-by ada.enable,adora.enable``): the values of those keys in each run's saved config (a
  wandb run's config; a metrics.jsonl run's is the ``config.json`` train_local writes next to it, else the wandb
  run its trainer wrote there, see ``compare.saved_config``);
- by a name pattern (``--name-pattern '(.*)_seed\\d+'``): the first capture group (or the one named ``setting``) of a
  regular expression searched in each run's name;
- or explicitly (``--setting NAME=RUN,RUN,...``, repeated).

A run's seed is its config's ``train.seed`` (or ``seed``), else the first group of ``--seed-pattern`` in its name
(default: the digits after ``seed`` in ``grpo_seed3``). Within a setting every run needs a seed and no two runs the
same one. Two settings are paired by seed: the difference of a metric is taken seed by seed, over the seeds both
have, against the reference setting (``--reference``, default the first).

For every headline metric (held-out accuracy first) three values per run are compared:

- ``end``: its last logged value;
- ``tokens``: its value at the largest number of generated tokens every run reaches (curves interpolated linearly
  in ``generated_tokens_total``), the budget-matched value;
- ``curve``: the mean of its curve over the token range every run covers (the area under it over the width).

Per setting: the mean over seeds and its 95% interval; per setting against the reference: the mean paired
difference, its 95% interval and whether that excludes zero (see ``openrlhf_ada.analysis.seed_stats`` for the t and
bootstrap intervals). The curves' means and intervals on the common token grid are drawn as bands.
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from openrlhf_ada.analysis.compare import (
    BETTER,
    DEFAULT_SEED_PATTERN,
    LABELS,
    METRICS,
    SHARES,
    CompareError,
    Run,
    saved_config,
)
from openrlhf_ada.analysis.seed_stats import (
    Interval,
    IntervalMethod,
    band,
    common_range,
    curve_mean,
    grid,
    interpolate,
    mean_interval,
)
from openrlhf_ada.trainer.heldout import ACCURACY, AVG_AT_K

HEADLINE = (ACCURACY,) + tuple(m for m in METRICS if BETTER[m] is not None)
SEED_KEYS = ("train.seed", "seed")
PROBLEMS_DIGEST = "eval.problems_sha256"  # train_local's config.json: the held-out problems a run was evaluated on
TOKENS = "generated_tokens_total"
POINTS = ("end", "tokens", "curve")
AXIS_LABELS = {**LABELS, ACCURACY: "held-out accuracy", AVG_AT_K: "held-out avg@k"}


@dataclass(frozen=True)
class SettingsOptions:
    """How runs form settings and how they are compared (the command line's settings flags, checked)."""

    group_by: Tuple[str, ...] = ()
    name_pattern: Optional[str] = None
    explicit: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (setting, its RUN sources) from --setting
    seed_pattern: str = DEFAULT_SEED_PATTERN
    reference: Optional[str] = None
    method: IntervalMethod = IntervalMethod()
    grid_points: int = 50
    metrics: Tuple[str, ...] = HEADLINE


@dataclass(frozen=True)
class Setting:
    """One setting: its name, its runs and their seeds (distinct)."""

    name: str
    runs: Tuple[Run, ...]
    seeds: Tuple[int, ...]  # seeds[i] is runs[i]'s


# -- options ---------------------------------------------------------------------------------------------------------
def parse_explicit(values: Sequence[str]) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    """``NAME=RUN,RUN,...`` values of --setting as (name, sources); each name once, each with a run."""
    out, seen = [], set()
    for value in values:
        name, sep, runs = value.partition("=")
        sources = tuple(r for r in runs.split(",") if r)
        if not sep or not name or not sources:
            raise CompareError(f"--setting {value!r}: expected NAME=RUN[,RUN...], e.g. --setting "
                               "grpo=runs/grpo_seed1,runs/grpo_seed2")
        if name in seen:
            raise CompareError(f"--setting {name}: given twice; list all its runs in one --setting")
        seen.add(name)
        out.append((name, sources))
    return tuple(out)


def make_options(*, group_by: Optional[str], name_pattern: Optional[str], setting: Sequence[str],
                 seed_pattern: str, reference: Optional[str], interval: str, resamples: int, bootstrap_seed: int,
                 grid_points: int, metrics: Optional[str]) -> SettingsOptions:
    """The settings options from the flags, checked before any run is read (each error says how to fix it)."""
    ways = [flag for flag, given in (("--group-by", group_by), ("--name-pattern", name_pattern),
                                     ("--setting", setting)) if given]
    if len(ways) > 1:
        raise CompareError(f"{' and '.join(ways)}: give one way of grouping runs into settings")
    for flag, pattern in (("--name-pattern", name_pattern), ("--seed-pattern", seed_pattern)):
        if pattern is None:
            continue
        try:
            compiled = re.compile(pattern)
        except re.error as e:
            raise CompareError(f"{flag} {pattern!r}: not a regular expression ({e})") from None
        if compiled.groups < 1:
            raise CompareError(f"{flag} {pattern!r}: needs a capture group, the part of the name that is the "
                               f"{'setting' if flag == '--name-pattern' else 'seed'}, e.g. "
                               + ("'(.*)_seed\\d+'" if flag == "--name-pattern" else "'seed(\\d+)'"))
    explicit = parse_explicit(setting or ())
    if reference is not None and explicit and reference not in dict(explicit):
        raise CompareError(f"--reference {reference}: no such --setting (settings: {', '.join(dict(explicit))})")
    if resamples < 1:
        raise CompareError(f"--resamples {resamples}: give 1 or more (default 10000)")
    if grid_points < 2:
        raise CompareError(f"--grid-points {grid_points}: give 2 or more points of the token grid")
    chosen = tuple(m.strip() for m in metrics.split(",") if m.strip()) if metrics else HEADLINE
    unknown = [m for m in chosen if m not in METRICS and not m.startswith("eval/")]
    if unknown or not chosen:
        raise CompareError(f"--metrics {metrics!r}: unknown {', '.join(unknown) or '(none given)'}; give standard "
                           f"keys ({', '.join(METRICS)}) or held-out keys (eval/...)")
    return SettingsOptions(group_by=tuple(k.strip() for k in (group_by or "").split(",") if k.strip()),
                           name_pattern=name_pattern, explicit=explicit, seed_pattern=seed_pattern,
                           reference=reference, method=IntervalMethod(interval, resamples, bootstrap_seed),
                           grid_points=grid_points, metrics=chosen)


# -- grouping and seeds ----------------------------------------------------------------------------------------------
def _value(value: object) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def group_names(runs: Sequence[Run], options: SettingsOptions,
                configs: Sequence[Tuple[Dict[str, object], Optional[str]]]) -> List[str]:
    """The setting of each run, by --group-by or --name-pattern (explicit groups are known from the sources)."""
    if options.group_by:
        missing = [f"{run.name} ({where or run.source}: no "
                   + ("saved config" if not config else ", ".join(k for k in options.group_by if k not in config))
                   + ")" for run, (config, where) in zip(runs, configs)
                   if not config or any(k not in config for k in options.group_by)]
        if missing:
            raise CompareError("--group-by " + ",".join(options.group_by) + ": not in the config of "
                               + "; ".join(missing) + ". A run's config is its wandb run's (a metrics.jsonl run: the "
                               "config.json train_local writes into its folder, else the wandb run in its folder, "
                               "which train_local writes with WANDB_MODE=offline or --logger.wandb.key); group such "
                               "runs with --name-pattern or --setting instead")
        return [",".join(f"{k}={_value(config[k])}" for k in options.group_by) for config, _ in configs]
    pattern = re.compile(options.name_pattern)
    names, unmatched = [], []
    for run in runs:
        match = pattern.search(run.name)
        if match is None:
            unmatched.append(run.name)
            continue
        names.append(match.group("setting") if "setting" in pattern.groupindex else match.group(1))
    if unmatched:
        raise CompareError(f"--name-pattern {options.name_pattern!r} does not match the run name(s) "
                           f"{', '.join(unmatched)}; fix the pattern, or name the runs with --names")
    return names


def run_seed(run: Run, config: Dict[str, object], seed_pattern: str) -> Optional[int]:
    """The run's seed: its config's train.seed (or seed), else the first group of seed_pattern in its name."""
    for key in SEED_KEYS:
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    match = re.search(seed_pattern, run.name)
    return int(match.group(1)) if match and match.group(1) and match.group(1).lstrip("-").isdigit() else None


def build_settings(runs: Sequence[Run], options: SettingsOptions) -> List[Setting]:
    """The settings in order of first appearance, each run with its seed. Errors name the runs: a run without a
    seed, two runs of one setting with the same seed, an unknown --reference."""
    configs = [saved_config(run) for run in runs]  # a metrics.jsonl run's is read here, once
    if options.explicit:
        names = [name for name, sources in options.explicit for _ in sources]
    else:
        names = group_names(runs, options, configs)
    order: Dict[str, List[int]] = {}
    for i, name in enumerate(names):
        order.setdefault(name, []).append(i)
    settings, problems = [], []
    for name, members in order.items():
        seeds = [run_seed(runs[i], configs[i][0], options.seed_pattern) for i in members]
        no_seed = [runs[i].name for i, seed in zip(members, seeds) if seed is None]
        if no_seed:
            problems.append(f"setting {name}: no seed for {', '.join(no_seed)} (no train.seed in a saved config, and "
                            f"--seed-pattern {options.seed_pattern!r} does not match the name; name runs like "
                            "grpo_seed3, or pass --seed-pattern with a group that captures the seed)")
        by_seed: Dict[int, List[str]] = {}
        for i, seed in zip(members, seeds):
            if seed is not None:
                by_seed.setdefault(seed, []).append(runs[i].name)
        for seed, holders in by_seed.items():
            if len(holders) > 1:
                problems.append(f"setting {name}: seed {seed} twice ({', '.join(holders)}); runs of one setting are "
                                "paired with other settings by seed, so each seed once (drop a run, or fix the "
                                "grouping)")
        settings.append(Setting(name, tuple(runs[i] for i in members), tuple(s for s in seeds if s is not None)))
    digests: Dict[str, List[str]] = {}
    for run, (config, _) in zip(runs, configs):
        if config.get(PROBLEMS_DIGEST) is not None:
            digests.setdefault(str(config[PROBLEMS_DIGEST]), []).append(run.name)
    if len(digests) > 1:
        problems.append("the runs were evaluated on different held-out problems (" + "; ".join(
            f"{', '.join(names)}: {PROBLEMS_DIGEST} {digest[:12]}" for digest, names in digests.items())
            + "): their eval/* metrics cannot be compared; evaluate every run on the same --eval.dataset (and "
            "--data.max_samples, --data.max_len, --rollout.max_new_tokens, template)")
    if problems:
        raise CompareError("; ".join(problems))
    if options.reference is not None and options.reference not in order:
        raise CompareError(f"--reference {options.reference}: no such setting (settings: {', '.join(order)})")
    return settings


def reference_of(settings: Sequence[Setting], options: SettingsOptions) -> Setting:
    """The setting the others are compared with: --reference, else the first."""
    return next(s for s in settings if s.name == (options.reference or settings[0].name))


def pairs(reference: Setting, other: Setting) -> List[Tuple[int, Run, Run]]:
    """(seed, reference run, other run) for each seed both settings have, in seed order; no shared seed is an
    error naming both settings' seeds."""
    ref = dict(zip(reference.seeds, reference.runs))
    shared = [(seed, ref[seed], run) for seed, run in sorted(zip(other.seeds, other.runs)) if seed in ref]
    if not shared:
        raise CompareError(f"settings {other.name} (seeds {', '.join(map(str, sorted(other.seeds)))}) and "
                           f"{reference.name} (seeds {', '.join(map(str, sorted(reference.seeds)))}) share no seed: "
                           "runs are paired by seed; run the same seeds for both, or pick another --reference")
    return shared


# -- statistics ------------------------------------------------------------------------------------------------------
def last_value(run: Run, metric: str) -> Optional[float]:
    """The metric's value at the run's last step that logs it (None when no step does)."""
    values = [row[metric] for row in run.rows if row.get(metric) is not None]
    return values[-1] if values else None


def _interval_json(interval: Interval) -> dict:
    return {"n": interval.n, "mean": interval.mean, "low": interval.low, "high": interval.high}


def metric_values(settings: Sequence[Setting], metric: str, grid_points: int) -> Optional[dict]:
    """Per run of the settings that log `metric` in every run: its end, budget-matched and curve-mean values, and
    its curve on the common token grid. None when no setting logs it throughout."""
    reporting = [s for s in settings if all(last_value(run, metric) is not None for run in s.runs)]
    if not reporting:
        return None
    curves = {run.name: run.series(TOKENS, metric) for s in reporting for run in s.runs}
    covered = common_range(list(curves.values()))
    xs = grid(covered[0], covered[1], grid_points) if covered else None
    values: Dict[str, Dict[str, Dict[int, float]]] = {}
    on_grid: Dict[str, List[List[float]]] = {}
    for s in reporting:
        per_point = {"end": {}, "tokens": {}, "curve": {}}
        for seed, run in zip(s.seeds, s.runs):
            per_point["end"][seed] = last_value(run, metric)
            if xs is not None:
                curve = interpolate(*curves[run.name], xs)
                per_point["tokens"][seed] = curve[-1]
                per_point["curve"][seed] = curve_mean(xs, curve)
                on_grid.setdefault(s.name, []).append(curve)
        values[s.name] = per_point
    return {"settings": [s.name for s in reporting], "values": values, "grid": xs,
            "tokens_range": list(covered) if covered else None, "curves": on_grid}


def compare_settings(settings: Sequence[Setting], options: SettingsOptions) -> dict:
    """Everything the settings outputs show, as JSON-ready data: the settings and their runs and seeds, and per
    metric and point (end, tokens, curve) each setting's mean and interval and each setting's paired difference
    from the reference; per metric the bands on the token grid; notes on what was left out."""
    reference = reference_of(settings, options)
    paired = {s.name: pairs(reference, s) for s in settings if s is not reference}
    notes = []
    for s in settings:
        if s is reference:
            continue
        unpaired = sorted(set(s.seeds) ^ set(reference.seeds))
        if unpaired:
            notes.append(f"{s.name} vs {reference.name}: seeds {', '.join(map(str, unpaired))} are in only one of "
                         "them and left out of the paired difference")
    out = {"interval": options.method.name, "interval_description": options.method.describe(),
           "reference": reference.name, "pairing": "by seed",
           "settings": [{"name": s.name, "seeds": sorted(s.seeds),
                         "runs": [{"name": r.name, "source": r.source, "seed": seed}
                                  for seed, r in sorted(zip(s.seeds, s.runs), key=lambda p: p[0])]}
                        for s in settings],
           "metrics": [], "notes": notes}
    for metric in options.metrics:
        got = metric_values(settings, metric, options.grid_points)
        if got is None:
            notes.append(f"{metric}: not logged by every run of any setting; left out")
            continue
        left_out = [s.name for s in settings if s.name not in got["settings"]]
        if left_out:
            notes.append(f"{metric}: left out for {', '.join(left_out)} (not logged by all its runs)")
        if got["grid"] is None:
            notes.append(f"{metric}: no range of generated tokens every run covers; only its end values")
        entry = {"metric": metric, "tokens_range": got["tokens_range"], "points": [], "band": None}
        for point in POINTS:
            if point != "end" and got["grid"] is None:
                continue
            per_setting, differences = {}, {}
            for name in got["settings"]:
                by_seed = got["values"][name][point]
                stats = mean_interval([by_seed[seed] for seed in sorted(by_seed)], options.method)
                per_setting[name] = {**_interval_json(stats), "values": {str(k): by_seed[k] for k in sorted(by_seed)}}
                if name == reference.name or reference.name not in got["settings"]:
                    continue
                ref_values = got["values"][reference.name][point]
                diffs = {seed: by_seed[seed] - ref_values[seed] for seed, _, _ in paired[name]}
                stats = mean_interval([diffs[k] for k in sorted(diffs)], options.method)
                differences[name] = {**_interval_json(stats), "excludes_zero": stats.excludes_zero,
                                     "seeds": sorted(diffs), "values": {str(k): diffs[k] for k in sorted(diffs)}}
            entry["points"].append({"at": point, "settings": per_setting, "differences": differences})
        if got["grid"] is not None:
            entry["band"] = {"tokens": got["grid"], "settings": {}}
            for name, curves in got["curves"].items():
                means, lows, highs = band(np.asarray(curves), options.method)
                entry["band"]["settings"][name] = {"mean": means, "low": lows, "high": highs}
        out["metrics"].append(entry)
    return out


# -- table, files ----------------------------------------------------------------------------------------------------
def _num(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def _where(point: str, tokens_range: Optional[List[float]]) -> str:
    if point == "end":
        return "end of run"
    if point == "tokens":
        return f"at {_num(tokens_range[1])} tokens"
    return f"curve mean {_num(tokens_range[0])}..{_num(tokens_range[1])} tokens"


def _interval_text(entry: dict) -> str:
    if entry["low"] is None:
        return f"no interval ({entry['n']} seed)"
    return f"[{_num(entry['low'])}, {_num(entry['high'])}]"


def table_rows(result: dict) -> List[dict]:
    """One row per metric, point and setting: what the table, the CSV and compare's printout show."""
    rows = []
    for entry in result["metrics"]:
        for point in entry["points"]:
            for name, stats in point["settings"].items():
                diff = point["differences"].get(name)
                rows.append({
                    "metric": entry["metric"], "at": _where(point["at"], entry["tokens_range"]), "point": point["at"],
                    "setting": name, "seeds": stats["n"], "mean": stats["mean"], "low": stats["low"],
                    "high": stats["high"], "reference": result["reference"],
                    "difference": None if diff is None else diff["mean"],
                    "difference_low": None if diff is None else diff["low"],
                    "difference_high": None if diff is None else diff["high"],
                    "paired_seeds": None if diff is None else diff["n"],
                    "excludes_zero": None if diff is None else diff["excludes_zero"]})
    return rows


def markdown(result: dict) -> str:
    ref = result["reference"]
    lines = [f"Intervals: {result['interval_description']}. Differences: paired by seed, setting minus {ref}.", "",
             f"| metric | at | setting | seeds | mean | 95% interval | minus {ref} (paired seeds) | 95% interval "
             "| excludes 0 |", "|---|---|---|---|---|---|---|---|---|"]
    for row in table_rows(result):
        if row["setting"] == ref:
            diff = ("reference", "-", "-")
        elif row["difference"] is None:
            diff = ("-", "-", "-")
        else:
            stats = {"low": row["difference_low"], "high": row["difference_high"], "n": row["paired_seeds"]}
            excludes = "-" if row["excludes_zero"] is None else ("yes" if row["excludes_zero"] else "no")
            diff = (f"{_num(row['difference'])} ({row['paired_seeds']})", _interval_text(stats), excludes)
        own = _interval_text({"low": row["low"], "high": row["high"], "n": row["seeds"]})
        lines.append(f"| {row['metric']} | {row['at']} | {row['setting']} | {row['seeds']} | {_num(row['mean'])} "
                     f"| {own} | {diff[0]} | {diff[1]} | {diff[2]} |")
    return "\n".join(lines)


def write_files(result: dict, out_dir: str) -> List[str]:
    """settings.md, settings.json and settings.csv in out_dir; returns their names."""
    os.makedirs(out_dir, exist_ok=True)
    runs = "\n".join(f"- {s['name']}: " + ", ".join(f"{r['name']} (seed {r['seed']})" for r in s["runs"])
                     for s in result["settings"])
    notes = "".join(f"\n- note: {note}" for note in result["notes"])
    with open(os.path.join(out_dir, "settings.md"), "w", encoding="utf-8") as f:
        f.write(f"# Settings comparison\n\n{runs}{notes}\n\n{markdown(result)}\n")
    with open(os.path.join(out_dir, "settings.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    rows = table_rows(result)
    with open(os.path.join(out_dir, "settings.csv"), "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["metric"])
        writer.writeheader()
        writer.writerows(rows)
    return ["settings.md", "settings.json", "settings.csv"]


# -- plots with bands ------------------------------------------------------------------------------------------------
def _slug(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", metric).strip("_")


def _draw_bands(ax, entry: dict, settings: Sequence[Setting], colors: Dict[str, tuple], interval: str) -> None:
    from matplotlib.ticker import EngFormatter

    metric = entry["metric"]
    for s in settings:
        drawn = entry["band"]["settings"].get(s.name)
        if drawn is None:
            continue
        for run in s.runs:  # each seed faint behind the band
            xs, ys = run.series(TOKENS, metric)
            ax.plot(xs, ys, color=colors[s.name], alpha=0.2, linewidth=0.8)
        tokens = entry["band"]["tokens"]
        ax.plot(tokens, drawn["mean"], color=colors[s.name], linewidth=2, label=f"{s.name} ({len(s.runs)} seeds)")
        if drawn["low"][0] is not None:
            ax.fill_between(tokens, drawn["low"], drawn["high"], color=colors[s.name], alpha=0.2, linewidth=0)
    ax.set_title(f"{AXIS_LABELS.get(metric, metric)}: mean and 95% {interval} interval over seeds", fontsize=10)
    ax.set_xlabel("generated tokens (cumulative)")
    ax.set_ylabel(AXIS_LABELS.get(metric, metric))
    ax.xaxis.set_major_formatter(EngFormatter())
    if metric in SHARES or metric.startswith("eval/"):  # a share: never outside [0, 1], zoomed to the curves
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -0.02), min(high, 1.02))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def plot_bands(result: dict, settings: Sequence[Setting], out_dir: str) -> List[str]:
    """settings_<metric>.png per metric with a common token range, and settings.png with all of them; returns the
    file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    palette = plt.get_cmap("tab10").colors
    colors = {s.name: palette[i % len(palette)] for i, s in enumerate(settings)}
    entries = [e for e in result["metrics"] if e["band"] is not None]
    written = []
    for entry in entries:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _draw_bands(ax, entry, settings, colors, result["interval"])
        fig.tight_layout()
        name = f"settings_{_slug(entry['metric'])}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=120)
        plt.close(fig)
        written.append(name)
    if entries:
        cols = min(3, len(entries))
        rows = (len(entries) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False)
        for ax, entry in zip(axes.flat, entries):
            _draw_bands(ax, entry, settings, colors, result["interval"])
        for ax in list(axes.flat)[len(entries):]:
            ax.set_visible(False)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "settings.png"), dpi=110)
        plt.close(fig)
        written.append("settings.png")
    return written
