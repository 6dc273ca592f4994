"""The benchmarks' core functions on tiny sizes: fields, hand-derived values, consistency with the project's metrics.
No timing assertions (performance claims live in docs/benchmarks.md, measured by the scripts themselves)."""

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq, make_rng, pool_metrics
from openrlhf_ada.analysis import learning_stats as stats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, "benchmarks")


def load(name):
    """benchmarks/ is not a package: import a script by path (registered, as dataclasses need its module)."""
    module_name = f"_benchmarks_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, os.path.join(BENCHMARKS, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@pytest.fixture(scope="module")
def se():
    return load("sampling_efficiency")


ROW_FIELDS = {"mix", "method", "family", "samples_per_prompt", "prompts_per_slot", "coverage", "eta",
              "resolved_share", "rounds_mean", "slots", "samples"}


def by_method(rows):
    return {r["method"]: r for r in rows}


def test_hopeless_prompts_give_no_signal_for_any_method(se):
    """Pass rates 0 and 1 only: no group can hold both classes, so coverage and eta are 0 for every method."""
    cap = 3
    rows = se.run_benchmark(prompts=20, seeds=(0,), mixes={"zero_one": [0.0, 1.0]}, cap=cap)
    assert len(rows) == len(se.NAMED)
    for r in rows:
        assert ROW_FIELDS <= set(r), r["method"]
        assert r["coverage"] == 0.0 and r["eta"] == 0.0, r["method"]
    rows = by_method(rows)
    # GRPO spends exactly n per prompt
    for n in (4, 8, 16):
        assert rows[f"GRPO n={n}"]["samples_per_prompt"] == n
        assert rows[f"GRPO n={n}"]["prompts_per_slot"] == 1
    # balance (2 + 2 needed): never resolved, all 4 rounds of 8 -> 32 samples per prompt, kept
    authors_balance = rows[se.AUTHORS["balance"].label]
    assert authors_balance["samples_per_prompt"] == 32 and authors_balance["resolved_share"] == 0.0
    # pos: p = 1 prompts resolve after round 1 (8 samples), p = 0 prompts use 32 -> 20 on average
    authors_pos = rows[se.AUTHORS["pos"].label]
    assert authors_pos["samples_per_prompt"] == 20 and authors_pos["resolved_share"] == 0.5
    # DAPO filters every group and refills until cap x prompts were drawn, 8 samples each
    dapo = rows["DAPO n=8 (filter + refill)"]
    assert dapo["prompts_per_slot"] == cap and dapo["samples_per_prompt"] == 8 * cap
    # the oracles skip every prompt (hopeless) at no cost
    for name in ("oracle-batch (knows p)", "oracle-seq (knows p, stops on outcomes)"):
        assert rows[name]["samples_per_prompt"] == 0 and rows[name]["prompts_per_slot"] == cap


def test_grpo_eta_equals_coverage_and_half_pass_rate_by_hand(se):
    """p = 1/2: a GRPO group of n lacks a class with probability 2 / 2^n; with every group fully trained, eta =
    coverage. Statistical check on 4000 prompts (a few standard errors)."""
    rows = by_method(se.run_benchmark(prompts=4000, seeds=(1,), mixes={"half": [0.5]}, cap=1,
                                      methods=[m for m in se.NAMED if m.family == "grpo"]))
    for n in (4, 8, 16):
        r = rows[f"GRPO n={n}"]
        assert r["eta"] == r["coverage"]
        assert r["coverage"] == pytest.approx(1 - 2 / 2**n, abs=4 * math.sqrt(2 / 2**n / 4000) + 1e-9)


def test_oracle_draws(se):
    assert se.oracle_batch_draws(0.5) == 5  # 1 - 2 / 2^4 = 0.875 < 0.9 <= 1 - 2 / 2^5
    assert se.oracle_batch_draws(0.01) == se.ORACLE_BUDGET
    assert se.oracle_seq_draws([1, 1, 1, 1, 1, 0, 1]) == 6  # the 6th sample brings the second class
    assert se.oracle_seq_draws([1, 0, 1, 1, 1]) == 4  # both classes early: still n samples
    assert se.oracle_seq_draws([0.0] * 40) == se.ORACLE_BUDGET


def test_ada_eta_matches_the_projects_pool_metrics(se):
    """The benchmark's eta for a keep-mode setting equals `ada/eta` of pool_metrics when every sample is one token,
    on the same outcome streams (PromptPool driven round by round here)."""
    prompts = 60
    u = se.Universe(np.random.default_rng(3).uniform(0, 1, prompts), seed=3)
    for method in (se.AUTHORS["balance"], se.AUTHORS["pos"], se.ada("balance", 4, 4, 8)):
        agg = method.run(u, prompts, cap=1)
        row = se._row("m", method, agg)
        config = Seq(n=4, mode=method.mode, round_size=method.round, first_round_size=method.first,
                           max_rounds=method.rounds)
        pools = []
        for p in range(prompts):
            pool, pos = PromptPool(config, rng=make_rng(0, p)), 0
            while not pool.done:
                size = pool.next_round_size()
                chunk = u.streams[p][pos: pos + size]
                pool.add_round(chunk, chunk, lengths=[1] * size)
                pos += size
            pools.append(pool)
        metrics = pool_metrics(pools, method.rounds)
        assert row["eta"] == pytest.approx(metrics["ada/eta"])
        assert row["samples_per_prompt"] == pytest.approx(metrics["ada/samples_per_prompt_mean"])
        assert row["resolved_share"] == pytest.approx(metrics["ada/resolved_share"])
        assert row["coverage"] == pytest.approx(metrics["ada/nonzero_adv_group_share"])  # keep mode: every slot trained


def test_report_names_winners_and_grid_is_valid(se):
    rows = se.run_benchmark(prompts=200, seeds=(0,), mixes={"uniform": "uniform"})
    grid = [m for m in se.grid() if m.label not in {x.label for x in se.NAMED}]
    assert len(grid) > 50
    grid_rows = se.run_benchmark(prompts=200, seeds=(0,), mixes={"uniform": "uniform"}, methods=grid[:12])
    text = se.report(rows, grid_rows, ["uniform"])
    assert "### uniform" in text and "Beating the authors' balance" in text and "In every mix" in text
    ref = se.reference_row(rows, "uniform", "balance")
    for r in se.winners(rows + grid_rows, "balance")["uniform"]:
        assert r["eta"] >= se.ETA_MARGIN * ref["eta"] and r["coverage"] >= ref["coverage"]


def test_update_section_replaces_only_its_own_block(se, tmp_path):
    path = tmp_path / "benchmarks.md"
    se.update_section(str(path), "a", "first A")
    se.update_section(str(path), "b", "only B")
    se.update_section(str(path), "a", "second A")
    text = path.read_text()
    assert "second A" in text and "first A" not in text and "only B" in text
    assert text.count("<!-- BEGIN a -->") == 1 and text.count("<!-- END b -->") == 1


@pytest.mark.slow  # imports openrlhf and builds upstream's experience maker: about 40 s
def test_advantage_overhead_core_runs_on_a_tiny_batch():
    ao = load("advantage_overhead")
    rows = ao.run_overhead(prompts=4, samples=(2, 4), max_tokens=16, estimators=("group_norm", "dr_grpo"), reps=2,
                           micro_batch_size=4, log=lambda m: None)
    assert [(r["samples_per_prompt"], r["estimator"]) for r in rows] == [
        (2, "group_norm"), (2, "dr_grpo"), (4, "group_norm"), (4, "dr_grpo")]
    for r in rows:
        for key in ("ratio_median", "cpu_ratio_median", "control_ratio_median", "upstream_median_s", "ours_median_s"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert r["micro_batches"] == r["prompts"] * r["samples_per_prompt"] // 4
    assert "| group_norm | 4 x 2 x 16 |" in ao.markdown_table(rows)
    split = ao.profile_split(prompts=4, n=2, max_tokens=16, estimator="dr_grpo", micro_batch_size=4)
    for who in ("ours", "upstream"):
        assert 0 < split[f"{who}_own_s"] <= split[f"{who}_total_s"]
        assert 0 < split[f"{who}_returns_s"] <= split[f"{who}_total_s"]


def test_advantage_overhead_measures_the_adora_and_pool_path():
    """The timed `ours` call really takes the ADORA + pool-baseline path on the benchmark's Experiences."""
    ao = load("advantage_overhead")
    from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker

    batch = ao.Batch(prompts=3, n=4, max_tokens=8, micro_batch_size=4)
    maker = ao.make_maker(AdoraPoolExperienceMaker, ao.make_args("dr_grpo", 4, 4, ours=True))
    assert maker.baseline == "pool" and maker.adora_active
    out = maker.compute_advantages_and_returns(batch.experiences())
    assert all("adora_weight" in e.info and e.advantages.shape == e.action_mask.shape for e in out)
    assert sum(len(e.index) for e in out) == 12


# --- the multi-epoch model (cancel, history) ----------------------------------------------------------------------

def test_expected_max_rounds_and_floor_draws_by_hand(se):
    # two prompts, rounds 1 or 2 with probability 1/2: P(max >= 1) = 1, P(max >= 2) = 1 - 1/4 -> 1.75
    assert se.expected_max_rounds({1: 1, 2: 1}, prompts=2) == pytest.approx(1.75)
    assert se.expected_max_rounds({4: 5}) == pytest.approx(4.0) and se.expected_max_rounds({}) == 0.0
    stream = [1, 1, 0, 1, 0] + [0] * 27
    assert se.floor_draws(stream, "balance") == 5  # 2nd wrong answer is the 5th sample
    assert se.floor_draws(stream, "signal") == 4  # both classes at the 3rd, n = 4 samples at the 4th
    assert se.floor_draws([1] * 32, "balance") == 0  # no signal in the cap: skipped for free
    assert se.floor_draws([0] * 31 + [1], "balance") == 32 and se.floor_draws([0] * 31 + [1], "signal") == 32


def test_epoch_universe_follows_its_stated_model(se):
    u = se.EpochUniverse("saturated", "wrong_longer", prompts=400, seed=1, epochs=3)
    p0 = u.p[0]
    assert np.all(u.p[2][p0 == 0] == 0) and np.all(u.p[2][p0 == 1] == 1)  # never learnt / always solved
    inner = (p0 > 0) & (p0 < 1)
    assert np.all(u.p[1][inner] >= p0[inner]) and u.p[2][inner].mean() > p0[inner].mean()  # rising
    for o, L, t in zip(u.outcomes, u.lengths, u.truncated):
        correct = o > 0.5
        assert L.min() >= se.MIN_LEN and L.max() <= se.MAX_LEN and L[correct].max() < se.MAX_LEN
        assert np.array_equal(t, ~correct & (L == se.MAX_LEN))
    o, L = np.concatenate(u.outcomes), np.concatenate(u.lengths)
    c, w = se.LENGTH_MODELS["wrong_longer"]
    assert np.median(L[o == 0]) / np.median(L[o == 1]) == pytest.approx(w / c, rel=0.1)
    # the two length models read the same outcomes
    v = se.EpochUniverse("saturated", "correct_longer", prompts=400, seed=1, epochs=3)
    assert all(np.array_equal(a, b) for a, b in zip(u.outcomes, v.outcomes))


def test_epoch_model_on_saturated_prompts_by_hand(se):
    """Pass rates 0 and 1 only (they never move): no group ever has signal. The authors' balance draws all 32
    samples in 4 rounds; a history that always skips saturated prompts skips every visit after the first epoch."""
    methods = [se.EpochMethod("GRPO n=4", "grpo"), se.EpochMethod(se.EPOCH_REFERENCE),
               se.EpochMethod("skip all", history=True, target=0.0, skip=1.0),
               se.EpochMethod(se.FLOOR_BALANCE, "floor", mode="balance")]
    rows = by_method(se.run_epoch_benchmark(prompts=10, seeds=(0,), mixes={"zero_one": [0.0, 1.0]},
                                            lengths=["wrong_longer"], methods=methods, epochs=3))
    u = se.EpochUniverse([0.0, 1.0], "wrong_longer", 10, 0, epochs=3)
    for r in rows.values():
        assert r["tokens_per_signal"] is None and r["coverage"] in (0.0, None)
    ref = rows[se.EPOCH_REFERENCE]
    assert (ref["samples_per_visit"], ref["rounds_mean"], ref["max_rounds_step"]) == (32, 4, pytest.approx(4.0))
    assert ref["started_len"] == pytest.approx(sum(int(L.sum()) for L in u.lengths) / (3 * 10 * 32))
    skip = rows["skip all"]
    assert skip["skipped_share"] == pytest.approx(2 / 3) and skip["missed_signal_share"] == 0
    assert skip["max_rounds_step"] == pytest.approx(4 * (1 - (2 / 3) ** 128))  # 2/3 of visits take 0 rounds
    assert rows[se.FLOOR_BALANCE]["samples_per_visit"] is None  # every visit skipped for free
    assert rows["GRPO n=4"]["samples_per_visit"] == 4


def test_epoch_model_tokens_and_eta_match_the_projects_pools_with_cancel(se):
    """The benchmark's tokens and eta for `+ cancel (arrival)` equal pool_metrics of PromptPools driven here under
    the stated timing model (shortest first; outstanding requests cut at the stop time)."""
    u = se.EpochUniverse("uniform", "correct_longer", prompts=40, seed=5, epochs=1)
    t = se.run_epochs(se.EpochMethod("c", cancel=True), u, seed=5)
    config = Seq(n=4, round_size=8, max_rounds=4, cancel=True)
    pools = []
    for i in range(40):
        o, L = u.outcomes[0][i], [int(x) for x in u.lengths[0][i]]
        pool, pos = PromptPool(config, rng=make_rng(5, i)), 0
        while not pool.done:
            size = pool.start_round()
            times = sorted(range(size), key=lambda j: (L[pos + j], j))
            cut = 0
            for rank, j in enumerate(times):
                if pool.add_sample(j, o[pos + j], o[pos + j], length=L[pos + j]):
                    cut = L[pos + j] * (size - rank - 1)
                    break
            pool.end_round(cancelled_tokens=cut)
            pos += size
        pools.append(pool)
    m = pool_metrics(pools, 4)
    assert t["tokens"] == m["ada/tokens_generated"] and t["samples"] == m["ada/samples_generated"]
    assert t["useful_tokens"] / t["tokens"] == pytest.approx(m["ada/eta"])
    assert t["signal"] / t["trained"] == pytest.approx(m["ada/nonzero_adv_group_share"])


def test_epoch_report_states_targets_and_bias(se):
    methods = [m for m in se.EPOCH_METHODS if m.name in (se.EPOCH_REFERENCE, "+ cancel (arrival)",
                                                          "+ cancel (request order)", se.FLOOR_BALANCE)]
    rows = se.run_epoch_benchmark(prompts=30, seeds=(0, 1), mixes=["uniform"], methods=methods, epochs=2)
    text = se.epoch_report(rows, ["uniform"], list(se.LENGTH_MODELS))
    assert "#### uniform" in text and "#### Targets" in text and "#### Length bias" in text
    ref = next(r for r in rows if r["method"] == se.EPOCH_REFERENCE)
    assert ref["ratio"] == pytest.approx(1.0) and ref["ratio_seeds"] == [pytest.approx(1.0)] * 2
    for r in rows:
        if r["method"].startswith("+ cancel"):  # cancelling never changes which groups have signal (balance)
            same = next(x for x in rows if x["method"] == se.EPOCH_REFERENCE and x["lengths"] == r["lengths"])
            assert r["coverage"] == same["coverage"] and r["rounds_mean"] == same["rounds_mean"]
            assert r["ratio"] <= 1.0


@pytest.mark.parametrize(
    "script,args,expect",
    [
        ("sampling_efficiency.py", ["--prompts", "20", "--seeds", "0", "--mixes", "paper_hard", "--no-grid",
                                    "--epoch-prompts", "20", "--epochs", "2"],
         ["### paper_hard", "#### paper_hard: initial", "#### Targets"]),
        ("adaptive_family.py", ["--prompts", "32", "--batch", "8", "--seeds", "0", "--epochs", "2", "--mixes",
                                "saturated"],
         ["### Mix `saturated`", "| GRESO + Est paper |", "the A/A row at"]),
        pytest.param("advantage_overhead.py", ["--prompts", "2", "--samples", "2", "--tokens", "8", "--reps", "1"],
                     ["| group_norm | 2 x 2 x 8 |"], marks=pytest.mark.slow),
    ],
)
def test_scripts_run_in_a_fresh_interpreter(tmp_path, script, args, expect):
    """As a user runs them (nothing imported beforehand, unlike under pytest's conftest), writing a docs section."""
    docs = tmp_path / "benchmarks.md"
    proc = subprocess.run([sys.executable, os.path.join(BENCHMARKS, script), *args, "--docs", str(docs)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for text in expect:
        assert text in proc.stdout
    text = docs.read_text()
    section = script[:-3]
    assert f"<!-- BEGIN {section} -->" in text and f"<!-- END {section} -->" in text
    assert "Machine: `" in text and "CPUs" in text and "Date: " in text and f"benchmarks/{script}" in text


# -- benchmarks/learning_comparison.py -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lc():
    return load("learning_comparison")


@pytest.fixture(scope="module")
def ld(lc):
    """The designs (benchmarks/learning_designs.py, as the runner imports it)."""
    return sys.modules["learning_designs"]


@pytest.fixture(scope="module")
def lr(lc):
    """The report writer (benchmarks/learning_report.py, as the runner imports it)."""
    return sys.modules["learning_report"]


def test_learning_runs_rotate_settings_by_seed(lc, ld):
    order = lc.run_order(["a", "b", "c", "d"], [1, 2, 3])
    assert order == [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("b", 2), ("c", 2), ("d", 2), ("a", 2),
                     ("c", 3), ("d", 3), ("a", 3), ("b", 3)]
    # stages one after the other, each rotated by seed
    assert lc.plan_order([["a", "b"], ["c"]], [1, 2]) == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("c", 1), ("c", 2)]
    a = lc.parse(["--design", "v2", "--settings", "grpo,ada_est;ada;grpo_n8"])
    assert a.stages == [["grpo", "ada_est"], ["ada"], ["grpo_n8"]] and a.settings == ["grpo", "ada_est", "ada", "grpo_n8"]
    assert sorted(lc.parse(["--design", "v2"]).settings) == sorted(ld.V2.names)  # the plan holds every setting once


def test_learning_counts_an_attempt_that_wrote_no_time_record_from_its_load_samples(lc, tmp_path):
    # attempt 1: samples at 100, 105, ..., 400 and no record (its machine went away);
    # attempt 2: samples at 1000, 1005, ..., 1200, recorded as starting at 1000.2 for 203 s
    first = [100.0 + 5 * i for i in range(61)]
    second = [1000.0 + 5 * i for i in range(41)]
    records = [{"start": 1000.2, "seconds": 203.0, "returncode": 0}]
    missing = lc.unrecorded_attempts(second + first, records)
    assert [(m["start"], m["seconds"]) for m in missing] == [(100.0, 305.0)]  # 400 - 100 + one 5 s period
    assert lc.unrecorded_attempts(first + second, records + [{"start": 100.1, "seconds": 301.0}]) == []
    # a gap of 3 periods or less is one attempt
    assert len(lc.unrecorded_attempts([0.0, 15.0, 30.0], [])) == 1
    assert len(lc.unrecorded_attempts([0.0, 15.1], [])) == 2
    # written to the run's records once: a second call finds nothing more
    with open(tmp_path / "load.jsonl", "w") as f:
        f.writelines(json.dumps({"time": t, "load1": 1.0}) + "\n" for t in first + second)
    with open(tmp_path / "wall_seconds.jsonl", "w") as f:
        f.write(json.dumps(records[0]) + "\n")
    assert len(lc.record_unrecorded_attempts(str(tmp_path))) == 1
    assert lc.record_unrecorded_attempts(str(tmp_path)) == []
    rows = [json.loads(line) for line in open(tmp_path / "wall_seconds.jsonl")]
    assert sum(r["seconds"] for r in rows) == 203.0 + 305.0


def test_learning_leftover_processes_found_by_marker_and_ended(lc):
    marker = f"test-{os.getpid()}"
    child = subprocess.Popen(["sleep", "60"], env={**os.environ, lc.MARKER_ENV: marker})
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, lc.MARKER_ENV: marker + "-other"})
    try:
        assert lc.leftover_processes(marker) == [child.pid]
        lc.end_leftovers(marker)
        assert child.wait(timeout=10) != 0 and other.poll() is None
    finally:
        for p in (child, other):
            p.kill()
            p.wait()


@pytest.mark.parametrize("design", ["v2", "seq_vs_grpo"])
def test_learning_default_folder_keeps_finished_runs_in_git_but_not_checkpoints(lc, design):
    """The design runs in parts, possibly from fresh clones: its default folder's finished runs (config, metrics,
    summaries) must be committable (the top .gitignore hides every runs/ folder), its checkpoints, logs, load traces
    and per-run plots must not."""
    if not os.path.isdir(os.path.join(REPO, ".git")):
        pytest.skip("not a git checkout")
    out = os.path.relpath(lc.parse(["--design", design]).out, REPO)
    run = os.path.join(out, "runs", "grpo_seed9")

    def ignored(path):
        return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0

    for kept in ("done.json", "metrics.jsonl", "config.json", "command.txt", "wall_seconds.jsonl"):
        assert not ignored(os.path.join(run, kept)), kept
    for left in ("load.jsonl", "train.log", "heldout.png"):
        assert ignored(os.path.join(run, left)), left
    assert not ignored(os.path.join(out, "base", "greedy", "done.json"))
    assert ignored(os.path.join(out, "base", "greedy", "train.log"))
    assert not ignored(os.path.join(out, "compare", "settings.json"))
    assert ignored(os.path.join(run, "ckpt", "global_step5", "model.pt"))
    assert ignored(os.path.join("runs", "learning", "runs", "grpo_seed1", "done.json"))  # other runs/ stay ignored


def test_learning_refuses_bad_arguments(lc, tmp_path):
    with pytest.raises(SystemExit):
        lc.parse(["--design", "v2", "--settings", "grpo,dapo"])
    with pytest.raises(SystemExit):
        lc.parse(["--design", "v2", "--seeds", "1,1"])
    with pytest.raises(SystemExit):
        lc.parse(["--design", "v2", "--settings", "grpo;grpo"])
    with pytest.raises(SystemExit):
        lc.parse(["--design", "v2", "--avg-temperature", "0"])
    with pytest.raises(SystemExit):
        lc.parse([])  # no design named
    with pytest.raises(SystemExit):  # the current design's settings, order and base measurement are its plan's
        lc.parse(["--design", "seq_vs_grpo", "--settings", "grpo"])
    with pytest.raises(SystemExit):
        lc.parse(["--design", "seq_vs_grpo", "--no-base"])
    with pytest.raises(SystemExit):  # the A/A control's seed
        lc.parse(["--design", "seq_vs_grpo", "--seeds", "2,3"])


def test_learning_settings_are_the_six_of_the_design(lc, ld):
    """Six settings, GRPO n=4 the reference; every one trains the same 32 samples per update (8 prompts x 4, Est
    allocating 4 per prompt on average, GRPO n=8 on 4 prompts a step); every run gets greedy and avg@k evaluation on
    the same flags, and stops at --updates updates."""
    v2 = ld.V2
    assert list(v2.names) == ["grpo", "grpo_n8", "grpo_adora", "ada", "ada_est", "ada_adora"]
    assert v2.reference == "grpo"

    def n(name):
        flags = v2.setting(name).flags
        return [flags[i + 1] for i, f in enumerate(flags) if f == "--rollout.n_samples_per_prompt"]

    assert {name: n(name) for name in v2.names} == {"grpo": ["4"], "grpo_n8": ["8"], "grpo_adora": ["4"],
                                                     "ada": ["4"], "ada_est": ["4"], "ada_adora": ["4"]}
    assert {name: v2.setting(name).prompts_per_step for name in v2.names} == {
        "grpo": 8, "grpo_n8": 4, "grpo_adora": 8, "ada": 8, "ada_est": 8, "ada_adora": 8}
    assert {v2.setting(name).trained_per_update for name in v2.names} == {32} and ld.TRAINED_PER_UPDATE == 32
    est = v2.setting("ada_est").flags
    assert est[est.index("--ada.strategy") + 1] == "est" and "--adora.enable" not in est
    a = lc.parse(["--design", "v2", "--avg-k", "6", "--avg-temperature", "0.7", "--updates", "40", "--eval-points",
                  "3"])
    flags = lc.common_flags(a)
    assert "--rollout.n_samples_per_prompt" not in flags
    for key, value in (("--eval.avg_k", "6"), ("--eval.avg_temperature", "0.7"), ("--eval.avg_seed", "0"),
                       ("--eval.temperature", "0"), ("--eval.steps", "14"), ("--local.max_steps", "40"),
                       ("--local.max_generated_tokens", "0"), ("--local.engine", "vllm")):
        assert flags[flags.index(key) + 1] == value, key
    assert "--local.eval_tokens" not in flags  # no token budget: evaluations by updates only
    for flag in ("--local.eval_at_tokens", "--local.request_seeds", "--local.skip_base_eval"):  # v2 had none
        assert flag not in flags, flag
    budget = lc.common_flags(lc.parse(["--design", "v2", "--budget", "900", "--eval-points", "3"]))
    assert budget[budget.index("--local.eval_tokens") + 1] == "300"
    assert "--eval.avg_k" not in lc.common_flags(a, avg=False)
    assert "--eval.avg_k" not in lc.common_flags(lc.parse(["--design", "v2", "--avg-k", "0"]))
    # the pool repeats: 32 prompts, 8 a step, 24 updates: each prompt seen 6 times
    d = lc.parse(["--design", "v2"])
    assert (d.train_size, d.updates, d.format) == (32, 24, "cot") and d.updates * 8 // d.train_size == 6


@pytest.mark.parametrize("name", ["grpo", "grpo_n8", "grpo_adora", "ada", "ada_est", "ada_adora"])
def test_learning_settings_pass_train_locals_checks(lc, tmp_path, name):
    """Each setting's train_local arguments, as a run gets them, pass train_local's own parsing and checks (the
    project's flag validation: Est with group_norm, ADORA with Seq, avg@k), with the setting's n and strategy."""
    from openrlhf_ada.cli.train_local import parse_local_args

    model = tmp_path / "model"
    model.mkdir()
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input": "What is 1 + 2?", "label": "3", "datasource": "easy"}) + "\n")
    a = lc.parse(["--design", "v2", "--out", str(tmp_path / "out")])
    args = parse_local_args(lc.train_argv(a, name, 5, str(model), str(data), str(data), resume=False))
    assert args.train.seed == 5 and args.eval.avg_k == 4 and args.eval.temperature == 0
    assert args.local.max_steps == 24 and args.local.max_generated_tokens == 0
    assert args.local.output_dir == lc.run_dir(a, name, 5)
    assert args.rollout.n_samples_per_prompt == (8 if name == "grpo_n8" else 4)
    assert args.rollout.n_samples_per_prompt * args.rollout.batch_size == 32  # the same trained batch
    assert (args.ada.enable, args.adora.enable) == (name.startswith("ada"), name.endswith("adora"))
    if args.ada.enable:
        assert args.ada.strategy == ("est" if name == "ada_est" else "seq")


def test_learning_verdict_rule():
    assert stats.verdict({"n": 3, "mean": 0.05, "low": 0.01, "high": 0.09}) == "helps"
    assert stats.verdict({"n": 3, "mean": -0.05, "low": -0.09, "high": -0.01}) == "hurts"
    assert stats.verdict({"n": 3, "mean": 0.02, "low": -0.01, "high": 0.05}) == "no difference larger than the interval"
    assert stats.verdict({"n": 1, "mean": 0.02, "low": None, "high": None}).startswith("no verdict")
    # fewer pairs than the design plans: the same rule, marked interim
    assert stats.verdict({"n": 3, "mean": -0.05, "low": -0.09, "high": -0.01}, planned=7) == "hurts (interim: 3 of 7 pairs)"
    assert stats.verdict({"n": 7, "mean": -0.05, "low": -0.09, "high": -0.01}, planned=7) == "hurts"
    # a half-width above the target (0.04 here) is reported as short of it; one below (0.025) is not
    assert stats.verdict({"n": 7, "mean": -0.05, "low": -0.09, "high": -0.01}, 7, 0.03) == "hurts; short of the 0.03 target"
    assert stats.verdict({"n": 7, "mean": 0.02, "low": -0.005, "high": 0.045}, 7, 0.03) == (
        "no difference larger than the interval")


def test_learning_primary_verdicts_holm_over_the_designs_ten_by_hand(ld, lr):
    """Holm over the 10 tests by hand: p sorted 0.001, 0.004, 0.006, 0.010, then 0.5 x 6; adjusted 10 x 0.001 =
    0.010, 9 x 0.004 = 0.036, 8 x 0.006 = 0.048 (all at most 0.05: rejected), 7 x 0.010 = 0.070 (not), the rest
    running maximum min(1, 6 x 0.5) = 1."""
    ps = {("ada", "updates"): (0.001, +0.05), ("ada", "tokens"): (0.004, -0.03), ("ada_est", "updates"): (0.006, 0.02),
          ("grpo_n8", "updates"): (0.010, -0.04)}
    family = lr.family(ld.V2)
    tests = {k: {"n": 3, "mean": ps.get(k, (0.5, 0.01))[1], "p": ps.get(k, (0.5, 0.01))[0]} for k in family}
    assert len(tests) == 10 and ("grpo", "updates") not in tests
    engaged = {name: True for name in ld.V2.names}
    out = stats.primary_verdicts(tests, engaged, 3, family)
    expect = {("ada", "updates"): (0.010, "helps"), ("ada", "tokens"): (0.036, "hurts"),
              ("ada_est", "updates"): (0.048, "helps"), ("grpo_n8", "updates"): (0.070, "no difference shown"),
              ("grpo_adora", "tokens"): (1.0, "no difference shown")}
    for key, (adjusted, rule) in expect.items():
        assert out[key]["adjusted"] == pytest.approx(adjusted) and out[key]["rule"] == rule, (key, out[key])
    # a setting whose mechanism did not engage (or could not be read) gets no verdict, whatever its p
    out = stats.primary_verdicts(tests, {**engaged, "ada": False, "ada_est": None}, 3, family)
    assert out[("ada", "updates")]["rule"] == "no verdict: its mechanism did not engage (table above)"
    assert out[("ada_est", "updates")]["rule"] == "no verdict: its mechanism could not be read (table above)"
    assert out[("grpo_n8", "updates")]["rule"] == "no difference shown"
    # a look before the family is complete gives no verdict, and counts the missing test at p = 1: with Est's
    # tokens test gone, the four smallest keep their ranks (10, 9, 8, 7 x p)
    partial = {k: v for k, v in tests.items() if k != ("ada_est", "tokens")}
    out = stats.primary_verdicts(partial, engaged, 3, family)
    assert out[("ada", "updates")] == {"adjusted": pytest.approx(0.010),
                                       "rule": "interim, no verdict: 9 of 10 tests have 3 pairs"}
    assert out[("grpo_n8", "updates")]["adjusted"] == pytest.approx(0.070)
    # fewer pairs than planned, or a test without a p (one pair), is waiting too
    out = stats.primary_verdicts(tests, engaged, 4, family)
    assert out[("ada", "updates")]["rule"] == "interim, no verdict: 0 of 10 tests have 4 pairs"
    one = {**tests, ("ada_adora", "updates"): {"n": 1, "mean": 0.1, "p": None}}
    out = stats.primary_verdicts(one, engaged, 3, family)
    assert out[("ada_adora", "updates")] == {"adjusted": None, "rule": "no verdict (1 paired seed)"}
    assert out[("ada", "updates")]["rule"] == "interim, no verdict: 9 of 10 tests have 3 pairs"


def test_learning_progress_has_a_line_for_every_update_even_between_polls(lc, tmp_path, capsys):
    """Three updates logged between two polls (a quick run) give three lines, each with the evaluation made by then;
    a poll with nothing new prints nothing."""
    rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "reward_mean": 0.25, "generated_tokens_total": 10.0},
            {"step": 2, "reward_mean": 0.5, "generated_tokens_total": 20.0, "eval/accuracy": 0.3},
            {"step": 3, "reward_mean": 0.75, "generated_tokens_total": 30.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = lc.parse(["--design", "v2", "--updates", "3"])
    assert lc.report_progress(a, str(tmp_path), "grpo", 1, 1, 1, 0.0, -1) == 3
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(lines) == 3
    assert "step 1/3, 10 tokens, reward 0.250, held-out 0.100 (step 0)" in lines[0]
    assert "step 3/3, 30 tokens, reward 0.750, held-out 0.300 (step 2)" in lines[2]
    assert lc.report_progress(a, str(tmp_path), "grpo", 1, 1, 1, 0.0, 3) == 3 and capsys.readouterr().out == ""


def test_learning_sign_test_by_hand():
    """Two-sided exact sign test: 7 of 7 below 0 -> 2 x (1/2)^7 = 0.015625; 1 of 3 above -> 2 x (1 + 3) / 8 = 1;
    1 of 6 below -> 2 x (1 + 6) / 64 = 0.21875; a zero is dropped: 2 of 2 above -> 2 x 1 / 4 = 0.5."""
    assert stats.sign_test_p([-0.01, -0.02, -0.03, -0.04, -0.05, -0.06, -0.07]) == pytest.approx(0.015625)
    assert stats.sign_test_p([-1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert stats.sign_test_p([1.0, 2.0, 3.0, 4.0, 5.0, -1.0]) == pytest.approx(0.21875)
    assert stats.sign_test_p([0.0, 1.0, 1.0]) == pytest.approx(0.5)
    assert stats.sign_test_p([0.0]) == 1.0


def test_learning_evaluation_noise_by_hand():
    """Step-0 avg@k of 0.02, 0.04, 0.06 over three runs: mean 0.04, sd 0.02, the difference of two evaluations
    sqrt(2) x 0.02 = 0.0282843; a run whose first evaluation is not at step 0 (a resumed log) is left out."""
    runs = [{"evaluations": [{"step": 0, "avg_at_k": v}, {"step": 3, "avg_at_k": 0.5}]} for v in (0.02, 0.04, 0.06)]
    runs.append({"evaluations": [{"step": 2, "avg_at_k": 0.9}]})
    noise = stats.evaluation_noise(runs, "avg_at_k")
    assert noise["n"] == 3 and (noise["min"], noise["max"]) == (0.02, 0.06)
    assert (noise["mean"], noise["sd"], noise["difference_sd"]) == pytest.approx((0.04, 0.02, 0.0282843), abs=1e-7)
    assert stats.evaluation_noise(runs[:1], "avg_at_k") is None  # one run: no spread


def _learning_rows(end_avg, mid_avg, end_greedy, tokens=(100.0, 200.0), last=None):
    """Evaluations at 0, tokens[0], tokens[1] generated tokens (steps 0, 1, 2); avg@k 0.10 before training; `last`:
    more metrics of step 2."""
    evals = [(0.10, 0.30), (mid_avg, 0.35), (end_avg, end_greedy)]
    rows = []
    for step, (avg, greedy) in enumerate(evals):
        row = {"step": step, "generated_tokens_total": ([0.0] + list(tokens))[step], "eval/accuracy": greedy,
               "eval/accuracy_se": 0.03, "eval/avg_at_k": avg, "eval/avg_at_k_se": 0.01, "timing/eval": 5.0,
               "timing/eval_avg": 3.0}
        if step:
            row.update({"generated_tokens": tokens[step - 1] - ([0.0] + list(tokens))[step - 1],
                        "reward_mean": 0.2, "samples_per_prompt": 4.0, "zero_adv_group_share": 0.5,
                        "timing/step": 30.0})
        if step == 2:
            row.update(last or {})
        rows.append(row)
    return rows


def test_learning_report_uses_compare_statistics_by_hand(lc, lr, tmp_path):
    """Hand-made finished runs (metrics.jsonl, config.json, done.json from summarize_run) of three settings, seeds
    1-3, and one of a fourth with an unshared seed; --updates 2, a pool of 8 prompts (8 a step: update 2 is the only
    one after the first visit, where the mechanisms are read). Evaluations at 0, 100, 200 tokens (updates 0, 1, 2);
    avg@k 0.10 before training.
      GRPO n=4: avg@k 0.12 at 100, G = 0.20, 0.18, 0.22 at 200; greedy at 200: 0.3, 0.4, 0.5
      Est:      avg@k 0.14 at 100, E = 0.25, 0.27, 0.29;         greedy 0.4, 0.3, 0.5
      ADORA:    avg@k 0.12 at 100, G - 0.05, 0.06, 0.07;          greedy 0.3, 0.4, 0.5
    At update 2 = at 200 tokens (both axes), Est minus GRPO: 0.05, 0.09, 0.07 -> mean 0.07, sd 0.02, half-width
    t(0.975, 2) x 0.02 / sqrt(3) = 4.302653 x 0.011547 = 0.049683: [0.0203, 0.1197]; t = 0.07 / 0.011547 = 6.0622,
    two-sided p with 2 df 1 - t / sqrt(t^2 + 2) = 0.02614. ADORA: -0.05, -0.06, -0.07 -> -0.06, sd 0.01, t = 10.392,
    p = 0.009150. Holm over the 4 tests (2 settings x 2 axes; the fourth setting has no pair): ADORA 4 x 0.00915 =
    0.0366 (and max(0.0366, 3 x 0.00915)), rejected: hurts; Est 2 x 0.02614 = 0.0523 > 0.05. Est's mechanism did not
    engage in seed 3 (no prompt seen before): no verdict for Est. Curve mean over 0..200 (trapezoids on 0, 100, 200):
    (0.11 + (0.12 + G) / 2) / 2 for GRPO, (0.12 + (0.14 + E) / 2) / 2 for Est, so Est minus GRPO is 0.01 + d / 4 =
    0.0225, 0.0325, 0.0275: mean 0.0275, sd 0.005, half-width 0.012421. Greedy at 200, Est minus GRPO: 0.1, -0.1,
    0 -> mean 0."""
    a = lc.parse(["--design", "v2", "--out", str(tmp_path / "out"), "--doc", str(tmp_path / "learning.md"), "--img-dir",
                  str(tmp_path / "img"), "--grid-points", "3", "--avg-k", "4", "--eval-size", "2", "--updates", "2",
                  "--train-size", "8", "--seeds", "1,2,3,4"])
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input": "x", "label": "1", "datasource": "easy"}) + "\n")
    G, E = {1: 0.20, 2: 0.18, 3: 0.22}, {1: 0.25, 2: 0.27, 3: 0.29}
    greedy = {"grpo": {1: 0.3, 2: 0.4, 3: 0.5}, "ada_est": {1: 0.4, 2: 0.3, 3: 0.5},
              "grpo_adora": {1: 0.3, 2: 0.4, 3: 0.5}}
    plan = {"grpo": {s: (G[s], 0.12) for s in G}, "ada_est": {s: (E[s], 0.14) for s in E},
            "grpo_adora": {s: (G[s] - 0.04 - 0.01 * s, 0.12) for s in G}, "ada": {7: (0.3, 0.2)}}

    def mechanism(name, seed):
        if name == "ada_est":  # seeds 1, 2 engaged; seed 3 saw no prompt before
            return {"zero_adv_group_share": 0.25, "ada/est_seen_share": 0.0 if seed == 3 else 1.0,
                    "ada/est_p_hat_mean": 0.4, "ada/alloc_min": 2.0, "ada/alloc_max": 6.0, "ada/alloc_cov_n_r": -0.2}
        if name == "grpo_adora":
            return {"adora/mixed_share": 0.5, "adora/attenuated_mixed_share": 0.25, "adora/length_gap_mixed": 3.0}
        return {}

    for name, seeds in plan.items():
        for seed, (end, mid) in seeds.items():
            folder = lc.run_dir(a, name, seed)
            os.makedirs(folder)
            rows = _learning_rows(end, mid, greedy.get(name, {}).get(seed, 0.3), last=mechanism(name, seed))
            with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump({"train.seed": seed, "eval.problems_sha256": "same"}, f)
            with open(os.path.join(folder, "load.jsonl"), "w") as f:
                f.write(json.dumps({"time": 0, "load1": 2.0}) + "\n")
            summary = {**lc.summarize_run(folder, name, seed), "process_seconds": 120.0}
            with open(os.path.join(folder, "done.json"), "w") as f:
                json.dump(summary, f)
    body = lr.report(a, None, str(data), str(data))
    ref = "minus GRPO n=4"
    assert ref in body and "Student t" in body
    lines = body.splitlines()
    # the mechanisms, per run, before any verdict
    assert "| Reinforce-Ada-Est | 3 | 1 | 0.750 | est | **no** | " in body and "no prompt was seen before" in body
    assert "| Reinforce-Ada-Est | 1 | 1 | 0.750 | est | yes | " in body
    assert "| GRPO + ADORA | 2 | 1 | 0.500 | adora | yes | mixed groups 0.500 of all, 0.250 of them re-weighted" in body
    assert "| Reinforce-Ada balance | 7 | 1 | 0.500 | seq | unread | " in body  # no first-round share logged
    assert "- Reinforce-Ada-Est: +0.250 [+0.250, +0.250] (3 pairs)" in body  # non-zero-advantage share, paired
    # the primary tests: both axes, paired t p, verdicts gated by the mechanisms and by a complete family
    # Holm over the design's 10 tests, the 6 not run counted at p = 1: ADORA's two equal p's take ranks 1-2 (x 10,
    # x 9: both 10 p), Est's ranks 3-4 (x 8, x 7: both 8 p); seeds 1-4 planned and 3 paired, so no verdict yet
    t_est, t_adora = 0.07 / (0.02 / math.sqrt(3)), 0.06 / (0.01 / math.sqrt(3))
    p_est, p_adora = 1 - t_est / math.sqrt(t_est ** 2 + 2), 1 - t_adora / math.sqrt(t_adora ** 2 + 2)
    assert (round(p_est, 3), round(p_adora, 3), round(8 * p_est, 3), round(10 * p_adora, 3)) == (
        0.026, 0.009, 0.209, 0.091)
    for axis in ("2 updates", "equal tokens"):
        assert (f"| GRPO + ADORA | {axis} | -0.060 [-0.085, -0.035] (3) | {p_adora:.3f} | {10 * p_adora:.3f} | "
                "interim, no verdict: 0 of 10 tests have 4 pairs |") in body, axis
        assert (f"| Reinforce-Ada-Est | {axis} | +0.070 [+0.020, +0.120] (3) | {p_est:.3f} | {8 * p_est:.3f} | "
                "no verdict: its mechanism did not engage (table above) |") in body, axis
        assert f"| GRPO n=8 | {axis} | not run yet | 1 (counted) | - | - |" in body, axis
    assert "Holm-adjusted over the design's 10 tests" in body
    # seeds from the spread: the largest sd of paired differences at update 2 is Est's 0.02; t(0.975, n - 1) x 0.02 /
    # sqrt(n): n = 4 gives 3.182446 x 0.01 = 0.0318 > 0.03, n = 5 gives 2.776445 x 0.008944 = 0.0248: 5 seeds;
    # 10 runs of 120 s: 2 min a run, 6 settings x n x 2 min <= 6 h: n <= 30
    assert ("Reinforce-Ada-Est 0.0200; the largest, 0.0200, asks for 5 seeds for a paired half-width of 0.03; at "
            "2.0 min a run, 30 seeds of the 6 settings fit in 6 hours.") in body
    # an invocation that runs a subset still sizes the whole comparison: the settings with runs here (GRPO n=4,
    # GRPO + ADORA, balance, Est: 4) and the one it names (GRPO n=8): 5 x n x 2 min <= 6 h: n <= 36
    subset = lr.sizing_from_runs(argparse.Namespace(**{**vars(a), "settings": ["grpo_n8"]}), lr.finished_runs(a))
    assert (subset["settings"], subset["fit"]) == (5, 36)
    avg_table = lines.index(next(line for line in lines if line.startswith("Held-out avg@4 at the budget")))
    greedy_table = lines.index(next(line for line in lines if line.startswith("Held-out greedy accuracy at")))
    row = next(line for line in lines[avg_table:greedy_table] if line.startswith("| Reinforce-Ada-Est |"))
    assert row == ("| Reinforce-Ada-Est | 3 | 0.270 [0.220, 0.320] | +0.070 [+0.020, +0.120] (3 pairs) | 0.050 | "
                   "0.163 [0.150, 0.175] | +0.027 [+0.015, +0.040] (3 pairs) | 0.012 |"), row  # compare's, no verdict
    # the evaluation's noise beside the pairs' spread: every run starts at avg@k 0.10 (sd 0); Est's differences at
    # the budget 0.05, 0.09, 0.07 (sd 0.02, none below 0), ADORA's -0.05, -0.06, -0.07 (sd 0.01, all below 0);
    # the sign test with 3 of 3 on one side: 2 x (1/2)^3 = 0.25
    assert "Over the 10 runs those values have mean 0.1000 and standard deviation 0.0000" in body
    assert "- Reinforce-Ada-Est: standard deviation 0.0200 over 3 pairs; 0 of 3 below 0 (two-sided sign test p = 0.250)" \
        in body
    assert "- GRPO + ADORA: standard deviation 0.0100 over 3 pairs; 3 of 3 below 0 (two-sided sign test p = 0.250)" \
        in body
    row = next(line for line in lines[avg_table:greedy_table] if line.startswith("| GRPO n=4 |"))
    assert "| 0.200 [" in row and "reference" in row
    # greedy accuracy is secondary: its differences and intervals, and no verdict
    row = next(line for line in lines[greedy_table:] if line.startswith("| Reinforce-Ada-Est |"))
    assert "| +0.000 [" in row and "no difference" not in row and "interim" not in row, row
    assert row.count(" | ") == 7, row  # setting, seeds, then 3 cells at the budget and 3 over the curve
    header = lines[greedy_table + 2]
    assert "verdict" not in header and header.count("|") == row.count("|") == lines[greedy_table + 3].count("|")
    assert "Reinforce-Ada balance: no seed shared with GRPO n=4" in body
    assert "| Reinforce-Ada balance | 7 | 2 | 200 |" in body  # its run is still in the per-run table
    assert "Machine time of these 10 runs: 0.33 hours" in body  # 10 x 120 s
    # the report's images: written, shown in its section, and none of them an image that the page's other sections
    # show (the earlier comparisons' plots are kept as they were measured)
    with open(os.path.join(REPO, "docs", "learning.md"), encoding="utf-8") as f:
        page = f.read()
    outside = page.split("<!-- BEGIN learning_comparison_v2 -->")[0] + \
        page.split("<!-- END learning_comparison_v2 -->")[1]
    for image in ("learning_v2_avg_at_k.png", "learning_v2_accuracy.png", "learning_v2_time.png"):
        assert (tmp_path / "img" / image).stat().st_size > 0 and f"]({os.path.relpath(tmp_path / 'img', tmp_path)}" \
            f"/{image})" in body
        assert f"img/{image}" not in outside
    assert "img/learning_time.png" in outside and "img/learning_powered_time.png" in outside  # what it guards
    saved = json.loads((tmp_path / "out" / "compare" / "settings.json").read_text())
    curve = next(p for p in next(m for m in saved["metrics"] if m["metric"] == "eval/avg_at_k")["points"]
                 if p["at"] == "curve")["differences"]["Reinforce-Ada-Est"]
    assert curve["mean"] == pytest.approx(0.0275)
    assert (curve["low"], curve["high"]) == pytest.approx((0.0275 - 0.012421, 0.0275 + 0.012421), abs=1e-6)
    assert saved["reference"] == "GRPO n=4" and [s["name"] for s in saved["settings"]] == [
        "GRPO n=4", "GRPO + ADORA", "Reinforce-Ada-Est"]
    text = (tmp_path / "learning.md").read_text()
    assert text.count("<!-- BEGIN learning_comparison_v2 -->") == 1 and body in text
    # a run evaluated on other held-out problems: compare refuses to pair it, the report says so and keeps its rows
    with open(os.path.join(lc.run_dir(a, "ada_est", 2), "config.json"), "w") as f:
        json.dump({"train.seed": 2, "eval.problems_sha256": "other"}, f)
    body = lr.report(a, None, str(data), str(data))
    assert "compare refused these runs" in body and "different held-out problems" in body
    assert "| Reinforce-Ada-Est | 2 |" in body and "**Primary metrics**" not in body


def test_learning_sizing_by_hand(lr):
    """The earlier comparison's seeds (greedy at 8000 tokens): within-setting variances (a - b)^2 / 2 = 0.0006125,
    0.0015125, 0.0021125, 0.0032 -> pooled 0.001859375; one evaluation's binomial variance, the mean of p (1 - p) /
    199 over the eight values = 0.00066993; training part 0.00118945. A pilot with avg@k SE 0.02 at the end: one
    run's variance 0.00158945, a paired difference's 0.0031789 (sd 0.056382). Half-width with 6 seeds: 2.570582 x
    0.056382 / sqrt(6) = 0.059169; 16 seeds: 2.131450 x 0.056382 / 4 = 0.030044 > 0.03; 17 seeds: 2.119905 x
    0.056382 / sqrt(17) = 0.028989: 17 seeds. Time: a run of 600 s (400 training, 2 x 60 evaluating, 80 other);
    the base model 2 x (80 + 60) s = 280 s; 6 settings x 17 seeds = 102 runs: 102 x 600 + 280 s = 17.08 h."""
    spread = stats.earlier_spread()
    assert spread["pooled_sd"] ** 2 == pytest.approx(0.001859375)
    assert spread["eval_se"] ** 2 == pytest.approx(0.00066993, abs=1e-8)
    assert spread["train_sd"] ** 2 == pytest.approx(0.00118945, abs=1e-8) and spread["df"] == 4
    summary = {"setting": "grpo", "seed": 1, "steps": 14, "tokens": 8100.0, "process_seconds": 600.0,
               "train_seconds": 400.0, "load_mean": 2.5,
               "evaluations": [{"eval_seconds": 60.0, "eval_avg_seconds": 40.0, "avg_at_k": 0.05, "avg_at_k_se": 0.01,
                                "accuracy": 0.1, "accuracy_se": 0.02},
                               {"eval_seconds": 60.0, "eval_avg_seconds": 40.0, "avg_at_k": 0.1, "avg_at_k_se": 0.02,
                                "accuracy": 0.2, "accuracy_se": 0.03}]}
    s = stats.sizing(summary, target=0.03, hours=5.0)
    assert s["sd_difference"] == pytest.approx(0.056382, abs=1e-6)
    assert stats.paired_half_width(s["sd_difference"], 6) == pytest.approx(0.059169, abs=1e-6)
    assert stats.paired_half_width(s["sd_difference"], 16) == pytest.approx(0.030044, abs=1e-6)
    assert s["seeds_needed"] == 17 and s["pilot"]["other_seconds"] == pytest.approx(80.0)
    assert s["base_hours"] * 3600 == pytest.approx(280.0)
    full = next(r for r in s["designs"] if r["settings"] == 6 and r["seeds"] == 17)
    assert full["hours"] == pytest.approx((102 * 600 + 280) / 3600) and not full["fits"]
    # within 5 h: 6 settings x n x 600 s + 280 s <= 18000 s -> n <= 4; 2 settings -> n <= 14
    assert max(r["seeds"] for r in s["designs"] if r["settings"] == 6 and r["fits"]) == 4
    assert max(r["seeds"] for r in s["designs"] if r["settings"] == 2 and r["fits"]) == 14
    # half the training part: 2 x (0.00118945 / 4 + 0.0004) = 0.00139473 (sd 0.037346); 8 seeds: 2.364624 x
    # 0.037346 / sqrt(8) = 0.031222 > 0.03; 9 seeds: 2.306004 x 0.037346 / 3 = 0.028707
    half = s["sensitivity"][0.5]
    assert half["sd_difference"] == pytest.approx(0.037346, abs=1e-6) and half["seeds_needed"] == 9
    text = lr.sizing_text(s)
    assert "Seeds for a half-width of 0.03: 17" in text and "| 6 | 17 | 102 | 17.1 | 0.0290 | no |" in text


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_learning_comparison_tiny_run_resumes_and_reports(tmp_path, tiny_llama_path):
    """A tiny configuration in a fresh interpreter (tiny llama, transformers engine), GRPO n=4 and Reinforce-Ada-Est
    with seed 3: a first part stopped by --stop-after after one run; the same command without it runs the other;
    each run goes to its 2 updates with greedy and avg@k evaluations before and at the end, recording its tokens;
    a pool of 8 prompts, 8 a step, so the second update repeats the first's prompts and Est's estimator has
    something to read; the report has the rows, the mechanism checks of update 2, the primary tests on both axes
    (one pair: no verdict), compare's statistics, band plots and commands; a further invocation redoes nothing; a
    run whose done.json is gone continues from its checkpoint; other settings in the same folder are refused."""
    out, doc = tmp_path / "out", tmp_path / "learning.md"
    args = ["--design", "v2", "--model", tiny_llama_path, "--engine", "hf", "--updates", "2", "--eval-points", "1", "--train-size", "8",
            "--eval-size", "4", "--avg-k", "2", "--max-new-tokens", "3", "--settings", "grpo,ada_est", "--seeds", "3",
            "--no-base", "--out", str(out), "--doc", str(doc), "--img-dir", str(tmp_path / "img"), "--poll", "1"]

    def invoke(*extra):
        return subprocess.run([sys.executable, os.path.join(BENCHMARKS, "learning_comparison.py"), *args, *extra],
                              capture_output=True, text=True, timeout=400)

    proc = invoke("--stop-after", "1e-9")  # the first run of the order only
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--stop-after 1e-09 h reached: 1 runs not started (ada_est seed 3)" in proc.stdout
    assert (out / "runs" / "grpo_seed3" / "done.json").is_file()
    assert not (out / "runs" / "ada_est_seed3").exists()
    assert "Reinforce-Ada-Est: no seed shared" not in doc.read_text()  # not run yet: not in the statistics at all

    proc = invoke()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "grpo seed 3: finished earlier" in proc.stdout
    folder = out / "runs" / "ada_est_seed3"
    done = json.loads((folder / "done.json").read_text())
    assert done["tokens"] > 0 and done["steps"] == 2
    steps = [e["step"] for e in done["evaluations"]]
    assert steps == [0, 2]
    assert [e["tokens"] for e in done["evaluations"]] == sorted(e["tokens"] for e in done["evaluations"])
    for e in done["evaluations"]:  # avg@2 on 4 problems: a multiple of 1/8, with its standard error
        assert e["avg_at_k"] * 8 == pytest.approx(round(e["avg_at_k"] * 8)) and e["avg_at_k_se"] >= 0
    assert "step 1/2, " in proc.stdout and " tokens, reward " in proc.stdout  # progress lines
    text = doc.read_text()
    assert "<!-- BEGIN learning_comparison_v2 -->" in text and "| Reinforce-Ada-Est | 3 |" in text
    assert "| GRPO n=4 | 3 |" in text and "Held-out avg@2 at the budget" in text
    # Est's estimator read update 2: its prompts were seen at update 1 (whether it moved the allocation is the
    # tiny model's business: the check's verdict is not asserted, only that it was read)
    row = next(line for line in text.splitlines() if line.startswith("| Reinforce-Ada-Est | 3 | 1 | "))
    assert "| est | " in row and "prompts seen before 1.00" in row and "unread" not in row, row
    rows = [line for line in text.splitlines() if line.startswith("| Reinforce-Ada-Est | ") and "no verdict" in line]
    assert [r.split(" | ")[1] for r in rows] == ["2 updates", "equal tokens"], rows  # one pair: no p, no verdict
    assert "--ada.strategy est" in text and "--eval.avg_k 2" in text and "learning_comparison.py --design v2 --model" in text
    for image in ("learning_v2_avg_at_k.png", "learning_v2_accuracy.png", "learning_v2_time.png"):
        assert (tmp_path / "img" / image).stat().st_size > 0, image
    saved = json.loads((out / "compare" / "settings.json").read_text())
    assert [(s["name"], s["seeds"]) for s in saved["settings"]] == [("GRPO n=4", [3]), ("Reinforce-Ada-Est", [3])]
    train_inputs = {json.loads(line)["input"] for line in open(out / "data" / "train.jsonl")}
    held_inputs = {json.loads(line)["input"] for line in open(out / "data" / "eval.jsonl")}
    assert len(held_inputs) == 4 and not train_inputs & held_inputs

    proc = invoke()  # finished: nothing is redone
    assert proc.returncode == 0 and proc.stdout.count("finished earlier") == 2
    assert len((folder / "command.txt").read_text().splitlines()) == 1

    (folder / "done.json").unlink()  # as if interrupted after its last checkpoint
    proc = invoke()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    commands = (folder / "command.txt").read_text().splitlines()
    assert len(commands) == 2 and "--local.overwrite" in commands[0] and "--ckpt.load_enable" in commands[1]
    assert json.loads((folder / "done.json").read_text())["evaluations"] == done["evaluations"]

    proc = invoke("--updates", "3")
    assert proc.returncode != 0 and "other settings (updates)" in proc.stdout + proc.stderr


def test_rollout_realistic_totals_and_length_bias_by_hand():
    """benchmarks/rollout_realistic.py's per-run totals and length table on a hand-made run (batch 2): step 1 trains
    2 groups (one with signal), step 2 one group with signal and skips one prompt."""
    rr = load("rollout_realistic")

    def group(rewards, lengths):
        return {"rewards": rewards, "scores": rewards, "lengths": lengths, "truncated": [False] * 4}

    def pool(samples, tokens, cancelled=0, cancelled_tokens=0, rounds=1, lengths=(), pos=()):
        return {"samples": samples, "tokens": tokens, "cancelled": cancelled, "cancelled_tokens": cancelled_tokens,
                "discarded": 0, "rounds": rounds, "pool_lengths": list(lengths), "pool_pos": list(pos), "kept": []}

    run = {"steps": [
        {"epoch": 0, "wall": 10.0, "tokens": 300.0, "samples": 20.0, "skipped": 0.0,
         "groups": [group([1, 0, 0, 1], [10, 20, 30, 40]), group([0, 0, 0, 0], [5, 5, 5, 5])],
         "pools": [pool(12, 200, cancelled=2, cancelled_tokens=20, rounds=2, lengths=[10, 20, 30, 40, 50],
                        pos=[True, False, False, True, True]),
                   pool(8, 100, rounds=1, lengths=[5] * 8, pos=[False] * 8)]},
        {"epoch": 1, "wall": 4.0, "tokens": 100.0, "samples": 8.0, "skipped": 1.0,
         "groups": [group([1, 1, 0, 0], [8, 8, 8, 8])],
         "pools": [pool(8, 100, rounds=3, lengths=[8] * 8, pos=[True, True] + [False] * 6)]},
    ], "load": [1.0, 3.0], "vllm_tokens": 400.0}
    s = rr.summarize_run(run, batch=2)
    assert s["step_wall"] == 10.0 and s["steps"] == 2  # only step 1 trained a full batch
    assert (s["visits"], s["samples_per_visit"], s["tokens_per_visit"]) == (4, 7.0, 100.0)  # 3 pools + 1 skipped
    assert (s["groups"], s["signal_groups"], s["signal_per_visit"]) == (3, 2, 0.5)
    assert s["coverage"] == pytest.approx(2 / 3) and s["skipped_share"] == 0.25
    assert s["eta"] == pytest.approx((100 + 32) / 400) and s["tokens_per_signal_group"] == 200.0
    assert s["rounds"] == 2.0 and s["cancelled_token_share"] == pytest.approx(20 / 400)
    assert (s["load_mean"], s["load_max"], s["vllm_ratio"]) == (2.0, 3.0, 1.0)
    b = rr.length_bias([run])
    assert b["kept"] == pytest.approx(152 / 12) and b["kept_pos"] == 16.5 and b["kept_neg"] == 10.75
    # pool: correct 10, 40, 50, 8, 8; wrong 20, 30, 5 x 8, 8 x 6; finished: (400 - 20) tokens / (28 - 2) samples
    assert b["pool_pos"] == pytest.approx(116 / 5) and b["pool_neg"] == pytest.approx(138 / 16)
    assert b["finished"] == pytest.approx(380 / 26) and (b["cancelled"], b["cancelled_n"]) == (10.0, 2)
    # ADORA: group 1 longest correct 40 > mean wrong 25 (advantageous); group 3: 8 > 8 is not
    assert (b["advantageous"], b["signal_groups"]) == (0.5, 2)


def test_learning_max_digits_writes_easier_problems_and_is_part_of_the_config(lc, tmp_path):
    """--max-digits 1: every training and held-out problem has 1-digit terms (its datasource says so); the
    chain-of-thought wording is the question; a folder written with 2 digits refuses --max-digits 1."""
    a = lc.parse(["--design", "v2", "--out", str(tmp_path / "one"), "--max-digits", "1", "--train-size", "8",
                  "--eval-size", "4"])
    lc.check_config(a)
    train, heldout = lc.prepare_data(a)
    rows = [json.loads(line) for path in (train, heldout) for line in open(path)]
    assert len(rows) == 12 and all(r["datasource"].endswith("_1digit") for r in rows)
    assert all("Work it out one term at a time" in r["input"] for r in rows)
    b = lc.parse(["--design", "v2", "--out", str(tmp_path / "one"), "--train-size", "8", "--eval-size", "4"])
    with pytest.raises(SystemExit, match="other settings"):
        lc.check_config(b)


@pytest.fixture(scope="module")
def af():
    return load("adaptive_family")


def _rule(af, name):
    return next(r for r in af.RULES if r.name == name)


def test_adaptive_family_budget_and_each_rules_mechanism_by_hand(af):
    """The budget is the lengths of the first 4 samples of every prompt visit in 3 passes, summed by hand; GRPO n=4
    spends it in exactly passes x prompts / batch updates; DAPO trains only groups with both classes; GRESO skips
    nothing in the first pass (no prompt has a history) and skips in later ones; a saturated prompt (p = 0 or 1)
    never gives a trained group with signal, under any rule."""
    world = af.World("saturated", "wrong_longer", prompts=64, batch=16, seed=0)
    budget = af.grpo_budget(world, 3.0)
    by_hand, visits = 0.0, {}
    for epoch in range(3):
        for pos, i in enumerate(world.order(epoch)):
            update = (epoch * 64 + pos) // 16  # the step this visit is in
            by_hand += sum(world.visit(int(i), visits.get(int(i), 0), update)[1][:4])
            visits[int(i)] = visits.get(int(i), 0) + 1
    assert budget == by_hand
    grpo = af.run_rule(_rule(af, "GRPO n=4"), world, budget, dapo_cap=10)
    assert grpo["updates"] == 3 * 64 // 16 and grpo["tokens"] == budget
    assert grpo["trained"] == grpo["updates"] * 16
    dapo = af.run_rule(_rule(af, "DAPO dynamic filtering n=4"), world, budget, dapo_cap=10)
    assert dapo["share"] == 1.0 and dapo["trained"] == dapo["signal"] > 0
    one_pass = af.run_rule(_rule(af, "GRESO + GRPO n=4"), world, af.grpo_budget(world, 1.0), dapo_cap=10)
    assert one_pass["skipped"] == 0 and one_pass["updates"] == 64 // 16
    later = af.run_rule(_rule(af, "GRESO + GRPO n=4"), world, budget, dapo_cap=10)
    assert later["skipped"] > 0
    saturated = int(((world.p0 == 0) | (world.p0 == 1)).sum())
    assert saturated > 0
    for rule in af.RULES:  # never trained includes every saturated prompt
        out = af.run_rule(rule, world, budget, dapo_cap=10)
        assert out["never"] * 64 >= saturated - 1e-9, rule.name
        assert out["tokens"] <= budget, rule.name


def test_adaptive_family_world_follows_its_stated_model(af):
    """The drift: logit0 + gain x update x batch / prompts, p = 0 and 1 fixed; draws are common to every rule (the same
    visit gives the same outcomes and lengths), and correct samples are below the pass rate's quantile."""
    world = af.World("uniform", "wrong_longer", prompts=32, batch=8, seed=1)
    i = int(np.argmax((world.p0 > 0.2) & (world.p0 < 0.8)))
    expected = 1.0 / (1.0 + math.exp(-(math.log(world.p0[i] / (1 - world.p0[i])) + world.gain[i] * 12 * 8 / 32)))
    assert world.pass_rate(i, 12) == pytest.approx(expected)
    a, b = world.visit(i, 2, 5), world.visit(i, 2, 5)
    assert a == b
    outcomes, lengths = world.visit(i, 0, 0)
    assert len(outcomes) == af.STREAM and all(af.MIN_LEN <= x <= af.MAX_LEN for x in lengths)
    assert abs(sum(outcomes) / len(outcomes) - world.p0[i]) < 0.15  # 256 Bernoulli draws: sd <= 0.031


def test_learning_failure_message_carries_the_last_exception_line(tmp_path):
    """A failed run's message names its root cause, not only its log: the last exception line, an engine process's
    prefixed one included; a log without one says so."""
    load("learning_comparison")
    runs = sys.modules["learning_runs"]
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File x.py, line 1\nValueError: first\n"
                   "(EngineCore pid=6545) RuntimeError: CPU Generator does not use offset\n"
                   "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
                   "Generate samples:   0%|          | 0/32\n")
    assert runs.last_error(str(log)) == "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
    log.write_text("(EngineCore pid=1) RuntimeError: CPU Generator does not use offset\nbye\n")
    assert runs.last_error(str(log)) == "(EngineCore pid=1) RuntimeError: CPU Generator does not use offset"
    log.write_text("all fine\n")
    assert runs.last_error(str(log)) == "no exception line in the log"
    assert runs.last_error(str(tmp_path / "missing.log")) == "no exception line in the log"
