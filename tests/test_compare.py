"""`python -m openrlhf_ada.cli.compare` on synthetic runs written here (JSONL files, and real wandb offline runs written
by wandb itself), with values checked by hand; and on a real WANDB_MODE=offline run of train_local, whose .wandb log
must hold what its metrics.jsonl holds."""

import json
import os

import pytest

from openrlhf_ada.analysis import compare
from openrlhf_ada.cli import compare as compare_cli

VIEW_FILES = ["compare.png", "reward_vs_step.png", "reward_vs_tokens.png", "samples_per_prompt.png",
              "resolved_share.png", "zero_adv_group_share.png", "eta.png"]


def write_run(folder, rows):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "metrics.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


# GRPO-like run with the standard keys, no resolved_share:
#   reward_mean 0.1, 0.5, 0.3 -> final 0.3 (step 3), best (max) 0.5 (step 2)
#   zero_adv_group_share 0.6, 0.2, 0.4 -> final 0.4 (3), best (min) 0.2 (2)
#   eta 0.4, 0.8, 0.6 -> final 0.6 (3), best 0.8 (2)
GRPO = [
    {"step": s, "time": 0.0, "reward_mean": r, "pass_rate": r, "generated_tokens": 100.0,
     "generated_tokens_total": 100.0 * s, "samples_per_prompt": 4.0, "zero_adv_group_share": z, "eta": e}
    for s, r, z, e in [(1, 0.1, 0.6, 0.4), (2, 0.5, 0.2, 0.8), (3, 0.3, 0.4, 0.6)]
]
# Reinforce-Ada run as the cluster launcher may log it, upstream's names (and wandb's train/ prefix on one row):
#   rollout/reward_mean 0.2, 0.7 -> reward_mean final 0.7, best 0.7 (2)
#   ada_nonzero_adv_group_share 0.75, 0.9 -> zero_adv_group_share 0.25, 0.1 (best 0.1 at step 2)
#   ada_tokens_generated 300, 500 -> generated_tokens_total (running sum) 300, 800
#   ada_samples_per_prompt_mean 12, 10 -> samples_per_prompt final 10, best (min) 10
#   ada_resolved_share 0.8, 0.9; ada_eta 0.3, 0.25 -> eta best 0.3 (step 1)
ADA = [
    {"step": 1, "rollout/reward_mean": 0.2, "ada_nonzero_adv_group_share": 0.75, "ada_tokens_generated": 300,
     "ada_samples_per_prompt_mean": 12, "ada_resolved_share": 0.8, "ada_eta": 0.3},
    {"step": 2, "train/rollout/reward_mean": 0.7, "train/ada_nonzero_adv_group_share": 0.9,
     "train/ada_tokens_generated": 500, "train/ada_samples_per_prompt_mean": 10, "train/ada_resolved_share": 0.9,
     "train/ada_eta": 0.25},
]


@pytest.fixture
def runs(tmp_path):
    grpo = write_run(tmp_path / "grpo_n4", GRPO)
    ada = write_run(tmp_path / "ada_balance", ADA)
    return tmp_path, os.path.dirname(grpo), ada  # a folder and a file


def test_table_final_and_best_by_hand(runs, capsys):
    tmp, grpo_dir, ada_file = runs
    out = tmp / "out"
    assert compare_cli.main([grpo_dir, ada_file, "--out", str(out)]) == 0
    table = (out / "compare.md").read_text()
    printed = capsys.readouterr().out
    expected = [
        "| reward_mean | higher | grpo_n4 | 3 | 0.3 (3) | 0.5 (2) |",
        "| zero_adv_group_share | lower | grpo_n4 | 3 | 0.4 (3) | 0.2 (2) |",
        "| eta | higher | grpo_n4 | 3 | 0.6 (3) | 0.8 (2) |",
        "| generated_tokens_total | - | grpo_n4 | 3 | 300 (3) | - |",
        "| samples_per_prompt | lower | grpo_n4 | 3 | 4 (3) | 4 (1) |",
        "| resolved_share | higher | grpo_n4 | 0 | - | - |",
        # default name of a metrics.jsonl file: its folder's name
        "| reward_mean | higher | ada_balance | 2 | 0.7 (2) | 0.7 (2) |",
        "| eta | higher | ada_balance | 2 | 0.25 (2) | 0.3 (1) |",
        "| resolved_share | higher | ada_balance | 2 | 0.9 (2) | 0.9 (2) |",
    ]
    for line in expected:
        assert line in table, line
        assert line in printed, line


def test_aliases_map_to_standard_keys(runs):
    _, _, ada_file = runs
    (run,) = compare.load_runs([ada_file])
    assert [r["step"] for r in run.rows] == [1, 2]
    assert [r["reward_mean"] for r in run.rows] == [0.2, 0.7]
    assert [r["zero_adv_group_share"] for r in run.rows] == pytest.approx([0.25, 0.1])
    assert [r["generated_tokens"] for r in run.rows] == [300, 500]
    assert [r["generated_tokens_total"] for r in run.rows] == [300, 800]  # running sum: not logged by this run
    assert [r["samples_per_prompt"] for r in run.rows] == [12, 10]
    assert [r["resolved_share"] for r in run.rows] == [0.8, 0.9]
    assert [r["eta"] for r in run.rows] == [0.3, 0.25]
    summary = compare.summarize([run])
    assert summary["zero_adv_group_share"]["ada_balance"]["best"] == pytest.approx(0.1)
    assert summary["zero_adv_group_share"]["ada_balance"]["best_step"] == 2
    assert "pass_rate" not in summary  # not logged under any known name


def test_pngs_written_and_resolved_share_only_for_ada_runs(runs):
    tmp, grpo_dir, ada_file = runs
    out = tmp / "plots"
    (grpo, ada) = compare.load_runs([grpo_dir, ada_file], names=["GRPO", "Ada"])
    drawn = compare.plot([grpo, ada], str(out))
    for name in VIEW_FILES:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    assert drawn["resolved_share.png"] == ["Ada"]  # the GRPO run has no resolved_share: absent from that plot
    for name in ("reward_vs_step.png", "reward_vs_tokens.png", "samples_per_prompt.png", "eta.png",
                 "zero_adv_group_share.png", "compare.png"):
        assert drawn[name] == ["GRPO", "Ada"], name


def test_names_flag_and_mismatch(runs, capsys):
    tmp, grpo_dir, ada_file = runs
    assert compare_cli.main([grpo_dir, ada_file, "--out", str(tmp / "o"), "--names", "a", "b"]) == 0
    assert "| reward_mean | higher | b | 2 | 0.7 (2) | 0.7 (2) |" in (tmp / "o" / "compare.md").read_text()
    assert compare_cli.main([grpo_dir, ada_file, "--out", str(tmp / "o"), "--names", "a"]) == 2
    assert "--names got 1 names for 2 runs" in capsys.readouterr().err


def test_missing_metrics_file_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "run_without_metrics"
    empty.mkdir()
    assert compare_cli.main([str(empty), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no metrics.jsonl" in err and str(empty) in err
    missing = tmp_path / "nope" / "metrics.jsonl"
    assert compare_cli.main([str(missing), "--out", str(tmp_path / "o")]) == 2
    assert str(missing) in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written when a run cannot be read


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"step": 2, "reward_mean": 0.5', "metrics.jsonl:2"),  # cut mid-write
        ('{"reward_mean": 0.5}', "line 2: no numeric 'step'"),
        ("[1, 2]", "line 2: a JSON list"),
        ('{"step": 2, "reward_mean": "high"}', "step 2, 'reward_mean': expected a number"),
    ],
)
def test_malformed_row_names_the_file(tmp_path, capsys, line, message):
    path = write_run(tmp_path / "bad", GRPO[:1])
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    assert compare_cli.main([path, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert path in err and message in err, err


def test_wandb_runs_fail_fast_and_clearly_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(compare.CompareError, match="WANDB_MODE=offline"):
        compare.load_runs(["wandb:me/proj/abc123"])
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    with pytest.raises(compare.CompareError, match="no wandb credentials"):
        compare.load_runs(["wandb:me/proj/abc123"])
    with pytest.raises(compare.CompareError, match="wandb:ENTITY/PROJECT/RUN_ID"):
        compare.load_runs(["wandb:me/abc123"])


def test_help_explains_every_flag(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens too: one line per flag's help
    with pytest.raises(SystemExit) as e:
        compare_cli.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in ("RUN", "--out", "--names", "--smooth", "--wandb-timeout", "wandb:ENTITY/PROJECT/RUN_ID",
                 "metrics.jsonl", "wandb/offline-run-*", "WANDB_MODE=offline"):
        assert flag in text


def test_upstream_only_rows_give_generated_tokens(tmp_path):
    """A GRPO run logged with upstream's names only: tokens = response_length_mean x num_samples (what the cluster
    trainer computes), summed into generated_tokens_total; no resolved_share, no eta."""
    path = write_run(tmp_path / "grpo_upstream", [
        {"step": 1, "rollout/reward_mean": 0.25, "rollout/response_length_mean": 100.0, "rollout/num_samples": 8},
        {"step": 2, "rollout/reward_mean": 0.5, "rollout/response_length_mean": 50.0, "rollout/num_samples": 8},
    ])
    (run,) = compare.load_runs([path])
    assert [r["generated_tokens"] for r in run.rows] == [800.0, 400.0]
    assert [r["generated_tokens_total"] for r in run.rows] == [800.0, 1200.0]
    assert not run.has("resolved_share") and not run.has("eta")


# -- wandb runs on this machine (WANDB_MODE=offline) -----------------------------------------------------------------
# Two real offline runs, written by wandb itself in a fresh interpreter, logged the way train_local logs
# (`train/<key>`, step=global_step). Expected rows, by hand:
#   hand_a step 1: reward_mean 0.25, generated_tokens 100 (total 100), samples_per_prompt 4, eta NaN -> absent
#   hand_a step 2: reward_mean 0.75, generated_tokens 300 (total 400), samples_per_prompt 6, eta 0.5,
#                  ada/resolved_share 0.5 -> resolved_share 0.5
#   hand_b: reward_mean 0.125, 0.375, 0.625 at steps 1, 2, 3
WRITE_OFFLINE_RUNS = r'''
import sys
import wandb

out = sys.argv[1]
a = wandb.init(project="compare-test", name="hand_a", id="handaaaa", dir=out + "/a")
a.log({"train/reward_mean": 0.25, "train/generated_tokens": 100, "train/samples_per_prompt": 4,
       "train/eta": float("nan")}, step=1)
a.log({"train/reward_mean": 0.75, "train/generated_tokens": 300, "train/samples_per_prompt": 6, "train/eta": 0.5,
       "train/ada/resolved_share": 0.5}, step=2)
a.finish()
b = wandb.init(project="compare-test", name="hand_b", id="handbbbb", dir=out + "/b")
for step, reward in [(1, 0.125), (2, 0.375), (3, 0.625)]:
    b.log({"train/reward_mean": reward}, step=step)
b.finish()
'''
HAND_A = [
    {"step": 1, "reward_mean": 0.25, "generated_tokens": 100, "generated_tokens_total": 100, "samples_per_prompt": 4},
    {"step": 2, "reward_mean": 0.75, "generated_tokens": 300, "generated_tokens_total": 400, "samples_per_prompt": 6,
     "eta": 0.5, "resolved_share": 0.5},
]


def _offline_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return {**env, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


@pytest.fixture(scope="module")
def offline_runs(tmp_path_factory):
    """{"a": folder given to wandb.init as dir (holds wandb/offline-run-*-handaaaa), "b": the same for hand_b}."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("offline_runs")
    proc = subprocess.run([sys.executable, "-c", WRITE_OFFLINE_RUNS, str(out)], env=_offline_env(), cwd=out,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"a": out / "a", "b": out / "b"}


def _run_folder(root):
    (folder,) = (root / "wandb").glob("offline-run-*")
    return folder


def test_offline_run_rows_by_hand_from_every_kind_of_path(offline_runs):
    root = offline_runs["a"]
    folder = _run_folder(root)
    (log,) = folder.glob("run-*.wandb")
    for source in (root, root / "wandb", folder, log):  # dir of wandb.init, wandb folder, run folder, the log
        (run,) = compare.load_runs([str(source)])
        assert run.rows == HAND_A, source
        assert run.name == "hand_a" and run.notes == [], source


def test_offline_run_in_the_table(offline_runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert compare_cli.main([str(_run_folder(offline_runs["a"])), str(offline_runs["b"]), "--out", str(out)]) == 0
    table = (out / "compare.md").read_text()
    for line in ["| reward_mean | higher | hand_a | 2 | 0.75 (2) | 0.75 (2) |",
                 "| eta | higher | hand_a | 1 | 0.5 (2) | 0.5 (2) |",
                 "| reward_mean | higher | hand_b | 3 | 0.625 (3) | 0.625 (3) |"]:
        assert line in table, line


def test_metrics_jsonl_wins_over_wandb_folder(offline_runs, tmp_path):
    """A trainer's output folder holds both; its metrics.jsonl is read (the trainer's own record of every step)."""
    import shutil

    run_dir = tmp_path / "train_out"
    shutil.copytree(offline_runs["a"], run_dir)
    write_run(run_dir, GRPO)
    (run,) = compare.load_runs([str(run_dir)])
    assert [r["reward_mean"] for r in run.rows] == [0.1, 0.5, 0.3]  # GRPO's, not hand_a's
    (run,) = compare.load_runs([str(run_dir / "wandb")])
    assert run.rows == HAND_A


def test_latest_of_several_runs_with_a_note_and_a_tie_is_an_error(offline_runs, tmp_path):
    import shutil

    wandb_dir = tmp_path / "wandb"
    # the older run sorts last by name and by id (an online run's folder, run-*): only its start time says older
    shutil.copytree(_run_folder(offline_runs["a"]), wandb_dir / "run-20250101_000000-handzzzz")
    shutil.copytree(_run_folder(offline_runs["b"]), wandb_dir / "offline-run-20250102_000000-handbbbb")
    (run,) = compare.load_runs([str(tmp_path)])
    assert run.name == "hand_b" and [r["reward_mean"] for r in run.rows] == [0.125, 0.375, 0.625]
    (note,) = run.notes
    assert "latest of 2 wandb runs" in note and "run-20250101_000000-handzzzz" in note
    shutil.copytree(_run_folder(offline_runs["a"]), wandb_dir / "offline-run-20250102_000000-handcccc")
    with pytest.raises(compare.CompareError, match="ambiguous") as e:
        compare.load_runs([str(wandb_dir)])
    assert "handbbbb" in str(e.value) and "handcccc" in str(e.value) and str(wandb_dir) in str(e.value)


def test_offline_run_errors_name_the_path_and_the_fix(offline_runs, tmp_path, capsys):
    import shutil

    nothing = tmp_path / "nothing"
    nothing.mkdir()
    assert compare_cli.main([str(nothing), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{nothing}: no run in this folder" in err and "wandb/offline-run-*" in err

    no_log = tmp_path / "wandb" / "offline-run-20250101_000000-gone1234"
    shutil.copytree(_run_folder(offline_runs["a"]), no_log)
    for log in no_log.glob("run-*.wandb"):
        log.unlink()
    with pytest.raises(compare.CompareError, match="without its run-\\*.wandb log") as e:
        compare.load_runs([str(no_log)])
    assert str(no_log) in str(e.value)

    empty = tmp_path / "run-empty.wandb"
    empty.write_bytes(b"")
    with pytest.raises(compare.CompareError, match="empty") as e:
        compare.load_runs([str(empty)])
    assert str(empty) in str(e.value)

    foreign = tmp_path / "run-foreign.wandb"
    foreign.write_text('{"step": 1}\n')
    with pytest.raises(compare.CompareError, match="not a wandb transaction log") as e:
        compare.load_runs([str(foreign)])
    assert str(foreign) in str(e.value)
    assert not (tmp_path / "o").exists()


def test_corrupt_log_is_an_error_and_a_cut_one_reads_its_steps_with_a_note(offline_runs, tmp_path):
    (log,) = _run_folder(offline_runs["b"]).glob("run-*.wandb")
    data = log.read_bytes()
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF  # inside some record: its checksum no longer matches
    corrupt = tmp_path / "run-corrupt.wandb"
    corrupt.write_bytes(bytes(damaged))
    with pytest.raises(compare.CompareError, match="corrupt") as e:
        compare.load_runs([str(corrupt)])
    assert str(corrupt) in str(e.value) and "metrics.jsonl" in str(e.value)

    cut = tmp_path / "run-cut.wandb"
    cut.write_bytes(data[:-40])  # the exit record (and what follows it) lost, as when a run is killed
    (run,) = compare.load_runs([str(cut)])
    expected = [{"step": s, "reward_mean": r} for s, r in [(1, 0.125), (2, 0.375), (3, 0.625)]]
    assert run.rows and run.rows == expected[:len(run.rows)]
    (note,) = run.notes
    assert "no exit record" in note and str(cut) in note


def test_wandb_source_offline_points_to_the_local_copy(offline_runs, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(offline_runs["a"])
    with pytest.raises(compare.CompareError, match="WANDB_MODE=offline") as e:
        compare.load_runs(["wandb:me/compare-test/handaaaa"])
    assert "this machine has it locally: pass " + os.path.join("wandb", _run_folder(offline_runs["a"]).name) \
        in str(e.value)


TRAIN_LOCAL_REWARD = '''
import torch

def reward_func(queries, prompts, labels):
    response = queries[0][len(prompts[0]):]
    t = torch.tensor([1.0 if response[:1].isdigit() else 0.0])
    return {"rewards": t, "scores": t, "extra_logs": {}}
'''


@pytest.mark.slow
def test_offline_run_written_by_train_local_equals_its_metrics_jsonl(tmp_path, tiny_llama_path):
    """A real WANDB_MODE=offline run of train_local (2 steps, tiny llama, HF engine, Ray): every value compare reads
    from its .wandb log equals the run's metrics.jsonl, written independently by the trainer's MetricsWriter."""
    import subprocess
    import sys

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"input": f"Say a number {i}:", "label": "d"}) + "\n" for i in range(16)))
    (tmp_path / "reward.py").write_text(TRAIN_LOCAL_REWARD)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "openrlhf_ada.cli.train_local", "--actor.model_name_or_path", tiny_llama_path,
            "--data.prompt_dataset", str(data), "--data.label_key", "label", "--reward.remote_url",
            str(tmp_path / "reward.py"), "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt",
            "4", "--rollout.batch_size", "4", "--rollout.max_new_tokens", "3", "--data.max_len", "64",
            "--actor.adam.lr", "1e-2", "--local.engine", "hf", "--local.max_steps", "2", "--local.output_dir",
            str(out), "--ckpt.save_steps", "-1", "--ada.enable", "--ada.baseline", "group", "--ada.round_size", "4",
            "--ada.max_rounds", "2", "--ada.selection", "random"]
    proc = subprocess.run(argv, env=_offline_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jsonl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in jsonl] == [1, 2]
    (folder,) = (out / "wandb").glob("offline-run-*")

    # every key the trainer logged, as wandb stored it (train/ prefix), against the JSONL row of the same step
    (log,) = folder.glob("run-*.wandb")
    got = compare.read_wandb_history(str(log))
    assert got.finished
    assert [row["_step"] for row in got.history] == [1, 2]
    for row, line in zip(got.history, jsonl):
        logged = {k[len("train/"):]: v for k, v in row.items() if k.startswith("train/")}
        assert logged == {k: v for k, v in line.items() if k not in ("step", "time")}

    # what compare reads through the wandb folder (and the output folder's wandb/): the JSONL's standard keys
    expected = [{"step": line["step"], **{k: line[k] for k in compare.METRICS if line.get(k) is not None}}
                for line in jsonl]
    assert len(expected[0]) == 1 + len(compare.METRICS)  # train_local logs every standard key and resolved_share
    for source in (out / "wandb", folder):
        (run,) = compare.load_runs([str(source)])
        assert run.rows == expected and run.notes == []
    assert compare_cli.main([str(out), str(out / "wandb"), "--names", "jsonl", "wandb", "--out",
                         str(tmp_path / "cmp")]) == 0
