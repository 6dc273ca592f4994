"""Data mistakes are found before training with file and line; train_local's flag
mistakes name the flags; an output folder holding an earlier run is not overwritten without being asked."""

import json

import pytest

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.data.checks import DataCheckError, check_prompt_file
from openrlhf_ada.trainer.checkpoint_dir import write_checkpoint


def jsonl(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"".join(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode() for r in rows))
    return str(path)


GOOD = {"input": "What is 1 + 1?", "label": "2"}


@pytest.mark.parametrize(
    "bad_row,words",
    [
        (b'{"input": "caf\xe9 au lait", "label": "x"}\n', ["data.jsonl:3:", "not UTF-8", "0xe9", "column 15"]),
        ({"input": None, "label": "2"}, ["data.jsonl:3:", "--data.input_key 'input'", "is null"]),
        ({"input": 42, "label": "2"}, ["data.jsonl:3:", "is a number (42), not text"]),
        ({"input": "What?", "label": None}, ["data.jsonl:3:", "--data.label_key 'label'", "is null"]),
        ({"input": [{"role": "user", "content": "hi"}], "label": "2"}, ["data.jsonl:3:",
                                                                        "needs --data.apply_chat_template"]),
    ],
)
def test_row_problems_name_file_and_line(tmp_path, bad_row, words):
    path = jsonl(tmp_path, [GOOD, GOOD, bad_row, GOOD])
    with pytest.raises(DataCheckError) as e:
        check_prompt_file(path, "input", "label")
    for word in words:
        assert word in str(e.value), str(e.value)


def test_chat_messages_are_text_with_the_chat_template(tmp_path):
    path = jsonl(tmp_path, [GOOD, {"input": [{"role": "user", "content": "hi"}], "label": "2"}])
    assert check_prompt_file(path, "input", "label", chat_template=True).rows == 2
    assert check_prompt_file(jsonl(tmp_path, [{"input": "a", "label": 3}], "n.jsonl"), "input", "label").rows == 1
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps([GOOD, {"input": "b", "label": None}]))
    with pytest.raises(DataCheckError, match=r"rows.json, row 2: the label"):
        check_prompt_file(str(listed), "input", "label")


def local_argv(tmp_path, data, *extra):
    reward = tmp_path / "reward.py"
    reward.write_text("def reward_func(queries, prompts, labels):\n    return None\n")
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)  # a folder is all that parsing checks (the hub is offline in tests)
    return ["--actor.model_name_or_path", str(model), "--data.prompt_dataset", data, "--data.label_key", "label",
            "--reward.remote_url", str(reward), "--algo.advantage.estimator", "group_norm",
            "--rollout.n_samples_per_prompt", "2", "--local.output_dir", str(tmp_path / "run"), *extra]


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        parse_local_args(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_train_local_refuses_data_and_flag_mistakes_at_parse_time(tmp_path, capsys):
    data = jsonl(tmp_path, [GOOD, {"input": 7, "label": "x"}])
    err = refused(local_argv(tmp_path, data), capsys)
    assert f"{data}:2: the input" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    good = jsonl(tmp_path, [GOOD], "good.jsonl")
    err = refused(local_argv(tmp_path, good, "--algo.advantage.estimator", "gae"), capsys)
    assert "gae" in err and "needs a critic" in err and "--algo.advantage.estimator group_norm" in err
    err = refused(local_argv(tmp_path, good, "--rollout.n_samples_per_prompt", "1"), capsys)
    assert "--algo.advantage.estimator group_norm" in err and "--rollout.n_samples_per_prompt >= 2" in err
    err = refused(local_argv(tmp_path, good, "--data.max_len", "32", "--rollout.max_new_tokens", "64"), capsys)
    assert "--data.max_len=32" in err and "--rollout.max_new_tokens=64" in err
    err = refused(local_argv(tmp_path, good, "--rollout.batch_size", "0"), capsys)
    assert "--rollout.batch_size=0" in err
    # train_local's default micro-batch is 8 samples: 2 x 2 samples make 0 micro-batches for its 1 process
    err = refused(local_argv(tmp_path, good, "--rollout.batch_size", "2"), capsys)
    assert "= 4 samples per step make 0 micro-batches of --rollout.micro_batch_size 8" in err


def test_an_earlier_run_is_not_overwritten_without_being_asked(tmp_path, capsys):
    data = jsonl(tmp_path, [GOOD])
    argv = local_argv(tmp_path, data)
    assert parse_local_args(argv).local.output_dir == str(tmp_path / "run")  # a fresh folder is fine
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    err = refused(argv, capsys)
    assert "metrics.jsonl with 3 rows" in err and "--ckpt.load_enable" in err and "--local.overwrite" in err
    (run / "metrics.jsonl").write_text("")
    write_checkpoint(str(run / "ckpt"), lambda d: open(f"{d}/trainer_state.json", "w").write("{}"))
    err = refused(argv, capsys)
    assert f"a checkpoint in {run / 'ckpt' / 'latest'}" in err
    assert parse_local_args(argv + ["--ckpt.load_enable"]).ckpt.load_enable
    assert parse_local_args(argv + ["--local.overwrite"]).local.overwrite
    err = refused(argv + ["--local.overwrite", "--ckpt.load_enable"], capsys)
    assert "pass one of them" in err
