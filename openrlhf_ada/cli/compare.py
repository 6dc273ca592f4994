"""``python -m openrlhf_ada.cli.compare RUN [RUN ...]``: compare training runs from their per-step metrics.

A RUN is a run folder holding ``metrics.jsonl`` (what both trainers write, see ``openrlhf_ada.utils.metrics_log``), the
JSONL file itself, or a wandb run ``wandb:ENTITY/PROJECT/RUN_ID`` (needs the ``wandb`` package, credentials and
network; checked up front, so an offline machine gets an error within seconds instead of a hang).

Writes into ``--out`` (default ``docs/compare``):

``compare.png``
    all six views in a 2 x 3 grid, one colour per run throughout;
``reward_vs_step.png``, ``reward_vs_tokens.png``, ``samples_per_prompt.png``, ``resolved_share.png``,
``zero_adv_group_share.png``, ``eta.png``
    the same views one per file. ``reward_vs_tokens`` puts every run on the same generation budget
    (x = ``generated_tokens_total``), the fair view when methods spend different numbers of samples per step.
    ``resolved_share`` exists only for Reinforce-Ada runs; other runs are left out of that view.
``compare.md``
    a table of the final and best value of every metric per run (also printed).

Rows may use the standard keys of ``metrics_log`` or the names upstream's logging gives the same quantities
(``rollout/reward_mean``, ``ada_eta``, ``ada/eta``, ``ada_samples_per_prompt_mean``, ``ada_resolved_share``, a
``train/`` prefix from wandb, ...); see ``openrlhf_ada.utils.metrics_log.ALIASES``. A run without ``generated_tokens_total`` gets the running sum
of ``generated_tokens``, which upstream-only rows give as ``rollout/response_length_mean x rollout/num_samples``
(as the cluster trainer computes it); ``zero_adv_group_share`` can come from ``1 - ada_nonzero_adv_group_share``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

from openrlhf_ada.utils.metrics_log import STANDARD_KEYS, read_metrics, standardize

PROG = "python -m openrlhf_ada.cli.compare"

METRICS = tuple(STANDARD_KEYS) + ("resolved_share",)
# "best" = the max or the min over steps; None: no meaningful best (a running total).
BETTER = {
    "reward_mean": max,
    "pass_rate": max,
    "generated_tokens": min,
    "generated_tokens_total": None,
    "samples_per_prompt": min,
    "zero_adv_group_share": min,
    "eta": max,
    "resolved_share": max,
}
LABELS = {
    "reward_mean": "mean reward (generated samples)",
    "pass_rate": "pass rate",
    "generated_tokens": "generated tokens per step",
    "generated_tokens_total": "generated tokens (cumulative)",
    "samples_per_prompt": "samples generated per prompt",
    "zero_adv_group_share": "share of zero-advantage groups",
    "eta": "sampling efficiency eta",
    "resolved_share": "resolved share of prompts",
}
SHARES = ("pass_rate", "zero_adv_group_share", "eta", "resolved_share")  # drawn on a 0..1 axis
# (file stem, x key, y key, title)
VIEWS = (
    ("reward_vs_step", "step", "reward_mean", "Reward vs step"),
    ("reward_vs_tokens", "generated_tokens_total", "reward_mean", "Reward vs generated tokens (budget-matched)"),
    ("samples_per_prompt", "step", "samples_per_prompt", "Samples generated per prompt"),
    ("resolved_share", "step", "resolved_share", "Resolved share (Reinforce-Ada runs only)"),
    ("zero_adv_group_share", "step", "zero_adv_group_share", "Share of zero-advantage groups"),
    ("eta", "step", "eta", "Sampling efficiency eta (useful / generated tokens)"),
)


class CompareError(Exception):
    """A run that cannot be read; the message names it and says what to do."""


@dataclass
class Run:
    name: str
    source: str
    rows: List[dict] = field(default_factory=list)  # step order; standard keys only (plus "step")

    def series(self, x: str, y: str) -> Tuple[List[float], List[float]]:
        xs, ys = [], []
        for row in self.rows:
            if row.get(x) is not None and row.get(y) is not None:
                xs.append(row[x])
                ys.append(row[y])
        return xs, ys

    def has(self, key: str) -> bool:
        return any(row.get(key) is not None for row in self.rows)


# -- reading ---------------------------------------------------------------------------------------------------------
def _standardize(raw_rows, where: str) -> List[dict]:
    try:
        return standardize(raw_rows, where)
    except ValueError as e:
        raise CompareError(str(e)) from None


def _default_name(source: str) -> str:
    if source.startswith("wandb:"):
        return source.rstrip("/").rsplit("/", 1)[-1]
    path = os.path.normpath(os.path.abspath(source))
    if os.path.isfile(path):
        stem = os.path.splitext(os.path.basename(path))[0]
        return os.path.basename(os.path.dirname(path)) if stem == "metrics" else stem
    return os.path.basename(path)


def read_local(source: str) -> List[dict]:
    path = source
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
        if not os.path.isfile(path):
            raise CompareError(f"{source}: no metrics.jsonl in this folder (expected {path}); pass a run folder "
                               "written by the trainers, or the JSONL file itself")
    elif not os.path.isfile(path):
        raise CompareError(f"{source}: no such file or folder")
    try:
        raw = read_metrics(path)  # its errors name the file and the line
    except ValueError as e:
        raise CompareError(str(e)) from None
    if not raw:
        raise CompareError(f"{path}: no rows (an empty metrics file; did the run log a step?)")
    return _standardize(raw, path)


def _wandb_host() -> str:
    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    return urlparse(base).hostname or "api.wandb.ai"


def _wandb_has_key(host: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, OSError, netrc.NetrcParseError):
        return False


def read_wandb(source: str, timeout: float = 10.0) -> Tuple[str, List[dict]]:
    """Rows of a wandb run `wandb:ENTITY/PROJECT/RUN_ID`, and its display name. Fails fast and clearly without the
    package, credentials, or network."""
    path = source[len("wandb:"):].strip("/")
    if path.count("/") != 2 or not all(path.split("/")):
        raise CompareError(f"{source}: expected wandb:ENTITY/PROJECT/RUN_ID")
    try:
        import wandb
    except ImportError:
        raise CompareError(f"{source}: the wandb package is not installed (pip install wandb), or export the run's "
                           "history to a metrics.jsonl") from None
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        raise CompareError(f"{source}: WANDB_MODE={mode}: reading a run needs the wandb server; unset WANDB_MODE or "
                           "compare local metrics.jsonl files")
    host = _wandb_host()
    if not _wandb_has_key(host):
        raise CompareError(f"{source}: no wandb credentials for {host} (set WANDB_API_KEY or run `wandb login`)")
    try:
        socket.create_connection((host, 443), timeout=min(timeout, 5.0)).close()
    except OSError as e:
        raise CompareError(f"{source}: cannot reach {host}:443 ({e}); offline? compare local metrics.jsonl files "
                           "instead") from None
    try:
        run = wandb.Api(timeout=timeout).run(path)
        history = list(run.scan_history(page_size=1000))
        name = run.name or path.rsplit("/", 1)[-1]
    except Exception as e:  # wandb raises its own CommError/ValueError/HTTP errors: one clear message for all
        raise CompareError(f"{source}: wandb could not return the run ({type(e).__name__}: {e})") from None
    raw = []
    for row in history:
        row = dict(row)
        step = row.get("train/global_step", row.get("global_step", row.get("_step")))
        if step is None:
            continue
        row["step"] = step
        raw.append(row)
    if not raw:
        raise CompareError(f"{source}: the run has no logged steps")
    by_step = {}
    for row in _standardize(raw, source):  # wandb logs train and eval at the same step in separate rows: merge
        merged = by_step.setdefault(row["step"], {"step": row["step"]})
        merged.update({k: v for k, v in row.items() if v is not None})
    return name, [by_step[k] for k in sorted(by_step)]


def load_runs(sources: Sequence[str], names: Optional[Sequence[str]] = None, wandb_timeout: float = 10.0) -> List[Run]:
    if names is not None and len(names) != len(sources):
        raise CompareError(f"--names got {len(names)} names for {len(sources)} runs; give one name per run")
    runs = []
    for i, source in enumerate(sources):
        if source.startswith("wandb:"):
            default, rows = read_wandb(source, wandb_timeout)
        else:
            default, rows = _default_name(source), read_local(source)
        runs.append(Run(names[i] if names else default, source, rows))
    seen: Dict[str, int] = {}
    for run in runs:  # distinct legend entries
        seen[run.name] = seen.get(run.name, 0) + 1
        if seen[run.name] > 1:
            run.name = f"{run.name} ({seen[run.name]})"
    return runs


# -- summary table ---------------------------------------------------------------------------------------------------
def summarize(runs: Sequence[Run]) -> Dict[str, Dict[str, dict]]:
    """{metric: {run name: {"final", "final_step", "best", "best_step", "steps"}}} for the metrics a run has."""
    out: Dict[str, Dict[str, dict]] = {}
    for metric in METRICS:
        for run in runs:
            points = [(r["step"], r[metric]) for r in run.rows if r.get(metric) is not None]
            if not points:
                continue
            final_step, final = points[-1]
            entry = {"final": final, "final_step": final_step, "best": None, "best_step": None, "steps": len(points)}
            pick = BETTER[metric]
            if pick is not None:
                best = pick(v for _, v in points)
                entry["best"] = best
                entry["best_step"] = next(s for s, v in points if v == best)  # first step that reached it
            out.setdefault(metric, {})[run.name] = entry
    return out


def _num(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1e4:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def markdown_table(runs: Sequence[Run]) -> str:
    summary = summarize(runs)
    lines = ["| metric | better | run | steps | final (step) | best (step) |", "|---|---|---|---|---|---|"]
    for metric in METRICS:
        better = {max: "higher", min: "lower", None: "-"}[BETTER[metric]]
        for run in runs:
            e = summary.get(metric, {}).get(run.name)
            if e is None:
                lines.append(f"| {metric} | {better} | {run.name} | 0 | - | - |")
                continue
            best = "-" if e["best"] is None else f"{_num(e['best'])} ({e['best_step']})"
            lines.append(f"| {metric} | {better} | {run.name} | {e['steps']} | {_num(e['final'])} ({e['final_step']}) "
                         f"| {best} |")
    return "\n".join(lines)


# -- plots -----------------------------------------------------------------------------------------------------------
def _smooth(ys: List[float], window: int) -> List[float]:
    if window <= 1:
        return ys
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= window:
            acc -= ys[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _draw(ax, runs: Sequence[Run], colors: Dict[str, str], view: tuple, smooth: int, legend: bool) -> int:
    from matplotlib.ticker import EngFormatter

    stem, x, y, title = view
    plotted = 0
    for run in runs:
        xs, ys = run.series(x, y)
        if not xs:
            continue
        plotted += 1
        marker = "o" if len(xs) <= 30 else None
        if smooth > 1:
            ax.plot(xs, ys, color=colors[run.name], alpha=0.25, linewidth=1)
            ax.plot(xs, _smooth(ys, smooth), color=colors[run.name], linewidth=2, label=run.name)
        else:
            ax.plot(xs, ys, color=colors[run.name], linewidth=1.8, marker=marker, markersize=3, label=run.name)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("generated tokens (cumulative)" if x == "generated_tokens_total" else "training step")
    ax.set_ylabel(LABELS[y])
    if x == "generated_tokens_total":
        ax.xaxis.set_major_formatter(EngFormatter())
    if y in ("generated_tokens", "generated_tokens_total"):
        ax.yaxis.set_major_formatter(EngFormatter())
    if y in SHARES:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    missing = [run.name for run in runs if not run.series(x, y)[0]]
    if plotted and missing:
        ax.text(0.99, 0.02, "not shown (no data): " + ", ".join(missing), transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="gray")
    if not plotted:
        what = "no Reinforce-Ada run" if y == "resolved_share" else f"no run logs {y}"
        ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", color="gray")
    elif legend:
        ax.legend(fontsize=8, loc="best")
    return plotted


def plot(runs: Sequence[Run], out_dir: str, smooth: int = 1) -> Dict[str, List[str]]:
    """Write the grid and one PNG per view; return {file name: names of the runs drawn in it}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    palette = plt.get_cmap("tab10").colors
    colors = {run.name: palette[i % len(palette)] for i, run in enumerate(runs)}
    drawn: Dict[str, List[str]] = {}
    for view in VIEWS:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _draw(ax, runs, colors, view, smooth, legend=True)
        fig.tight_layout()
        name = f"{view[0]}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=120)
        plt.close(fig)
        drawn[name] = [run.name for run in runs if run.series(view[1], view[2])[0]]
    fig, axes = plt.subplots(2, 3, figsize=(18, 9.5))
    for ax, view in zip(axes.flat, VIEWS):
        _draw(ax, runs, colors, view, smooth, legend=False)
    handles = [plt.Line2D([], [], color=colors[run.name], linewidth=2.5, label=run.name) for run in runs]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(runs), 6), fontsize=11, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(os.path.join(out_dir, "compare.png"), dpi=110)
    plt.close(fig)
    drawn["compare.png"] = [run.name for run in runs]
    return drawn


# -- command line ----------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Compare training runs: plots of reward (per step and per generated token), samples per "
                    "prompt, resolved share, zero-advantage groups and sampling efficiency, and a table of final "
                    "and best values.",
        epilog="Outputs in --out: compare.png (2x3 grid), reward_vs_step.png, reward_vs_tokens.png, "
               "samples_per_prompt.png, resolved_share.png (Reinforce-Ada runs only), zero_adv_group_share.png, "
               "eta.png, compare.md. Key names: the standard keys of openrlhf_ada/utils/metrics_log.py, or upstream's "
               "(rollout/reward_mean, ada_eta, ada_samples_per_prompt_mean, ada_resolved_share, a train/ prefix, ...).",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="a run folder containing metrics.jsonl, a metrics JSONL file, or "
                             "wandb:ENTITY/PROJECT/RUN_ID (needs wandb, credentials and network)")
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
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.smooth < 1:
            raise CompareError(f"--smooth {args.smooth}: give 1 (no smoothing) or more steps")
        runs = load_runs(args.runs, args.names, args.wandb_timeout)
    except CompareError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    drawn = plot(runs, args.out, args.smooth)
    table = markdown_table(runs)
    sources = "\n".join(f"- {run.name}: `{run.source}` ({len(run.rows)} steps)" for run in runs)
    absent = [run.name for run in runs if not run.has("resolved_share")]
    note = f"\nNot in resolved_share.png (no Reinforce-Ada metrics): {', '.join(absent)}.\n" if absent else ""
    with open(os.path.join(args.out, "compare.md"), "w", encoding="utf-8") as f:
        f.write(f"# Run comparison\n\n{sources}\n{note}\n{table}\n\nPlots: "
                + ", ".join(f"`{name}`" for name in drawn) + "\n")
    print(table)
    print(f"\nwrote {len(drawn)} plots and compare.md to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
