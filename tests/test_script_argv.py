"""What each launch script hands to `ray job submit`, word for word, against a committed record.

Every `examples/scripts/train_*.sh` is run under a stub `ray` (tests/test_scripts_and_docker.py's) in each of the
environments of CASES: the scripts' defaults, other sizes, other inputs, wandb, a CPU-mode job, extra launcher
arguments, other ways of invoking the script. The whole argv (`job submit --address=... --runtime-env-json=... --
python3 -m openrlhf_ada.cli.train_ppo_ray ...`) must equal the one in tests/data/script_argv.json, with the
repository's path written as `<ROOT>` there. The scripts' tests elsewhere check what the flags mean; this one
catches any change at all, e.g. in a refactor of the scripts that should change nothing.

A change to a script's arguments that is meant: rewrite the record with
    .venv/bin/python tests/test_script_argv.py --record
and check its diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from siblings import load

scripts_tests = load("test_scripts_and_docker.py")
ROOT: Path = scripts_tests.ROOT
TRAIN_SCRIPTS: list[Path] = scripts_tests.TRAIN_SCRIPTS
RECORD = Path(__file__).resolve().parent / "data" / "script_argv.json"
ROOT_MARK = "<ROOT>"

TOY_REWARD = "openrlhf_ada/rewards/toy.py"

# name -> (environment variables, extra arguments, how the script is invoked). The environment is only these
# variables (and PATH, HOME): nothing from the developer's shell reaches the script.
# Invocation: "bash" = `bash /abs/path/script.sh` from a scratch folder; "relative" = `bash examples/scripts/x.sh`
# from the repository root (as README shows); "exec" = the script run as a program, from a scratch folder.
CASES: dict[str, tuple[dict[str, str], list[str], str]] = {
    "defaults": ({}, [], "bash"),
    "defaults_relative": ({}, [], "relative"),
    "defaults_exec": ({}, [], "exec"),
    "gpus_4": ({"NUM_GPUS": "4"}, [], "bash"),
    "nodes_2": ({"NUM_NODES": "2"}, [], "bash"),
    "gpus_8_tp_2": ({"NUM_GPUS": "8", "VLLM_TP": "2"}, [], "bash"),
    "nodes_2_gpus_2_tp_2": ({"NUM_NODES": "2", "NUM_GPUS": "2", "VLLM_TP": "2"}, [], "bash"),
    "custom_inputs": ({"MODEL": "some-org/some model", "DATA": "/data/my prompts.jsonl",
                       "SAVE_PATH": "/shared/runs/my run", "REWARD_FILE": TOY_REWARD, "INPUT_KEY": "prompt",
                       "LABEL_KEY": "solution", "IMAGE_KEY": "pictures"}, [], "bash"),
    "run_name": ({"RUN_NAME": "my_run"}, [], "bash"),
    "repo_dir": ({"REPO_DIR": "/elsewhere/openrlhf-ada"}, [], "bash"),
    "ray_address": ({"RAY_ADDRESS": "http://10.1.2.3:8265"}, [], "bash"),
    "cpu_mode": ({"OPENRLHF_ADA_CPU": "1"}, [], "bash"),
    "wandb": ({"WANDB_TOKEN": "dummy-token"}, [], "bash"),
    "wandb_project_run": ({"WANDB_TOKEN": "dummy-token", "WANDB_PROJECT": "proj", "RUN_NAME": "r1"}, [], "bash"),
    "empty_values": ({"MODEL": "", "NUM_GPUS": "", "WANDB_TOKEN": "", "SAVE_PATH": "", "OPENRLHF_ADA_CPU": ""},
                     [], "bash"),
    "extra_args": ({}, ["--logger.tensorboard_dir", "/tmp/tb dir", "--adora.lam", "0.2", "--ada.max_rounds=6"],
                   "bash"),
    "everything": ({"MODEL": "m", "DATA": "d.jsonl", "REWARD_FILE": TOY_REWARD, "NUM_NODES": "2", "NUM_GPUS": "2",
                    "VLLM_TP": "1", "WANDB_TOKEN": "k", "WANDB_PROJECT": "p", "RUN_NAME": "n",
                    "SAVE_PATH": "/s", "RAY_ADDRESS": "http://h:1", "OPENRLHF_ADA_CPU": "1"},
                   ["--train.num_episodes", "1", ""], "relative"),
}


def submitted_argv(script: Path, tmp_path: Path, env_vars: dict[str, str], extra: list[str],
                   invocation: str) -> list[str]:
    """The argv `script` gives the stub `ray`, with the repository's path as ROOT_MARK."""
    argv_file = tmp_path / "ray_argv"
    argv_file.unlink(missing_ok=True)
    scripts_tests._stub(tmp_path / "bin", "ray", 'printf "%s\\0" "$@" > "${STUB_ARGV_FILE:?}"\n')
    env = scripts_tests._clean_env(tmp_path, STUB_ARGV_FILE=str(argv_file), **env_vars)
    if invocation == "relative":
        command, cwd = ["bash", script.relative_to(ROOT).as_posix()], ROOT
    elif invocation == "exec":
        command, cwd = [str(script)], tmp_path
    else:
        command, cwd = ["bash", str(script)], tmp_path
    proc = subprocess.run([*command, *extra], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{script.name} failed under the stub ray:\n{proc.stderr}"
    argv = argv_file.read_bytes().decode().split("\0")[:-1]
    roots = {str(ROOT), os.path.realpath(ROOT)}
    out = []
    for word in argv:
        for root in roots:
            word = word.replace(root, ROOT_MARK)
        out.append(word)
    return out


def record_all(tmp_path: Path) -> dict[str, dict[str, list[str]]]:
    return {script.name: {case: submitted_argv(script, tmp_path, *CASES[case]) for case in CASES}
            for script in TRAIN_SCRIPTS}


def load_record() -> dict[str, dict[str, list[str]]]:
    return json.loads(RECORD.read_text())


def test_the_record_covers_every_script_and_case():
    record = load_record()
    assert sorted(record) == sorted(p.name for p in TRAIN_SCRIPTS), "a script without a record, or a record of none"
    for script, cases in record.items():
        assert sorted(cases) == sorted(CASES), script


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("script", TRAIN_SCRIPTS, ids=lambda p: p.name)
def test_script_submits_the_recorded_argv(script, case, tmp_path):
    expected = load_record()[script.name][case]
    got = submitted_argv(script, tmp_path, *CASES[case])
    assert got[:2] == ["job", "submit"]
    if got != expected:
        changed = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g][:5]
        pytest.fail(f"{script.name} [{case}]: argv differs from tests/data/script_argv.json; first differing words "
                    f"(index, recorded, now): {changed}; lengths {len(expected)} / {len(got)}", pytrace=False)


def test_the_comparison_sees_a_changed_flag(tmp_path):
    """A copy of a script with one value changed does not match the script's record (the check can fail)."""
    source = TRAIN_SCRIPTS[0]
    expected = load_record()[source.name]["defaults"]
    copy_dir = tmp_path / "repo" / "examples" / "scripts"
    copy_dir.mkdir(parents=True)
    for path in source.parent.iterdir():  # the script with whatever it reads beside it
        if path.is_file():
            (copy_dir / path.name).write_bytes(path.read_bytes())
            (copy_dir / path.name).chmod(path.stat().st_mode)
    changed = copy_dir / source.name
    flag = "--train.seed 42"  # one value, in the script or in what it sources
    holder = next(p for p in [changed, *sorted(copy_dir.iterdir())] if flag in p.read_text())
    holder.write_text(holder.read_text().replace(flag, "--train.seed 43", 1))
    got = submitted_argv(changed, tmp_path, {"REPO_DIR": str(ROOT)}, [], "bash")
    assert len(got) == len(expected) and [(e, g) for e, g in zip(expected, got) if e != g] == [("42", "43")]


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(record_all(Path(tmp)), indent=1) + "\n")
    print(f"wrote {RECORD.relative_to(ROOT)}")
