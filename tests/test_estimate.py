"""Reinforce-Ada-Est's math: the Ada-EMA update, p_hat, the allocation (bounds, exact budget, monotone in p_hat), the
groups of varying size and the explicit prompt weights. Expected values derived by hand in the comments."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.baselines import group_baseline, group_index
from openrlhf_ada.algorithms.estimate import (
    EstConfig,
    allocate,
    allocation_metrics,
    ema_update,
    pass_rate_estimate,
    prompt_weights,
)
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory
from openrlhf_ada.algorithms.reinforce_ada import Est, Seq


def ragged_baseline(rewards, sizes, estimator):
    """The one group baseline on contiguous groups of the given sizes."""
    return group_baseline(rewards, group_index(sizes), estimator)


# -- the estimator ------------------------------------------------------------------------------------------------
def test_ema_update_by_hand():
    # visit 1: 8 samples, 2 correct, from nothing: (8, 2)
    total, pos = ema_update(0.0, 0.0, 8, 2, 0.9)
    assert (total, pos) == (8.0, 2.0)
    # visit 2: 4 samples, 4 correct: 0.9 * 8 + 4 = 11.2, 0.9 * 2 + 4 = 5.8
    total, pos = ema_update(total, pos, 4, 4, 0.9)
    assert total == pytest.approx(11.2) and pos == pytest.approx(5.8)
    # decay 0: only the last visit counts; decay 1: plain sums
    assert ema_update(11.2, 5.8, 3, 1, 0.0) == (3.0, 1.0)
    assert ema_update(11.2, 5.8, 3, 1, 1.0) == pytest.approx((14.2, 6.8))
    with pytest.raises(ValueError, match="k_t"):
        ema_update(0, 0, 2, 3, 0.9)


def test_pass_rate_estimate_by_hand():
    # unseen: the prior mean alpha / (alpha + beta)
    assert float(pass_rate_estimate(0, 0, 1.0, 1.0)) == 0.5
    assert float(pass_rate_estimate(0, 0, 1.0, 3.0)) == 0.25
    # (5.8 + 1) / (11.2 + 2) = 6.8 / 13.2
    assert float(pass_rate_estimate(11.2, 5.8, 1.0, 1.0)) == pytest.approx(6.8 / 13.2)
    with pytest.raises(ValueError):
        pass_rate_estimate(1, 2, 1.0, 1.0)


def test_history_keeps_the_ema_and_resumes_it():
    config = HistoryConfig(ema=True, ema_decay=0.5)
    h = PromptHistory(config)
    h.record("a", 0, 2, 6)  # (8, 2)
    h.record("a", 1, 4, 0)  # 0.5 * 8 + 4 = 8, 0.5 * 2 + 4 = 5
    assert h.ema_counts("a") == (8.0, 5.0)
    assert h.ema_counts("never") == (0.0, 0.0)
    saved = h.to_dict()
    assert saved["ema"] == {"a": [8.0, 5.0]}
    assert PromptHistory.from_dict(saved, config).ema_counts("a") == (8.0, 5.0)
    # without ema the record holds no counts and the dict is the one written before
    plain = PromptHistory(HistoryConfig())
    plain.record("a", 0, 2, 6)
    assert plain.ema == {} and "ema" not in plain.to_dict()


def test_est_config_defaults_and_history():
    c = Est(n=8)
    est = c.resolved
    assert est.budget == 8 and (est.n_min, est.n_max) == (2, 32)
    assert c.history_config.ema and c.weight_kind == "inv_sqrt_pass_rate"
    assert c.advantage_baseline("rloo") == "group" and c.requests_per_prompt == 16 and c.max_samples == 32
    assert Seq(n=8).weight_kind == "none" and not Seq(n=8).history_config.ema
    with pytest.raises(ValueError, match="n_samples_per_prompt"):
        Est(n=40)  # budget above --ada.est_max 32
    with pytest.raises(ValueError):
        EstConfig(budget=8, decay=1.5)


# -- the allocation -----------------------------------------------------------------------------------------------
def test_allocation_by_hand():
    # p = [0.1, 0.5, 0.9, 0.5, 1.0], eps 0.01: w = [3.17228, 1.42421, 1.06409, 1.42421, 1.01], sum 8.09479.
    # budget 8 x 5 = 40 -> shares 40 w / sum w = [15.676, 7.038, 5.258, 7.038, 4.991]; floors [15, 7, 5, 7, 4]
    # (38), two missing: largest fractions .991 (prompt 4) and .676 (prompt 0) -> [16, 7, 5, 7, 5]
    counts = allocate([0.1, 0.5, 0.9, 0.5, 1.0], 40, 2, 32, 0.01)
    assert counts.tolist() == [16, 7, 5, 7, 5]


def test_allocation_clips_and_redistributes_by_hand():
    # p = [0.01, 1, 1, 1], eps 0: w = [10, 1, 1, 1]; budget 16 within [2, 8]: unclipped shares 16 w / 13 =
    # [12.3, 1.23, ...] break both bounds; with the first at 8 the others share 8 -> 8/3 = 2.667 each:
    # floors [8, 2, 2, 2] = 14, two missing to the two earliest of equal fractions -> [8, 3, 3, 2]
    counts = allocate([0.01, 1.0, 1.0, 1.0], 16, 2, 8, 0.0)
    assert counts.tolist() == [8, 3, 3, 2]
    # equal p_hat: the budget split evenly
    assert allocate([0.3] * 4, 32, 2, 32).tolist() == [8, 8, 8, 8]
    # the bounds themselves
    assert allocate([0.2, 0.9], 4, 2, 32).tolist() == [2, 2]
    assert allocate([0.2, 0.9], 64, 2, 32).tolist() == [32, 32]
    with pytest.raises(ValueError, match="cannot be split"):
        allocate([0.2, 0.9], 65, 2, 32)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    p=st.lists(st.floats(min_value=1e-3, max_value=1.0), min_size=1, max_size=40),
    n_min=st.integers(2, 6),
    width=st.integers(0, 40),
    eps=st.floats(min_value=0.0, max_value=2.0),
    data=st.data(),
)
def test_allocation_properties(p, n_min, width, eps, data):
    n_max = n_min + width
    P = len(p)
    total = data.draw(st.integers(P * n_min, P * n_max))
    counts = allocate(p, total, n_min, n_max, eps)
    assert int(counts.sum()) == total
    assert int(counts.min()) >= n_min and int(counts.max()) <= n_max
    for i in range(P):  # monotone: a lower p_hat never gets fewer samples
        for j in range(P):
            if p[i] < p[j]:
                assert counts[i] >= counts[j]
    # each count within one sample of its real share (independent: the shares from a fine grid of scales)
    w = [1 / math.sqrt(x) + eps for x in p]
    shares = None
    lo, hi = 0.0, n_max / min(w)
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(min(max(mid * wi, n_min), n_max) for wi in w) < total:
            lo = mid
        else:
            hi = mid
    shares = [min(max(hi * wi, n_min), n_max) for wi in w]
    assert all(abs(int(c) - s) < 1 + 1e-6 for c, s in zip(counts, shares))


# -- groups of varying size ---------------------------------------------------------------------------------------
def test_ragged_baselines_by_hand():
    r = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    sizes = [2, 4, 2]
    assert group_index(sizes).tolist() == [0, 0, 1, 1, 1, 1, 2, 2]
    # group 1 = [0, 1, 0, 0]: mean 0.25; group 0 = [1, 0]: mean 0.5; group 2 all equal -> 0
    assert ragged_baseline(r, sizes, "dr_grpo").tolist() == [0.5, -0.5, -0.25, 0.75, -0.25, -0.25, 0.0, 0.0]
    assert ragged_baseline(r, sizes, "reinforce_baseline").tolist() == ragged_baseline(r, sizes, "dr_grpo").tolist()
    # rloo: leave-one-out means; group 1: 0 - 1/3, 1 - 0, 0 - 1/3, 0 - 1/3; group 0: 1 - 0, 0 - 1
    expected = [1.0, -1.0, -1 / 3, 1.0, -1 / 3, -1 / 3, 0.0, 0.0]
    assert ragged_baseline(r, sizes, "rloo").tolist() == pytest.approx(expected)
    # group_norm: group 1 unbiased std sqrt((3 x 0.0625 + 0.5625) / 3) = 0.5; group 0 std sqrt(0.5)
    gn = ragged_baseline(r, sizes, "group_norm")
    assert gn[:2].tolist() == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)])
    assert gn[2:6].tolist() == pytest.approx([-0.5, 1.5, -0.5, -0.5])
    assert gn[6:].tolist() == [0.0, 0.0]
    # a group of one sample has no baseline to compare with: zero, under every estimator
    for estimator in ("rloo", "reinforce_baseline", "dr_grpo", "group_norm"):
        assert ragged_baseline([1.0, 0.0, 1.0], [1, 2], estimator)[0].item() == 0.0
    assert ragged_baseline([1.0, 0.0, 1.0], [1, 2], "rloo").tolist() == [0.0, -1.0, 1.0]
    with pytest.raises(ValueError, match="sum"):
        ragged_baseline([1.0, 0.0, 1.0], [2, 2], "dr_grpo")


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0, 0.5, -0.5]), min_size=2, max_size=6), min_size=1, max_size=6),
       st.sampled_from(["rloo", "reinforce_baseline", "dr_grpo", "group_norm"]))
def test_ragged_baseline_equals_the_fixed_group_formula_per_group(groups, estimator):
    # each group alone, through the textbook formula, must give what the ragged batch gives
    flat = [x for g in groups for x in g]
    out = ragged_baseline(flat, [len(g) for g in groups], estimator).tolist()
    pos = 0
    for g in groups:
        t = torch.tensor(g, dtype=torch.float64)
        if len(set(g)) == 1:
            ref = torch.zeros_like(t)
        elif estimator == "rloo":
            ref = t - (t.sum() - t) / (len(g) - 1)
        elif estimator == "group_norm":
            ref = (t - t.mean()) / (t.std() + 1e-9)
        else:
            ref = t - t.mean()
        assert out[pos : pos + len(g)] == pytest.approx(ref.tolist(), abs=1e-5)
        pos += len(g)


def test_prompt_weights_by_hand():
    p = [0.25, 1.0, 0.0, 0.01]
    # inv_sqrt: 1/0.5 + 0.01 = 2.01; 1 + 0.01; p = 0 -> cap 10; 1/0.1 + 0.01 = 10.01 -> cap 10
    assert prompt_weights(p, "inv_sqrt_pass_rate", eps=0.01, cap=10.0).tolist() == pytest.approx(
        [2.01, 1.01, 10.0, 10.0])
    # inv: 4 + 0.01, 1.01, cap, 100.01 -> cap 50
    assert prompt_weights(p, "inv_pass_rate", eps=0.01, cap=50.0).tolist() == pytest.approx([4.01, 1.01, 50.0, 50.0])
    assert prompt_weights(p, "none", eps=0.01, cap=10.0).tolist() == [1.0] * 4
    with pytest.raises(ValueError):
        prompt_weights([1.5], "inv_pass_rate", eps=0.0, cap=10.0)


def test_allocation_metrics_by_hand():
    # N = [16, 4, 4], r = [0.25, 1, 1]: means 8 and 0.75; Cov = ((8)(-0.5) + (-4)(0.25) + (-4)(0.25)) / 3 = -2
    m = allocation_metrics([16, 4, 4], [0.25, 1.0, 1.0])
    assert m["ada/alloc_cov_n_r"] == pytest.approx(-2.0)
    assert (m["ada/alloc_min"], m["ada/alloc_median"], m["ada/alloc_max"]) == (4.0, 4.0, 16.0)
    # the identity: (r_batch - r_prompt) x mean(N) = Cov; r_batch = (4 + 4 + 4) / 24 = 0.5, r_prompt = 0.75
    assert (0.5 - 0.75) * 8 == pytest.approx(m["ada/alloc_cov_n_r"])


def test_simulate_est_over_two_epochs_by_hand():
    from openrlhf_ada.algorithms.simulation import simulate_est

    config = EstConfig(budget=4, n_min=2, n_max=8, decay=0.5, eps=0.0)
    history = PromptHistory(HistoryConfig(ema=True, ema_decay=0.5))
    streams = [[1.0] * 8, [0.0] * 8, [1.0, 0.0] * 4]
    keys = ["easy", "hard", "mixed"]
    # epoch 0: all unseen, p_hat 1/2 -> 4 each
    first = simulate_est(streams, config=config, history=history, prompt_keys=keys, epoch=0)
    assert [r.samples for r in first] == [4, 4, 4] and [r.num_pos for r in first] == [4, 0, 2]
    assert first[2].kept == [0, 1, 2, 3] and first[2].pool_mean == 0.5
    # epoch 1: p_hat = 5/6, 1/6, 3/6; w = 1.09545, 2.44949, 1.41421 (sum 4.95915); shares of 12: 2.651, 5.927,
    # 3.422; floors 2, 5, 3 = 10; the 2 missing go to .927 (hard) and .651 (easy) -> [3, 6, 3]
    second = simulate_est(streams, config=config, history=history, prompt_keys=keys, epoch=1)
    assert [r.samples for r in second] == [3, 6, 3]
    # the counts: easy 0.5 x 4 + 3 = 5 of which 0.5 x 4 + 3 = 5 correct
    assert history.ema_counts("easy") == (5.0, 5.0) and history.ema_counts("hard") == (8.0, 0.0)
    with pytest.raises(ValueError, match="ema=True"):
        simulate_est(streams, config=config, history=PromptHistory(), prompt_keys=keys)


def test_est_flags_are_checked_against_the_rest():
    from openrlhf_ada.launcher import parse_args

    def parse(*extra):
        return parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/r",
                           "--rollout.n_samples_per_prompt", "8", "--algo.advantage.estimator", "dr_grpo", *extra])

    ns = parse("--ada.enable", "--ada.strategy", "est", "--ada.est_max", "16")
    assert ns.ada.strategy == "est" and ns.ada.est_max == 16 and ns.ada.prompt_weight == "auto"
    # ADORA weighs groups of varying size, dynamic filtering replaces a filtered group with its count
    for good in (["--adora.enable"], ["--algo.dynamic_filtering_enable"]):
        assert parse("--ada.enable", "--ada.strategy", "est", *good).ada.strategy == "est"
    for bad in (["--ada.enable", "--ada.strategy", "est", "--ada.cancel"],
                ["--ada.enable", "--ada.strategy", "est", "--ada.history", "--ada.history_target", "0.9"],
                ["--ada.enable", "--ada.strategy", "est", "--algo.advantage.estimator", "gae", "--ada.baseline",
                 "group", "--ada.prompt_weight", "none"],
                ["--ada.enable", "--ada.est_max", "16"],  # an Est flag without Est
                ["--ada.strategy", "est"]):  # without --ada.enable
        with pytest.raises(SystemExit):
            parse(*bad)
