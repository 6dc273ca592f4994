"""reasoning-gym reward for OpenRLHF: ``--reward.remote_url openrlhf_ada/rewards/gym.py``.

Data: :func:`openrlhf_ada.data.demo_task.write_demo_dataset` (the CPU demo's task, reasoning-gym's ``chain_sum``
asked as "What is 7 - 3? Answer with just the number."). The label is a JSON object in a string that names the
reasoning-gym dataset and carries the generated entry its scorer needs::

    {"task": "reasoning_gym", "dataset": "chain_sum",
     "entry": {"question": "...", "answer": "4", "metadata": {...}}}

The answer is the LAST number in the response (the text after the prompt, cut at the first end-of-turn marker such
as ``<|im_end|>``): ASCII digits after NFKC normalisation (full-width digits count; ``−`` is a minus sign), an
optional leading ``-``, thousands separators (``1,234``) and a decimal part allowed. It is normalised (``1,234`` ->
``1234``, ``12.0`` -> ``12``, ``-0`` -> ``0``) and handed to the dataset's own ``score_answer(answer, entry)``
(``reasoning_gym.get_score_answer_fn(dataset)``). So the model may answer ``"4"``, ``"7 - 3 = 4."`` or
``"The answer is 4."``, but not ``"4, I think; 7 - 3 = 5"``.

Binary: reward = score = 1 when the dataset's scorer gives full marks (>= 1.0), else 0. Some reasoning-gym scorers
give partial credit when the oracle answer is a substring of the answer ("12" in "112"); for a single extracted
number that credit is noise, so it only appears in the ``gym_dataset_score`` log. Also 0 (the lowest reward): no
number, an answer over 64 characters, an empty response, a bad label (unknown dataset, no ``answer``), a scorer that
fails or takes longer than 10 s.

``extra_logs`` (float tensors of shape ``[n]``): ``gym_answer_found``, ``gym_answer_correct``, ``gym_dataset_score``
(the dataset scorer's raw value, 0 when it was not called), ``gym_response_chars`` (length of the response text) and
``gym_reason`` (a code of :data:`openrlhf_ada.rewards._common.REASON_CODES`).

reasoning-gym is imported on the first call (about 2 s), not when the file is loaded.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata

# OpenRLHF loads this file by path; the package must be importable there (installed, or Ray py_modules).
from openrlhf_ada.rewards import _common

Outcome = _common.Outcome

TASK = "gym"
LABEL_TASK = "reasoning_gym"
FLAGS = ("answer_found", "answer_correct", "dataset_score", "response_chars")
MAX_ANSWER_CHARS = 64
SCORE_TIMEOUT_S = 10.0

#: End-of-turn markers: the response ends at the first one (decoded with ``skip_special_tokens=False``).
_END_OF_TURN = re.compile(r"<\|(?:im_end|endoftext|eot_id|end|im_start)\|>|</s>")
#: A number: optional minus, digits with optional thousands separators, optional decimal part (ASCII only).
_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})


def response_text(response: str) -> str:
    """The response up to its first end-of-turn marker, NFKC-normalised, Unicode minus signs as ``-``."""
    match = _END_OF_TURN.search(response)
    if match:
        response = response[: match.start()]
    return unicodedata.normalize("NFKC", response).translate(_MINUS_SIGNS)


def normalize_number(text: str) -> str:
    """``"1,234"`` -> ``"1234"``, ``"12.50"`` -> ``"12.5"``, ``"12.0"`` -> ``"12"``, ``"007"`` -> ``"7"``, ``"-0"`` -> ``"0"``."""
    text = text.replace(",", "")
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    whole, _, frac = digits.partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    value = whole + ("." + frac if frac else "")
    if value == "0":
        return "0"
    return ("-" if negative else "") + value


def extract_answer(response: str) -> str | None:
    """The last number in ``response`` (text from :func:`response_text`) as written, or None; see :func:`normalize_number`."""
    last = None
    for last in _NUMBER.finditer(response):  # noqa: B007 - only the last match is wanted
        pass
    if last is None:
        return None
    return last.group(0)


def _read_label(label) -> tuple[str, dict] | None:
    data = _common.parse_json_label(label)
    if data is None:
        return None
    dataset, entry = data.get("dataset"), data.get("entry")
    if not isinstance(dataset, str) or not dataset or not isinstance(entry, dict):
        return None
    if not isinstance(entry.get("answer"), str):
        return None
    return dataset, entry


_scorers: dict = {}
_scorer_lock = threading.Lock()


class UnknownDataset(ValueError):
    """The label names a dataset reasoning-gym does not have."""


def get_scorer(dataset: str):
    """``reasoning_gym.get_score_answer_fn(dataset)``, cached (imports reasoning-gym on first use)."""
    with _scorer_lock:
        scorer = _scorers.get(dataset)
        if scorer is None:
            import reasoning_gym
            from reasoning_gym.factory import DATASETS

            if dataset not in DATASETS:
                raise UnknownDataset(dataset)
            scorer = reasoning_gym.get_score_answer_fn(dataset)
            _scorers[dataset] = scorer
        return scorer


def score_one(response: str, prompt: str, label) -> Outcome:
    """The verdict on one response (the text after the prompt)."""
    text = response_text(response)
    chars = float(len(text))
    parsed = _read_label(label)
    if parsed is None:
        _common.log_reason(TASK, "bad_label", repr(label)[:200])
        return Outcome(0.0, 0.0, "bad_label", {"response_chars": chars})
    dataset, entry = parsed
    if not text.strip():
        return Outcome(0.0, 0.0, "empty_response", {"response_chars": chars})
    raw = extract_answer(text)
    if raw is None:
        return Outcome(0.0, 0.0, "no_answer", {"response_chars": chars})
    flags = {"answer_found": 1.0, "response_chars": chars}
    if len(raw) > MAX_ANSWER_CHARS:
        return Outcome(0.0, 0.0, "answer_too_long", flags)
    answer = normalize_number(raw)
    try:
        scorer = get_scorer(dataset)
    except UnknownDataset:
        _common.log_reason(TASK, "bad_label", f"unknown reasoning-gym dataset {dataset!r}")
        return Outcome(0.0, 0.0, "bad_label", flags)
    try:
        value = _common.call_with_timeout(scorer, SCORE_TIMEOUT_S, answer, entry)
    except TimeoutError:
        _common.log_reason(TASK, "timeout", f"{dataset} scorer on {answer!r}")
        return Outcome(0.0, 0.0, "timeout", flags)
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = 0.0
    if not math.isfinite(value):
        value = 0.0
    flags["dataset_score"] = value
    correct = value >= 1.0
    flags["answer_correct"] = float(correct)
    return Outcome(float(correct), float(correct), "correct" if correct else "wrong_answer", flags)


def reward_func(queries, prompts, labels):
    """OpenRLHF's entry point: ``{"rewards", "scores", "extra_logs"}`` as float tensors of shape ``[len(queries)]``."""
    return _common.score_batch(
        queries, prompts, labels, task=TASK, score_one=score_one, lowest=0.0, flag_names=FLAGS
    )
