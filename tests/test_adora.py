"""ADORA weights (docs/algorithms.md, section 1): every row of the edge-case table, both variants, by hand; the rule against an
independent per-group reference on random inputs; bad input."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.adora import (
    AdoraConfig,
    adora_metrics,
    adora_weights,
    group_stats,
    in_schedule,
    ragged_sample_weights,
    threshold_unreachable,
)
from openrlhf_ada.algorithms.baselines import group_baseline, group_index

LAM, BOOST = 0.25, 2.0  # not the defaults, so that a weight tells which branch was taken


def w(scores, lengths, truncated=None, variant="llm", **kw):
    return adora_weights([scores], [lengths], None if truncated is None else [truncated], variant=variant,
                         lam=LAM, boost=BOOST, **kw).tolist()[0]


# --- the edge-case table, one test per row, both variants -------------------------------------------------------


@pytest.mark.parametrize("variant,expected", [("llm", LAM), ("vl", BOOST)])
def test_no_positive_sample(variant, expected):
    assert w([0, 0, 0], [5, 60, 7], variant=variant) == expected


@pytest.mark.parametrize("variant,expected", [("llm", BOOST), ("vl", LAM)])
def test_positives_but_all_positive(variant, expected):
    assert w([1, 1, 1], [5, 6, 7], variant=variant) == expected


@pytest.mark.parametrize("variant,expected", [("llm", BOOST), ("vl", LAM)])
def test_positives_and_only_truncated_negatives(variant, expected):
    # the only negative was cut by the length limit: no usable negative
    assert w([1, 0], [3, 10], [False, True], variant=variant) == expected


@pytest.mark.parametrize("variant", ["llm", "vl"])
def test_longest_correct_outruns_mean_wrong(variant):
    # maxPos = 10, meanNeg = (4 + 6) / 2 = 5 -> advantageous
    assert w([1, 1, 0, 0], [10, 2, 4, 6], variant=variant) == BOOST


@pytest.mark.parametrize("variant", ["llm", "vl"])
def test_tie_is_not_advantageous(variant):
    # maxPos = 5 == meanNeg = 5: the comparison is strict
    assert w([1, 0, 0], [5, 4, 6], variant=variant) == LAM


@pytest.mark.parametrize("variant", ["llm", "vl"])
def test_shorter_correct_is_attenuated(variant):
    # maxPos = 3 < meanNeg = 9
    assert w([1, 0, 0], [3, 8, 10], variant=variant) == LAM


@pytest.mark.parametrize("variant", ["llm", "vl"])
def test_truncated_negatives_leave_the_mean(variant):
    # negatives 4 (kept) and 100 (truncated): meanNeg = 4 < maxPos = 6 -> boost; counting 100 would give 52 -> lam
    assert w([1, 0, 0], [6, 4, 100], [False, False, True], variant=variant) == BOOST
    assert w([1, 0, 0], [6, 4, 100], [False, False, False], variant=variant) == LAM


def test_truncation_from_max_length_when_no_flags():
    assert w([1, 0, 0], [6, 4, 100], max_length=100) == BOOST  # 100 >= 100: truncated
    assert w([1, 0, 0], [6, 4, 100], max_length=101) == LAM  # 100 < 101: usable, meanNeg = 52
    assert w([1, 0, 0], [6, 4, 100]) == LAM  # no flags, no max_length: nothing truncated


def test_truncated_positive_still_counts_for_max_pos():
    assert w([1, 0], [100, 50], [True, False]) == BOOST


def test_threshold_is_strict_and_configurable():
    # 0.5 is not > 0.5: no positive -> lam (llm)
    assert w([0.5, 0.0], [10, 1]) == LAM
    # Logic-RL scale: correct 3, wrong -0.5; threshold 1.01 still finds the positive
    assert w([3.0, -0.5], [10, 1], positive_threshold=1.01) == BOOST


def test_several_groups_at_once():
    scores = [[0, 0], [1, 0], [1, 1], [1, 0]]
    lengths = [[4, 4], [9, 3], [2, 2], [1, 3]]
    assert adora_weights(scores, lengths, lam=LAM, boost=BOOST).tolist() == [LAM, BOOST, BOOST, LAM]
    assert adora_weights(scores, lengths, lam=LAM, boost=BOOST, variant="vl").tolist() == [BOOST, BOOST, LAM, LAM]


def test_defaults_are_lam_point_one_and_boost_one():
    out = adora_weights([[0, 0], [1, 0]], [[1, 1], [5, 1]])
    assert out.dtype == torch.float32 and out.shape == (2,)
    assert out.tolist() == pytest.approx([0.1, 1.0])


# --- an independent reference on random inputs -------------------------------------------------------------------


def reference_weight(scores, lengths, truncated, variant, thr, lam, boost):
    """The spec's table, written out per group with plain python."""
    pos_lengths = [L for s, L in zip(scores, lengths) if s > thr]
    neg_lengths = [L for s, L, t in zip(scores, lengths, truncated) if not s > thr and not t]
    if not pos_lengths:
        return lam if variant == "llm" else boost
    if not neg_lengths:
        return boost if variant == "llm" else lam
    return boost if max(pos_lengths) > sum(neg_lengths) / len(neg_lengths) else lam


@st.composite
def batches(draw):
    P = draw(st.integers(1, 6))
    n = draw(st.integers(1, 8))
    cell = st.tuples(st.sampled_from([0.0, 1.0, 0.5, 0.7, -0.5, 3.0]), st.integers(0, 40), st.booleans())
    rows = [[draw(cell) for _ in range(n)] for _ in range(P)]
    scores = [[c[0] for c in r] for r in rows]
    lengths = [[c[1] for c in r] for r in rows]
    truncated = [[c[2] for c in r] for r in rows]
    return scores, lengths, truncated


@settings(max_examples=300, deadline=None)
@given(batches(), st.sampled_from(["llm", "vl"]), st.sampled_from([0.5, 1.01, 0.0]),
       st.floats(0.01, 1.0), st.floats(1.0, 3.0))
def test_matches_reference_and_takes_only_lam_or_boost(batch, variant, thr, lam, boost):
    scores, lengths, truncated = batch
    out = adora_weights(scores, lengths, truncated, variant=variant, positive_threshold=thr, lam=lam, boost=boost)
    expected = [reference_weight(s, L, t, variant, thr, lam, boost) for s, L, t in zip(scores, lengths, truncated)]
    assert out.tolist() == pytest.approx(expected)
    assert all(math.isclose(x, lam, rel_tol=1e-6) or math.isclose(x, boost, rel_tol=1e-6) for x in out.tolist())


@settings(max_examples=200, deadline=None)
@given(batches(), st.integers(0, 10))
def test_weights_constant_within_group_and_keep_advantage_signs(batch, step):
    scores, lengths, truncated = batch
    s = torch.tensor(scores)
    if s.shape[1] < 2:
        return
    config = AdoraConfig(enable=True, lam=0.1, boost=1.0)
    P, n = s.shape
    sw = ragged_sample_weights(config, scores=s.reshape(-1), rewards=s.reshape(-1),
                               lengths=torch.tensor(lengths).float().reshape(-1),
                               truncated=torch.tensor(truncated).reshape(-1), sizes=[n] * P, step=step)
    assert sw.shape == (P * n,)
    sw = sw.reshape(P, n)
    assert torch.equal(sw, sw[:, :1].expand_as(sw))  # constant within each group
    adv = group_baseline(s.reshape(-1), group_index([s.shape[1]] * s.shape[0]), "group_norm").reshape(s.shape)
    assert torch.equal(torch.sign(adv * sw), torch.sign(adv))  # weights > 0 never flip or zero a sign


# --- staging, metrics, warnings ---------------------------------------------------------------------------------


def test_schedule_window_is_half_open():
    assert [in_schedule(s, 2, 5) for s in range(7)] == [False, False, True, True, True, False, False]
    assert in_schedule(10**6, 3, -1) and not in_schedule(2, 3, -1)


def test_weights_are_one_outside_the_window_or_when_disabled():
    s = torch.tensor([0.0, 0.0])  # one group of two wrong samples: no positive, lam (0.1) inside the window
    kw = dict(scores=s, rewards=s, lengths=torch.tensor([3.0, 4.0]), truncated=torch.zeros(2, dtype=torch.bool),
              sizes=[2])
    on = AdoraConfig(enable=True, start_step=2, end_step=4)
    assert ragged_sample_weights(on, step=1, **kw).tolist() == [1.0, 1.0]
    assert ragged_sample_weights(on, step=2, **kw).tolist() == pytest.approx([0.1, 0.1])
    assert ragged_sample_weights(on, step=4, **kw).tolist() == [1.0, 1.0]
    assert ragged_sample_weights(AdoraConfig(enable=False), step=2, **kw).tolist() == [1.0, 1.0]


def test_metrics_by_hand():
    scores = [[0, 0], [1, 0], [1, 1], [1, 0]]
    lengths = [[4, 4], [9, 3], [2, 2], [1, 3]]
    stats = group_stats(scores, lengths)
    weights = adora_weights(scores, lengths)  # [0.1, 1, 1, 0.1]
    m = adora_metrics(stats, weights)
    assert m["adora/weight_mean"] == pytest.approx((0.1 + 1 + 1 + 0.1) / 4)
    assert m["adora/attenuated_share"] == pytest.approx(0.5)
    assert m["adora/no_pos_share"] == pytest.approx(0.25)
    assert m["adora/no_usable_neg_share"] == pytest.approx(0.25)
    # mixed groups: the 2nd (correct 9 long, wrong 3: gap 6, weight 1) and the 4th (correct 1, wrong 3: gap -2,
    # weight 0.1); one of the two attenuated; the mean gap (6 - 2) / 2 = 2
    assert m["adora/mixed_share"] == pytest.approx(0.5)
    assert m["adora/attenuated_mixed_share"] == pytest.approx(0.5)
    assert m["adora/length_gap_mixed"] == pytest.approx(2.0)
    none = adora_metrics(group_stats([[0, 0], [1, 1]], [[4, 4], [2, 2]]), adora_weights([[0, 0], [1, 1]],
                                                                                        [[4, 4], [2, 2]]))
    assert none["adora/mixed_share"] == 0.0 and none["adora/attenuated_mixed_share"] == 0.0
    assert none["adora/length_gap_mixed"] == 0.0


def test_unreachable_threshold_is_detected_and_logged(caplog):
    assert threshold_unreachable([[0.0, 1.0]], 1.01)
    assert not threshold_unreachable([[0.0, 1.0]], 0.5)
    assert not threshold_unreachable([[0.0, 0.0]], 1.01)  # scores do not vary: nothing to warn about
    with caplog.at_level("WARNING"):
        adora_weights([[0.0, 1.0]], [[3, 4]], positive_threshold=1.01)
    assert "positive_threshold=1.01" in caplog.text


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: adora_weights([[1, 0]], [[1, 2, 3]]), ["lengths", "[1, 3]", "[1, 2]"]),
        (lambda: adora_weights([1, 0], [1, 2]), ["scores", "[num_prompts, n]"]),
        (lambda: adora_weights([[1, 0]], [[1, 2]], [[True]]), ["truncated", "[1, 1]"]),
        (lambda: adora_weights([[1, 0]], [[1, 2]], variant="text"), ["variant", "'text'", "'llm'", "'vl'"]),
        (lambda: adora_weights([[1, 0]], [[1, 2]], lam=float("nan")), ["lam", "nan"]),
        (lambda: adora_weights([[1, 0]], [[1, 2]], boost=-1), ["boost", "-1", ">= 0"]),
        (lambda: AdoraConfig(variant="x"), ["adora.variant", "'x'"]),
        (lambda: AdoraConfig(start_step=5, end_step=5), ["adora.end_step=5", "-1"]),
    ],
)
def test_bad_input_names_parameter_value_and_accepted(call, words):
    with pytest.raises(ValueError) as e:
        call()
    for word in words:
        assert word in str(e.value)
