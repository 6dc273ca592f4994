"""Shared helpers for the reward files in this folder (``kk.py``, ``math.py``, ``countdown.py``).

How OpenRLHF 0.11.2 calls a reward file (``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor``): once per sample,
in a worker thread (``asyncio.to_thread``), with lists of length 1:
``queries = [tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)]``, ``prompts = [prompt]``
(the prompt text, after the chat template when ``--data.apply_chat_template`` is on) and ``labels = [label]`` (the
``--data.label_key`` field of the dataset row). Any exception is swallowed upstream and leaves the sample without a
reward, so :func:`score_batch` never raises. Upstream turns every ``extra_logs`` value into ``torch.tensor([v])``
(a tensor value contributes its first element), so every extra log here is a float tensor of shape ``[n]`` and the set
of keys is the same for every sample of a task.

Only the standard library and ``torch`` are imported here, so that a reward file stays cheap to load.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

#: Stable numeric reason codes, logged per sample as ``extra_logs["<task>_reason"]``. Upstream averages ``extra_logs``
#: over a batch, so the mean of a code means little; the per-flag rates (``<task>_answer_found``, ...) are the metrics
#: to plot. The codes are for inspecting single samples (and the log lines carry the reason text).
REASON_CODES: dict[str, int] = {
    "correct": 0,
    "wrong_answer": 1,  # parsed, verified, not equal to the label
    "no_answer": 2,  # no <answer>...</answer> block / no \boxed{...}
    "unparsable_answer": 3,  # an answer block exists but cannot be read (bad syntax, names missing, ...)
    "bad_format": 4,  # kk logic_rl only: <think>/<answer> structure wrong (the answer is not even looked at)
    "answer_too_long": 5,  # the answer block exceeds the task's length cap
    "invalid_numbers": 6,  # countdown: a number that is not given, or used more often than given
    "empty_response": 7,  # nothing but whitespace after the prompt
    "bad_label": 8,  # the dataset label cannot be read: a data problem, not the model's
    "timeout": 9,  # verification took longer than its time limit
    "internal_error": 10,  # unexpected exception inside the reward code (logged with traceback)
    "bad_input": 11,  # a query that is not a string
}
#: Reasons that point at the data or the code, not at the model: logged as warnings (rate-limited).
ABNORMAL_REASONS = frozenset({"bad_label", "timeout", "internal_error", "bad_input", "prompt_not_found"})

logger = logging.getLogger("openrlhf_ada.rewards")


@dataclass
class Outcome:
    """The verdict on one sample: the reward, the 0/1 score, a reason (a key of :data:`REASON_CODES`) and flags."""

    reward: float
    score: float
    reason: str
    flags: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------------------------------------------------
_TAIL_ANCHORS = (256, 64, 24)


def extract_response(query: str, prompt: Any) -> tuple[str, bool]:
    """Return ``(response, found)``: the text of ``query`` after the prompt.

    Upstream decodes prompt+response token ids back to text, which normally starts with the prompt text exactly. When
    it does not (the tokenizer does not round-trip the prompt, or upstream cut the prompt from the left because it was
    too long), the response starts after the first occurrence of the prompt's last 256 / 64 / 24 characters. If even
    that fails, the whole query is returned with ``found=False``: a format instruction in the prompt (such as an
    ``<answer>`` example) may then be mistaken for part of the response, so callers log it.
    """
    if not isinstance(prompt, str):
        return query, False
    if not prompt or query.startswith(prompt):
        return query[len(prompt):], True
    idx = query.find(prompt)
    if idx >= 0:
        return query[idx + len(prompt):], True
    for k in _TAIL_ANCHORS:
        if len(prompt) <= k:
            continue
        anchor = prompt[-k:]
        if not anchor.strip():
            continue
        idx = query.find(anchor)
        if idx >= 0:
            return query[idx + len(anchor):], True
    return query, False


def last_tag_block(text: str, tag: str) -> str | None:
    """Content of the last ``<tag>...</tag>`` block (the nearest opening tag before the last closing tag), or None."""
    close_tag = f"</{tag}>"
    open_tag = f"<{tag}>"
    end = text.rfind(close_tag)
    if end < 0:
        return None
    start = text.rfind(open_tag, 0, end)
    if start < 0:
        return None
    return text[start + len(open_tag):end]


def last_boxed(text: str) -> tuple[str, str | None]:
    r"""Find the LAST ``\boxed{...}`` (or ``\fbox{...}``) in ``text``.

    Returns ``("none", None)`` if there is none, ``("unbalanced", None)`` if its braces never close (a truncated
    response), else ``("ok", content)``. Nested braces are matched; the short form ``\boxed 5`` is accepted.
    """
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return "none", None
    pos = idx + (len("\\boxed") if text.startswith("\\boxed", idx) else len("\\fbox"))
    n = len(text)
    if pos < n and text[pos] == " ":  # "\boxed 5": the answer is the next token
        rest = text[pos:].lstrip(" ")
        token = rest.split(None, 1)[0] if rest.strip() else ""
        token = token.split("$", 1)[0]
        return ("ok", token) if token else ("unbalanced", None)
    while pos < n and text[pos] in " \t\n":
        pos += 1
    if pos >= n or text[pos] != "{":
        return "unbalanced", None
    depth = 0
    for j in range(pos, n):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return "ok", text[pos + 1:j]
    return "unbalanced", None


def parse_json_label(label: Any) -> dict | None:
    """A label written by ``prepare_data`` is a JSON object in a string; a dict is accepted as is. Else None."""
    if isinstance(label, dict):
        return label
    if not isinstance(label, (str, bytes)):
        return None
    try:
        value = json.loads(label)
    except (ValueError, TypeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------------------------------------------------------------
# Timeouts and logging
# ---------------------------------------------------------------------------------------------------------------------
def call_with_timeout(fn: Callable[..., Any], timeout_s: float | None, *args: Any) -> Any:
    """Run ``fn(*args)`` in a daemon thread and wait at most ``timeout_s`` seconds; raise TimeoutError past that.

    Why a thread: upstream calls reward files from worker threads, where ``signal.alarm`` (math-verify's own timeout)
    does not work. A Python thread cannot be killed, so a computation that never ends keeps running in the background
    (daemon: it does not block interpreter exit); the caller gets its answer in time either way.
    """
    if timeout_s is None or timeout_s <= 0:
        return fn(*args)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="openrlhf-ada-reward-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"verification did not finish within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


_log_counts: Counter = Counter()
_log_lock = threading.Lock()


def log_reason(task: str, reason: str, detail: str = "") -> None:
    """Log a sample's reason: DEBUG for the model's own failures, rate-limited WARNING for data/code problems."""
    text = f"[{task} reward] {reason}" + (f": {detail}" if detail else "")
    if reason not in ABNORMAL_REASONS:
        logger.debug(text)
        return
    with _log_lock:
        _log_counts[(task, reason)] += 1
        count = _log_counts[(task, reason)]
    if count <= 5 or _is_power_of_ten(count):
        logger.warning("%s (occurrence %d)", text, count)


def _is_power_of_ten(k: int) -> bool:
    while k >= 10 and k % 10 == 0:
        k //= 10
    return k == 1


# ---------------------------------------------------------------------------------------------------------------------
# The batch wrapper every reward file uses
# ---------------------------------------------------------------------------------------------------------------------
def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (str, bytes, dict)):
        return [value]
    try:
        return list(value)
    except TypeError:
        return [value]


def score_batch(
    queries: Any,
    prompts: Any,
    labels: Any,
    *,
    task: str,
    score_one: Callable[[str, str, Any], Outcome],
    lowest: float,
    flag_names: tuple[str, ...],
) -> dict:
    """Score every query with ``score_one(response, prompt, label)``; never raise.

    Returns ``{"rewards": FloatTensor[n], "scores": FloatTensor[n], "extra_logs": {...}}`` with ``n = len(queries)``;
    ``extra_logs`` holds ``<task>_<flag>`` for every name in ``flag_names`` (0/1 floats, missing flags are 0) and
    ``<task>_reason`` (a :data:`REASON_CODES` value). A query that is not a string, or an exception in
    ``score_one``, gives ``lowest`` with reason ``bad_input`` / ``internal_error``.
    """
    import torch

    try:
        query_list = _as_list(queries)
        prompt_list = _as_list(prompts)
        label_list = _as_list(labels)
    except Exception:  # noqa: BLE001 - a reward function never raises
        logger.exception("[%s reward] unreadable inputs", task)
        query_list, prompt_list, label_list = [], [], []

    outcomes: list[Outcome] = []
    for i, query in enumerate(query_list):
        prompt = prompt_list[i] if i < len(prompt_list) else None
        label = label_list[i] if i < len(label_list) else None
        try:
            if not isinstance(query, str):
                outcome = Outcome(lowest, 0.0, "bad_input")
                log_reason(task, "bad_input", f"query of type {type(query).__name__}")
            else:
                response, found = extract_response(query, prompt)
                if not found:
                    log_reason(task, "prompt_not_found", "prompt text not found in the query; scoring the whole query")
                outcome = score_one(response, prompt if isinstance(prompt, str) else "", label)
                log_reason(task, outcome.reason)
        except Exception as exc:  # noqa: BLE001 - a reward function never raises
            logger.exception("[%s reward] internal error on sample %d: %s", task, i, exc)
            outcome = Outcome(lowest, 0.0, "internal_error")
        outcomes.append(outcome)

    def column(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32)

    extra_logs = {
        f"{task}_{name}": column([float(o.flags.get(name, 0.0)) for o in outcomes]) for name in flag_names
    }
    extra_logs[f"{task}_reason"] = column([float(REASON_CODES.get(o.reason, REASON_CODES["internal_error"]))
                                          for o in outcomes])
    return {
        "rewards": column([float(o.reward) for o in outcomes]),
        "scores": column([float(o.score) for o in outcomes]),
        "extra_logs": extra_logs,
    }
