r"""Math reward for OpenRLHF: ``--reward.remote_url openrlhf_ada/rewards/math.py``.

The answer is the content of the LAST ``\boxed{...}`` (or ``\fbox{...}``) of the response (the text after the
prompt), compared with the label by math-verify (``parse`` + ``verify``: ``0.5`` = ``\frac{1}{2}`` = ``\dfrac12``,
``x = 3`` = ``3``, ``50\%`` = ``\frac12``...). Binary: reward = score = 1 if equivalent, else 0; 0 is also the lowest
reward (no box, unbalanced braces of a truncated answer, box content over 1,000 characters, unparsable content,
bad label, timeout).

Label: the reference answer as a string (``"42"``, ``"\frac{1}{2}"``; ``$...$`` and ``\boxed{}`` are accepted), a
number, or a JSON object with an ``"answer"`` key, as written by ``prepare_data hf``.

Timeouts: upstream calls reward files from worker threads, where math-verify's own ``signal.alarm`` timeout cannot
run (math-verify then logs an error and returns nothing, i.e. every answer would score 0). So math-verify runs with
its timeouts off, inside a daemon thread that is waited for at most ``OPENRLHF_ADA_MATH_TIMEOUT`` seconds (default
10); past that the sample gets 0 with reason ``timeout``.

``extra_logs``: ``math_answer_found`` (a box with content), ``math_answer_correct`` and ``math_reason``.
"""

from __future__ import annotations

import os
from functools import lru_cache

# OpenRLHF loads this file by path; the package must be importable there (installed, or Ray py_modules).
from openrlhf_ada.rewards import _common  # noqa: E402

Outcome = _common.Outcome

TASK = "math"
FLAGS = ("answer_found", "answer_correct")
MAX_BOXED_CHARS = 1_000
MAX_LABEL_CHARS = 1_000
TIMEOUT_ENV = "OPENRLHF_ADA_MATH_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0


class _BadLabel(ValueError):
    pass


def _timeout_s() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _extraction_config():
    import math_verify.grader
    import math_verify.parser
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    # math-verify warns once that its timeouts are off; here they are off on purpose (see call_with_timeout)
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    return [LatexExtractionConfig(), ExprExtractionConfig()]


_extraction_config()  # import math-verify now: a missing verifier fails when OpenRLHF loads the file


def label_answer(label) -> str | None:
    """The reference answer text of a label, or None when there is none."""
    if isinstance(label, bool):
        return None
    if isinstance(label, (int, float)):
        return str(label)
    data = _common.parse_json_label(label)
    if data is not None:
        label = data.get("answer")
        if isinstance(label, (int, float)) and not isinstance(label, bool):
            return str(label)
    if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL_CHARS:
        return None
    return label.strip()


@lru_cache(maxsize=4096)
def _parse_gold(answer: str) -> tuple:
    from math_verify import parse

    text = answer if ("\\boxed" in answer or "$" in answer) else f"${answer}$"
    return tuple(parse(text, extraction_config=_extraction_config(), parsing_timeout=None))


def _check(gold_text: str, boxed: str) -> tuple[bool, bool]:
    """``(parsed, correct)``; raises _BadLabel when the label does not parse."""
    from math_verify import parse, verify

    gold = _parse_gold(gold_text)
    if not gold:
        raise _BadLabel(gold_text)
    pred = parse("\\boxed{" + boxed + "}", extraction_config=_extraction_config(), parsing_timeout=None)
    if not pred:
        return False, False
    return True, bool(verify(list(gold), pred, timeout_seconds=None))


def score_one(response: str, prompt: str, label) -> Outcome:
    """The verdict on one response (the text after the prompt)."""
    gold_text = label_answer(label)
    if gold_text is None:
        _common.log_reason(TASK, "bad_label", repr(label)[:200])
        return Outcome(0.0, 0.0, "bad_label")
    if not response.strip():
        return Outcome(0.0, 0.0, "empty_response")
    status, boxed = _common.last_boxed(response)
    if status == "none":
        return Outcome(0.0, 0.0, "no_answer")
    if status != "ok" or not boxed.strip():
        return Outcome(0.0, 0.0, "unparsable_answer")
    flags = {"answer_found": 1.0}
    if len(boxed) > MAX_BOXED_CHARS:
        return Outcome(0.0, 0.0, "answer_too_long", flags)
    try:
        parsed, correct = _common.call_with_timeout(_check, _timeout_s(), gold_text, boxed)
    except _BadLabel:
        _common.log_reason(TASK, "bad_label", f"math-verify cannot parse the label {gold_text[:200]!r}")
        return Outcome(0.0, 0.0, "bad_label", flags)
    except TimeoutError:
        _common.log_reason(TASK, "timeout", f"answer {boxed[:200]!r} vs label {gold_text[:200]!r}")
        return Outcome(0.0, 0.0, "timeout", flags)
    if not parsed:
        return Outcome(0.0, 0.0, "unparsable_answer", flags)
    flags["answer_correct"] = float(correct)
    return Outcome(float(correct), float(correct), "correct" if correct else "wrong_answer", flags)


def reward_func(queries, prompts, labels):
    """OpenRLHF's entry point: ``{"rewards", "scores", "extra_logs"}`` as float tensors of shape ``[len(queries)]``."""
    return _common.score_batch(
        queries, prompts, labels, task=TASK, score_one=score_one, lowest=0.0, flag_names=FLAGS
    )
