"""The current learning design (`--design seq_vs_grpo`): its rule checks, its primary test and secondaries by
hand-worked values, the runner's order and gates, and its report written from hand-made run folders (no training:
the runner stops at its rules before any train_local starts)."""

import json
import math
import os
import shutil
import sys

import pytest
from siblings import load

from openrlhf_ada.analysis import learning_stats as stats
from openrlhf_ada.analysis import plan_rules
from openrlhf_ada.analysis.power import paired_t_power


@pytest.fixture(scope="module")
def lc():
    """The runner, loaded through tests/test_benchmarks_smoke.py's loader (one module object per process); it
    imports the designs and the report writer by name."""
    return load("test_benchmarks_smoke.py").load("learning_comparison")


ld = pytest.fixture(scope="module", name="ld")(lambda lc: sys.modules["learning_designs"])
lr = pytest.fixture(scope="module", name="lr")(lambda lc: sys.modules["learning_report"])


# -- the plan's rules, by hand ---------------------------------------------------------------------------------------
def test_pool_rule_bounds():
    assert not plan_rules.pool_rule(0.0977, 0.10, 0.70)["ok"]  # the last design's pool
    assert plan_rules.pool_rule(0.10, 0.10, 0.70)["ok"] and plan_rules.pool_rule(0.70, 0.10, 0.70)["ok"]
    out = plan_rules.pool_rule(0.71, 0.10, 0.70)
    assert not out["ok"] and "no training run starts" in out["why"]


def test_aa_rule_equal_different_and_missing():
    keys = ("generated_tokens", "reward_mean")
    assert plan_rules.aa_rule({"generated_tokens": 1500.0, "reward_mean": 0.25},
                              {"generated_tokens": 1500.0, "reward_mean": 0.25}, keys)["ok"]
    out = plan_rules.aa_rule({"generated_tokens": 1500.0, "reward_mean": 0.25},
                             {"generated_tokens": 1501.0, "reward_mean": 0.25}, keys)
    assert not out["ok"] and out["differ"] == ["generated_tokens"] and "amended" in out["why"]
    assert plan_rules.aa_rule({"generated_tokens": 1.0}, {"generated_tokens": 1.0}, keys)["differ"] == ["reward_mean"]


def test_time_rule_by_hand():
    """Estimates 19 (GRPO) and 22 (Seq) minutes, tolerance 1.1, 7 hours. A/A runs of 19 and 20 min: ratio 19.5 / 19
    = 1.026, within the tolerance. A/A runs of 23 and 23: ratio 23 / 19 = 1.2105 > 1.1, so GRPO 23 and Seq 22 x
    1.2105 = 26.632 a run, 49.632 a pair; spent 46 + 2 (base) = 48 min, seed 1's GRPO run done: 420 - 48 + 23 = 395
    min left for n pairs: n = floor(395 / 49.632) = 7 seeds, fewer than 9: stop; a plan cut to 7 passes."""
    est = {"grpo": 19.0, "ada": 22.0}
    ok = plan_rules.time_rule([19.0, 20.0], est, "grpo", 1.1, 7.0, 41.0, 9)
    assert ok["ok"] and ok["ratio"] == pytest.approx(19.5 / 19)
    over = plan_rules.time_rule([23.0, 23.0], est, "grpo", 1.1, 7.0, 48.0, 9)
    assert not over["ok"] and over["fit"] == 7 and over["pair_minutes"] == pytest.approx(23 + 22 * 23 / 19)
    assert "cut the seeds to 7" in over["why"]
    assert plan_rules.time_rule([23.0, 23.0], est, "grpo", 1.1, 7.0, 48.0, 7)["ok"]
    assert plan_rules.seeds_that_fit(60.0, 40.0, 1.0) == 0 and plan_rules.seeds_that_fit(0.0, 30.0, 1.0) == 2


def test_shared_draws_across_settings():
    assert plan_rules.shared_draws_across(0.375, 0.625)[0] is True
    assert plan_rules.shared_draws_across(0.5, 0.625)[0] is False
    assert plan_rules.shared_draws_across(None, 0.625)[0] is None


# -- the primary test and the secondaries, by hand -------------------------------------------------------------------
def test_primary_test_by_hand():
    """d = 0.05, 0.06, 0.07: mean 0.06, sd 0.01, t = 0.06 / (0.01 / sqrt 3) = 10.392, two-sided p with 2 df =
    1 - t / sqrt(t^2 + 2) = 1 - 10.3923 / 10.4881 = 0.009133: helps. d = 0.01, 0.03, 0.05: mean 0.03, sd 0.02, t = 2.598, p = 0.1217,
    interval 0.03 +- 4.302653 x 0.011547 = [-0.0197, 0.0797]: no difference shown."""
    out = stats.primary_test([0.05, 0.06, 0.07], planned=3)
    assert out["verdict"] == "helps" and out["p"] == pytest.approx(0.009133, abs=1e-6)
    assert out["sd"] == pytest.approx(0.01)
    assert stats.primary_test([-0.05, -0.06, -0.07], planned=3)["verdict"] == "hurts"
    out = stats.primary_test([0.01, 0.03, 0.05], planned=3)
    assert out["verdict"] == "no difference shown" and out["p"] == pytest.approx(0.12168, abs=1e-5)
    assert (out["low"], out["high"]) == pytest.approx((0.03 - 0.049683, 0.03 + 0.049683), abs=1e-6)
    # the detectable effect: the one the test rejects with 80% power at the observed sd
    assert paired_t_power(out["detectable"], 0.02, 3) == pytest.approx(0.8, abs=1e-4)
    # no verdict with fewer pairs than planned, or when a rule blocks it
    assert stats.primary_test([0.05, 0.06, 0.07], planned=9)["verdict"] == "no verdict: 3 of 9 pairs"
    assert stats.primary_test([0.05, 0.06, 0.07], 3, blocked="x")["verdict"] == "no verdict: x"
    assert stats.primary_test([], 9)["mean"] is None


def test_paired_vs_unpaired_by_hand():
    """a = 0.2, 0.3, 0.4 (variance 0.01), b = 0.1, 0.3, 0.3 (0.013333), a - b = 0.1, 0, 0.1 (0.003333): paired sd
    0.057735, unpaired sqrt(0.023333) = 0.152753, correlation (0.01 + 0.013333 - 0.003333) / (2 x sqrt(0.01 x
    0.013333)) = 0.866025."""
    out = stats.paired_vs_unpaired({1: 0.2, 2: 0.3, 3: 0.4}, {1: 0.1, 2: 0.3, 3: 0.3})
    assert (out["paired_sd"], out["unpaired_sd"], out["correlation"]) == pytest.approx((0.057735, 0.152753, 0.866025),
                                                                                      abs=1e-6)
    assert stats.paired_vs_unpaired({1: 0.2}, {1: 0.1}) is None


def test_values_at_tokens_is_measured_not_interpolated():
    runs = [{"setting": "ada", "seed": 1, "evaluations": [{"step": 0, "tokens": 0.0, "avg_at_k": 0.1},
                                                          {"step": 7, "tokens": 12500.0, "avg_at_k": 0.2},
                                                          {"step": 24, "tokens": 40000.0, "avg_at_k": 0.3}]},
            {"setting": "grpo", "seed": 1, "evaluations": [{"step": 0, "tokens": 0.0, "avg_at_k": 0.1},
                                                           {"step": 24, "tokens": 9000.0, "avg_at_k": 0.3}]}]
    values, missing = stats.values_at_tokens(runs, "avg_at_k", 12000)
    assert values == {"ada": {1: 0.2}} and missing == [("grpo", 1)]


# -- the runner: order, gates and report ---------------------------------------------------------------------------
def test_rule_5_amendment_by_hand(ld):
    """The A/A runs took 1620.2 s each (27.0 min against the plan's 19: x 1.42 > 1.1), so Seq's 22 min scale to
    31.3 and a pair to 58.3 min; the base model took 584.7 s and the A/A 54.0 min: 63.8 min spent; seed 1's GRPO run
    is done: floor((420 - 63.8 + 27.0) / 58.3) = floor(6.58) = 6 seeds. At the planning sd 0.034, 6 pairs: the
    normal approximation (1.96 + 0.84) x 0.034 / sqrt 6 = 0.039 is a floor, t with 5 degrees of freedom
    (2.571 + 0.920) x 0.034 / sqrt 6 = 0.0485 about the value."""
    rules = ld.SEQ_VS_GRPO.rules
    assert rules.planned_seeds == 9 and ld.SEQ_VS_GRPO.seeds == (1, 2, 3, 4, 5, 6)
    timing = plan_rules.time_rule([1620.18 / 60, 1620.17 / 60], dict(rules.minutes), "grpo", rules.tolerance,
                                  rules.hours, 584.66 / 60 + 2 * 27.0, 9)
    assert not timing["ok"] and timing["fit"] == 6
    assert plan_rules.time_rule([27.0, 27.0], dict(rules.minutes), "grpo", 1.1, 7.0, 63.8, 6)["ok"]
    from openrlhf_ada.analysis.power import detectable_effect

    assert 0.039 < detectable_effect(rules.planning_sd, 6) < 0.050


def test_report_projects_the_machine_time_from_the_runs_so_far(lc, lr):
    """GRPO seed 1 and its A/A repeat took 27 min each, Seq seed 1 33: with seeds 1-2 the runs to come are GRPO
    and Seq seed 2, 27 + 33 = 60 min = 1.00 h; with 1.59 h spent that is 2.59 h in all."""
    a = lc.parse(["--design", "seq_vs_grpo", "--seeds", "1,2"])
    runs = [{"setting": "grpo", "seed": 1, "process_seconds": 27 * 60.0},
            {"setting": "grpo_repeat", "seed": 1, "process_seconds": 27 * 60.0},
            {"setting": "ada", "seed": 1, "process_seconds": 33 * 60.0}]
    text = lr._projection(a, runs, "grpo", "ada", 1.59, 7.0)
    assert "GRPO n=4 27.0 min, Reinforce-Ada balance 33.0 min" in text
    assert "the 2 runs to come take 1.00 hours: 2.59 in all, against the plan's 7." in text, text
    assert lr._projection(a, runs[:2], "grpo", "ada", 1.0, 7.0) == " No run of each setting yet to project the rest from."


def test_order_follows_rule_4(lc, ld):
    order = lc.seq_vs_grpo_order(ld.SEQ_VS_GRPO, [1, 2, 3])
    assert order == [("grpo", 1), ("grpo_repeat", 1), ("ada", 1), ("ada", 2), ("grpo", 2), ("grpo", 3), ("ada", 3)]
    assert len(lc.seq_vs_grpo_order(ld.SEQ_VS_GRPO, list(range(1, 10)))) == 19  # 9 pairs and the repeat


def test_design_flags_are_the_plans(lc, ld, tmp_path):
    """One-digit pool of 32 (seed 0), 200 held-out problems, 24 updates evaluated at the end and at 12,000 tokens
    (not before training: the base model is measured once), shared draws; the two settings' flags; every run's and
    every base pass's train_local arguments pass train_local's own checks."""
    from openrlhf_ada.cli.train_local import parse_local_args

    d = ld.SEQ_VS_GRPO
    assert (d.train_size, d.eval_size, d.max_digits, d.updates, d.eval_at_tokens, d.seeds) == (
        32, 200, 1, 24, 12000, tuple(range(1, 7)))
    assert d.setting("grpo").flags == ("--rollout.n_samples_per_prompt", "4") == d.setting("grpo_repeat").flags
    assert d.setting("ada").flags == ("--rollout.n_samples_per_prompt", "4", "--ada.enable", "--ada.mode", "balance",
                                      "--ada.baseline", "pool", "--ada.round_size", "4", "--ada.max_rounds", "2")
    model = tmp_path / "model"
    model.mkdir()
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input": "What is 1 + 2?", "label": "3", "datasource": "easy"}) + "\n")
    a = lc.parse(["--design", "seq_vs_grpo", "--out", str(tmp_path / "out")])
    for name in d.names:
        args = parse_local_args(lc.train_argv(a, name, 2, str(model), str(data), str(data), resume=False))
        assert args.local.request_seeds and args.local.eval_at_tokens == 12000 and args.eval.steps == 24
        assert args.local.max_steps == 24 and args.eval.avg_k == 4 and args.rollout.batch_size == 8
        assert args.ada.enable == (name == "ada")
        assert args.local.skip_base_eval  # the base model is measured once, by itself
    for key in d.base_passes:  # each base pass (--local.max_steps 0) passes train_local's checks: no skip_base_eval
        args = parse_local_args(lc.base_argv(a, key, str(model), str(data), str(data)))
        assert args.local.max_steps == 0 and not args.local.skip_base_eval and args.local.request_seeds
        assert (args.eval.n_samples_per_prompt, args.eval.avg_k) == ((8, 0) if key == "train_sampled" else (1, 4))


def _write_run(lc, a, name, seed, step1, step2, evals, seconds=120.0):
    """A finished run: metrics rows of steps 0 (evaluation), 1 and 2 (`evals`: {step: (tokens, avg, greedy)})."""
    folder = lc.run_dir(a, name, seed)
    os.makedirs(folder)
    rows = []
    for step in (0, 1, 2):
        row = {"step": step}
        if step:
            row.update({"reward_mean": 0.2, "samples_per_prompt": 4.0, "timing/step": 30.0,
                        **(step1 if step == 1 else step2)})
        if step in evals:
            tokens, avg, greedy = evals[step]
            row.update({"generated_tokens_total": tokens, "eval/accuracy": greedy, "eval/accuracy_se": 0.03,
                        "eval/avg_at_k": avg, "eval/avg_at_k_se": 0.01})
        rows.append(row)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    summary = {**lc.summarize_run(folder, name, seed), "process_seconds": seconds}
    with open(os.path.join(folder, "done.json"), "w") as f:
        json.dump(summary, f)
    with open(os.path.join(folder, "wall_seconds.jsonl"), "w") as f:
        f.write(json.dumps({"start": 1000.0 * len(os.listdir(os.path.dirname(folder))), "seconds": seconds}) + "\n")


def _design(lc, tmp_path, pool_rate=0.3, aa_tokens=100.0, seconds=120.0):
    """Hand-made runs of the design with seeds 1-3, 2 updates, a pool of 8 (update 2 is after the first visit).
      GRPO: step 1 100 tokens, zero-adv. share 0.625; step 2 200 tokens; avg@4 at 2: G = 0.20, 0.18, 0.22; greedy
            0.3, 0.4, 0.5.
      Seq:  step 1 160 tokens (crosses 150: evaluated there, avg@4 0.15, 0.16, 0.17), first-round signal 0.375
            (= 1 - 0.625: shared draws); step 2 320 tokens, trained non-zero share 0.75 against 0.5 from the first
            round (engaged); avg@4 at 2: 0.25, 0.27, 0.29; greedy 0.4, 0.4, 0.6.
      the A/A repeat: GRPO seed 1 again, step 1 `aa_tokens` tokens; avg@4 at 2 0.21."""
    out, model = tmp_path / "out", tmp_path / "model"
    model.mkdir(parents=True)
    a = lc.parse(["--design", "seq_vs_grpo", "--model", str(model), "--out", str(out), "--doc", str(tmp_path / "learning.md"),
                  "--img-dir", str(tmp_path / "img"), "--seeds", "1,2,3", "--updates", "2", "--train-size", "8",
                  "--eval-size", "4", "--eval-at-tokens", "150"])
    lc.check_config(a)
    train, heldout = lc.prepare_data(a)
    for key, metrics in (("train_sampled", {"eval/accuracy": pool_rate, "eval/pass_at_8": 0.6, "seconds": 60.0}),
                         ("heldout", {"eval/accuracy": 0.1, "eval/avg_at_k": 0.05, "eval/avg_at_k_se": 0.01,
                                      "seconds": 60.0})):
        os.makedirs(out / "base" / key)
        (out / "base" / key / "done.json").write_text(json.dumps(metrics))
    G, greedy = {1: 0.20, 2: 0.18, 3: 0.22}, {1: 0.3, 2: 0.4, 3: 0.5}
    for seed in (1, 2, 3):
        _write_run(lc, a, "grpo", seed, {"generated_tokens": 100.0, "zero_adv_group_share": 0.625},
                   {"zero_adv_group_share": 0.5}, {0: (0.0, 0.05, 0.1), 2: (200.0, G[seed], greedy[seed])}, seconds)
        if seed == 1:
            _write_run(lc, a, "grpo_repeat", 1, {"generated_tokens": aa_tokens, "zero_adv_group_share": 0.625},
                       {"zero_adv_group_share": 0.5}, {0: (0.0, 0.05, 0.1), 2: (200.0, 0.21, 0.3)}, seconds)
        _write_run(lc, a, "ada", seed, {"generated_tokens": 160.0, "zero_adv_group_share": 0.25,
                                        "ada/first_round_signal_share": 0.375},
                   {"zero_adv_group_share": 0.25, "ada/first_round_signal_share": 0.5},
                   {0: (0.0, 0.05, 0.1), 1: (160.0, 0.14 + 0.01 * seed, 0.2),
                    2: (320.0, 0.23 + 0.02 * seed, {1: 0.4, 2: 0.4, 3: 0.6}[seed])}, seconds)
    return a, train, heldout


def test_report_by_hand(lc, lr, tmp_path):
    """Primary: d = 0.05, 0.09, 0.07: mean 0.07, sd 0.02, [0.0203, 0.1197], p = 0.02614: helps (3 of 3 pairs, Seq
    engaged in every run, A/A equal). (a) at 150 tokens: Seq at step 1 minus GRPO at step 2: -0.05, -0.02, -0.05:
    mean -0.04, sd 0.017321, half-width 4.302653 x 0.01 = 0.043027. (b) greedy: 0.1, 0, 0.1: mean 0.0667, half-width
    4.302653 x 0.057735 / sqrt 3 = 0.143422. (c) paired sd 0.02 against sqrt(0.0004 + 0.0004) = 0.0283,
    correlation (0.0008 - 0.0004) / (2 x 0.0004) = 0.5."""
    a, train, heldout = _design(lc, tmp_path)
    base = lc.measure_base(a, None, train, heldout)
    body = lr.report(a, base, train, heldout)
    assert "1. Pool: the base model's pass rate on the training pool is 0.3000, within [0.1, 0.7] (pass@8 0.600)." \
        in body
    assert "2. A/A control: step 1 of the A/A pair: generated_tokens 100.0 and 100.0, reward_mean 0.2 and 0.2: equal" \
        in body and "a difference of +0.0100" in body
    assert "avg@4 0.0500 to 0.0500 over 7 runs (all equal: the evaluation's draws are shared)" in body
    assert ("3. Seeds: 9 planned, cut to 6 by rule 5's amendment (written before seed 2 ran); this report reads seeds "
            "1, 2, 3; at the planning sd 0.034, 3 pairs detect ") in body and "; 3 pairs finished." in body
    assert "5. Machine time: the A/A runs took 2.0 min on average against the plan's 19" in body
    assert "6. Mechanism: Seq engaged in 3 of 3 finished" in body
    row = next(line for line in body.splitlines() if line.startswith("| Reinforce-Ada balance | 2 |"))
    assert "0.750 vs 0.500: engaged" in row and "| equal (" in row and "| 0.160 (1) |" in row, row
    assert "- mean +0.0700 [+0.0203, +0.1197] (95% t interval, 3 pairs), p 0.0261, sd of the differences 0.0200" \
        in body
    assert "**verdict: helps**" in body
    t = 0.07 / (0.02 / math.sqrt(3))
    assert round(1 - t / math.sqrt(t * t + 2), 4) == 0.0261
    assert "first reached 150 tokens, Reinforce-Ada balance minus GRPO n=4: -0.0400 [-0.0830, +0.0030] (3 pairs)" \
        in body
    assert "(b) Greedy accuracy at 2 updates, Reinforce-Ada balance minus GRPO n=4: +0.0667 [-0.0768, +0.2101]" in body
    assert "sd of the paired differences 0.0200; the same runs analysed as if unpaired, 0.0283" in body and "implied correlation of a seed's two runs 0.50" in body
    # (d) greedy minus avg@4 at 2: GRPO 0.10, 0.22, 0.28 (mean 0.2); Seq 0.15, 0.13, 0.31; GRPO's minus Seq's -0.05,
    # +0.09, -0.03, its half-width t(0.975, 2) x sd / sqrt 3, with t(0.975, 2) = 0.95 sqrt(2 / (1 - 0.95^2))
    gap = [-0.05, 0.09, -0.03]
    g_mean = sum(gap) / 3
    half = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2)) * math.sqrt(sum((x - g_mean) ** 2 for x in gap) / 2) / math.sqrt(3)
    assert (f"(d) greedy accuracy minus avg@4 at 2 updates (descriptive, added after the runs): Reinforce-Ada balance "
            f"{(0.15 + 0.13 + 0.31) / 3:.4f}, GRPO n=4 0.2000; GRPO n=4's minus Reinforce-Ada balance's, paired by seed: "
            f"{g_mean:+.4f} [{g_mean - half:+.4f}, {g_mean + half:+.4f}] (3 pairs).") in body, body
    assert "<!-- BEGIN learning_comparison_v3 -->" in (tmp_path / "learning.md").read_text()
    # fewer pairs than planned: no verdict
    a9 = lc.parse(["--design", "seq_vs_grpo", "--model", a.model, "--out", str(a.out), "--doc", str(tmp_path / "learning.md"),
                   "--seeds", "1,2,3,4", "--updates", "2", "--train-size", "8", "--eval-size", "4",
                   "--eval-at-tokens", "150"])
    assert "**verdict: no verdict: 3 of 4 pairs**" in lr.report(a9, base, train, heldout)


def test_report_withholds_the_verdict_when_seq_did_not_engage(lc, lr, tmp_path):
    a, train, heldout = _design(lc, tmp_path)
    folder = lc.run_dir(a, "ada", 3)
    rows = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    rows[2]["ada/first_round_signal_share"] = 0.74  # gain 0.01 < 0.05
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    body = lr.report(a, lc.measure_base(a, None, train, heldout), train, heldout)
    assert "**not engaged**" in body and "no verdict: Seq did not engage" in body


def test_runner_stops_at_rule_1_before_any_run(lc, tmp_path, capsys):
    a, _, _ = _design(lc, tmp_path, pool_rate=0.0977)
    shutil.rmtree(os.path.join(a.out, "runs"))  # no run yet
    os.makedirs(os.path.join(a.out, "runs"))
    model = tmp_path / "model"
    code = lc.main(["--design", "seq_vs_grpo", "--out", a.out, "--doc", a.doc, "--seeds", "1,2,3", "--updates", "2",
                    "--train-size", "8", "--eval-size", "4", "--eval-at-tokens", "150", "--model", str(model)])
    assert code == 2 and "outside [0.1, 0.7]: no training run starts" in capsys.readouterr().out
    assert os.listdir(os.path.join(a.out, "runs")) == []


def test_runner_stops_after_a_failed_aa_pair_and_a_slow_one(lc, tmp_path, capsys):
    """The A/A pair finished, its step-1 tokens differ: the next run (Seq seed 1) does not start. With equal draws
    but 23-minute runs, 7 seeds fit 7 hours: with 9 seeds the runner stops for the amendment."""
    a, train, heldout = _design(lc, tmp_path, aa_tokens=101.0)
    shutil.rmtree(lc.run_dir(a, "ada", 1))
    model = tmp_path / "model"
    args = ["--design", "seq_vs_grpo", "--out", a.out, "--doc", a.doc, "--seeds", "1,2,3", "--updates", "2",
            "--train-size", "8", "--eval-size", "4", "--eval-at-tokens", "150", "--model", str(model)]
    assert lc.main(args) == 2
    out = capsys.readouterr().out
    assert "stopped before ada seed 1 by the plan's rule 2" in out and "generated_tokens differ" in out
    assert not os.path.isdir(lc.run_dir(a, "ada", 1))
    base = lc.measure_base(a, None, train, heldout)
    assert lc.gate(a, base, "grpo_repeat", 1) is None  # the A/A pair itself is not gated by its own outcome
    slow, _, _ = _design(lc, tmp_path / "slow", seconds=23 * 60.0)
    nine = lc.parse(["--design", "seq_vs_grpo", "--model", slow.model, "--out", slow.out, "--updates", "2", "--train-size", "8",
                     "--eval-size", "4", "--eval-at-tokens", "150", "--seeds", "1,2,3,4,5,6,7,8,9"])
    held = lc.gate(nine, lc.measure_base(nine, None, train, heldout), "ada", 1)
    # spent 46 + 2 = 48 min: 7 seeds fit (test_time_rule_by_hand)
    assert held.startswith("rule 5:") and "cut the seeds to 7" in held


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_runner_measures_the_base_model_and_applies_rule_1_for_real(lc, tmp_path, tiny_llama_path):
    """The design's first step end to end on a tiny llama (transformers engine): the base model's pool pass rate (8
    samples a prompt at T = 1) and its held-out evaluation (greedy and avg@k) measured by train_local with the
    design's flags; a random model's pass rate is far below 0.10, so rule 1 stops the design before any run."""
    out = tmp_path / "out"
    code = lc.main(["--design", "seq_vs_grpo", "--model", tiny_llama_path, "--engine", "hf", "--updates", "2",
                    "--train-size", "8", "--eval-size", "4", "--avg-k", "2", "--max-new-tokens", "3",
                    "--eval-at-tokens", "40", "--seeds", "1,2", "--out", str(out), "--doc", str(tmp_path / "l.md")])
    assert code == 2
    pool = json.loads((out / "base" / "train_sampled" / "done.json").read_text())
    held = json.loads((out / "base" / "heldout" / "done.json").read_text())
    assert pool["eval/accuracy"] < 0.10 and "eval/pass_at_8" in pool and pool["seconds"] > 0
    assert held["eval/avg_at_k"] * 8 == pytest.approx(round(held["eval/avg_at_k"] * 8))  # avg@2 on 4 problems
    command = (out / "base" / "heldout" / "command.txt").read_text()
    assert "--local.request_seeds" in command and "--local.eval_at_tokens 40" in command
    assert not (out / "runs").exists() or not os.listdir(out / "runs")
    assert "outside [0.1, 0.7]" in (tmp_path / "l.md").read_text()


# -- the equal-token design (`--design seq_vs_grpo_equal_tokens`) ----------------------------------------------------
V3 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results", "learning_v3")


def _repo_relative(token):
    """A committed command's token with the repository's absolute prefix dropped (the runs ran in another checkout)."""
    for top in ("benchmarks/", "openrlhf_ada/"):
        if f"/{top}" in token:
            return top + token.split(f"/{top}", 1)[1]
    return token


def test_equal_tokens_design_is_the_committed_regime(lc, ld):
    """Same settings, seeds, problems and evaluation as seq_vs_grpo; its own folder and report section; the Seq A/A
    first, then the GRPO reruns seed by seed."""
    d, v3 = ld.SEQ_VS_GRPO_EQUAL_TOKENS, ld.SEQ_VS_GRPO
    rules = d.rules
    assert d.kind == "equal_tokens" and d.out.endswith(os.path.join("results", "learning_v4")) and d.out != v3.out
    assert (d.section, d.image_prefix) == ("learning_comparison_v4", "learning_v4")
    assert rules.reuse == v3.out and rules.seq_setting == "ada" and rules.rerun == "grpo" and rules.max_steps == 120
    assert d.setting("grpo").flags == v3.setting("grpo").flags
    assert d.setting("ada_repeat").flags == v3.setting("ada").flags
    assert d.seeds == v3.seeds[:5] and rules.planned_seeds == len(v3.seeds) == 6  # rule 5 cut seed 6
    for key in ("updates", "eval_points", "eval_at_tokens", "request_seeds", "skip_base_eval", "train_size",
                "eval_size", "max_digits", "avg_k", "avg_seed", "max_new_tokens", "lr", "engine"):
        assert getattr(d, key) == getattr(v3, key), key
    assert d.base_passes == () and rules.reproduced == ("avg_at_k", "accuracy", "tokens") and rules.hours == 7.0
    assert ld.equal_tokens_order(d, [1, 2, 3]) == [("ada_repeat", 1), ("grpo", 1), ("grpo", 2), ("grpo", 3)]


def test_a_rerun_is_its_committed_command_but_for_its_length(lc):
    """Each GRPO rerun's train_local arguments are its committed run's (command.txt in learning_v3), but for the
    folder, 120 updates at most and the token budget its Seq run generated; the Seq A/A's are Seq seed 1's."""
    import shlex

    a = lc.parse(["--design", "seq_vs_grpo_equal_tokens"])
    v3 = lc.parse(["--design", "seq_vs_grpo"])
    for name, committed, seed in [("grpo", "grpo", s) for s in a.seeds] + [("ada_repeat", "ada", 1)]:
        with open(os.path.join(V3, "runs", f"{committed}_seed{seed}", "command.txt")) as f:
            old = shlex.split(f.readline())[3:]
        done = json.load(open(os.path.join(V3, "runs", f"ada_seed{seed}", "done.json")))
        model = old[old.index("--actor.model_name_or_path") + 1]
        new = lc.train_argv(a, name, seed, model, os.path.join(v3.out, "data", "train.jsonl"),
                            os.path.join(v3.out, "data", "eval.jsonl"), resume=False)
        new = [_repo_relative(t) for t in new]
        expected = [_repo_relative(t) for t in old]
        expected[expected.index("--local.output_dir") + 1] = f"benchmarks/results/learning_v4/runs/{name}_seed{seed}"
        if name == "grpo":
            expected[expected.index("--local.max_steps") + 1] = "120"
            expected[expected.index("--local.max_generated_tokens") + 1] = str(int(done["tokens"]))
        assert new == expected, (name, seed)


def test_a_longer_run_keeps_the_24_update_schedule(lc):
    """train_local's schedule is built over --local.max_steps (`lr_scheduler`); the design's runs use its default,
    constant, with no warmup: a 120-update rerun's first 24 rates are the 24-update run's, and 1e-5 after them. Under
    upstream's cosine_with_min_lr they would not be (what this test guards). The committed runs logged 1e-5 at every
    update."""
    import torch

    from openrlhf_ada.cli.train_local import parse_local_args
    from openrlhf_ada.trainer.local_trainer import lr_scheduler, optimizer_steps_per_step

    a, v3 = lc.parse(["--design", "seq_vs_grpo_equal_tokens"]), lc.parse(["--design", "seq_vs_grpo"])

    def rates(args, steps_run, schedule=None):
        if schedule:
            args.actor.lr_scheduler = schedule
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.actor.adam.lr)
        scheduler = lr_scheduler(args, optimizer, args.local.max_steps * optimizer_steps_per_step(args))
        out = []
        for _ in range(steps_run):
            optimizer.step()
            scheduler.step()
            out.append(scheduler.get_last_lr()[0])
        return out

    longer = parse_local_args(lc.train_argv(a, "grpo", 1, V3, V3 + "/data/train.jsonl", V3 + "/data/eval.jsonl", False))
    short = parse_local_args(lc.train_argv(v3, "grpo", 1, V3, V3 + "/data/train.jsonl", V3 + "/data/eval.jsonl", False))
    assert (longer.local.max_steps, short.local.max_steps) == (120, 24) and longer.actor.lr_scheduler == "constant"
    assert optimizer_steps_per_step(longer) == 1
    assert rates(longer, 120)[:24] == rates(short, 24) and set(rates(longer, 120)) == {1e-5}
    assert rates(longer, 24, "cosine_with_min_lr") != rates(short, 24, "cosine_with_min_lr")
    for run in sorted(os.listdir(os.path.join(V3, "runs"))):
        with open(os.path.join(V3, "runs", run, "metrics.jsonl")) as f:
            logged = [json.loads(line).get("actor_lr") for line in f if line.strip()]
        assert [x for x in logged if x is not None] == [1e-5] * 24, run


def test_crossing_step_is_the_first_step_at_the_budget():
    totals = [(1, 900.0), (2, 1900.0), (3, 2500.0), (4, 3100.0)]
    assert stats.crossing_step(totals, 2500) == 3 and stats.crossing_step(totals, 2501) == 4
    assert stats.crossing_step(totals, 1.0) == 1 and stats.crossing_step(totals, 3101) is None
    assert stats.crossing_step(list(reversed(totals)), 2000) == 3  # by step, not by list order
    evals = [{"step": 2, "tokens": 1900.0, "avg_at_k": 0.2}, {"step": 4, "tokens": 3100.0, "avg_at_k": 0.3}]
    out = stats.budget_evaluation({"steps": 4, "tokens": 3100.0, "crossing_step": 4, "evaluations": evals}, 2600)
    assert out["ok"] and out["step"] == 4 and out["evaluation"]["avg_at_k"] == 0.3
    never = stats.budget_evaluation({"steps": 4, "tokens": 3100.0, "crossing_step": None, "evaluations": evals}, 4000)
    assert not never["ok"] and "never reached 4000 tokens" in never["why"]
    past = stats.budget_evaluation({"steps": 4, "tokens": 3100.0, "crossing_step": 3, "evaluations": evals}, 2400)
    assert not past["ok"] and "ran to step 4" in past["why"]
    unevaluated = stats.budget_evaluation({"steps": 4, "tokens": 3100.0, "crossing_step": 4,
                                           "evaluations": evals[:1]}, 2600)
    assert not unevaluated["ok"] and "not evaluated at its crossing step 4" in unevaluated["why"]


def test_interpolation_at_another_runs_training_time():
    evals = [{"step": 2, "train_seconds": 60.0, "avg_at_k": 0.20}, {"step": 6, "train_seconds": 180.0,
                                                                       "avg_at_k": 0.26}]
    assert stats.interpolated_at(evals, "train_seconds", 100.0, "avg_at_k")["value"] == pytest.approx(0.22)
    assert stats.interpolated_at(evals, "train_seconds", 180.0, "avg_at_k")["value"] == 0.26
    assert stats.interpolated_at(evals, "train_seconds", 200.0, "avg_at_k") is None


def test_reproduction_rule_fires_on_a_mismatch_and_passes_on_equality():
    keys = ("avg_at_k", "accuracy", "tokens")
    committed = {"avg_at_k": 0.23875, "accuracy": 0.25, "tokens": 25151.0}
    assert plan_rules.reproduction_rule(dict(committed), committed, keys)["ok"]
    off = plan_rules.reproduction_rule({**committed, "avg_at_k": 0.23875 + 1e-12}, committed, keys)
    assert not off["ok"] and off["differ"] == ["avg_at_k"] and "avg_at_k differ" in off["why"]
    assert plan_rules.reproduction_rule({**committed, "tokens": 25152.0}, committed, keys)["differ"] == ["tokens"]
    missing = plan_rules.reproduction_rule(None, committed, keys)
    assert not missing["ok"] and "no evaluation at the reproduction point" in missing["why"]


def test_equal_tokens_time_rule_by_hand():
    """A rerun of a committed run of 1620 s, evaluations of 265 s, 25151 tokens, last updates 656 tokens and 37.9 s
    each, to 46575 tokens: ceil(21424 / 656) = 33 more updates, crossing at 57, evaluations at 48 and 57: (1620 + 33
    x 37.9 + 2 x 265) / 60 = 56.678 min. Time rule: 100 min spent by a run estimated at 80 (x 1.25), three runs of
    100 to come: 100 + 3 x 125 = 475 > 420, and 2 of the 3 fit (350)."""
    est = plan_rules.rerun_estimate(1620.0, 265.0, 25151.0, 656.0, 37.9, 46575.0, 24, 24)
    assert (est["extra_steps"], est["crossing"], est["evaluations"]) == (33, 57, 2)
    assert est["minutes"] == pytest.approx((1620 + 33 * 37.9 + 2 * 265) / 60)
    short = plan_rules.rerun_estimate(1620.0, 265.0, 25151.0, 656.0, 37.9, 25151.0 + 656 * 20, 24, 24)
    assert (short["crossing"], short["evaluations"]) == (44, 1)  # no update 48 before the crossing
    out = plan_rules.equal_tokens_time_rule(100.0, [(100.0, 80.0)], [100.0] * 3, 7.0)
    assert not out["ok"] and out["ratio"] == 1.25 and out["fit"] == 2 and out["projected_minutes"] == 475.0
    assert plan_rules.equal_tokens_time_rule(100.0, [(60.0, 80.0)], [100.0] * 3, 7.0)["ratio"] == 1.0


def _chi2_5_cdf(x):
    """The chi-square distribution's CDF with 5 degrees of freedom, in closed form."""
    return math.erf(math.sqrt(x / 2)) - math.sqrt(2 * x / math.pi) * math.exp(-x / 2) * (1 + x / 3) if x > 0 else 0.0


def _t5_cdf(t):
    """Student's t CDF with 5 degrees of freedom, in closed form."""
    th = math.atan(t / math.sqrt(5))
    return 0.5 + (th + math.sin(th) * math.cos(th) * (1 + 2 / 3 * math.cos(th) ** 2)) / math.pi


def _bisect(f, target, low, high):
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return (low + high) / 2


def _power_6_pairs(effect, sd):
    """The two-sided paired t test's power with 6 pairs at 0.05, independently of openrlhf_ada.analysis.power: T =
    (Z + delta) / sqrt(V / 5) with V chi-square(5), so P(|T| > c) = E_Z[P(V < 5 (Z + delta)^2 / c^2)], by Simpson's
    rule over Z."""
    c = _bisect(_t5_cdf, 0.975, 0.0, 20.0)
    delta = effect * math.sqrt(6) / sd
    n, lo, hi = 4000, -12.0, 12.0
    h = (hi - lo) / n
    total = 0.0
    for i in range(n + 1):
        z = lo + i * h
        w = 1 if i in (0, n) else (4 if i % 2 else 2)
        total += w * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * _chi2_5_cdf(5 * (z + delta) ** 2 / c ** 2)
    return total * h / 3


def test_the_plans_power_statement_by_an_independent_computation(ld):
    """The plan's numbers at 6 pairs: power 0.76 at +0.04 and sd 0.0295, 0.0423 detected with 80% power, power 0.20
    to 0.99 over the sd's 95% interval [0.018, 0.072] (sd x sqrt(5 / chi-square quantiles 0.975 and 0.025 with 5
    df)); the design's `planned_power` and the page say the same."""
    rules = ld.SEQ_VS_GRPO_EQUAL_TOKENS.rules
    plan = stats.planned_power(rules.effect, rules.planning_sd, rules.sd_interval, 6, rules.alpha, rules.power)
    assert plan["power"] == pytest.approx(_power_6_pairs(0.04, 0.0295), abs=1e-4)
    assert round(plan["power"], 2) == 0.76
    assert _power_6_pairs(plan["detectable"], 0.0295) == pytest.approx(0.8, abs=1e-4)
    assert round(plan["detectable"], 4) == 0.0423
    assert plan["range"] == pytest.approx((_power_6_pairs(0.04, 0.072), _power_6_pairs(0.04, 0.018)), abs=1e-4)
    assert (round(plan["range"][0], 2), round(plan["range"][1], 2)) == (0.20, 0.99)
    q_high, q_low = _bisect(_chi2_5_cdf, 0.975, 0.0, 60.0), _bisect(_chi2_5_cdf, 0.025, 0.0, 60.0)
    assert (round(0.0295 * math.sqrt(5 / q_high), 3), round(0.0295 * math.sqrt(5 / q_low), 3)) == rules.sd_interval
    page = open(os.path.join(os.path.dirname(V3), "..", "..", "docs", "learning.md")).read()
    plan_text = page.split("## Seq against GRPO at equal generated tokens")[1].split("\n## ")[0]
    for text in ("power **0.76** at +0.04", "**0.042** avg@4 with 80% power", "from 0.20 (sd 0.072) to 0.99"):
        assert text in plan_text, text


def _chi2_4_cdf(x):
    """The chi-square distribution's CDF with 4 degrees of freedom, in closed form."""
    return 1 - math.exp(-x / 2) * (1 + x / 2) if x > 0 else 0.0


def test_observed_sd_interval_and_power_over_it():
    """The sd's 95% interval is sd x sqrt((n - 1) / q) for the chi-square quantiles 0.975 (low end) and 0.025 (high
    end): with 6 pairs at sd 0.0295 it is the plan's [0.018, 0.072]; with 5 pairs, from the closed-form CDF with 4
    df. The power over it runs from the high end's to the low end's, by the independent computation at 6 pairs."""
    from openrlhf_ada.analysis.power import sd_interval
    q_high, q_low = _bisect(_chi2_5_cdf, 0.975, 0.0, 60.0), _bisect(_chi2_5_cdf, 0.025, 0.0, 60.0)
    assert sd_interval(0.0295, 6) == pytest.approx((0.0295 * math.sqrt(5 / q_high), 0.0295 * math.sqrt(5 / q_low)))
    assert tuple(round(v, 3) for v in sd_interval(0.0295, 6)) == (0.018, 0.072)
    q_high, q_low = _bisect(_chi2_4_cdf, 0.975, 0.0, 60.0), _bisect(_chi2_4_cdf, 0.025, 0.0, 60.0)
    assert sd_interval(0.0121, 5) == pytest.approx((0.0121 * math.sqrt(4 / q_high), 0.0121 * math.sqrt(4 / q_low)))
    seen = stats.observed_power(0.04, 0.0295, 6)
    low, high = seen["sd_interval"]
    assert seen["power"] == pytest.approx((_power_6_pairs(0.04, high), _power_6_pairs(0.04, low)), abs=1e-4)
    assert _power_6_pairs(seen["detectable"][0], low) == pytest.approx(0.8, abs=1e-4)
    assert _power_6_pairs(seen["detectable"][1], high) == pytest.approx(0.8, abs=1e-4)
    assert stats.observed_power(0.04, 0.0, 6) is None and stats.observed_power(0.04, 0.02, 1) is None


def test_the_plans_projection_is_the_runners(lc, lr):
    """The plan's minutes per run and its total, from the committed runs (`run_estimates`), as the page states them
    (over the 6 seeds planned; rule 5 cut seed 6 later)."""
    a = lc.parse(["--design", "seq_vs_grpo_equal_tokens", "--seeds", "1,2,3,4,5,6"])
    est = lr.run_estimates(a, lr.committed_runs(a))
    page = open(os.path.join(os.path.dirname(V3), "..", "..", "docs", "learning.md")).read()
    plan_text = page.split("## Seq against GRPO at equal generated tokens")[1].split("\n## ")[0]
    for (name, seed), e in est.items():
        if name == "grpo":
            assert f"| {seed} | {lr.budgets(a)[seed]:.0f} |" in plan_text and f"| {e['minutes']:.1f} |" in plan_text
    assert f"**{sum(e['minutes'] for e in est.values()) / 60:.2f} hours**" in plan_text
    assert sum(e["minutes"] for e in est.values()) <= a.design.rules.hours * 60  # the plan fitted before its runs


def _done(folder, summary):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "done.json"), "w") as f:
        json.dump(summary, f)


def _evaluation(step, tokens, avg, greedy, train_seconds):
    return {"step": step, "tokens": tokens, "avg_at_k": avg, "accuracy": greedy, "train_seconds": train_seconds,
            "eval_seconds": 30.0}


#: hand-made committed runs (2 updates; seeds 1-4): Seq's tokens (the budgets), avg@4, greedy and training seconds at
#: update 2; GRPO's tokens, avg@4 and greedy at update 2 (60 training seconds); and the reruns' crossing evaluations
SEQ = {1: (500.0, 0.30, 0.35, 100.0), 2: (600.0, 0.32, 0.30, 110.0), 3: (700.0, 0.40, 0.45, 120.0),
       4: (650.0, 0.28, 0.30, 130.0)}
GRPO = {1: (200.0, 0.20, 0.25), 2: (220.0, 0.25, 0.30), 3: (250.0, 0.30, 0.35), 4: (240.0, 0.22, 0.20)}
CROSS = {1: (6, 520.0, 0.26, 0.30, 180.0), 2: (5, 610.0, 0.25, 0.35, 150.0), 3: (7, 700.0, 0.31, 0.40, 210.0),
         4: (6, 660.0, 0.23, 0.25, 190.0)}


def _equal_tokens(lc, tmp_path, seeds="1,2,3,4"):
    """The committed folder (a seq_vs_grpo folder of 2 updates) and the equal-token design's folder, with every run
    of SEQ, GRPO and CROSS finished; the Seq A/A equal to its committed run but for avg@4 (+0.01)."""
    model, v3, v4 = tmp_path / "model", tmp_path / "v3", tmp_path / "v4"
    model.mkdir(parents=True)
    common = ["--model", str(model), "--doc", str(tmp_path / "learning.md"), "--img-dir", str(tmp_path / "img"),
              "--seeds", seeds, "--updates", "2", "--train-size", "8", "--eval-size", "4", "--eval-at-tokens", "150"]
    old = lc.parse(["--design", "seq_vs_grpo", "--out", str(v3), *common])
    lc.check_config(old)
    lc.prepare_data(old)
    for s in (1, 2, 3, 4):
        tokens, avg, greedy, train = SEQ[s]
        _done(lc.run_dir(old, "ada", s), {"setting": "ada", "seed": s, "steps": 2, "tokens": tokens,
                                          "train_seconds": train, "process_seconds": 600.0,
                                          "evaluations": [_evaluation(2, tokens, avg, greedy, train)]})
        tokens, avg, greedy = GRPO[s]
        folder = lc.run_dir(old, "grpo", s)
        _done(folder, {"setting": "grpo", "seed": s, "steps": 2, "tokens": tokens, "train_seconds": 60.0,
                       "process_seconds": 480.0, "evaluations": [_evaluation(2, tokens, avg, greedy, 60.0)]})
        with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
            for step in (1, 2):
                f.write(json.dumps({"step": step, "reward_mean": 0.2, "generated_tokens": tokens / 2,
                                    "generated_tokens_total": tokens * step / 2, "timing/step": 30.0}) + "\n")
    a = lc.parse(["--design", "seq_vs_grpo_equal_tokens", "--out", str(v4), "--reuse", str(v3), *common])
    lc.check_config(a)
    train, heldout = lc.prepare_data(a)
    lc.check_reuse(a)
    tokens, avg, greedy, train_s = SEQ[1]
    _done(lc.run_dir(a, "ada_repeat", 1), {"setting": "ada_repeat", "seed": 1, "steps": 2, "tokens": tokens,
                                           "train_seconds": train_s, "process_seconds": 610.0,
                                           "evaluations": [_evaluation(2, tokens, avg + 0.01, greedy, train_s)]})
    for s in (1, 2, 3, 4):
        step, tokens, avg, greedy, train_s = CROSS[s]
        _done(lc.run_dir(a, "grpo", s), {"setting": "grpo", "seed": s, "steps": step, "tokens": tokens,
                                         "train_seconds": train_s, "process_seconds": 900.0, "budget": SEQ[s][0],
                                         "crossing_step": step,
                                         "evaluations": [_evaluation(2, *GRPO[s], 60.0),
                                                         _evaluation(step, tokens, avg, greedy, train_s)]})
    return a, train, heldout


def _t3_p(t):
    """Two-sided p of Student's t with 3 degrees of freedom, in closed form."""
    return 1 - 2 / math.pi * (math.atan(t / math.sqrt(3)) + t * math.sqrt(3) / (3 + t * t))


def test_equal_tokens_report_by_hand(lc, lr, tmp_path):
    """d = Seq at 2 - GRPO at its crossing: 0.30 - 0.26, 0.32 - 0.25, 0.40 - 0.31, 0.28 - 0.23 = 0.04, 0.07, 0.09,
    0.05: mean 0.0625, sd sqrt(0.001475 / 3) = 0.022174, t = 0.0625 / (0.022174 / 2) = 5.637, p (3 df, closed form),
    interval 0.0625 +- t(0.975, 3) x 0.011087. Greedy at equal tokens: 0.05, -0.05, 0.05, 0.05. At Seq's training
    time, GRPO interpolated between (60 s, update 2) and its crossing: seed 1 0.20 + 0.06 x 40 / 120 = 0.22."""
    a, train, heldout = _equal_tokens(lc, tmp_path)
    body = lr.report(a, None, train, heldout)
    d = [0.04, 0.07, 0.09, 0.05]
    mean = sum(d) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 3)
    t = mean / (sd / 2)
    q = _bisect(lambda x: 1 - _t3_p(x) / 2, 0.975, 0.0, 20.0)  # t(0.975, 3) = 3.182
    assert round(q, 3) == 3.182
    assert (f"- mean +{mean:.4f} [+{mean - q * sd / 2:.4f}, +{mean + q * sd / 2:.4f}] (95% t interval, 4 pairs), p "
            f"{_t3_p(t):.4f}, sd of the differences {sd:.4f}") in body, body
    assert "- per seed: 1: +0.0400, 2: +0.0700, 3: +0.0900, 4: +0.0500" in body
    assert "**verdict: helps**" in body and _t3_p(t) < 0.05
    assert "2. Reproduction: 4 of 4 finished GRPO n=4 reruns equal their committed runs at update 2" in body
    assert "3. Crossing: 4 of 4 reruns stopped at the first step" in body
    assert "1. Seq A/A" in body and "avg_at_k +0.0100, accuracy +0.0000, tokens +0.0000" in body
    g = [0.05, -0.05, 0.05, 0.05]
    g_sd = math.sqrt(sum((x - 0.025) ** 2 for x in g) / 3)
    assert (f"crossing step), Reinforce-Ada balance minus GRPO n=4: +0.0250 [{0.025 - q * g_sd / 2:+.4f}, "
            f"{0.025 + q * g_sd / 2:+.4f}] (4 pairs)") in body
    at_time = [SEQ[s][1] - (GRPO[s][1] + (CROSS[s][2] - GRPO[s][1]) * (SEQ[s][3] - 60) / (CROSS[s][4] - 60))
               for s in (1, 2, 3, 4)]
    assert at_time[0] == pytest.approx(0.08)
    assert f"the two evaluations around it, Reinforce-Ada balance minus GRPO n=4: {sum(at_time) / 4:+.4f}" in body
    row = next(line for line in body.splitlines() if line.startswith("| 3 |"))
    assert "| 700 |" in row and "| equal |" in row and "| 7 (700) |" in row and "| +0.0900 |" in row
    # (e) greedy minus avg@4: Seq at 2 0.05, -0.02, 0.05, 0.02 (mean 0.025); GRPO at its crossing 0.04, 0.10, 0.09,
    # 0.02 (mean 0.0625), at 2 0.05, 0.05, 0.05, -0.02 (mean 0.0325); GRPO's at its crossing minus Seq's -0.01, 0.12,
    # 0.04, 0
    gap = [-0.01, 0.12, 0.04, 0.0]
    g_sd = math.sqrt(sum((x - 0.0375) ** 2 for x in gap) / 3)
    assert ("(descriptive, added after the runs): Reinforce-Ada balance 0.0250, GRPO n=4 0.0625 (at 2, committed: "
            f"0.0325); GRPO n=4's minus Reinforce-Ada balance's, paired by seed: +0.0375 [{0.0375 - q * g_sd / 2:+.4f}, "
            f"{0.0375 + q * g_sd / 2:+.4f}] (4 pairs).") in body, body
    assert "<!-- BEGIN learning_comparison_v4 -->" in (tmp_path / "learning.md").read_text()
    assert (tmp_path / "img" / "learning_v4_tokens.png").is_file() and "(img/learning_v4_tokens.png)" in body


def test_equal_tokens_runner_stops_at_a_rerun_that_does_not_reproduce(lc, lr, tmp_path, capsys):
    """Seed 2's rerun differs from its committed run at update 2 (avg@4 by 1e-12): the runner stops before seed 3's
    rerun, and the report withholds the verdict and says why."""
    a, train, heldout = _equal_tokens(lc, tmp_path)
    path = os.path.join(lc.run_dir(a, "grpo", 2), "done.json")
    run = json.load(open(path))
    run["evaluations"][0]["avg_at_k"] += 1e-12
    json.dump(run, open(path, "w"))
    shutil.rmtree(lc.run_dir(a, "grpo", 3))
    assert lc.gate(a, {}, "ada_repeat", 1) is None  # the Seq A/A is never held back
    held = lc.gate(a, {}, "grpo", 3)
    assert held.startswith("reproduction: grpo seed 2 at update 2:") and "avg_at_k differ" in held
    code = lc.main(["--design", "seq_vs_grpo_equal_tokens", "--out", a.out, "--reuse", a.reuse, "--doc", a.doc,
                    "--img-dir", a.img_dir, "--model", a.model, "--seeds", "1,2,3,4", "--updates", "2",
                    "--train-size", "8", "--eval-size", "4", "--eval-at-tokens", "150"])
    out = capsys.readouterr().out
    assert code == 2 and "stopped before grpo seed 3 by the plan's reproduction: grpo seed 2" in out
    assert not os.path.isdir(lc.run_dir(a, "grpo", 3))
    body = open(a.doc).read()
    assert "**not reproduced: seed(s) 2**" in body
    assert "**verdict: no verdict: the reproduction check failed (seed(s) 2)**" in body


def test_the_time_rule_counts_a_run_without_the_machine_alone_at_its_estimate(lc, lr, tmp_path):
    """Rule 5's amendment: the Seq A/A (listed in `not_alone`) took 610 s where its committed run took 600 s alone; the
    time rule counts it at its estimate, 10.0 minutes, and the four reruns at their measured 15.0 each: 70.0 minutes
    spent, and the ratio is measured over estimated with the A/A at 10 / 10. Without the amendment it counts 10.17."""
    import copy
    import dataclasses

    a, _, _ = _equal_tokens(lc, tmp_path)
    committed = lr.committed_runs(a)
    estimates = lr.run_estimates(a, committed)
    assert estimates[("ada_repeat", 1)]["minutes"] == pytest.approx(10.0)
    rerun_estimates = sum(estimates[("grpo", s)]["minutes"] for s in (1, 2, 3, 4))
    check = lr.time_check(a, committed)
    assert check["projected_minutes"] == pytest.approx(70.0)  # every run finished: nothing left to scale
    assert check["ratio"] == pytest.approx(max(1.0, 70.0 / (10.0 + rerun_estimates)))
    plain = copy.copy(a)
    plain.design = dataclasses.replace(a.design, rules=dataclasses.replace(a.design.rules, not_alone=()))
    check = lr.time_check(plain, committed)
    assert check["projected_minutes"] == pytest.approx(610.0 / 60.0 + 60.0)
    assert check["ratio"] == pytest.approx(max(1.0, (610.0 / 60.0 + 60.0) / (10.0 + rerun_estimates)))


def test_equal_tokens_runner_refuses_other_problems_or_flags(lc, tmp_path):
    a, _, _ = _equal_tokens(lc, tmp_path)
    with open(os.path.join(a.reuse, "data", "eval.jsonl"), "a") as f:
        f.write("\n")
    with pytest.raises(SystemExit, match="data/eval.jsonl differs"):
        lc.check_reuse(a)
    config = json.load(open(os.path.join(a.reuse, "config.json")))
    config["settings"]["grpo"] = ["--rollout.n_samples_per_prompt", "8"]
    json.dump(config, open(os.path.join(a.reuse, "config.json"), "w"))
    with pytest.raises(SystemExit, match="settings.grpo"):
        lc.check_reuse(a)
