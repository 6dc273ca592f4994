"""openrlhf_ada/analysis/mechanisms.py: the mechanism checks on hand-made metrics rows, Holm's correction against a
hand-worked example and its properties, the paired t test's p against the closed form of 2 degrees of freedom."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.analysis import mechanisms as mech


def test_holm_hand_worked():
    # m = 4; sorted d 0.005, a 0.01, c 0.03, b 0.04; step-down thresholds 0.05/4, 0.05/3, 0.05/2, 0.05/1:
    # 0.005 <= 0.0125 and 0.01 <= 0.0167 reject, 0.03 > 0.025 stops. Adjusted: 4 x 0.005 = 0.02, 3 x 0.01 = 0.03,
    # 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06
    out = mech.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005, "e": None})
    assert {k: v["reject"] for k, v in out.items()} == {"a": True, "b": False, "c": False, "d": True, "e": False}
    assert [out[k]["adjusted"] for k in "dacb"] == pytest.approx([0.02, 0.03, 0.06, 0.06])
    assert out["e"]["adjusted"] is None  # too few seeds: not one of the m tests
    assert mech.holm({"x": 0.6, "y": 0.7})["x"]["adjusted"] == 1.0  # capped at 1
    with pytest.raises(ValueError):
        mech.holm({"x": 1.5})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=12),
       st.floats(min_value=0.001, max_value=0.2))
def test_holm_properties(ps, alpha):
    out = mech.holm({f"t{i}": p for i, p in enumerate(ps)}, alpha)
    m = len(ps)
    for i, p in enumerate(ps):
        r = out[f"t{i}"]
        assert p - 1e-12 <= r["adjusted"] <= 1.0
        if p * m <= alpha:  # Bonferroni's rejections are Holm's too
            assert r["reject"]
        if p > alpha:  # nothing above alpha is ever rejected
            assert not r["reject"]
    # the rejected tests are the smallest p values: every rejected p is below every kept one
    rejected = [p for i, p in enumerate(ps) if out[f"t{i}"]["reject"]]
    kept = [p for i, p in enumerate(ps) if not out[f"t{i}"]["reject"]]
    assert not rejected or not kept or max(rejected) <= min(kept)


def test_paired_t_p_closed_form_two_degrees_of_freedom():
    # [1, 2, 3]: mean 2, sd 1, t = 2 sqrt(3); with 2 df the two-sided p is 1 - t / sqrt(t^2 + 2)
    t = 2 * math.sqrt(3)
    assert mech.paired_t_p([1.0, 2.0, 3.0]) == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)
    assert mech.paired_t_p([-1.0, -2.0, -3.0]) == pytest.approx(mech.paired_t_p([1.0, 2.0, 3.0]))
    assert mech.paired_t_p([0.5]) is None
    assert mech.paired_t_p([0.0, 0.0]) == 1.0 and mech.paired_t_p([0.2, 0.2]) == 0.0


def row(step, **metrics):
    return {"step": step, "reward_mean": 0.3, **metrics}


def test_after_first_visit_reads_the_steps_where_prompts_repeat():
    rows = [row(s) for s in (3, 1, 2, 4, 5)] + [{"step": 0, "eval/accuracy": 0.1}]
    # 16 prompts, 8 a step: steps 1 and 2 see every prompt once; prompts repeat from step 3 on
    assert [r["step"] for r in mech.after_first_visit(rows, 16, 8)] == [3, 4, 5]
    assert [r["step"] for r in mech.after_first_visit(rows, 20, 8)] == [4, 5]  # ceil(20 / 8) = 3
    assert mech.after_first_visit(rows, 64, 8) == []
    with pytest.raises(ValueError):
        mech.after_first_visit(rows, 0, 8)


def test_seq_engaged_when_rounds_add_signal_groups():
    rows = [row(1, zero_adv_group_share=0.25, **{"ada/first_round_signal_share": 0.5}),
            row(2, zero_adv_group_share=0.5, **{"ada/first_round_signal_share": 0.375})]
    out = mech.seq_mechanism(rows)
    # trained non-zero share (0.75 + 0.5) / 2 = 0.625, first round (0.5 + 0.375) / 2 = 0.4375, gain 0.1875
    assert out["nonzero_share"] == pytest.approx(0.625) and out["gain"] == pytest.approx(0.1875)
    assert out["engaged"] is True
    flat = [row(1, zero_adv_group_share=0.5, **{"ada/first_round_signal_share": 0.48})]
    assert mech.seq_mechanism(flat)["engaged"] is False  # gain 0.02 < 0.05
    assert mech.seq_mechanism([row(1, zero_adv_group_share=0.5)])["engaged"] is None  # not a Seq run


def test_est_not_engaged_at_the_prior_as_in_the_earlier_comparison():
    at_prior = [row(s, **{"ada/est_seen_share": 0.0, "ada/est_p_hat_mean": 0.5, "ada/alloc_min": 8.0,
                          "ada/alloc_max": 8.0, "ada/alloc_cov_n_r": 0.0}) for s in (1, 2)]
    out = mech.est_mechanism(at_prior)
    assert out["engaged"] is False
    assert "no prompt was seen before" in out["why"] and "same count" in out["why"] and "prior" in out["why"]
    moving = [row(1, **{"ada/est_seen_share": 0.5, "ada/est_p_hat_mean": 0.45, "ada/alloc_min": 2.0,
                        "ada/alloc_max": 8.0, "ada/alloc_cov_n_r": -0.5}),
              row(2, **{"ada/est_seen_share": 1.0, "ada/est_p_hat_mean": 0.4, "ada/alloc_min": 2.0,
                        "ada/alloc_max": 6.0, "ada/alloc_cov_n_r": -0.3})]
    out = mech.est_mechanism(moving)
    assert out["engaged"] is True and out["seen_share"] == 0.75 and out["p_hat_shift"] == pytest.approx(0.1)
    assert out["alloc_spread"] == 5.0 and out["cov_n_r"] == pytest.approx(-0.4)
    assert mech.est_mechanism([row(1)])["engaged"] is None


def test_adora_engaged_only_when_it_reweights_some_mixed_groups():
    some = [row(1, **{"adora/mixed_share": 0.5, "adora/attenuated_mixed_share": 0.25, "adora/length_gap_mixed": 3.0})]
    assert mech.adora_mechanism(some)["engaged"] is True
    # the earlier comparison's case: answers of a few tokens, every mixed group weighted alike
    none = [row(1, **{"adora/mixed_share": 0.5, "adora/attenuated_mixed_share": 0.0, "adora/length_gap_mixed": 0.0})]
    every = [row(1, **{"adora/mixed_share": 0.5, "adora/attenuated_mixed_share": 1.0, "adora/length_gap_mixed": -2})]
    assert mech.adora_mechanism(none)["engaged"] is False and mech.adora_mechanism(every)["engaged"] is False
    assert mech.adora_mechanism([row(1, **{"adora/attenuated_share": 0.5})])["engaged"] is None  # older runs


def test_engagement_by_setting_flags():
    assert mech.mechanisms_of(["--rollout.n_samples_per_prompt", "4"]) == []
    assert mech.mechanisms_of(["--ada.enable", "--ada.mode", "balance", "--adora.enable"]) == ["seq", "adora"]
    assert mech.mechanisms_of(["--ada.enable", "--ada.strategy", "est"]) == ["est"]
    assert mech.engaged({}) is True
    assert mech.engaged({"seq": {"engaged": True}, "adora": {"engaged": False}}) is False
    assert mech.engaged({"seq": {"engaged": True}, "adora": {"engaged": None}}) is None
