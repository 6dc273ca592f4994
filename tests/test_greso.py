"""GRESO's pre-rollout skip: streaks of zero-variance groups, the skip probability 1 - max(p_e^z, keep_floor), the
seeded draw, the step's zero-variance counts and the adaptation of p_e toward the target share, the state's dict
round trip; and properties: the probability within its bounds, growing with the streak and falling with p_e, the
adaptation moving p_e (and so the skip) the right way and staying within [p_min, p_max]. Expected values by hand."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.greso import (
    EASY,
    HARD,
    GresoConfig,
    GresoState,
    adapt,
    decide_skip,
    skip_probability,
    skip_rng,
    streak,
    zero_variance_counts,
)

CONFIG = GresoConfig()  # target 0.25 (1/3 of it all-correct), p_e from 0.5 by 0.01 within [0.05, 0.95], floor 0.01
HALF = GresoState(p_easy=0.5, p_hard=0.5)


# -- streaks and the probability ------------------------------------------------------------------------------------
def test_streaks_by_hand():
    assert streak([]) == ("", 0)
    assert streak([(3, 5), (8, 0), (8, 0)]) == (EASY, 2)  # the two last all correct
    assert streak([(8, 0), (0, 8)]) == (HARD, 1)  # the last decides the kind; the one before breaks it
    assert streak([(0, 8), (0, 4), (0, 2)]) == (HARD, 3)
    assert streak([(8, 0), (3, 5)]) == ("", 0)  # the last group had signal
    assert streak([(8, 0), (0, 0), (8, 0)]) == (EASY, 2)  # a group with no scored sample says nothing
    assert streak([(0, 0)]) == ("", 0)
    with pytest.raises(ValueError):
        streak([(1, 2, 3)])
    with pytest.raises(ValueError):
        streak([(-1, 2)])


def test_skip_probability_by_hand():
    # easy streak 2 at p_easy 0.5: 1 - 0.5^2 = 0.75
    assert skip_probability([(8, 0), (8, 0)], HALF, CONFIG) == pytest.approx(0.75)
    # hard streak 1 at p_hard 0.6: 1 - 0.6 = 0.4 (p_easy does not enter)
    assert skip_probability([(0, 8)], GresoState(p_easy=0.1, p_hard=0.6), CONFIG) == pytest.approx(0.4)
    # streak 10 at 0.5: 0.5^10 = 1/1024 < the floor 0.01, so 1 - 0.01 = 0.99; without the floor 1 - 1/1024
    long = [(0, 4)] * 10
    assert skip_probability(long, HALF, CONFIG) == pytest.approx(0.99)
    assert skip_probability(long, HALF, GresoConfig(keep_floor=0.0)) == pytest.approx(1 - 1 / 1024)
    # no streak: never skipped
    assert skip_probability([(8, 0), (2, 6)], HALF, CONFIG) == 0.0
    assert skip_probability([], HALF, CONFIG) == 0.0


def test_the_draw_comes_from_the_given_generator():
    # random.Random(0).random() = 0.8444..., random.Random(1).random() = 0.1343... (Python's Mersenne Twister)
    assert not decide_skip([(8, 0)] * 2, HALF, CONFIG, random.Random(0))  # 0.844 >= 0.75: kept
    assert decide_skip([(8, 0)] * 3, HALF, CONFIG, random.Random(0))  # 0.844 < 1 - 0.5^3 = 0.875: skipped
    assert decide_skip([(0, 8)], GresoState(0.5, 0.6), CONFIG, random.Random(1))  # 0.134 < 0.4: skipped
    rng = random.Random(0)
    assert not decide_skip([(3, 5)], HALF, CONFIG, rng)  # no streak: no draw taken
    assert rng.random() == random.Random(0).random()
    # the per-prompt generator: the same key, epoch and seed give the same draw, whatever came before
    assert skip_rng(7, 2, "abc").random() == skip_rng(7, 2, "abc").random()
    assert skip_rng(7, 2, "abc").random() != skip_rng(7, 3, "abc").random()


def test_skips_happen_at_their_probability():
    # 4000 prompts of easy streak 2 (p = 0.75): the share skipped is within 5 sd = 5 sqrt(0.75 x 0.25 / 4000) = 0.034
    skipped = sum(decide_skip([(8, 0)] * 2, HALF, CONFIG, skip_rng(0, 1, f"prompt-{i}")) for i in range(4000))
    assert abs(skipped / 4000 - 0.75) < 5 * math.sqrt(0.75 * 0.25 / 4000)


# -- the adaptation -------------------------------------------------------------------------------------------------
def test_zero_variance_counts_by_hand():
    # all correct: (8, 0), (2, 0); all wrong: (0, 8); with signal: (3, 5); no sample: (0, 0) not counted
    assert zero_variance_counts([(8, 0), (0, 8), (3, 5), (0, 0), (2, 0)]) == (2, 1, 4)
    assert zero_variance_counts([]) == (0, 0, 0)


def test_adaptation_by_hand():
    # targets: all correct 0.25 / 3 = 0.0833, all wrong 0.25 x 2/3 = 0.1667. A step of 10 groups, 2 all correct
    # (0.2 >= 0.0833: skip more, p_easy 0.5 -> 0.49) and 1 all wrong (0.1 < 0.1667: skip less, p_hard 0.5 -> 0.51)
    new = adapt(HALF, 2, 1, 10, CONFIG, epoch=1)
    assert new.p_easy == pytest.approx(0.49) and new.p_hard == pytest.approx(0.51)
    # a share exactly at its target counts as reached: targets 0.25 each, 1 all correct of 4 -> down, 0 all wrong -> up
    even = GresoConfig(target=0.5, easy_parts=1, hard_parts=1)
    new = adapt(HALF, 1, 0, 4, even, epoch=3)
    assert new.p_easy == pytest.approx(0.49) and new.p_hard == pytest.approx(0.51)
    # the first epoch, or a step with no group: unchanged
    assert adapt(HALF, 2, 1, 10, CONFIG, epoch=0) == HALF
    assert adapt(HALF, 0, 0, 0, CONFIG, epoch=5) == HALF
    # at the bounds: p_easy 0.05 cannot go lower, p_hard 0.95 cannot go higher
    edge = adapt(GresoState(0.05, 0.95), 5, 0, 10, CONFIG, epoch=1)
    assert edge == GresoState(0.05, 0.95)
    # 45 steps over the target take p_easy from 0.5 to 0.05 (0.45 / 0.01), and it stays there
    state = HALF
    for _ in range(50):
        state = adapt(state, 5, 0, 10, CONFIG, epoch=2)
    assert state.p_easy == pytest.approx(0.05) and state.p_hard == pytest.approx(0.95)
    with pytest.raises(ValueError):
        adapt(HALF, 6, 5, 10, CONFIG, epoch=1)


def test_a_share_of_exactly_one_in_six_reaches_the_all_wrong_target():
    # the all-wrong target is 0.25 x 2 / 3 = 1/6. A step of 6 groups, 1 all wrong: share 1/6, at the target, so
    # reached: p_hard 0.5 -> 0.49 (skip more). 0 all correct of 6: 0 < 1/12, so p_easy 0.5 -> 0.51.
    new = adapt(HALF, 0, 1, 6, CONFIG, epoch=1)
    assert new.p_hard == pytest.approx(0.49) and new.p_easy == pytest.approx(0.51)
    # the same at 2 of 12 and 3 of 18 (the same share), and one group fewer is below it: p_hard up
    assert adapt(HALF, 0, 2, 12, CONFIG, epoch=1).p_hard == pytest.approx(0.49)
    assert adapt(HALF, 0, 3, 18, CONFIG, epoch=1).p_hard == pytest.approx(0.49)
    assert adapt(HALF, 0, 1, 7, CONFIG, epoch=1).p_hard == pytest.approx(0.51)
    # the all-correct target 0.25 x 1 / 3 = 1/12: 1 all correct of 12 reaches it, 1 of 13 does not
    assert adapt(HALF, 1, 0, 12, CONFIG, epoch=1).p_easy == pytest.approx(0.49)
    assert adapt(HALF, 1, 0, 13, CONFIG, epoch=1).p_easy == pytest.approx(0.51)
    assert CONFIG.easy_share == pytest.approx(1 / 3)
    for kwargs in ({"easy_parts": 0, "hard_parts": 0}, {"easy_parts": -1}, {"hard_parts": 1.5}):
        with pytest.raises(ValueError):
            GresoConfig(**kwargs)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200), st.integers(0, 3), st.integers(0, 3), st.sampled_from([0.125, 0.25, 0.5, 0.75, 1.0]))
def test_a_share_exactly_at_its_parts_of_the_target_counts_as_reached(k, easy_parts, hard_parts, target):
    # target t (eighths, so t x parts is exact in floating point) split in parts e + h: a step of (e + h) x k x 8
    # groups holding exactly t x e / (e + h) of them all correct and t x h / (e + h) all wrong reaches both targets
    # (both sides are the double nearest the same fraction), so both p_e move down
    if easy_parts + hard_parts == 0:
        return
    config = GresoConfig(target=target, easy_parts=easy_parts, hard_parts=hard_parts)
    total = (easy_parts + hard_parts) * k * 8
    easy, hard = int(target * 8) * easy_parts * k, int(target * 8) * hard_parts * k
    new = adapt(HALF, easy, hard, total, config, epoch=1)
    assert new.p_easy == pytest.approx(0.49) and new.p_hard == pytest.approx(0.49)


def test_state_round_trips_and_bad_input_is_refused():
    state = GresoState(0.37, 0.81)
    assert GresoState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert GresoState.initial(GresoConfig(p_init=0.3)) == GresoState(0.3, 0.3)
    for bad in ({}, {"format": 2, "p_easy": 0.5, "p_hard": 0.5}, {"format": 1, "p_easy": 1.5, "p_hard": 0.5},
                {"format": 1, "p_easy": 0.5}, [0.5, 0.5]):
        with pytest.raises(ValueError):
            GresoState.from_dict(bad)
    for kwargs in ({"target": 1.5}, {"p_min": 0.6, "p_max": 0.4}, {"p_init": 0.99}, {"keep_floor": -0.1},
                   {"adapt_from_epoch": -1}, {"step": float("nan")}):
        with pytest.raises(ValueError):
            GresoConfig(**kwargs)


# -- properties ------------------------------------------------------------------------------------------------------
groups = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=6)
probability = st.floats(0.0, 1.0)
configs = st.builds(GresoConfig, target=probability, easy_parts=st.integers(1, 4), hard_parts=st.integers(0, 4),
                    keep_floor=probability,
                    step=st.floats(0.0, 0.2))


@settings(max_examples=300, deadline=None)
@given(groups, probability, probability, configs)
def test_the_probability_stays_within_its_bounds(history, p_easy, p_hard, config):
    p = skip_probability(history, GresoState(p_easy, p_hard), config)
    assert 0.0 <= p <= 1.0 - config.keep_floor + 1e-15
    kind, z = streak(history)
    base = p_easy if kind == EASY else p_hard
    # never skipped: no streak, a base of 1 (kept for sure), or a floor of 1
    assert (p == 0.0) == (z == 0 or base == 1.0 or config.keep_floor == 1.0)


@settings(max_examples=300, deadline=None)
@given(groups, probability, probability, configs, st.sampled_from([(8, 0), (0, 8)]))
def test_a_longer_streak_or_a_lower_base_skips_more(history, p_easy, p_hard, config, more):
    state = GresoState(p_easy, p_hard)
    before = skip_probability(history, state, config)
    kind = streak(history)[0]
    if kind == "" or kind == (EASY if more == (8, 0) else HARD):
        assert skip_probability(history + [more], state, config) >= before - 1e-15
    lower = GresoState(p_easy * 0.5, p_hard * 0.5)
    assert skip_probability(history, lower, config) >= before - 1e-15


@st.composite
def steps(draw):
    total = draw(st.integers(0, 50))
    easy = draw(st.integers(0, total))
    hard = draw(st.integers(0, total - easy))
    return easy, hard, total


@settings(max_examples=300, deadline=None)
@given(configs, st.data(), steps(), st.integers(0, 5))
def test_the_adaptation_moves_toward_the_target(config, data, step, epoch):
    state = GresoState(data.draw(st.floats(config.p_min, config.p_max)), data.draw(st.floats(config.p_min, config.p_max)))
    easy, hard, total = step
    new = adapt(state, easy, hard, total, config, epoch=epoch)
    for old_p, new_p, count, target in ((state.p_easy, new.p_easy, easy, config.target_easy),
                                        (state.p_hard, new.p_hard, hard, config.target_hard)):
        assert config.p_min <= new_p <= config.p_max
        if total == 0 or epoch < config.adapt_from_epoch:
            assert new_p == old_p
        elif count / total >= target:  # too many of this kind: a lower p_e, so every streak skips at least as much
            assert new_p <= old_p
        else:
            assert new_p >= old_p
    for history in ([(8, 0)] * 2, [(0, 8)] * 3):
        p_old, p_new = skip_probability(history, state, config), skip_probability(history, new, config)
        kind_count, kind_target = (easy, config.target_easy) if history[0] == (8, 0) else (hard, config.target_hard)
        if total and epoch >= config.adapt_from_epoch and kind_count / total >= kind_target:
            assert p_new >= p_old - 1e-15
        elif total and epoch >= config.adapt_from_epoch:
            assert p_new <= p_old + 1e-15
