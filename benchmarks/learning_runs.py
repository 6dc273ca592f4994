"""A learning design's folder: where its runs live and what a finished run's summary holds.

`<out>/runs/<setting>_seed<seed>/` holds each run: train_local's `metrics.jsonl` and `config.json`, the runner's
`command.txt`, `wall_seconds.jsonl` (each attempt's machine time) and, once finished, `done.json` (the summary
below). `<out>/base/<pass>/` holds the base model's measurements, `<out>/data/` the training and held-out files.
Logs (`train.log`) and load traces (`load.jsonl`) are written beside them for the run in progress and kept out of
git (`benchmarks/results/.gitignore`): the summary keeps the load's mean and maximum.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from typing import Dict, List


def run_dir(a, name: str, seed: int) -> str:
    return os.path.join(a.out, "runs", f"{name}_seed{seed}")


ERROR_LINE = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(?:[\w.]+\.)?\w*(?:Error|Exception)\b.*")


def last_error(log_path: str) -> str:
    """The last exception line of a log (e.g. "RuntimeError: CPU Generator does not use offset"), for the error a
    failed child process reports; "no exception line in the log" when there is none or no log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if ERROR_LINE.match(line.strip())]
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "no exception line in the log"


def read_rows(folder: str) -> List[dict]:
    from openrlhf_ada.trainer.metrics_log import read_metrics

    path = os.path.join(folder, "metrics.jsonl")
    return read_metrics(path) if os.path.isfile(path) else []


def summarize_run(folder: str, name: str, seed: int) -> dict:
    """The evaluations of a run with their token and training-time positions, and its load."""
    rows = read_rows(folder)
    train_seconds, points = 0.0, []
    for r in rows:
        train_seconds += r.get("timing/step") or 0.0
        if r.get("eval/accuracy") is not None:
            points.append({"step": r["step"], "tokens": r.get("generated_tokens_total") or 0.0,
                           "train_seconds": train_seconds, "accuracy": r["eval/accuracy"],
                           "accuracy_se": r.get("eval/accuracy_se"), "avg_at_k": r.get("eval/avg_at_k"),
                           "avg_at_k_se": r.get("eval/avg_at_k_se"), "eval_seconds": r.get("timing/eval"),
                           "eval_avg_seconds": r.get("timing/eval_avg"),
                           "per_difficulty": {k[len("eval/"):-len("_pass1")]: v for k, v in r.items()
                                              if k.startswith("eval/") and k.endswith("_pass1")}})
    trained = [r for r in rows if r.get("reward_mean") is not None]
    loads = []
    if os.path.isfile(os.path.join(folder, "load.jsonl")):
        with open(os.path.join(folder, "load.jsonl"), encoding="utf-8") as f:
            loads = [json.loads(line)["load1"] for line in f if line.strip()]
    return {
        "setting": name, "seed": seed, "steps": len(trained), "evaluations": points,
        "tokens": trained[-1]["generated_tokens_total"] if trained else 0.0,
        "train_seconds": train_seconds,
        "samples_per_prompt": statistics.fmean(r["samples_per_prompt"] for r in trained) if trained else None,
        "zero_adv_group_share": statistics.fmean(r["zero_adv_group_share"] for r in trained) if trained else None,
        "reward_first": statistics.fmean(r["reward_mean"] for r in trained[:3]) if trained else None,
        "reward_last": statistics.fmean(r["reward_mean"] for r in trained[-3:]) if trained else None,
        "load_mean": statistics.fmean(loads) if loads else None, "load_max": max(loads) if loads else None,
    }


def finished_runs(a) -> List[dict]:
    """The done.json of every finished run of the design's settings in `a.out`."""
    names = {s.name for s in a.design.settings}
    runs = []
    root = os.path.join(a.out, "runs")
    for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        done = os.path.join(root, entry, "done.json")
        if os.path.isfile(done):
            with open(done) as f:
                runs.append(json.load(f))
    return [r for r in runs if r["setting"] in names]


def step_row(a, name: str, seed: int, step: int) -> dict:
    """A run's metrics row of a trained step ({} when not logged)."""
    return next((r for r in read_rows(run_dir(a, name, seed)) if r["step"] == step and r.get("reward_mean")
                 is not None), {})


def difficulty_counts(path: str) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                source = json.loads(line)["datasource"]
                counts[source] = counts.get(source, 0) + 1
    return dict(sorted(counts.items()))
