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
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

STANDARD_KEYS = (
    "reward_mean",
    "pass_rate",
    "generated_tokens",
    "generated_tokens_total",
    "samples_per_prompt",
    "zero_adv_group_share",
    "eta",
)


# Every key the comparison knows, with the names other writers use for it (first match wins, standard name first).
ALIASES: Dict[str, Tuple[str, ...]] = {
    "reward_mean": ("reward_mean", "ada_reward_mean_generated", "ada/reward_mean_generated", "rollout/reward_mean",
                    "rollout_reward_mean", "reward"),
    "pass_rate": ("pass_rate", "ada_pass_rate_generated", "ada/pass_rate_generated", "rollout/pass_rate",
                  "ada_pass_rate", "ada/pass_rate"),
    "generated_tokens": ("generated_tokens", "ada_tokens_generated", "ada/tokens_generated"),
    "generated_tokens_total": ("generated_tokens_total", "ada_tokens_generated_total", "ada/tokens_generated_total"),
    "samples_per_prompt": ("samples_per_prompt", "ada_samples_per_prompt_mean", "ada/samples_per_prompt_mean"),
    "zero_adv_group_share": ("zero_adv_group_share", "ada_zero_adv_group_share", "ada/zero_adv_group_share"),
    "eta": ("eta", "ada_eta", "ada/eta"),
    "resolved_share": ("resolved_share", "ada_resolved_share", "ada/resolved_share"),
}
# Keys whose complement gives a standard key.
COMPLEMENTS: Dict[str, Tuple[str, ...]] = {
    "zero_adv_group_share": ("nonzero_adv_group_share", "ada_nonzero_adv_group_share", "ada/nonzero_adv_group_share"),
}


def _number(value, where: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number or null, got {value!r}")
    value = float(value)
    return value if math.isfinite(value) else None


def standardize(raw_rows: Sequence[dict], where: str) -> List[dict]:
    """Map rows with any known key names to the standard keys (see ALIASES, COMPLEMENTS); fill
    generated_tokens_total with the running sum of generated_tokens when a run does not log it."""
    rows = []
    for raw in raw_rows:
        raw = {(k[len("train/"):] if k.startswith("train/") else k): v for k, v in raw.items()}
        step = raw.get("step", raw.get("global_step"))
        if step is None or isinstance(step, bool) or not isinstance(step, (int, float)):
            raise ValueError(f"{where}: a row has no numeric 'step': {str(raw)[:200]}")
        row = {"step": int(step)}
        for key, names in ALIASES.items():
            for name in names:
                if raw.get(name) is not None:
                    row[key] = _number(raw[name], f"{where}, step {row['step']}, {name!r}")
                    break
        if row.get("generated_tokens") is None:  # upstream only: the trained samples are all that was generated
            length, count = (_number(raw.get(k), f"{where}, step {row['step']}, {k!r}")
                             for k in ("rollout/response_length_mean", "rollout/num_samples"))
            if length is not None and count is not None:
                row["generated_tokens"] = length * count
        for key, names in COMPLEMENTS.items():
            if row.get(key) is None:
                for name in names:
                    value = _number(raw.get(name), f"{where}, step {row['step']}, {name!r}")
                    if value is not None:
                        row[key] = 1.0 - value
                        break
        rows.append(row)
    rows.sort(key=lambda r: r["step"])
    if rows and not any(r.get("generated_tokens_total") is not None for r in rows):
        total, any_tokens = 0.0, False
        for r in rows:
            if r.get("generated_tokens") is not None:
                total += r["generated_tokens"]
                any_tokens = True
            if any_tokens:
                r["generated_tokens_total"] = total
    return rows


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


def keep_rows_up_to(path: str, last_step: int, who: str = "metrics") -> int:
    """Drop the rows of steps after `last_step` from a metrics.jsonl (and a line cut short by a crash), atomically:
    a resumed run writes those steps again. Returns how many rows were dropped."""
    if not os.path.isfile(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
                step = int(row["step"])
            except (ValueError, TypeError, KeyError):
                dropped += bool(line.strip())
                continue
            if step <= last_step:
                kept.append(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    if not dropped:
        return 0
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(tmp, path)
    print(f"[{who}] {path}: {dropped} rows after the checkpoint's step {last_step} removed (they are redone)")
    return dropped


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
