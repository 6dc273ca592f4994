"""`compare` for settings: runs grouped by setting, paired by seed, with 95% intervals; on hand-made runs whose means,
intervals and paired differences are computed by hand below (t quantiles from a printed t table)."""

import json
import math
import os

import numpy as np
import pytest

from openrlhf_ada.analysis import compare, compare_settings, seed_stats
from openrlhf_ada.cli import compare as compare_cli

T975 = {1: 12.706205, 2: 4.302653, 5: 2.570582, 10: 2.228139}  # t(0.975, df), from a t table


def write_run(folder, rows):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(folder)


# Two settings, seeds 1, 2, 3. Held-out accuracy at steps 0, 1, 2; base spends 100 tokens a step, ada 150.
#   base: eval/accuracy 0.3, 0.4, END_BASE[s] at 0, 100, 200 tokens
#   ada:  eval/accuracy 0.3, 0.45, END_ADA[s] at 0, 150, 300 tokens
#   end differences ada - base: 0.1, 0.2, 0.3 -> mean 0.2, sd 0.1, half-width 4.302653 x 0.1 / sqrt(3)
#   reward_mean at step 2: base 0.30, 0.32, 0.34; ada 0.40, 0.44, 0.48 -> differences 0.10, 0.12, 0.14,
#   mean 0.12, sd 0.02: half-width 4.302653 x 0.02 / sqrt(3) = 0.049683, the interval excludes zero
END_BASE = {1: 0.5, 2: 0.4, 3: 0.6}  # mean 0.5, sd 0.1
END_ADA = {1: 0.6, 2: 0.6, 3: 0.9}  # mean 0.7, sd sqrt(0.03)
REWARD_BASE = {1: 0.30, 2: 0.32, 3: 0.34}
REWARD_ADA = {1: 0.40, 2: 0.44, 3: 0.48}


def hand_rows(tokens_per_step, accuracy_at_step_1, end_accuracy, end_reward):
    """Held-out accuracy at steps 0, 1, 2 (0.3 before training) and reward_mean at steps 1, 2 (0.2 first)."""
    return [{"step": 0, "generated_tokens_total": 0.0, "eval/accuracy": 0.3}] + [
        {"step": step, "generated_tokens": tokens_per_step, "generated_tokens_total": tokens_per_step * step,
         "reward_mean": reward, "eval/accuracy": accuracy}
        for step, reward, accuracy in [(1, 0.2, accuracy_at_step_1), (2, end_reward, end_accuracy)]]


def base_rows(seed):
    return hand_rows(100.0, 0.4, END_BASE[seed], REWARD_BASE[seed])


def ada_rows(seed):
    return hand_rows(150.0, 0.45, END_ADA[seed], REWARD_ADA[seed])


@pytest.fixture
def settings_runs(tmp_path):
    """{"base": [3 run folders], "ada": [3 run folders]}, named <setting>_seed<s>."""
    return {"base": [write_run(tmp_path / f"base_seed{s}", base_rows(s)) for s in (1, 2, 3)],
            "ada": [write_run(tmp_path / f"ada_seed{s}", ada_rows(s)) for s in (1, 2, 3)]}


def run_settings(argv, out):
    assert compare_cli.main([*argv, "--out", str(out), "--metrics", "eval/accuracy,reward_mean",
                         "--grid-points", "3"]) == 0
    return json.loads((out / "settings.json").read_text())


def point(result, metric, at):
    entry = next(e for e in result["metrics"] if e["metric"] == metric)
    return next(p for p in entry["points"] if p["at"] == at)


# -- the t quantile and intervals, by hand -----------------------------------------------------------------------------
@pytest.mark.parametrize("df", sorted(T975))
def test_t_quantile_matches_the_t_table(df):
    assert seed_stats.t_quantile(0.975, df) == pytest.approx(T975[df], abs=1e-6)
    assert seed_stats.t_quantile(0.025, df) == pytest.approx(-T975[df], abs=1e-6)


def test_t_interval_by_hand():
    got = seed_stats.mean_interval([0.1, 0.2, 0.3])
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert got.mean == pytest.approx(0.2) and got.n == 3 and got.method == "t"
    assert (got.low, got.high) == pytest.approx((0.2 - half, 0.2 + half), abs=1e-6)
    assert got.excludes_zero is False
    one = seed_stats.mean_interval([0.7])
    assert one.mean == 0.7 and one.low is None and one.high is None and one.excludes_zero is None


def test_bootstrap_properties():
    boot = seed_stats.IntervalMethod("bootstrap", resamples=4000, seed=7)
    values = [0.05, 0.1, 0.2, 0.25, 0.4]
    got = seed_stats.mean_interval(values, boot)
    assert got.low < np.mean(values) < got.high  # contains the mean
    assert min(values) <= got.low and got.high <= max(values)  # a mean of resampled values lies among them
    assert seed_stats.mean_interval(values, boot) == got  # the same seed gives the same interval
    other = seed_stats.mean_interval(values, seed_stats.IntervalMethod("bootstrap", resamples=4000, seed=8))
    assert (other.low, other.high) != (got.low, got.high)
    more = seed_stats.mean_interval(values * 4, boot)  # the same spread over four times the seeds: narrower
    assert more.high - more.low < 0.75 * (got.high - got.low)
    assert seed_stats.mean_interval([0.3], boot).low is None  # one seed: no interval


def test_interpolation_onto_the_common_grid_by_hand():
    curves = [([0, 100, 200], [0.3, 0.4, 0.5]), ([0, 150, 300], [0.3, 0.45, 0.6])]
    assert seed_stats.common_range(curves) == (0, 200)
    xs = seed_stats.grid(0, 200, 3)
    assert xs == [0, 100, 200]
    # the second curve at 100: 0.3 + 0.15 x 100/150 = 0.4; at 200: 0.45 + 0.15 x 50/150 = 0.5
    assert seed_stats.interpolate(*curves[1], xs) == pytest.approx([0.3, 0.4, 0.5])
    # trapezoid mean over 0..200 of 0.3, 0.4, 0.5: (100 x 0.35 + 100 x 0.45) / 200 = 0.4
    assert seed_stats.curve_mean(xs, [0.3, 0.4, 0.5]) == pytest.approx(0.4)
    assert seed_stats.common_range([([0, 10], [1, 1]), ([20, 30], [1, 1])]) is None  # no shared range
    assert seed_stats.interpolate([0, 5, 5, 10], [0, 1, 2, 3], [5, 7.5]) == pytest.approx([2, 2.5])  # last of a tie


# -- the command on hand-made runs -----------------------------------------------------------------------------------
def test_settings_by_name_pattern_means_intervals_and_paired_differences(settings_runs, tmp_path, capsys):
    runs = settings_runs["base"] + settings_runs["ada"]
    result = run_settings([*runs, "--name-pattern", r"(.*)_seed\d+"], tmp_path / "out")
    assert result["reference"] == "base" and result["interval"] == "t" and result["pairing"] == "by seed"
    assert [(s["name"], s["seeds"]) for s in result["settings"]] == [("base", [1, 2, 3]), ("ada", [1, 2, 3])]

    end = point(result, "eval/accuracy", "end")
    base, ada = end["settings"]["base"], end["settings"]["ada"]
    half_base = 4.302653 * 0.1 / math.sqrt(3)
    assert base["mean"] == pytest.approx(0.5)
    assert (base["low"], base["high"]) == pytest.approx((0.5 - half_base, 0.5 + half_base), abs=1e-6)
    half_ada = 4.302653 * math.sqrt(0.03) / math.sqrt(3)
    assert ada["mean"] == pytest.approx(0.7)
    assert (ada["low"], ada["high"]) == pytest.approx((0.7 - half_ada, 0.7 + half_ada), abs=1e-6)
    diff = end["differences"]["ada"]
    assert diff["values"] == pytest.approx({"1": 0.1, "2": 0.2, "3": 0.3})
    assert diff["mean"] == pytest.approx(0.2) and diff["seeds"] == [1, 2, 3]
    assert (diff["low"], diff["high"]) == pytest.approx((0.2 - half_base, 0.2 + half_base), abs=1e-6)
    assert diff["excludes_zero"] is False
    assert "base" not in end["differences"]  # the reference itself

    reward = point(result, "reward_mean", "end")["differences"]["ada"]
    half = 4.302653 * 0.02 / math.sqrt(3)
    assert reward["mean"] == pytest.approx(0.12)
    assert (reward["low"], reward["high"]) == pytest.approx((0.12 - half, 0.12 + half), abs=1e-6)
    assert reward["excludes_zero"] is True

    # at equal tokens: every run reaches 200; ada at 200 = 0.45 + (end - 0.45) / 3 = 0.5, 0.5, 0.6; base = its end
    tokens = point(result, "eval/accuracy", "tokens")
    assert tokens["settings"]["ada"]["values"] == pytest.approx({"1": 0.5, "2": 0.5, "3": 0.6})
    diffs = [0.0, 0.1, 0.0]  # mean 1/30, sd sqrt(1/300)
    assert tokens["differences"]["ada"]["mean"] == pytest.approx(1 / 30)
    half = 4.302653 * math.sqrt(1 / 300) / math.sqrt(3)
    assert tokens["differences"]["ada"]["high"] == pytest.approx(np.mean(diffs) + half, abs=1e-6)
    entry = next(e for e in result["metrics"] if e["metric"] == "eval/accuracy")
    assert entry["tokens_range"] == [0.0, 200.0] and entry["band"]["tokens"] == [0.0, 100.0, 200.0]
    # the band of ada at 100 tokens: every seed is at 0.4 there, so mean 0.4 and a zero-width interval
    band = entry["band"]["settings"]["ada"]
    assert band["mean"][1] == pytest.approx(0.4) and band["low"][1] == pytest.approx(0.4)
    # curve mean of base seed 1 over 0..200 (0.3, 0.4, 0.5): 0.4, as by hand above
    assert point(result, "eval/accuracy", "curve")["settings"]["base"]["values"]["1"] == pytest.approx(0.4)

    printed = capsys.readouterr().out
    assert "95% Student t interval over seeds" in printed and "paired by seed" in printed
    md = (tmp_path / "out" / "settings.md").read_text()
    # 0.7 +- 0.430265, 0.2 +- 0.248414, 0.12 +- 0.049683, 0.5 +- 0.248414, to 4 significant digits
    assert "| eval/accuracy | end of run | ada | 3 | 0.7 | [0.2697, 1.13] | 0.2 (3) | [-0.04841, 0.4484] | no |" in md
    assert "| reward_mean | end of run | ada | 3 | 0.44 |" in md and "| 0.12 (3) | [0.07032, 0.1697] | yes |" in md
    assert "| eval/accuracy | end of run | base | 3 | 0.5 | [0.2516, 0.7484] | reference |" in md
    csv_text = (tmp_path / "out" / "settings.csv").read_text().splitlines()
    assert csv_text[0].startswith("metric,at,point,setting,seeds,mean,low,high,reference,difference")
    assert len(csv_text) == 1 + 2 * 3 * 2  # 2 metrics x 3 points x 2 settings
    for name in ("settings.png", "settings_eval_accuracy.png", "settings_reward_mean.png", "compare.png"):
        data = (tmp_path / "out" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name


def test_pairing_by_seed_with_runs_out_of_order(settings_runs, tmp_path):
    b, a = settings_runs["base"], settings_runs["ada"]
    shuffled = [a[2], b[1], a[0], b[0], b[2], a[1]]
    result = run_settings([*shuffled, "--name-pattern", r"(.*)_seed\d+", "--reference", "base"], tmp_path / "out")
    diff = point(result, "eval/accuracy", "end")["differences"]["ada"]
    assert diff["values"] == pytest.approx({"1": 0.1, "2": 0.2, "3": 0.3}) and diff["mean"] == pytest.approx(0.2)
    # the same runs as explicit settings, each listed out of seed order
    result = run_settings(["--setting", f"ada={a[1]},{a[2]},{a[0]}", "--setting", f"base={b[2]},{b[0]},{b[1]}",
                           "--reference", "base"], tmp_path / "out2")
    assert [s["name"] for s in result["settings"]] == ["ada", "base"] and result["reference"] == "base"
    diff = point(result, "eval/accuracy", "end")["differences"]["ada"]
    assert diff["values"] == pytest.approx({"1": 0.1, "2": 0.2, "3": 0.3})


def test_bootstrap_through_the_command_is_named_and_deterministic(settings_runs, tmp_path, capsys):
    runs = settings_runs["base"] + settings_runs["ada"]
    flags = [*runs, "--name-pattern", r"(.*)_seed\d+", "--interval", "bootstrap", "--resamples", "2000",
             "--bootstrap-seed", "3"]
    first = run_settings(flags, tmp_path / "one")
    assert "percentile bootstrap over seeds (2000 resamples, generator seed 3)" in capsys.readouterr().out
    again = run_settings(flags, tmp_path / "two")
    assert first["metrics"] == again["metrics"]
    diff = point(first, "eval/accuracy", "end")["differences"]["ada"]
    # percentiles of means of resampled differences 0.1, 0.2, 0.3: within their range, around their mean
    assert 0.1 - 1e-9 <= diff["low"] < 0.2 < diff["high"] <= 0.3 + 1e-9


def test_one_seed_says_no_interval(tmp_path, capsys):
    runs = [write_run(tmp_path / "base_seed1", base_rows(1)), write_run(tmp_path / "ada_seed1", ada_rows(1))]
    result = run_settings([*runs, "--name-pattern", r"(.*)_seed\d+"], tmp_path / "out")
    diff = point(result, "eval/accuracy", "end")["differences"]["ada"]
    assert diff["mean"] == pytest.approx(0.1) and diff["low"] is None and diff["excludes_zero"] is None
    assert "no interval (1 seed)" in capsys.readouterr().out


def test_unpaired_seeds_are_left_out_with_a_note(settings_runs, tmp_path, capsys):
    runs = settings_runs["base"] + settings_runs["ada"][:2]  # ada has seeds 1, 2 only
    result = run_settings([*runs, "--name-pattern", r"(.*)_seed\d+"], tmp_path / "out")
    diff = point(result, "eval/accuracy", "end")["differences"]["ada"]
    assert diff["seeds"] == [1, 2] and diff["mean"] == pytest.approx(0.15)
    assert "seeds 3 are in only one of them" in capsys.readouterr().err


# -- errors: before anything is written, naming the run and the fix --------------------------------------------------
def _fails(argv, tmp_path, capsys, *needles):
    out = tmp_path / "not_written"
    assert compare_cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()
    return err


def test_errors_on_seeds_name_the_runs(settings_runs, tmp_path, capsys):
    b, a = settings_runs["base"], settings_runs["ada"]
    twin = write_run(tmp_path / "base_seed1_again", base_rows(1))
    _fails([*b, twin, "--name-pattern", r"(base|ada)"], tmp_path, capsys,
           "setting base: seed 1 twice (base_seed1, base_seed1_again)")
    unseeded = write_run(tmp_path / "base_first", base_rows(1))
    _fails([*b, unseeded, "--name-pattern", r"(base|ada)"], tmp_path, capsys, "no seed for base_first",
           "--seed-pattern")
    _fails(["--setting", f"base={b[0]},{b[1]}", "--setting", f"ada={a[2]}"], tmp_path, capsys,
           "share no seed", "seeds 3", "seeds 1, 2")
    _fails([*b, *a, "--name-pattern", r"(.*)_seed\d+", "--reference", "grpo"], tmp_path, capsys,
           "--reference grpo: no such setting (settings: base, ada)")


def test_errors_on_grouping_flags(settings_runs, tmp_path, capsys):
    b, a = settings_runs["base"], settings_runs["ada"]
    _fails([*b, "--name-pattern", "base"], tmp_path, capsys, "needs a capture group")
    _fails([*b, "--name-pattern", "("], tmp_path, capsys, "not a regular expression")
    _fails([*b, *a, "--name-pattern", r"(base)_"], tmp_path, capsys, "does not match the run name(s) ada_seed1")
    _fails([*b, "--name-pattern", "(.*)", "--group-by", "ada.enable"], tmp_path, capsys,
           "give one way of grouping")
    _fails([*b, "--setting", f"base={b[0]}"], tmp_path, capsys, "give the runs in --setting only")
    _fails(["--setting", "base"], tmp_path, capsys, "expected NAME=RUN[,RUN...]")
    _fails([*b, "--reference", "base"], tmp_path, capsys, "--reference: only with settings")
    _fails([*b, "--name-pattern", "(.*)", "--metrics", "accuracy"], tmp_path, capsys, "unknown accuracy")
    _fails([*b, "--name-pattern", "(.*)", "--interval", "bootstrap", "--resamples", "0"], tmp_path, capsys,
           "--resamples 0")
    # metrics.jsonl runs without a wandb run next to them have no saved config
    _fails([*b, "--group-by", "ada.enable"], tmp_path, capsys, "not in the config of base_seed1", "no saved config",
           "--name-pattern or --setting")


def test_help_documents_grouping_pairing_and_intervals(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        compare_cli.main(["--help"])
    text = capsys.readouterr().out
    for needle in ("--group-by", "--name-pattern", "--setting", "--seed-pattern", "--reference", "--interval",
                   "--resamples", "--bootstrap-seed", "--grid-points", "paired by seed", "train.seed",
                   "t(0.975, n-1) x sd / sqrt(n)", "percentile", "One seed: no interval", "equal generated tokens"):
        assert needle in text, needle


# -- grouping by config: wandb runs (their config), and metrics.jsonl runs with the wandb run beside them -------------
WRITE_CONFIGURED_RUNS = r'''
import json, os, sys
import wandb

out = sys.argv[1]
for ada in (False, True):
    for seed in (1, 2):
        name = f"{'ada' if ada else 'grpo'}-{seed}"
        folder = os.path.join(out, name)
        os.makedirs(folder)
        run = wandb.init(project="settings-test", name=name, dir=folder,
                         config={"train": {"seed": seed}, "ada": {"enable": ada}})
        for step in (1, 2):
            row = {"train/reward_mean": 0.1 * step + (0.2 if ada else 0.0) + 0.01 * seed,
                   "train/generated_tokens": 100}
            run.log(row, step=step)
        run.finish()
'''


@pytest.fixture(scope="module")
def configured_runs(tmp_path_factory):
    """Four offline wandb runs, grpo-1, grpo-2, ada-1, ada-2, each in a folder of its own (as wandb.init's dir);
    reward_mean at step 2: 0.2 + 0.01 x seed, plus 0.2 for ada."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("configured")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = subprocess.run([sys.executable, "-c", WRITE_CONFIGURED_RUNS, str(out)], cwd=out, capture_output=True,
                          text=True, timeout=300, env={**env, "WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_group_by_config_keys_of_wandb_runs(configured_runs, tmp_path):
    names = ["grpo-1", "ada-2", "grpo-2", "ada-1"]
    result = run_settings([str(configured_runs / n) for n in names] + ["--group-by", "ada.enable"],
                          tmp_path / "out")
    assert [(s["name"], s["seeds"]) for s in result["settings"]] == [("ada.enable=false", [1, 2]),
                                                                    ("ada.enable=true", [1, 2])]
    diff = point(result, "reward_mean", "end")["differences"]["ada.enable=true"]
    assert diff["values"] == pytest.approx({"1": 0.2, "2": 0.2})


def test_metrics_jsonl_run_takes_its_config_from_the_wandb_run_beside_it(configured_runs, tmp_path):
    import shutil

    folder = tmp_path / "local_run"
    shutil.copytree(configured_runs / "ada-2", folder)
    write_run(folder, [{"step": 1, "reward_mean": 0.5}])
    (run,) = compare.load_runs([str(folder)])
    assert run.rows == [{"step": 1, "reward_mean": 0.5}]  # the rows: its metrics.jsonl
    config, where = compare.saved_config(run)
    assert config["train.seed"] == 2 and config["ada.enable"] is True and where.endswith(".wandb")
    assert compare_settings.run_seed(run, config, compare.DEFAULT_SEED_PATTERN) == 2
