"""``python -m openrlhf_ada.cli.compare RUN [RUN ...]``: compare training runs from their per-step metrics.

The flags; the work is openrlhf_ada/analysis/compare.py (reading runs: metrics.jsonl, wandb offline logs and the
wandb server; the table and the plots) and openrlhf_ada/analysis/compare_settings.py (settings: runs grouped by
setting, paired by seed, 95% intervals). `--help` says what it writes.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List

from openrlhf_ada.analysis import compare as runs_compare
from openrlhf_ada.analysis import compare_settings

PROG = "python -m openrlhf_ada.cli.compare"


# -- command line ----------------------------------------------------------------------------------------------------
SETTINGS_HELP = """\
Settings (runs grouped by setting, paired by seed): with --group-by, --name-pattern or --setting, compare also
reports each setting (one configuration, several seeds) and writes settings.md, settings.json, settings.csv,
settings.png and settings_<metric>.png. A run's seed is its config's train.seed (or seed), else the first group of
--seed-pattern in its name; in a setting every run needs a seed, each seed once. For every headline metric (held-out
eval/accuracy first, then reward_mean, pass_rate, generated_tokens, samples_per_prompt, zero_adv_group_share, eta,
resolved_share; --metrics to choose) three values per run: at the end of the run, at equal generated tokens (curves
interpolated linearly in generated_tokens_total, at the largest budget every run reaches) and the curve's mean over
the token range every run covers. Per setting: the mean over seeds and its 95% interval. Per setting against
--reference: the mean paired difference (seed by seed, over the seeds both have), its 95% interval and whether that
excludes zero. --interval t: mean +- t(0.975, n-1) x sd / sqrt(n) over n seeds (Student t, n-1 degrees of
freedom). --interval bootstrap: the 2.5th and 97.5th percentiles of the mean over --resamples resamples of the seeds
with replacement (seeded by --bootstrap-seed; too narrow with few seeds). One seed: no interval. The plots draw
each setting's mean curve with its interval as a band, each seed faint behind it."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Compare training runs: plots of reward (per step and per generated token), samples per "
                    "prompt, resolved share, zero-advantage groups and sampling efficiency, and a table of final "
                    "and best values. Compare settings run with several seeds: means and 95% intervals, paired "
                    "differences by seed, plots with bands (see Settings below).",
        epilog="Outputs in --out: compare.png (2x3 grid), reward_vs_step.png, reward_vs_tokens.png, "
               "samples_per_prompt.png, resolved_share.png (Reinforce-Ada runs only), zero_adv_group_share.png, "
               "eta.png, compare.md. Key names: the standard keys of openrlhf_ada/trainer/metrics_log.py, or upstream's "
               "(rollout/reward_mean, ada_eta, ada_samples_per_prompt_mean, ada_resolved_share, a train/ prefix, "
               "...), and the held-out evaluation's eval/* keys. " + SETTINGS_HELP,
    )
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="a run folder containing metrics.jsonl, a metrics JSONL file, a wandb run on this "
                             "machine (a wandb/offline-run-* folder as WANDB_MODE=offline writes it, its "
                             "run-*.wandb file, or a folder holding wandb/ and no metrics.jsonl: the latest run), "
                             "or wandb:ENTITY/PROJECT/RUN_ID (needs wandb, credentials and network); with --setting "
                             "the runs are given there instead")
    parser.add_argument("--out", default=os.path.join("docs", "compare"),
                        help="folder for the PNGs and compare.md (created if missing; files are overwritten)")
    parser.add_argument("--names", nargs="+", metavar="NAME",
                        help="legend/table names, one per RUN in the same order (default: the run folder's name, "
                             "the file's name, or the wandb run's name)")
    parser.add_argument("--smooth", type=int, default=1, metavar="K",
                        help="also draw a trailing mean over K steps (raw values faint behind it); 1 = raw only. "
                             "The table always uses raw values")
    parser.add_argument("--wandb-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="network timeout for each wandb request (a connectivity check of at most 5 s runs "
                             "first)")
    g = parser.add_argument_group("settings (runs grouped by setting, paired by seed)")
    g.add_argument("--group-by", metavar="KEY[,KEY...]",
                   help="group runs by the values of these keys of their saved config (dotted flag names, e.g. "
                        "ada.enable,adora.enable); a wandb run's config, or for a metrics.jsonl run the config.json "
                        "train_local writes into its folder, else the wandb run its trainer wrote there")
    g.add_argument("--name-pattern", metavar="REGEX",
                   help="group runs by a regular expression searched in each run's name: its first capture group "
                        "(or the group named setting) is the setting, e.g. '(.*)_seed[0-9]+'")
    g.add_argument("--setting", action="append", metavar="NAME=RUN[,RUN...]",
                   help="a setting and its runs, explicitly (repeat for each setting; no RUN arguments then)")
    g.add_argument("--seed-pattern", default=runs_compare.DEFAULT_SEED_PATTERN, metavar="REGEX",
                   help="for runs whose saved config has no train.seed (or seed): a regular expression whose first "
                        "group, found in the run's name, is the seed (default: %(default)s, as in grpo_seed3)")
    g.add_argument("--reference", metavar="NAME",
                   help="the setting every other one is compared with, paired by seed (default: the first)")
    g.add_argument("--interval", choices=("t", "bootstrap"), default="t",
                   help="95%% interval over seeds: t (Student t, seeds - 1 degrees of freedom) or bootstrap "
                        "(percentile bootstrap over seeds); default t")
    g.add_argument("--resamples", type=int, default=10000, metavar="N",
                   help="resamples of the seeds for --interval bootstrap (default 10000)")
    g.add_argument("--bootstrap-seed", type=int, default=0, metavar="N",
                   help="seed of the bootstrap's generator: the same seed gives the same intervals (default 0)")
    g.add_argument("--grid-points", type=int, default=50, metavar="N",
                   help="points of the common token grid the curves are interpolated onto (default 50)")
    g.add_argument("--metrics", metavar="KEY[,KEY...]",
                   help="the metrics to report per setting (default: eval/accuracy and every standard metric with "
                        "a better direction, those that the runs log; held-out keys too, e.g. eval/avg_at_k for "
                        "runs with --eval.avg_k)")
    return parser


def _settings_options(args):
    """The settings options from the flags, or None when no grouping flag is given."""
    if not (args.group_by or args.name_pattern or args.setting):
        for flag, given in (("--reference", args.reference), ("--metrics", args.metrics)):
            if given:
                raise runs_compare.CompareError(f"{flag}: only with settings; group the runs with --group-by, "
                                                "--name-pattern or --setting")
        return None
    return compare_settings.make_options(
        group_by=args.group_by, name_pattern=args.name_pattern, setting=args.setting or (),
        seed_pattern=args.seed_pattern, reference=args.reference, interval=args.interval, resamples=args.resamples,
        bootstrap_seed=args.bootstrap_seed, grid_points=args.grid_points, metrics=args.metrics)


def _sources(args, options) -> List[str]:
    if options is not None and options.explicit:
        if args.runs:
            raise runs_compare.CompareError(f"RUN arguments ({', '.join(args.runs)}) and --setting: give the runs "
                                            "in --setting only")
        return [source for _, sources in options.explicit for source in sources]
    if not args.runs:
        raise runs_compare.CompareError("no RUN given: pass run folders, metrics files or wandb runs (or --setting "
                                        "NAME=RUN,...)")
    return args.runs


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    settings = result = None
    try:
        if args.smooth < 1:
            raise runs_compare.CompareError(f"--smooth {args.smooth}: give 1 (no smoothing) or more steps")
        options = _settings_options(args)
        runs = runs_compare.load_runs(_sources(args, options), args.names, args.wandb_timeout)
        if options is not None:
            settings = compare_settings.build_settings(runs, options)
            result = compare_settings.compare_settings(settings, options)
    except runs_compare.CompareError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for run in runs:
        for note in run.notes:
            print(f"{PROG}: note: {note}", file=sys.stderr)
    drawn = runs_compare.plot(runs, args.out, args.smooth)
    table = runs_compare.markdown_table(runs)
    sources = "\n".join(f"- {run.name}: `{run.source}` ({len(run.rows)} steps)"
                        + "".join(f"\n  - note: {note}" for note in run.notes) for run in runs)
    absent = [run.name for run in runs if not run.has("resolved_share")]
    note = f"\nNot in resolved_share.png (no Reinforce-Ada metrics): {', '.join(absent)}.\n" if absent else ""
    with open(os.path.join(args.out, "compare.md"), "w", encoding="utf-8") as f:
        f.write(f"# Run comparison\n\n{sources}\n{note}\n{table}\n\nPlots: "
                + ", ".join(f"`{name}`" for name in drawn) + "\n")
    print(table)
    print(f"\nwrote {len(drawn)} plots and compare.md to {args.out}")
    if result is not None:
        written = compare_settings.write_files(result, args.out) + compare_settings.plot_bands(result, settings,
                                                                                          args.out)
        for note in result["notes"]:
            print(f"{PROG}: note: {note}", file=sys.stderr)
        print("\n" + compare_settings.markdown(result))
        print(f"\nwrote {', '.join(written)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
