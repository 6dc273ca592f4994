"""Reading training runs and comparing them from their per-step metrics: the work of
``python -m openrlhf_ada.cli.compare RUN [RUN ...]`` (openrlhf_ada/cli/compare.py holds its flags).

A RUN is one of

- a run folder holding ``metrics.jsonl`` (what both trainers write, see ``openrlhf_ada.trainer.metrics_log``), or the
  JSONL file itself;
- a wandb run on this machine, as ``WANDB_MODE=offline`` leaves it: a ``wandb/offline-run-*`` folder (or an online
  run's ``wandb/run-*`` folder), its ``run-*.wandb`` file, a ``wandb`` folder, or a folder holding ``wandb/`` and no
  ``metrics.jsonl`` (a folder with ``metrics.jsonl`` is read from that file: the trainer's own record of the same
  steps; pass ``DIR/wandb`` to read the wandb log instead). Of several runs in a ``wandb`` folder the latest (by the
  start time in the folder name) is read, with a note; a tie is an error. Read with wandb's own reader of the
  ``.wandb`` transaction log (``wandb leet inspect --json``), so a laptop run compares without uploading;
- a run on the wandb server, ``wandb:ENTITY/PROJECT/RUN_ID`` (needs the ``wandb`` package, credentials and network;
  checked up front, so an offline machine gets an error within seconds instead of a hang).

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

With ``--group-by``, ``--name-pattern`` or ``--setting`` the runs also form settings, one configuration run with
several seeds: ``settings.md`` (also printed), ``settings.json``, ``settings.csv``, ``settings.png`` and
``settings_<metric>.png`` give each setting's means and 95% intervals over seeds and its differences from a
reference setting, paired by seed (``openrlhf_ada.analysis.compare_settings``).

Rows may use the standard keys of ``metrics_log`` or the names upstream's logging gives the same quantities
(``rollout/reward_mean``, ``ada_eta``, ``ada/eta``, ``ada_samples_per_prompt_mean``, ``ada_resolved_share``, a
``train/`` prefix from wandb, ...); see ``openrlhf_ada.trainer.metrics_log.ALIASES``. A run without ``generated_tokens_total`` gets the running sum
of ``generated_tokens``, which upstream-only rows give as ``rollout/response_length_mean x rollout/num_samples``
(as the cluster trainer computes it); ``zero_adv_group_share`` can come from ``1 - ada_nonzero_adv_group_share``.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

from openrlhf_ada.trainer.metrics_log import STANDARD_KEYS, read_metrics, standardize

HELDOUT_PREFIX = "eval/"  # the held-out evaluation's keys (openrlhf_ada.trainer.heldout), kept as logged
DEFAULT_SEED_PATTERN = r"seed[_=-]?(\d+)"  # a run's seed in its name (grpo_seed3) when its config has none

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
    notes: List[str] = field(default_factory=list)  # what the reader chose or found incomplete; printed by main
    config: Optional[Dict[str, object]] = None  # the run's saved flags, dotted keys (a wandb run's config); None: unread

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
    """The standard keys of metrics_log, plus the held-out evaluation's numeric ``eval/*`` keys as logged (compare's
    setting statistics report held-out accuracy first)."""
    try:
        rows = standardize(raw_rows, where)
    except ValueError as e:
        raise CompareError(str(e)) from None
    by_step = {row["step"]: row for row in rows}
    for raw in raw_rows:
        step = raw.get("step", raw.get("global_step", raw.get("train/global_step")))
        row = by_step.get(int(step)) if isinstance(step, (int, float)) and not isinstance(step, bool) else None
        if row is None:
            continue
        for key, value in raw.items():
            if key.startswith(HELDOUT_PREFIX) and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                row[key] = float(value)
    return rows


def flatten_config(config: dict, prefix: str = "") -> Dict[str, object]:
    """A run's config with nested sections as dotted keys ({"train": {"seed": 1}} -> {"train.seed": 1}); wandb's
    own entries (``_wandb``) and the ``{"value": ...}`` wrapping of wandb's config files are left out."""
    out: Dict[str, object] = {}
    for key, value in config.items():
        if str(key).startswith("_wandb"):
            continue
        if isinstance(value, dict) and set(value) <= {"value", "desc"} and "value" in value:
            value = value["value"]
        if isinstance(value, dict):
            out.update(flatten_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


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
        raise CompareError(f"{source}: no such file or folder (a RUN is a run folder, its metrics.jsonl, a wandb "
                           "run folder or .wandb file, or wandb:ENTITY/PROJECT/RUN_ID for a run on the wandb server)")
    try:
        raw = read_metrics(path)  # its errors name the file and the line
    except ValueError as e:
        raise CompareError(str(e)) from None
    if not raw:
        raise CompareError(f"{path}: no rows (an empty metrics file; did the run log a step?)")
    return _standardize(raw, path)


def _rows_by_step(history: Sequence[dict], source: str) -> List[dict]:
    """Standard rows, one per training step, from wandb history rows (online or from a .wandb log). The step is
    upstream's ``train/global_step`` (``eval/global_step`` on its eval rows) where logged, else wandb's ``_step``
    (train_local logs with ``step=``); wandb logs train and eval at the same step in separate rows, which are
    merged."""
    raw = []
    for row in history:
        row = dict(row)
        step = next((row[k] for k in ("train/global_step", "global_step", "eval/global_step", "_step")
                     if row.get(k) is not None), None)
        if step is None:
            continue
        row["step"] = step
        raw.append(row)
    if not raw:
        raise CompareError(f"{source}: the run has no logged steps")
    by_step = {}
    for row in _standardize(raw, source):
        merged = by_step.setdefault(row["step"], {"step": row["step"]})
        merged.update({k: v for k, v in row.items() if v is not None})
    return [by_step[k] for k in sorted(by_step)]


# -- wandb runs on this machine (WANDB_MODE=offline) ---------------------------------------------------------------
# How wandb.init names a run's folder: offline-run-YYYYMMDD_HHMMSS-ID offline, run-YYYYMMDD_HHMMSS-ID online.
WANDB_RUN_DIR = re.compile(r"^(offline-)?run-(\d{8}_\d{6})-([A-Za-z0-9_-]+)$")
WANDB_READ_TIMEOUT = 300.0  # seconds for wandb's reader on one log; it reads a local file, this only bounds a hang
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}  # how the JSON reader writes them


def _latest_run_log(source: str, wandb_dir: str, folders: List[str]) -> Tuple[str, List[str]]:
    """The .wandb log of the newest run folder (by the start time wandb puts in its name); several runs give a note
    naming the others, two newest with the same start second are ambiguous."""
    folders = sorted(folders, key=lambda d: WANDB_RUN_DIR.match(d).group(2))
    newest = WANDB_RUN_DIR.match(folders[-1]).group(2)
    tied = [d for d in folders if WANDB_RUN_DIR.match(d).group(2) == newest]
    if len(tied) > 1:
        raise CompareError(f"{source}: ambiguous: {len(tied)} wandb runs started in the same second in {wandb_dir} "
                           f"({', '.join(tied)}); pass the run folder to read, e.g. "
                           f"{os.path.join(wandb_dir, tied[-1])}")
    chosen = os.path.join(wandb_dir, folders[-1])
    logs = glob.glob(os.path.join(glob.escape(chosen), "run-*.wandb"))
    if len(logs) != 1:
        raise CompareError(_no_log_message(chosen, logs))
    notes = []
    if len(folders) > 1:
        notes.append(f"{source}: read the latest of {len(folders)} wandb runs, {folders[-1]}; not read: "
                     f"{', '.join(folders[:-1])} (pass a run folder to read another; a resumed train_local run "
                     "starts a new wandb run, its metrics.jsonl holds every step)")
    return logs[0], notes


def _no_log_message(folder: str, logs: List[str]) -> str:
    if logs:
        return (f"{folder}: {len(logs)} .wandb logs in one run folder ({', '.join(map(os.path.basename, logs))}); "
                "pass the one to read")
    return (f"{folder}: a wandb run folder without its run-*.wandb log (removed by `wandb sync --clean` or "
            "`wandb clean`, or the run never started logging); compare the run's metrics.jsonl instead, or "
            "wandb:ENTITY/PROJECT/RUN_ID if it was synced")


def find_wandb_log(source: str) -> Optional[Tuple[str, List[str]]]:
    """The ``run-*.wandb`` log a local RUN points at, with notes on the choice; None when the RUN is read from a
    metrics.jsonl (a JSONL file, a folder holding metrics.jsonl, or a path that does not exist: read_local names
    it). Looks in the folder itself (a run folder), in its run folders (a ``wandb`` folder) and in its ``wandb/`` or
    ``.wandb/`` (a folder wandb.init was given as ``dir``)."""
    if os.path.isfile(source):
        return (source, []) if source.endswith(".wandb") else None
    if not os.path.isdir(source) or os.path.isfile(os.path.join(source, "metrics.jsonl")):
        return None
    logs = sorted(glob.glob(os.path.join(glob.escape(source), "run-*.wandb")))
    if logs or WANDB_RUN_DIR.match(os.path.basename(os.path.normpath(os.path.abspath(source)))):
        if len(logs) != 1:
            raise CompareError(_no_log_message(source, logs))
        return logs[0], []
    for wandb_dir in (source, os.path.join(source, "wandb"), os.path.join(source, ".wandb")):
        if os.path.isdir(wandb_dir):
            folders = [d for d in os.listdir(wandb_dir)
                       if WANDB_RUN_DIR.match(d) and os.path.isdir(os.path.join(wandb_dir, d))]
            if folders:
                return _latest_run_log(source, wandb_dir, folders)
    raise CompareError(f"{source}: no run in this folder: no metrics.jsonl, no run-*.wandb, no wandb/offline-run-* "
                       "folder; pass a run folder written by the trainers, a wandb run folder (wandb/offline-run-*), "
                       "or wandb:ENTITY/PROJECT/RUN_ID for a run on the wandb server")


def _wandb_version() -> str:
    try:
        from importlib.metadata import version

        return version("wandb")
    except Exception:
        return "?"


@dataclass
class WandbLog:
    """What a run's .wandb log holds that compare uses: its history rows as logged (keys unchanged, non-finite
    values as floats), the run's name and id, whether it ended (an exit record), what wandb's reader said, and the
    run's config (dotted keys)."""

    name: Optional[str]
    run_id: Optional[str]
    history: List[dict]
    finished: bool
    said: str
    config: Dict[str, object] = field(default_factory=dict)


def read_wandb_history(log: str, timeout: float = WANDB_READ_TIMEOUT) -> WandbLog:
    """Read a local ``run-*.wandb`` transaction log with wandb's own reader, ``wandb leet inspect --json`` (one JSON
    object per record; wandb 0.31 has no Python reader of the format any more), run in a scratch folder so that
    wandb's CLI leaves its debug log there and, offline, uploads nothing. Checks the file's header first (an empty
    or foreign file gives a clear error without starting wandb); a log with damaged records is an error, not a
    partial curve."""
    if importlib.util.find_spec("wandb") is None:
        raise CompareError(f"{log}: reading a .wandb log needs the wandb package (pip install wandb); or compare the "
                           "run's metrics.jsonl")
    if os.path.getsize(log) == 0:
        raise CompareError(f"{log}: empty (0 bytes): the run wrote nothing to its wandb log; compare its "
                           "metrics.jsonl instead")
    with open(log, "rb") as f:
        if f.read(4) != b":W&B":
            raise CompareError(f"{log}: not a wandb transaction log (it does not start with wandb's ':W&B' header); "
                               "pass a run-*.wandb file, its wandb/offline-run-* folder, or a metrics.jsonl")
    with tempfile.TemporaryDirectory(prefix="compare-wandb-") as scratch:
        os.makedirs(os.path.join(scratch, "wandb"))  # wandb's CLI writes debug-cli.<user>.log into ./wandb
        env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": scratch, "WANDB_ERROR_REPORTING": "false"}
        try:
            proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", os.path.abspath(log)],
                                  cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompareError(f"{log}: wandb's reader (wandb leet inspect) did not finish in {timeout:.0f} s") from None
    said = " ".join(proc.stderr.split())[-500:]
    if proc.returncode != 0:
        raise CompareError(f"{log}: wandb {_wandb_version()} could not read it ({said or f'exit {proc.returncode}'}); "
                           "reading .wandb logs needs `wandb leet inspect --json` (wandb 0.31 has it); or compare the "
                           "run's metrics.jsonl")
    if "corrupt" in said.lower():
        raise CompareError(f"{log}: corrupt: wandb's reader skipped damaged records ({said}); the steps it could read "
                           "would misrepresent the run. Compare the run's metrics.jsonl (train_local writes one next "
                           "to wandb/), or wandb:ENTITY/PROJECT/RUN_ID if the run was synced")
    out = WandbLog(None, None, [], False, said)
    records = 0
    for number, line in enumerate(proc.stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise CompareError(f"{log}: wandb {_wandb_version()}'s reader printed a line that is not JSON (line "
                               f"{number}: {line[:120]!r}); compare the run's metrics.jsonl instead") from None
        records += 1
        kind = record.get("type")
        if kind == "run":
            run = record.get("run") or {}
            out.name, out.run_id = run.get("display_name") or out.name, run.get("run_id") or out.run_id
            out.config.update(flatten_config((run.get("config") or {}).get("update") or {}))
        elif kind == "config":  # wandb.config.update after init
            out.config.update(flatten_config((record.get("config") or {}).get("update") or {}))
        elif kind == "history":
            body = record.get("history") or {}
            row = {k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in (body.get("item") or {}).items()}
            if row.get("_step") is None and (body.get("step") or {}).get("num") is not None:
                row["_step"] = int(body["step"]["num"])
            out.history.append(row)
        elif kind == "exit":
            out.finished = True
    if not records:
        raise CompareError(f"{log}: wandb's reader found no records in it (a run stopped right after it started?); "
                           "compare its metrics.jsonl instead")
    return out


def read_wandb_log(source: str, log: str,
                   timeout: float = WANDB_READ_TIMEOUT) -> Tuple[str, List[dict], List[str], Dict[str, object]]:
    """Standard rows of a wandb run from its local .wandb log, the run's display name, notes (a run that did not
    end: still running or interrupted, its steps so far are read), and its config."""
    got = read_wandb_history(log, timeout)
    if not got.history:
        raise CompareError(f"{log}: the run has no logged steps (no history records); did it finish a step?")
    rows = _rows_by_step(got.history, log)
    notes = []
    if not got.finished:
        notes.append(f"{log}: no exit record: the run was still running or was interrupted; read the "
                     f"{len(rows)} steps it logged" + (f" (wandb: {got.said})" if got.said else ""))
    elif got.said:
        notes.append(f"{log}: wandb's reader said: {got.said}")
    return got.name or got.run_id or os.path.basename(os.path.dirname(os.path.abspath(log))), rows, notes, got.config


def _local_copy_hint(run_id: str) -> str:
    """Where a run with this id lies on this machine (a wandb folder under the working directory), for errors about
    a wandb: source that cannot be read from the server."""
    found = [d for folder in ("wandb", ".wandb") for d in glob.glob(os.path.join(folder, f"*run-*-{glob.escape(run_id)}"))
             if WANDB_RUN_DIR.match(os.path.basename(d))]
    if found:
        return f"; this machine has it locally: pass {' or '.join(sorted(found))}"
    return f"; a run logged on this machine with WANDB_MODE=offline is read from its folder, wandb/offline-run-*-{run_id}"


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


def read_wandb(source: str, timeout: float = 10.0) -> Tuple[str, List[dict], Dict[str, object]]:
    """Rows of a wandb run `wandb:ENTITY/PROJECT/RUN_ID`, its display name and its config. Fails fast and clearly
    without the package, credentials, or network."""
    path = source[len("wandb:"):].strip("/")
    if path.count("/") != 2 or not all(path.split("/")):
        raise CompareError(f"{source}: expected wandb:ENTITY/PROJECT/RUN_ID")
    run_id = path.rsplit("/", 1)[-1]
    try:
        import wandb
    except ImportError:
        raise CompareError(f"{source}: the wandb package is not installed (pip install wandb), or export the run's "
                           "history to a metrics.jsonl") from None
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        raise CompareError(f"{source}: WANDB_MODE={mode}: reading a run needs the wandb server; unset WANDB_MODE or "
                           "compare local metrics.jsonl files" + _local_copy_hint(run_id))
    host = _wandb_host()
    if not _wandb_has_key(host):
        raise CompareError(f"{source}: no wandb credentials for {host} (set WANDB_API_KEY or run `wandb login`)"
                           + _local_copy_hint(run_id))
    try:
        socket.create_connection((host, 443), timeout=min(timeout, 5.0)).close()
    except OSError as e:
        raise CompareError(f"{source}: cannot reach {host}:443 ({e}); offline? compare local metrics.jsonl files "
                           "instead" + _local_copy_hint(run_id)) from None
    try:
        run = wandb.Api(timeout=timeout).run(path)
        history = list(run.scan_history(page_size=1000))
        name = run.name or path.rsplit("/", 1)[-1]
        config = flatten_config(dict(run.config))
    except Exception as e:  # wandb raises its own CommError/ValueError/HTTP errors: one clear message for all
        raise CompareError(f"{source}: wandb could not return the run ({type(e).__name__}: {e})") from None
    return name, _rows_by_step(history, source), config


def saved_config(run: Run) -> Tuple[Dict[str, object], Optional[str]]:
    """A run's config (dotted keys) and where it was found. A wandb run carries its own; a metrics.jsonl run's is
    the ``config.json`` next to it (train_local writes its flags there), else the wandb run its trainer wrote next to
    it (train_local with wandb on, or WANDB_MODE=offline, puts it in its output folder's ``wandb/``); ({}, None)
    when there is none."""
    if run.config is not None:
        return run.config, run.source
    folder = run.source if os.path.isdir(run.source) else os.path.dirname(os.path.abspath(run.source))
    path = os.path.join(folder, "config.json")
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise CompareError(f"{path}: not a readable JSON config ({e})") from None
        if not isinstance(config, dict):
            raise CompareError(f"{path}: a JSON {type(config).__name__}, expected an object of flags")
        return flatten_config(config), path
    for wandb_dir in (os.path.join(folder, "wandb"), os.path.join(folder, ".wandb")):
        if os.path.isdir(wandb_dir):
            folders = [d for d in os.listdir(wandb_dir)
                       if WANDB_RUN_DIR.match(d) and os.path.isdir(os.path.join(wandb_dir, d))]
            if folders:
                log, _ = _latest_run_log(run.source, wandb_dir, folders)
                return read_wandb_history(log).config, log
    return {}, None


def load_runs(sources: Sequence[str], names: Optional[Sequence[str]] = None, wandb_timeout: float = 10.0) -> List[Run]:
    if names is not None and len(names) != len(sources):
        raise CompareError(f"--names got {len(names)} names for {len(sources)} runs; give one name per run")
    # which .wandb log each local wandb source means, for all sources before reading any (a wrong path fails fast)
    logs = [None if source.startswith("wandb:") else find_wandb_log(source) for source in sources]
    runs = []
    for i, source in enumerate(sources):
        notes: List[str] = []
        config: Optional[Dict[str, object]] = None  # a metrics.jsonl run's config is read when asked for
        if source.startswith("wandb:"):
            default, rows, config = read_wandb(source, wandb_timeout)
        elif logs[i] is None:
            default, rows = _default_name(source), read_local(source)
        else:
            log, notes = logs[i]
            default, rows, more, config = read_wandb_log(source, log)
            notes = notes + more
        runs.append(Run(names[i] if names else default, source, rows, notes, config))
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
