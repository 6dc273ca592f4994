"""Per-step metrics as JSON lines: one object per training step, `{"step": int, "time": float, <metric>: float}`.

Both trainers write this file (`<run dir>/metrics.jsonl`): the single-machine trainer directly, the cluster launcher
through its logging hook. `openrlhf_ada.cli.compare` reads it. The keys every run writes, whatever the algorithm:

    reward_mean            mean reward of all samples generated this step (with Reinforce-Ada the trained group is
                           chosen for balance, so its own mean says little about the policy: trained_reward_mean)
    pass_rate              share of generated samples whose score is above the positive threshold
    generated_tokens       tokens generated this step (all rounds, dropped prompts included)
    generated_tokens_total the same, summed over the run so far
    samples_per_prompt     samples generated per prompt this step (n for GRPO)
    zero_adv_group_share   share of trained groups whose rewards are all equal (zero advantage)
    eta                    generated tokens of trained samples in groups with non-zero advantage / all generated
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Dict, Iterator, List

STANDARD_KEYS = (
    "reward_mean",
    "pass_rate",
    "generated_tokens",
    "generated_tokens_total",
    "samples_per_prompt",
    "zero_adv_group_share",
    "eta",
)


class MetricsWriter:
    """Appends one JSON line per step; values must be numbers (NaN/inf are written as null)."""

    def __init__(self, path: str, append: bool = False):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._file = open(path, "a" if append else "w", encoding="utf-8")

    def write(self, step: int, metrics: Dict[str, float]) -> None:
        row = {"step": int(step), "time": time.time()}
        for key, value in metrics.items():
            value = float(value)
            row[key] = value if math.isfinite(value) else None
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_metrics(path: str) -> List[dict]:
    """All rows of a metrics.jsonl (a run folder or the file itself), in step order; a later row for the same step
    (a resumed run) replaces the earlier one."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    rows: Dict[int, dict] = {}
    for row in _lines(path):
        rows[int(row["step"])] = row
    return [rows[k] for k in sorted(rows)]


def _lines(path: str) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON line ({e.msg}); was the run interrupted mid-write?") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: malformed row, line {number}: a JSON {type(row).__name__}, "
                                 "expected an object")
            step = row.get("step")
            if isinstance(step, bool) or not isinstance(step, (int, float)):
                raise ValueError(f"{path}:{number}: malformed row, line {number}: no numeric 'step' (got {step!r})")
            yield row
