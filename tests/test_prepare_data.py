"""prepare_data: the jsonl files OpenRLHF reads (fields, people counts, ranges, seeds, eval split), the labels the
reward files check against, and a fast, clear failure for Hub datasets when offline (no network attempt at all)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import openrlhf_ada  # noqa: F401  (CPU compat placeholder before anything imports openrlhf)
from openrlhf_ada.cli.prepare_data import build_parser, main
from openrlhf_ada.data import prepare as prepare_data

REWARDS = Path(__file__).resolve().parents[1] / "openrlhf_ada" / "rewards"
FIELDS = {"input", "label", "datasource"}


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def reward_func(name: str):
    """Loaded by path exactly as OpenRLHF does it."""
    spec = importlib.util.spec_from_file_location("reward_func", REWARDS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def reward(func, row: dict, response: str) -> float:
    return func([row["input"] + response], [row["input"]], [row["label"]])["rewards"].item()


# ---------------------------------------------------------------------------------------------------------------------
# Knights and Knaves
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kk_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("kk") / "kk.jsonl"
    assert main(["kk", "--out", str(out), "--size", "20", "--seed", "3", "--no-progress"]) == 0
    return read_jsonl(out)


def test_kk_rows_fields_and_people(kk_rows):
    assert len(kk_rows) == 20
    people = Counter()
    for row in kk_rows:
        assert set(row) == FIELDS and row["datasource"] == "knights_knaves"
        label = json.loads(row["label"])
        n = label["n_people"]
        people[n] += 1
        assert len(label["names"]) == len(label["solution"]) == n
        assert f"You meet {n} inhabitants" in row["input"]
        for name in label["names"]:
            assert name in row["input"]
        # the label's solution text says the same as its truth values, person by person
        for name, truth in zip(label["names"], label["solution"]):
            role = label["knight"] if truth else label["knave"]
            assert f"{name} is a {role}" in label["answer"] or f"{name} is an {role}" in label["answer"]
        # the instruction the kk reward parses
        assert "<answer> </answer>" in row["input"] and "<think> reasoning process here </think>" in row["input"]
    # 20 puzzles cycle over 3, 4, 5, 6, 7 people: four of each
    assert people == {3: 4, 4: 4, 5: 4, 6: 4, 7: 4}
    assert len({row["input"] for row in kk_rows}) == 20


def test_kk_labels_work_with_the_reward(kk_rows, monkeypatch):
    monkeypatch.setenv("OPENRLHF_ADA_KK_REWARD", "logic_rl")
    func = reward_func("kk")
    for row in kk_rows:
        label = json.loads(row["label"])
        right = ", ".join(
            f"{name} is a {label['knight'] if truth else label['knave']}"
            for name, truth in zip(label["names"], label["solution"])
        )
        assert reward(func, row, f"<think>ok</think><answer>{right}</answer>") == 3
        first_flipped = label["knave"] if label["solution"][0] else label["knight"]
        wrong = right.replace(f"{label['names'][0]} is a {label['knight'] if label['solution'][0] else label['knave']}",
                              f"{label['names'][0]} is a {first_flipped}", 1)
        assert reward(func, row, f"<think>ok</think><answer>{wrong}</answer>") == -0.5


def test_kk_people_flags_and_bad_ranges(tmp_path, capsys):
    out = tmp_path / "two.jsonl"
    assert main(["kk", "--out", str(out), "--size", "6", "--min-people", "5", "--max-people", "5", "--no-progress"]) == 0
    assert {json.loads(r["label"])["n_people"] for r in read_jsonl(out)} == {5}
    assert main(["kk", "--out", str(tmp_path / "bad.jsonl"), "--min-people", "6", "--max-people", "4"]) == 2
    assert "--min-people" in capsys.readouterr().err
    assert not (tmp_path / "bad.jsonl").exists()


def test_kk_same_seed_same_file_other_seed_other_file(tmp_path):
    paths = [tmp_path / f"{i}.jsonl" for i in range(3)]
    for path, seed in zip(paths, ("7", "7", "8")):
        assert main(["kk", "--out", str(path), "--size", "10", "--seed", seed, "--no-progress"]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


def test_eval_split_is_disjoint(tmp_path):
    out = tmp_path / "kk.jsonl"
    assert main(["kk", "--out", str(out), "--size", "10", "--eval-size", "5", "--seed", "1", "--no-progress"]) == 0
    train, held_out = read_jsonl(out), read_jsonl(tmp_path / "kk.eval.jsonl")
    assert (len(train), len(held_out)) == (10, 5)
    assert not {r["input"] for r in train} & {r["input"] for r in held_out}


def test_eval_out_equal_to_out_is_refused_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "kk.jsonl"
    out.write_text("earlier rows\n")
    same = str(tmp_path / "." / "kk.jsonl")  # the same file under another spelling
    code = main(["kk", "--out", str(out), "--size", "4", "--eval-size", "2", "--eval-out", same, "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--eval-out" in err and "would replace the training rows" in err
    assert out.read_text() == "earlier rows\n"  # untouched: refused before anything was generated


def test_out_that_is_a_folder_is_a_clear_error_without_leftovers(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    assert main(["kk", "--out", str(folder), "--size", "4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and "Traceback" not in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["countdown", "--out", str(blocker / "cd.jsonl"), "--size", "4", "--no-progress"]) == 2
    assert "is a file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "file"] and not any(folder.iterdir())


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "rows.jsonl"

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepare_data.os, "replace", fail)
    with pytest.raises(prepare_data.PrepareDataError, match="No space left on device"):
        prepare_data.write_jsonl([{"input": "a"}], out)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------------
# Countdown
# ---------------------------------------------------------------------------------------------------------------------
def test_countdown_rows(tmp_path):
    out = tmp_path / "cd.jsonl"
    assert main(["countdown", "--out", str(out), "--size", "25", "--seed", "5", "--no-progress"]) == 0
    rows = read_jsonl(out)
    assert len(rows) == 25
    func = reward_func("countdown")
    for row in rows:
        assert set(row) == FIELDS and row["datasource"] == "countdown"
        label = json.loads(row["label"])
        assert 3 <= len(label["numbers"]) <= 4 and all(1 <= n <= 99 for n in label["numbers"])
        assert 10 <= label["target"] <= 100 and label["use_all"] is False
        assert f"equals {label['target']}" in row["input"] and "at most once" in row["input"]
        assert reward(func, row, f"<answer>{label['reference']}</answer>") == 1
        assert reward(func, row, f"<answer>{label['reference']} + 1</answer>") == 0  # 1 off (or 1 not given)
    assert len({row["label"] for row in rows}) == 25


def test_countdown_use_all_and_seeds(tmp_path):
    a, b, c = (tmp_path / f"{i}.jsonl" for i in range(3))
    for path, seed in ((a, "1"), (b, "1"), (c, "2")):
        assert main(["countdown", "--out", str(path), "--size", "8", "--seed", seed, "--use-all",
                     "--min-numbers", "4", "--max-numbers", "4", "--no-progress"]) == 0
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    for row in read_jsonl(a):
        label = json.loads(row["label"])
        assert label["use_all"] is True and len(label["numbers"]) == 4 and "exactly once" in row["input"]


# ---------------------------------------------------------------------------------------------------------------------
# Hugging Face datasets: offline / no network fails fast and clearly; local paths work without network
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to open a connection or resolve a name is recorded and refused; datasets.load_dataset too."""
    attempts = []

    def refuse(what):
        def _refuse(*args, **kwargs):
            attempts.append((what, args[:2]))
            raise OSError(f"network blocked by the test ({what})")

        return _refuse

    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect_ex"))
    return attempts


HUB_NAMES = ["open-r1/OpenR1-Math-220k", "hiyouga/geometry3k"]


@pytest.mark.parametrize("name", HUB_NAMES)
def test_hf_offline_fails_fast_without_touching_the_network(tmp_path, monkeypatch, capsys, no_network, name):
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("load_dataset must not be called"))
    out = tmp_path / "m.jsonl"
    start = time.monotonic()
    assert main(["hf", "--name", name, "--out", str(out)]) == 2
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err
    assert f"cannot download dataset '{name}'" in err and "HF_HUB_OFFLINE=1" in err
    assert "machine with network access" in err and "--name DIR" in err
    assert no_network == [] and not out.exists()


def test_hf_without_network_fails_fast(tmp_path, monkeypatch, capsys, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    start = time.monotonic()
    assert main(["hf", "--name", HUB_NAMES[0], "--out", str(tmp_path / "m.jsonl"), "--connect-timeout", "2"]) == 2
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err
    assert "no network connection to huggingface.co:443" in err and "--name DIR" in err
    assert [what for what, _ in no_network] == ["create_connection"]  # only the probe, nothing else


def test_hf_hanging_connection_is_cut_short(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: time.sleep(30))  # a DNS lookup that hangs
    start = time.monotonic()
    assert main(["hf", "--name", HUB_NAMES[0], "--out", str(tmp_path / "m.jsonl"), "--connect-timeout", "0.5"]) == 2
    assert time.monotonic() - start < 3
    assert "no answer within 0.5 s" in capsys.readouterr().err


def test_hf_offline_command_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "openrlhf_ada.cli.prepare_data", "hf", "--name", HUB_NAMES[1], "--out",
         str(tmp_path / "g.jsonl")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - start < 60
    assert "cannot download dataset 'hiyouga/geometry3k'" in proc.stderr and "--name DIR" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_hf_local_jsonl_math(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = tmp_path / "src.jsonl"
    source.write_text(
        "\n".join(json.dumps(r) for r in [
            {"problem": "What is 6 times 7?", "answer": "42"},
            {"problem": "Natalia sold 48 clips and then half as many. How many in all?", "answer": "48/2 = 24 #### 72"},
            {"problem": "Half of one?", "answer": "We find \\boxed{\\frac{1}{2}}."},
            {"problem": "   ", "answer": "1"},  # no problem: skipped
        ]) + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "math.jsonl"
    assert main(["hf", "--name", str(source), "--out", str(out), "--no-progress"]) == 0
    rows = read_jsonl(out)
    assert sorted(r["label"] for r in rows) == sorted(["42", "72", "\\frac{1}{2}"])
    func = reward_func("math")
    for row in rows:
        assert set(row) == FIELDS and row["datasource"] == "src"
        assert row["input"].endswith("put your final answer within \\boxed{}.")
        assert reward(func, row, f"So \\boxed{{{row['label']}}}") == 1
        assert reward(func, row, "So \\boxed{1000}") == 0
    assert no_network == []


def test_hf_local_vision_dataset(tmp_path, monkeypatch, no_network):
    import datasets
    from openrlhf.utils.vlm_utils import load_images
    from PIL import Image

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    image = Image.new("RGB", (7, 5), (255, 0, 0))
    folder = tmp_path / "geo"
    datasets.Dataset.from_dict({"images": [[image], [image]], "problem": ["<image>Find x.", "Find y."],
                                "answer": ["3", "4"]}).save_to_disk(str(folder))
    out = tmp_path / "geo.jsonl"
    assert main(["hf", "--name", str(folder), "--out", str(out), "--no-progress"]) == 0
    rows = read_jsonl(out)
    assert len(rows) == 2
    for row in rows:
        assert set(row) == FIELDS | {"images"}
        assert row["input"].count("<image>") == 1 and row["input"].startswith("<image>Find")
        assert row["images"][0].startswith("data:image/png;base64,")
        loaded = load_images(row["images"])  # upstream's own image loader
        assert len(loaded) == 1 and loaded[0].size == (7, 5)
    assert no_network == []


def test_hf_missing_column_is_a_clear_error(tmp_path, capsys):
    source = tmp_path / "odd.jsonl"
    source.write_text(json.dumps({"text": "hi", "answer": "1"}) + "\n", encoding="utf-8")
    assert main(["hf", "--name", str(source), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "no problem column" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------------
# --help
# ---------------------------------------------------------------------------------------------------------------------
def test_help_explains_every_flag(capsys):
    parser = build_parser()
    subparsers = parser._subparsers._group_actions[0]
    assert set(subparsers.choices) == {"kk", "countdown", "shapes", "hf"}
    for task, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help and action.help.strip(), (task, action.option_strings)
        with pytest.raises(SystemExit) as exit_info:
            main([task, "--help"])
        assert exit_info.value.code == 0
        text = capsys.readouterr().out
        for action in sub._actions:
            for option in action.option_strings:
                assert option in text, (task, option)
    assert prepare_data.INPUT_KEY == "input" and prepare_data.LABEL_KEY == "label"
