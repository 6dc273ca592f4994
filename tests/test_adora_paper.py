"""ADORA's paper rules (--adora.variant paper_llm / paper_vl): one hand-derived case per row of the rule, the flags
tau / amplify / attenuate, and bad values."""

import pytest
import torch

from openrlhf_ada.algorithms.adora import AdoraConfig, PaperParams, adora_weights, ragged_sample_weights


def w(scores, lengths, truncated=None, variant="paper_llm", **paper):
    return adora_weights([scores], [lengths], None if truncated is None else [truncated], variant=variant,
                         lam=0.25, boost=3.0, paper=PaperParams(**paper)).tolist()[0]


# paper_llm: amplify when maxPos > meanNeg (Length Advantage) and success rate <= tau (Difficulty Advantage)
def test_llm_both_advantages_amplified():
    # maxPos 9 > meanNeg (4 + 6 + 5) / 3 = 5; success 1/4 <= 0.5 -> 2.0 (lam and boost play no part)
    assert w([1, 0, 0, 0], [9, 4, 6, 5]) == pytest.approx(2.0)


def test_llm_easy_group_not_amplified():
    # maxPos 9 > meanNeg 5 but success 3/4 > 0.5 -> 1
    assert w([1, 1, 1, 0], [9, 4, 6, 5]) == 1.0


def test_llm_no_length_advantage_not_amplified():
    # maxPos 3 < meanNeg 5, success 1/4 -> 1
    assert w([1, 0, 0, 0], [3, 4, 6, 5]) == 1.0


def test_llm_tau_is_inclusive():
    # success 2/4 = tau; maxPos 9 > meanNeg 5 -> 2.0
    assert w([1, 1, 0, 0], [9, 8, 4, 6]) == pytest.approx(2.0)


def test_llm_degenerate_groups_keep_weight_one():
    assert w([0, 0, 0, 0], [9, 4, 6, 5]) == 1.0  # no positive: no length advantage
    # the only negative is truncated: meanNeg undefined, no length advantage
    assert w([1, 0], [9, 100], [False, True]) == 1.0
    assert w([1, 1], [9, 4]) == 1.0  # all correct


def test_llm_flags_tau_and_amplify():
    assert w([1, 0, 0, 0], [9, 4, 6, 5], tau=0.2) == 1.0  # 1/4 > 0.2
    assert w([1, 0, 0, 0], [9, 4, 6, 5], amplify=3.5) == pytest.approx(3.5)


# paper_vl: attenuate when the Length Advantage fails; difficulty not used
def test_vl_length_advantage_keeps_one_whatever_the_difficulty():
    assert w([1, 1, 1, 0], [9, 4, 6, 5], variant="paper_vl") == 1.0  # success 3/4 > tau: still 1


def test_vl_without_length_advantage_attenuated():
    assert w([1, 0], [5, 5], variant="paper_vl") == pytest.approx(0.1)  # maxPos 5 = meanNeg 5: not strictly longer
    assert w([0, 0, 0], [9, 4, 6], variant="paper_vl") == pytest.approx(0.1)  # no positive
    assert w([1, 1, 1], [9, 4, 6], variant="paper_vl") == pytest.approx(0.1)  # no negative
    assert w([1, 0], [5, 5], variant="paper_vl", attenuate=0.3) == pytest.approx(0.3)


def test_paper_rule_through_the_trainers_entry_point():
    config = AdoraConfig(enable=True, variant="paper_llm", tau=0.5, amplify=2.0)
    scores = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    lengths = torch.tensor([[9.0, 4.0, 6.0, 5.0], [9.0, 4.0, 6.0, 5.0]])
    out = ragged_sample_weights(config, scores=scores.reshape(-1), rewards=scores.reshape(-1),
                                lengths=lengths.reshape(-1), truncated=torch.zeros(8, dtype=torch.bool), sizes=[4, 4],
                                step=1)
    assert out.tolist() == [2.0] * 4 + [1.0] * 4


def test_bad_paper_values_are_refused():
    with pytest.raises(ValueError, match="adora.tau"):
        AdoraConfig(tau=1.5)
    with pytest.raises(ValueError, match="adora.amplify"):
        AdoraConfig(amplify=-1.0)
