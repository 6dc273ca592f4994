"""`python -m openrlhf_ada.cli.compare` on synthetic runs written here, with values checked by hand."""

import json
import os

import pytest

from openrlhf_ada.cli import compare

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
    assert compare.main([grpo_dir, ada_file, "--out", str(out)]) == 0
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
    assert compare.main([grpo_dir, ada_file, "--out", str(tmp / "o"), "--names", "a", "b"]) == 0
    assert "| reward_mean | higher | b | 2 | 0.7 (2) | 0.7 (2) |" in (tmp / "o" / "compare.md").read_text()
    assert compare.main([grpo_dir, ada_file, "--out", str(tmp / "o"), "--names", "a"]) == 2
    assert "--names got 1 names for 2 runs" in capsys.readouterr().err


def test_missing_metrics_file_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "run_without_metrics"
    empty.mkdir()
    assert compare.main([str(empty), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no metrics.jsonl" in err and str(empty) in err
    missing = tmp_path / "nope" / "metrics.jsonl"
    assert compare.main([str(missing), "--out", str(tmp_path / "o")]) == 2
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
    assert compare.main([path, "--out", str(tmp_path / "o")]) == 2
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


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as e:
        compare.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in ("RUN", "--out", "--names", "--smooth", "--wandb-timeout", "wandb:ENTITY/PROJECT/RUN_ID",
                 "metrics.jsonl"):
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
