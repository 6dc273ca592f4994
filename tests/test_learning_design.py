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
