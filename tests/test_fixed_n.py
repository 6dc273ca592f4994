"""Fixed n as a config of its own: one round of n samples, every one kept as the group (Reinforce-Ada off, and each
Est prompt's pool), with no field of Seq's rounds or Est's allocation."""

from __future__ import annotations

import dataclasses

import pytest

from openrlhf_ada.algorithms.reinforce_ada import FixedN, PromptPool, Seq


def test_one_round_every_sample_kept_in_generation_order():
    """Scores 0, 1, 0 (threshold 0.5): one correct sample resolves the prompt; the group is all three, as generated
    (Seq would put the positive first)."""
    pool = PromptPool(FixedN(3))
    assert pool.next_round_size() == 3
    pool.add_round([0.0, 1.0, 0.0], [0.0, 1.0, 0.0], items=["a", "b", "c"])
    assert pool.done and pool.outcome == "resolved" and pool.select() == [0, 1, 2]


def test_no_correct_sample_is_kept_unresolved_and_a_failed_one_leaves_the_group():
    pool = PromptPool(FixedN(2, positive_threshold=0.7))
    pool.add_round([0.6, None], [0.6, None])  # 0.6 is not above 0.7; the second reward failed
    assert pool.done and pool.outcome == "failed"  # one sample with a reward: fewer than n
    pool = PromptPool(FixedN(2, positive_threshold=0.7))
    pool.add_round([0.6, 0.1], [0.6, 0.1])
    assert pool.outcome == "kept" and pool.select() == [0, 1]


def test_its_fields_are_its_own():
    assert [f.name for f in dataclasses.fields(FixedN)] == ["n", "seed", "positive_threshold"]
    assert not {f.name for f in dataclasses.fields(Seq)} & {"keep_all"}
    with pytest.raises(ValueError):
        FixedN(0)
    FixedN(1)  # one sample per prompt is a fixed n
    with pytest.raises(ValueError):
        Seq(n=1)  # Seq's rounds need a group of two
    with pytest.raises(dataclasses.FrozenInstanceError):
        FixedN(2).n = 3
