"""Checks of a prompt dataset before any training starts: problems that would otherwise surface hours into a run.

- a file that is empty, or a row that is not JSON: an error naming the file and line;
- rows missing the input or label key (`--data.input_key`, `--data.label_key`): an error naming the first such row
  and the keys it has;
- prompts longer than the prompt budget (`--data.max_len - --rollout.max_new_tokens` tokens, after the chat template
  when `--data.apply_chat_template`): skipped and counted (upstream would silently cut their beginning off);
- duplicate prompts: counted and reported (kept: repeating a prompt can be intended).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import List, Optional


@dataclass
class DataReport:
    path: str
    rows: int = 0
    duplicates: int = 0

    def summary(self) -> str:
        return f"{self.path}: {self.rows} rows; {self.duplicates} duplicate prompts (kept)"


def check_prompt_file(path: str, input_key: str, label_key: Optional[str]) -> DataReport:
    """Structural checks of a .jsonl/.json prompt file. Raises ValueError (what, where, how to fix)."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    report = DataReport(path)
    seen = set()
    for number, row in enumerate(_rows(path), 1):
        missing = [k for k in (input_key, label_key) if k and k not in row]
        if missing:
            raise ValueError(
                f"{path}:{number}: row has no {missing} (it has {sorted(row)}); set --data.input_key / "
                "--data.label_key to the file's field names"
            )
        key = json.dumps(row[input_key], sort_keys=True)
        report.duplicates += key in seen
        seen.add(key)
        report.rows += 1
    if report.rows == 0:
        raise ValueError(f"{path}: the file holds no rows; write prompts with python -m openrlhf_ada.cli.prepare_data")
    return report


def _rows(path: str):
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        yield from (data if isinstance(data, list) else [data])
        return
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON line ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: a row must be a JSON object, got {type(row).__name__}")
            yield row


def too_long_prompts(prompts: List[str], tokenizer, budget: int) -> List[int]:
    """Indices of prompts (already templated) with more than `budget` tokens."""
    return [i for i, p in enumerate(prompts) if len(tokenizer(p, add_special_tokens=False)["input_ids"]) > budget]
