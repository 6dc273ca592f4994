"""Reward-file and weight-function mistakes are refused by both trainers while the flags are parsed,
before Ray or any model starts, naming the file (and the line)."""

import textwrap

import pytest
import ray

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.rewards.checks import check_reward_url

GOOD = "def reward_func(queries, prompts, labels):\n    return {'rewards': [0.0]}\n"


def write(tmp_path, body, name="reward.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize(
    "body,words",
    [
        ("def reward_func(queries, prompts, labels:\n    pass\n", ["syntax error", ":1:"]),
        ("import torch\n\n\ndef reward_funk(queries, prompts, labels):\n    pass\n", ["defines no reward_func"]),
        ("def reward_func(queries, prompts):\n    pass\n", [":1:", "reward_func(queries, prompts)",
                                                          "takes 2 positional arguments, not 3"]),
        ("x = 1\n\ndef reward_func(q, p, l, extra):\n    pass\n", [":3:", "requires 4 positional arguments"]),
        ("def reward_func(q, p, l, *, strict):\n    pass\n", ["keyword-only", "strict"]),
        ("async def reward_func(queries, prompts, labels):\n    pass\n", ["async def", "plain 'def'"]),
        ("def reward_func(queries, prompts, labels)\n    pass\n", ["syntax error", ":1:"]),
    ],
)
def test_bad_reward_files_are_refused_naming_the_file(tmp_path, body, words):
    path = write(tmp_path, body)
    with pytest.raises(ValueError) as e:
        check_reward_url(path)
    msg = str(e.value)
    assert path in msg and "--reward.remote_url" in msg
    for word in words:
        assert word in msg, msg


@pytest.mark.parametrize(
    "body",
    [
        GOOD,
        "def reward_func(queries, prompts, labels, tokenizer=None):\n    pass\n",
        "def reward_func(*batch):\n    pass\n",
        "def reward_func(queries, *rest, **kw):\n    pass\n",
        "from math import floor as reward_func\n",  # bound by an import: accepted, its signature is not checked
        "import os\nif os.environ.get('X'):\n    def reward_func(q, p, l):\n        pass\nelse:\n    reward_func = len\n",
    ],
)
def test_usable_reward_files_and_urls_pass(tmp_path, body):
    check_reward_url(write(tmp_path, body))
    check_reward_url("http://localhost:5000/get_reward,https://rm.example.org/score")
    check_reward_url(["https://rm.example.org/score"])  # after upstream's split
    check_reward_url("not even a file", agent_func_path="agent.py")  # upstream ignores the URL with an agent


def test_paths_that_are_neither_file_nor_url(tmp_path):
    folder = tmp_path / "rewards.py"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        check_reward_url(str(folder))
    with pytest.raises(ValueError, match=r"neither a \.py reward file nor an http\(s\):// URL \(a folder\)"):
        check_reward_url(str(tmp_path))
    text = tmp_path / "reward.txt"
    text.write_text(GOOD)
    with pytest.raises(ValueError, match=r"\(an existing file\)"):
        check_reward_url(str(text))
    with pytest.raises(ValueError, match="entry 2 is empty"):
        check_reward_url("http://a:1,")


def test_both_trainers_refuse_before_ray_starts(tmp_path, monkeypatch, capsys, tiny_llama_path):
    started = []
    monkeypatch.setattr(ray, "init", lambda *a, **kw: started.append(kw))
    bad = write(tmp_path, "def reward_func(queries):\n    pass\n")
    data = tmp_path / "data.jsonl"
    data.write_text('{"input": "a", "label": "b"}\n')
    common = ["--reward.remote_url", bad, "--algo.advantage.estimator", "group_norm",
              "--rollout.n_samples_per_prompt", "2"]
    with pytest.raises(SystemExit) as e:
        parse_args(["--actor.model_name_or_path", "m", *common])
    assert e.value.code == 2 and f"{bad}:1: reward_func(queries) takes 1 positional argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        parse_local_args(["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", str(data),
                          "--local.output_dir", str(tmp_path / "out"), *common])
    assert e.value.code == 2 and f"{bad}:1:" in capsys.readouterr().err
    assert started == []


def test_weight_function_with_the_wrong_signature_is_refused_at_start(tmp_path, capsys):
    path = write(tmp_path, "def weights(scores, lengths):\n    return scores[:, 0]\n", name="w.py")
    with pytest.raises(SystemExit):
        parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://rm:5000",
                    "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "4",
                    "--adora.enable", "--adora.weight_func", f"{path}:weights"])
    err = capsys.readouterr().err
    assert path in err and "'weights'" in err and "weights(scores, lengths)" in err
    assert "(scores, rewards, lengths, truncated, step)" in err
