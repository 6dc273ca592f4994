"""Reward files (openrlhf_ada/rewards/*.py) loaded and called exactly as OpenRLHF 0.11.2 does it.

Loading: upstream's own ``SingleTurnAgentExecutor(remote_rm_url=<file>.py)`` (``spec_from_file_location``).
Calling: upstream's ``_fetch_rewards_via_func([query], [prompt], [label])``, i.e. one sample per call in a worker
thread (``asyncio.to_thread``), with ``query = prompt + response``. Labels and prompts come from prepare_data's own
builders, so both sides share one format. Every expected value below is derived by hand from the documented scales:

kk binary: 1 correct / 0 otherwise. kk logic_rl: format +1/-1 plus answer +2 correct, -1.5 parsed-but-wrong,
-2 unparsable (answer part -2 whenever the format is wrong): 3, -0.5, -1, -3. math / countdown: 1 / 0.
Reason codes: correct 0, wrong_answer 1, no_answer 2, unparsable_answer 3, bad_format 4, answer_too_long 5,
invalid_numbers 6, empty_response 7, bad_label 8, timeout 9, internal_error 10, bad_input 11.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import openrlhf_ada  # noqa: F401  (CPU compat placeholder before anything imports openrlhf)
from openrlhf_ada.data.prepare import (
    countdown_label,
    countdown_prompt,
    kk_label,
    kk_prompt,
    math_label,
    math_prompt,
)

REWARDS = Path(__file__).resolve().parents[1] / "openrlhf_ada" / "rewards"
MODE_ENV = "OPENRLHF_ADA_KK_REWARD"

CORRECT, WRONG, NO_ANSWER, UNPARSABLE, BAD_FORMAT, TOO_LONG, INVALID_NUMBERS = 0, 1, 2, 3, 4, 5, 6
EMPTY, BAD_LABEL, TIMEOUT, BAD_INPUT = 7, 8, 9, 11


# ---------------------------------------------------------------------------------------------------------------------
# Loading and calling through upstream
# ---------------------------------------------------------------------------------------------------------------------
def upstream_executor(name: str):
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    return SingleTurnAgentExecutor(remote_rm_url=str(REWARDS / f"{name}.py"))


@pytest.fixture(scope="module")
def executors():
    return {name: upstream_executor(name) for name in ("kk", "math", "countdown")}


def call(executor, query, prompt, label) -> dict:
    """One call as upstream makes it (worker thread, lists of length 1); returns the reward dict."""
    results = asyncio.run(executor._fetch_rewards_via_func([query], [prompt], [label]))
    assert len(results) == 1
    return results[0]


def score(executor, response: str, label, prompt: str) -> tuple[float, float, dict]:
    """(reward, score, extra_logs as floats) for ``prompt + response``; checks the output contract on the way."""
    out = call(executor, prompt + response, prompt, label)
    assert set(out) == {"rewards", "scores", "extra_logs"}
    for key in ("rewards", "scores"):
        assert isinstance(out[key], torch.Tensor) and out[key].dtype == torch.float32 and out[key].shape == (1,)
    logs = {}
    for key, value in out["extra_logs"].items():
        assert isinstance(value, torch.Tensor) and value.shape == (1,), key
        logs[key] = value.item()
    return out["rewards"].item(), out["scores"].item(), logs


# ---------------------------------------------------------------------------------------------------------------------
# Knights and Knaves
# ---------------------------------------------------------------------------------------------------------------------
KK_QUESTION = (
    'A very special island is inhabited only by knights and knaves. Knights always tell the truth, and knaves always '
    'lie. You meet 2 inhabitants: Zoey and Oliver. Zoey said, "Oliver is a knave." Oliver said, "Zoey is a knave." '
    'Zoey also said, "I am a knight." So who is a knight and who is a knave? (Format your answer like: '
    '"Zoey is a knight/knave, and Oliver is a knight/knave")'
)
KK_PROMPT = kk_prompt(KK_QUESTION)  # contains "<think> reasoning process here </think><answer> answer here </answer>"
KK_LABEL = kk_label("Zoey is a knight, and Oliver is a knave.", ["Zoey", "Oliver"], [True, False])
RIGHT = "Zoey is a knight, Oliver is a knave"
THINK = "<think>If Zoey were a knave, Oliver would be a knight.</think>"

# response -> (binary reward, binary score, logic_rl reward, logic_rl score, binary reason, logic_rl reason)
KK_CASES = {
    "correct": (f"{THINK}<answer>{RIGHT}</answer>", 1, 1, 3, 1, CORRECT, CORRECT),
    "correct_numbered_lines": (f"{THINK}\n<answer>\n(1) Zoey is a knight\n(2) Oliver is a knave\n</answer><|im_end|>",
                               1, 1, 3, 1, CORRECT, CORRECT),
    "correct_markdown": (f"{THINK}<answer>**Zoey**: knight; **Oliver**: knave</answer>", 1, 1, 3, 1, CORRECT, CORRECT),
    "both_wrong": (f"{THINK}<answer>Zoey is a knave, Oliver is a knight</answer>", 0, 0, -0.5, 0, WRONG, WRONG),
    "one_wrong": (f"{THINK}<answer>Zoey is a knight, Oliver is a knight</answer>", 0, 0, -0.5, 0, WRONG, WRONG),
    "one_name_missing": (f"{THINK}<answer>Zoey is a knight</answer>", 0, 0, -1, 0, UNPARSABLE, UNPARSABLE),
    "blank_answer": (f"{THINK}<answer>   </answer>", 0, 0, -1, 0, NO_ANSWER, NO_ANSWER),
    "no_think_tags": (f"<answer>{RIGHT}</answer>", 1, 1, -3, 0, CORRECT, BAD_FORMAT),
    "two_answer_blocks": (f"{THINK}<answer>Zoey is a knave, Oliver is a knight</answer> no: <answer>{RIGHT}</answer>",
                          1, 1, -3, 0, CORRECT, BAD_FORMAT),
    "tags_out_of_order": (f"<answer>{RIGHT}</answer>{THINK}", 1, 1, -3, 0, CORRECT, BAD_FORMAT),
    "no_answer_tags": (f"{THINK} {RIGHT}.", 0, 0, -3, 0, NO_ANSWER, BAD_FORMAT),
    "unclosed_answer": (f"{THINK}<answer>{RIGHT}", 0, 0, -3, 0, NO_ANSWER, BAD_FORMAT),
    "empty": ("", 0, 0, -3, 0, EMPTY, EMPTY),
    "whitespace": (" \n\t ", 0, 0, -3, 0, EMPTY, EMPTY),
    "long_reasoning_100k": ("<think>" + "hmm " * 25_000 + f"</think><answer>{RIGHT}</answer>", 1, 1, 3, 1,
                            CORRECT, CORRECT),
    "long_garbage_100k": ("a" * 100_000, 0, 0, -3, 0, NO_ANSWER, BAD_FORMAT),
    "answer_100k": (f"{THINK}<answer>" + "Zoey " * 20_000 + "</answer>", 0, 0, -1, 0, TOO_LONG, TOO_LONG),
    "non_ascii_reasoning": (f"<think>让我们想一想 🤔 Zoë? Ölüm…</think><answer>{RIGHT}</answer>", 1, 1, 3, 1,
                            CORRECT, CORRECT),
    "non_ascii_answer": (f"{THINK}<answer>Zoey ist ein Ritter, Oliver ist ein Schurke</answer>", 0, 0, -1, 0,
                         UNPARSABLE, UNPARSABLE),
    "only_special_tokens": ("<|im_end|>", 0, 0, -3, 0, NO_ANSWER, BAD_FORMAT),
}


@pytest.mark.parametrize("case", sorted(KK_CASES))
def test_kk_binary_and_logic_rl(executors, monkeypatch, case):
    response, b_reward, b_score, l_reward, l_score, b_reason, l_reason = KK_CASES[case]
    monkeypatch.setenv(MODE_ENV, "binary")
    reward, sc, logs = score(executors["kk"], response, KK_LABEL, KK_PROMPT)
    assert (reward, sc, logs["kk_reason"]) == (b_reward, b_score, b_reason)
    assert set(logs) == {"kk_answer_found", "kk_answer_parsed", "kk_answer_correct", "kk_format_ok", "kk_reason"}

    monkeypatch.setenv(MODE_ENV, "logic_rl")
    reward, sc, logs = score(executors["kk"], response, KK_LABEL, KK_PROMPT)
    assert (reward, sc, logs["kk_reason"]) == (l_reward, l_score, l_reason)
    # the answer flag does not depend on the scale: binary's reward is exactly "answer correct"
    assert logs["kk_answer_correct"] == b_reward


def test_kk_default_scale_is_binary(executors, monkeypatch):
    monkeypatch.delenv(MODE_ENV, raising=False)
    assert score(executors["kk"], KK_CASES["correct"][0], KK_LABEL, KK_PROMPT)[:2] == (1, 1)
    assert score(executors["kk"], KK_CASES["both_wrong"][0], KK_LABEL, KK_PROMPT)[:2] == (0, 0)


def test_kk_flags(executors, monkeypatch):
    monkeypatch.setenv(MODE_ENV, "logic_rl")
    _, _, logs = score(executors["kk"], KK_CASES["both_wrong"][0], KK_LABEL, KK_PROMPT)
    assert logs == {"kk_answer_found": 1, "kk_answer_parsed": 1, "kk_answer_correct": 0, "kk_format_ok": 1,
                    "kk_reason": WRONG}
    _, _, logs = score(executors["kk"], KK_CASES["no_think_tags"][0], KK_LABEL, KK_PROMPT)
    assert logs == {"kk_answer_found": 1, "kk_answer_parsed": 1, "kk_answer_correct": 1, "kk_format_ok": 0,
                    "kk_reason": BAD_FORMAT}


def test_kk_other_role_words(executors, monkeypatch):
    """reasoning-gym also uses saint/sinner, hero/villain, ...: the answer must use the puzzle's words."""
    monkeypatch.setenv(MODE_ENV, "logic_rl")
    label = kk_label("Zoey is a saint, and Oliver is a sinner.", ["Zoey", "Oliver"], [True, False], "saint", "sinner")
    assert score(executors["kk"], f"{THINK}<answer>Zoey is a saint, Oliver is a sinner</answer>", label,
                 KK_PROMPT)[:2] == (3, 1)
    assert score(executors["kk"], f"{THINK}<answer>{RIGHT}</answer>", label, KK_PROMPT)[:2] == (-0.5, 0)


def test_kk_prompt_that_prefills_think(executors, monkeypatch):
    """A chat template ending in "<think>" puts the opening tag into the prompt; the response lacks it."""
    monkeypatch.setenv(MODE_ENV, "logic_rl")
    response = f"Zoey's claim holds.</think><answer>{RIGHT}</answer>"
    assert score(executors["kk"], response, KK_LABEL, KK_PROMPT + "\nAssistant: <think>")[:2] == (3, 1)
    assert score(executors["kk"], response, KK_LABEL, KK_PROMPT)[:2] == (-3, 0)


def test_kk_prompt_is_cut_off_the_query(executors, monkeypatch):
    """The prompt's own "<think> ... <answer> ..." example must not count as part of the response, also when the
    decoded query does not start with the prompt text (extra BOS text, or upstream cut the prompt from the left)."""
    monkeypatch.setenv(MODE_ENV, "logic_rl")
    response = KK_CASES["correct"][0]
    ex = executors["kk"]
    for query in (KK_PROMPT + response, "<s>" + KK_PROMPT + response, KK_PROMPT[300:] + response):
        out = call(ex, query, KK_PROMPT, KK_LABEL)
        assert (out["rewards"].item(), out["scores"].item()) == (3, 1), query[:40]
    # the prompt alone (an empty response) gets nothing from the example tags it contains
    assert call(ex, KK_PROMPT, KK_PROMPT, KK_LABEL)["rewards"].item() == -3


GARBAGE_LABELS = [None, "", "not json", "[1, 2]", "{}", '{"answer": "Zoey is a knight."}',
                  '{"answer": "Zoey is a knight.", "names": []}', '{"answer": 5, "names": ["Zoey"]}', 123, 4.5,
                  ["Zoey"], {"names": ["Zoey"]}, '{"answer": "nobody", "names": ["Zoey", "Oliver"]}', "\u0000\ufffd"]


@pytest.mark.parametrize("label", GARBAGE_LABELS, ids=repr)
def test_kk_garbage_label_gives_lowest_reward(executors, monkeypatch, label):
    for mode, lowest in (("binary", 0), ("logic_rl", -3)):
        monkeypatch.setenv(MODE_ENV, mode)
        reward, sc, logs = score(executors["kk"], KK_CASES["correct"][0], label, KK_PROMPT)
        assert (reward, sc, logs["kk_reason"]) == (lowest, 0, BAD_LABEL)


def test_kk_unknown_scale_fails_at_load_not_at_call(monkeypatch):
    monkeypatch.setenv(MODE_ENV, "shaped")
    with pytest.raises(ValueError, match="OPENRLHF_ADA_KK_REWARD"):
        upstream_executor("kk")
    monkeypatch.setenv(MODE_ENV, "logic_rl")
    executor = upstream_executor("kk")
    monkeypatch.setenv(MODE_ENV, "shaped")  # changed after load: binary, no exception
    assert score(executor, KK_CASES["correct"][0], KK_LABEL, KK_PROMPT)[:2] == (1, 1)


# ---------------------------------------------------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------------------------------------------------
MATH_PROMPT = math_prompt("What is 1/2 as a fraction? Write it with \\frac.")  # ends with "...within \boxed{}."
HALF = math_label("\\frac{1}{2}")

MATH_CASES = {  # response -> (reward, reason)
    "decimal": ("So it is \\boxed{0.5}.", 1, CORRECT),
    "dfrac": ("\\boxed{\\dfrac{1}{2}}", 1, CORRECT),
    "slash": ("\\boxed{1/2}", 1, CORRECT),
    "wrong": ("\\boxed{\\frac{1}{3}}", 0, WRONG),
    "last_box_counts_wrong": ("first \\boxed{\\frac{1}{2}}, no, final: \\boxed{3}", 0, WRONG),
    "last_box_counts_right": ("first \\boxed{3}, no, final: \\boxed{\\frac{1}{2}}", 1, CORRECT),
    "no_box": ("The answer is 1/2.", 0, NO_ANSWER),
    "truncated_box": ("\\boxed{\\frac{1}{2}", 0, UNPARSABLE),
    "empty_box": ("\\boxed{}", 0, UNPARSABLE),
    "empty": ("", 0, EMPTY),
    "long_reasoning_100k": ("x" * 100_000 + " \\boxed{0.5}", 1, CORRECT),
    "box_100k": ("\\boxed{" + "1" * 100_000 + "}", 0, TOO_LONG),
    "long_garbage_100k": ("{" * 50_000 + "}" * 50_000, 0, NO_ANSWER),
    "non_ascii": ("答案是 \\boxed{\\frac{1}{2}} ✅", 1, CORRECT),
    "non_ascii_in_box": ("\\boxed{½}", 0, None),
    "text_in_box": ("\\boxed{\\text{one half}}", 0, None),
}


@pytest.mark.parametrize("case", sorted(MATH_CASES))
def test_math(executors, case):
    response, expected, reason = MATH_CASES[case]
    reward, sc, logs = score(executors["math"], response, HALF, MATH_PROMPT)
    assert (reward, sc) == (expected, expected)
    assert set(logs) == {"math_answer_found", "math_answer_correct", "math_reason"}
    if reason is not None:
        assert logs["math_reason"] == reason


def test_math_label_forms(executors):
    ex = executors["math"]
    prompt = math_prompt("What is 6 times 7?")
    for label in ("42", " 42 ", "$42$", "\\boxed{42}", 42, '{"answer": "42"}', {"answer": 42}, math_label("6*7 #### 42"),
                  math_label("We get \\boxed{42}.")):
        assert score(ex, "\\boxed{42}", label, prompt)[:2] == (1, 1), label
        assert score(ex, "\\boxed{41}", label, prompt)[:2] == (0, 0), label


@pytest.mark.parametrize("label", [None, "", "   ", [], ["42"], {"foo": 1}, '{"answer": ""}', True, "x" * 5000],
                         ids=repr)
def test_math_garbage_label(executors, label):
    reward, sc, logs = score(executors["math"], "\\boxed{42}", label, MATH_PROMPT)
    assert (reward, sc, logs["math_reason"]) == (0, 0, BAD_LABEL)


def test_math_timeout_gives_zero_quickly(monkeypatch):
    """A verification that hangs gets 0 with reason timeout after OPENRLHF_ADA_MATH_TIMEOUT seconds."""
    spec = importlib.util.spec_from_file_location("reward_func", REWARDS / "math.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("OPENRLHF_ADA_MATH_TIMEOUT", "0.3")
    monkeypatch.setattr(module, "_check", lambda gold, boxed: time.sleep(3))
    start = time.monotonic()
    out = module.reward_func([MATH_PROMPT + "\\boxed{0.5}"], [MATH_PROMPT], [HALF])
    assert time.monotonic() - start < 2
    assert (out["rewards"].item(), out["extra_logs"]["math_reason"].item()) == (0, TIMEOUT)


# ---------------------------------------------------------------------------------------------------------------------
# Countdown
# ---------------------------------------------------------------------------------------------------------------------
CD_PROMPT = countdown_prompt([3, 5, 7], 22)  # contains the example "<answer> (1 + 2) / 3 </answer>"
CD_LABEL = countdown_label([3, 5, 7], 22, reference="3*5 + 7")

COUNTDOWN_CASES = {  # answer-block content (or a whole response when it starts with "!") -> (reward, reason)
    "correct": ("3*5+7", 1, CORRECT),
    "correct_spaces_parens": (" (3 * 5) + 7 ", 1, CORRECT),
    "correct_other_order": ("7 + 5 * 3", 1, CORRECT),
    "correct_unary_minus": ("-(-3*5-7)", 1, CORRECT),
    "correct_with_equals": ("3*5+7 = 22", 1, CORRECT),
    "false_equation": ("3*5+7 = 23", 0, WRONG),
    "wrong_value": ("7*3+5", 0, WRONG),
    "number_used_twice": ("5*5-3", 0, INVALID_NUMBERS),
    "number_not_given": ("22", 0, INVALID_NUMBERS),
    "zero_not_given": ("3*5+7+0", 0, INVALID_NUMBERS),
    "power": ("3**5", 0, UNPARSABLE),
    "caret": ("3^5+7", 0, UNPARSABLE),
    "python_code": ("__import__('os').system('echo pwned')", 0, UNPARSABLE),
    "two_statements": ("3*5+7; 1", 0, UNPARSABLE),
    "float_literal": ("3*5+7.0", 0, UNPARSABLE),
    "words": ("three times five plus seven", 0, UNPARSABLE),
    "unbalanced": ("(3*5+7", 0, UNPARSABLE),
    "blank_answer": ("  ", 0, NO_ANSWER),
    "answer_100k": ("3+" * 50_000 + "3", 0, TOO_LONG),
    "non_ascii_times": ("3×5+7", 1, CORRECT),
    "non_ascii_digits": ("３*5+7", 0, UNPARSABLE),
    "non_ascii_words": ("三乘五加七", 0, UNPARSABLE),
    "!no_tags": ("!3*5+7", 0, NO_ANSWER),
    "!empty": ("!", 0, EMPTY),
    "!long_reasoning_100k": ("!<think>" + "try " * 25_000 + "</think><answer>3*5+7</answer>", 1, CORRECT),
    "!long_garbage_100k": ("!" + "(" * 100_000, 0, NO_ANSWER),
    "!last_block_counts": ("!<answer>3*5+7</answer> hmm <answer>7*3+5</answer>", 0, WRONG),
}


@pytest.mark.parametrize("case", sorted(COUNTDOWN_CASES))
def test_countdown(executors, case):
    text, expected, reason = COUNTDOWN_CASES[case]
    response = text[1:] if text.startswith("!") else f"<think>3*5 is 15, plus 7 is 22.</think><answer>{text}</answer>"
    reward, sc, logs = score(executors["countdown"], response, CD_LABEL, CD_PROMPT)
    assert (reward, sc, logs["countdown_reason"]) == (expected, expected, reason)
    assert set(logs) == {"countdown_answer_found", "countdown_answer_parsed", "countdown_answer_correct",
                         "countdown_reason"}


def test_countdown_python_code_is_not_run(executors, tmp_path):
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    assert score(executors["countdown"], f"<answer>{code}</answer>", CD_LABEL, CD_PROMPT)[0] == 0
    assert not marker.exists()


def test_countdown_division_and_use_all(executors):
    ex = executors["countdown"]
    at_most_once = countdown_label([2, 4, 6], 3)
    exactly_once = countdown_label([2, 4, 6], 3, use_all=True)
    assert score(ex, "<answer>6/2</answer>", at_most_once, CD_PROMPT)[0] == 1  # 4 unused: fine
    reward, _, logs = score(ex, "<answer>6/2</answer>", exactly_once, CD_PROMPT)
    assert (reward, logs["countdown_reason"]) == (0, INVALID_NUMBERS)
    assert score(ex, "<answer>6/(4-2)</answer>", exactly_once, CD_PROMPT)[0] == 1
    # exact fractions: (1/3)*6/2 is exactly 1
    assert score(ex, "<answer>(1/3)*6/2</answer>", countdown_label([1, 3, 6, 2], 1), CD_PROMPT)[0] == 1
    # division by zero is an invalid expression, not an exception
    reward, _, logs = score(ex, "<answer>6/(2-2)</answer>", countdown_label([2, 2, 6], 3), CD_PROMPT)
    assert (reward, logs["countdown_reason"]) == (0, UNPARSABLE)


@pytest.mark.parametrize("label", [None, "", "{}", "nonsense", '{"numbers": [], "target": 3}',
                                   '{"numbers": [1, "2"], "target": 3}', '{"numbers": [1, 2], "target": "3"}',
                                   '{"numbers": [1, 2], "target": 2.5}', '{"numbers": [true, 2], "target": 3}', 7],
                         ids=repr)
def test_countdown_garbage_label(executors, label):
    reward, sc, logs = score(executors["countdown"], "<answer>1+2</answer>", label, CD_PROMPT)
    assert (reward, sc, logs["countdown_reason"]) == (0, 0, BAD_LABEL)


# ---------------------------------------------------------------------------------------------------------------------
# All files: batch contract, hostile inputs, the whole upstream path, standalone loading
# ---------------------------------------------------------------------------------------------------------------------
CORRECT_SAMPLES = {
    "kk": (KK_PROMPT, KK_CASES["correct"][0], KK_LABEL),
    "math": (MATH_PROMPT, "\\boxed{0.5}", HALF),
    "countdown": (CD_PROMPT, "<answer>3*5+7</answer>", CD_LABEL),
}


@pytest.mark.parametrize("name", sorted(CORRECT_SAMPLES))
def test_batch_shapes_and_hostile_inputs(executors, monkeypatch, name):
    monkeypatch.setenv(MODE_ENV, "binary")
    func = executors[name].reward_func
    prompt, response, label = CORRECT_SAMPLES[name]
    out = func([prompt + response, prompt + "nothing", prompt + response], [prompt] * 3, [label] * 3)
    assert out["rewards"].tolist() == [1, 0, 1] and out["scores"].tolist() == [1, 0, 1]
    assert all(v.shape == (3,) and v.dtype == torch.float32 for v in out["extra_logs"].values())

    # non-string queries, missing prompts/labels, fewer labels than queries: lowest reward, no exception
    out = func([None, 5, prompt + response], [prompt], [label])
    assert out["rewards"].tolist() == [0, 0, 0]
    assert out["extra_logs"][f"{name}_reason"].tolist() == [BAD_INPUT, BAD_INPUT, BAD_LABEL]
    for queries, prompts, labels in ((None, None, None), ([], [], []), ("a string", "p", "l"), (7, 8, 9)):
        out = func(queries, prompts, labels)
        assert out["rewards"].dim() == 1 and out["rewards"].shape == out["scores"].shape


def test_upstream_end_to_end_with_real_tokenizer(monkeypatch):
    """The whole upstream sample path: chat template -> tokens -> (fake) vLLM -> decode -> reward -> Experience."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    from openrlhf_ada.models.tiny_llama import _build_tokenizer

    monkeypatch.setenv(MODE_ENV, "logic_rl")
    tokenizer = _build_tokenizer()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": KK_PROMPT}], tokenize=False,
                                           add_generation_prompt=True)
    response = f"<think>Zoë: 让我们想一想.</think><answer>{RIGHT}</answer>"

    class FakeEngine:
        async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
            ids = tokenizer(text=response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            out = SimpleNamespace(token_ids=ids, text=response, finish_reason="stop", logprobs=None)
            return SimpleNamespace(outputs=[out])

    executor = upstream_executor("kk")
    result = asyncio.run(executor.execute(prompt, KK_LABEL, SimpleNamespace(max_tokens=None, logprobs=None), 100_000,
                                          tokenizer, FakeEngine()))
    assert result["reward"].tolist() == [3.0] and result["scores"].tolist() == [1.0]
    experience = SamplesGenerator._process_response_into_experience(None, result, max_len=100_000)
    assert experience.rewards.tolist() == [3.0] and experience.scores.tolist() == [1.0]
    assert experience.info["kk_format_ok"].tolist() == [1.0]
    assert experience.info["kk_reason"].tolist() == [float(CORRECT)]



def test_reason_codes_match_the_table():
    from openrlhf_ada.rewards._common import REASON_CODES

    assert REASON_CODES == {"correct": 0, "wrong_answer": 1, "no_answer": 2, "unparsable_answer": 3, "bad_format": 4,
                            "answer_too_long": 5, "invalid_numbers": 6, "empty_response": 7, "bad_label": 8,
                            "timeout": 9, "internal_error": 10, "bad_input": 11}
    assert json.loads(KK_LABEL)["names"] == ["Zoey", "Oliver"]
