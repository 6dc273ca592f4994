"""Knights and Knaves reward for OpenRLHF: ``--reward.remote_url openrlhf_ada/rewards/kk.py``.

Data: ``python -m openrlhf_ada.cli.prepare_data kk ...`` (reasoning-gym's ``knights_knaves`` puzzles). The label is a
JSON object in a string: ``{"task": "knights_knaves", "answer": "<reasoning-gym's solution text>", "names": [...],
"solution": [true, false, ...], "knight": ..., "knave": ..., "n_people": n}``; only ``answer`` and ``names`` are needed.

The answer is the content of the LAST ``<answer>...</answer>`` block of the response (the text after the prompt).
It is checked with reasoning-gym's own ``KnightsKnavesDataset.score_answer`` (full credit = correct) after replacing
characters other than letters, digits, whitespace and ``.,()`` by spaces (so ``**Emma**: knight;`` reads). It counts
as *parsed* when reasoning-gym's ``_normalize_answer`` finds exactly one role for every inhabitant and no other name.
Known limit of that parser: a negation ("Emma is not a knight") reads as "Emma is a knight".

Reward scale, chosen by the environment variable ``OPENRLHF_ADA_KK_REWARD`` (read at every call; it must be set in
the vLLM engine processes, e.g. through Ray's ``runtime_env={"env_vars": {...}}``; an unknown value fails at load):

``binary`` (default)
    reward = score = 1 if the answer is correct, else 0. The ``<think>`` tags are not required.

``logic_rl`` (Logic-RL, Xie et al. 2025, ``verl/utils/reward_score/kk.py``): reward = format part + answer part.
    Format part: +1 if the response contains each of ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` exactly
    once and in that order (a prompt ending in ``<think>``, i.e. a template that pre-fills it, counts as the opening
    tag), else -1. Answer part, looked at only when the format is right and the answer block is not blank: +2 correct,
    -1.5 parsed but wrong, -2 not parsable (or longer than 10,000 characters); -2 otherwise. Hence:
    correct 3, wrong -0.5, unparsable or blank answer -1, bad format -3 (whatever the answer), empty response -3.

``scores`` is 1 exactly when the reward is the top of its scale (binary: correct; logic_rl: format right and answer
correct), else 0, so that "all samples of a group solved" means "all got the same top reward". Lowest reward (bad
label, empty or non-string response, internal error): 0 for binary, -3 for logic_rl.

``extra_logs``: ``kk_answer_found``, ``kk_answer_parsed``, ``kk_answer_correct`` (the answer alone, whatever the
format), ``kk_format_ok`` (the logic_rl structure test, also computed in binary mode) and ``kk_reason``.
"""

from __future__ import annotations

import os
import re

# OpenRLHF loads this file by path; the package must be importable there (installed, or Ray py_modules).
from openrlhf_ada.rewards import _common  # noqa: E402

Outcome = _common.Outcome

TASK = "kk"
MODE_ENV = "OPENRLHF_ADA_KK_REWARD"
MODES = ("binary", "logic_rl")
FLAGS = ("answer_found", "answer_parsed", "answer_correct", "format_ok")
MAX_ANSWER_CHARS = 10_000

# Logic-RL's parts (format +1/-1; answer +2 correct, -1.5 wrong, -2 unparsable/missing).
FORMAT_OK, FORMAT_BAD = 1.0, -1.0
ANSWER_CORRECT, ANSWER_WRONG, ANSWER_UNPARSABLE = 2.0, -1.5, -2.0
LOWEST = {"binary": 0.0, "logic_rl": FORMAT_BAD + ANSWER_UNPARSABLE}  # -3
TOP = {"binary": 1.0, "logic_rl": FORMAT_OK + ANSWER_CORRECT}  # 3

_FORMAT_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_NOISE = re.compile(r"[^\w\s.,()]|_")


def reward_mode() -> str:
    """The scale named by ``OPENRLHF_ADA_KK_REWARD`` (default binary); ValueError for an unknown name."""
    mode = os.environ.get(MODE_ENV, "binary").strip().lower() or "binary"
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r} is not one of {', '.join(MODES)}")
    return mode


reward_mode()  # fail when OpenRLHF loads the file, not silently at every sample


def _rg():
    from reasoning_gym.logic.knights_knaves import KnightsKnavesConfig, KnightsKnavesDataset

    global _RG_DATASET
    if _RG_DATASET is None:
        _RG_DATASET = KnightsKnavesDataset(KnightsKnavesConfig(size=1, seed=0))  # only its scorer is used
    return _RG_DATASET


_RG_DATASET = None
_rg()  # import reasoning-gym now: a missing verifier fails when OpenRLHF loads the file, not at every sample


def format_ok(response: str, prompt: str) -> bool:
    """Logic-RL's structure test: each tag exactly once, in the order <think> </think> <answer> </answer>."""
    text = "<think>" + response if prompt.rstrip().endswith("<think>") else response
    positions = []
    for tag in _FORMAT_TAGS:
        if text.count(tag) != 1:
            return False
        positions.append(text.find(tag))
    return positions == sorted(positions)


def judge_answer(answer: str, label: dict) -> tuple[bool, bool]:
    """``(parsed, correct)`` for an answer text, with reasoning-gym's parser and scorer."""
    dataset = _rg()
    cleaned = _NOISE.sub(" ", answer)
    correct = dataset.score_answer(cleaned, {"answer": label["answer"]}) == 1.0
    assignments = dataset._normalize_answer(cleaned)
    said = sorted(name for name, _role in assignments)
    parsed = said == sorted(name.lower() for name in label["names"])
    return parsed or correct, correct


def _read_label(label) -> dict | None:
    data = _common.parse_json_label(label)
    if not data:
        return None
    answer, names = data.get("answer"), data.get("names")
    if not isinstance(answer, str) or not answer.strip():
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        return None
    if len(_rg()._normalize_answer(answer)) != len(names):  # the oracle itself must read as one role per name
        return None
    return data


def score_one(response: str, prompt: str, label, mode: str | None = None) -> Outcome:
    """The verdict on one response (the text after the prompt); see the module docstring for the scales."""
    mode = mode or reward_mode()
    data = _read_label(label)
    if data is None:
        _common.log_reason(TASK, "bad_label", repr(label)[:200])
        return Outcome(LOWEST[mode], 0.0, "bad_label")
    if not response.strip():
        return Outcome(LOWEST[mode], 0.0, "empty_response")

    fmt = format_ok(response, prompt)
    answer = _common.last_tag_block(response, "answer")
    found = answer is not None and bool(answer.strip())
    parsed = correct = False
    if not found:
        answer_reason = "no_answer"
    elif len(answer) > MAX_ANSWER_CHARS:
        answer_reason = "answer_too_long"
    else:
        parsed, correct = judge_answer(answer, data)
        answer_reason = "correct" if correct else ("wrong_answer" if parsed else "unparsable_answer")
    flags = {"answer_found": float(found), "answer_parsed": float(parsed), "answer_correct": float(correct),
             "format_ok": float(fmt)}

    if mode == "binary":
        value = 1.0 if correct else 0.0
        return Outcome(value, value, answer_reason, flags)

    if not fmt:
        return Outcome(FORMAT_BAD + ANSWER_UNPARSABLE, 0.0, "bad_format", flags)
    if answer_reason == "correct":
        return Outcome(FORMAT_OK + ANSWER_CORRECT, 1.0, answer_reason, flags)
    if answer_reason == "wrong_answer":
        return Outcome(FORMAT_OK + ANSWER_WRONG, 0.0, answer_reason, flags)
    return Outcome(FORMAT_OK + ANSWER_UNPARSABLE, 0.0, answer_reason, flags)


def reward_func(queries, prompts, labels):
    """OpenRLHF's entry point: ``{"rewards", "scores", "extra_logs"}`` as float tensors of shape ``[len(queries)]``."""
    try:
        mode = reward_mode()
    except ValueError as exc:  # changed after load: say so, score with the default scale
        _common.logger.error("[kk reward] %s; using binary", exc)
        mode = "binary"
    return _common.score_batch(
        queries,
        prompts,
        labels,
        task=TASK,
        score_one=lambda response, prompt, label: score_one(response, prompt, label, mode),
        lowest=LOWEST[mode],
        flag_names=FLAGS,
    )
