"""Reinforce-Ada (docs/algorithms.md, section 2): the exit rule, group selection, PromptPool and simulate, by hand and as
properties on random pools and reward streams."""

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.reinforce_ada import (
    PromptPool,
    Seq,
    exit_reached,
    make_rng,
    pool_metrics,
    select_group,
)
from openrlhf_ada.algorithms.simulation import simulate

# --- exit rule --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "num_pos,num_neg,n,expected",
    [(2, 2, 4, True), (1, 3, 4, False), (2, 1, 4, False), (5, 2, 4, True), (0, 9, 4, False),
     (2, 3, 5, True), (3, 2, 5, False), (1, 1, 2, True), (1, 0, 2, False), (0, 1, 2, False)],
)
def test_exit_rule_balance(num_pos, num_neg, n, expected):
    # balance: #pos >= floor(n/2) and #neg >= n - floor(n/2)
    assert exit_reached(num_pos, num_neg, mode="balance", n=n) is expected


@pytest.mark.parametrize("num_pos,num_neg,expected", [(1, 0, True), (0, 10, False), (3, 5, True), (0, 0, False)])
def test_exit_rule_pos(num_pos, num_neg, expected):
    assert exit_reached(num_pos, num_neg, mode="pos", n=4) is expected


# --- selection --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pool,n,expected",
    [
        ([1, 1, 1, 0, 0, 0, 0, 0], 4, [0, 1, 3, 4]),  # 2 earliest positives, 2 earliest negatives
        ([0, 0, 0, 1, 0, 0], 4, [0, 1, 2, 3]),  # one positive: k_pos = 1, k_neg = 3
        ([1] * 8, 4, [0, 1, 2, 3]),  # no negative: k_pos = 2, top up with positives
        ([0] * 8, 4, [0, 1, 2, 3]),  # no positive: all negatives
        ([1, 1, 1, 0], 4, [0, 1, 2, 3]),  # k_neg = 1, top up one positive first
        ([0, 1, 0, 0, 0, 1, 1], 3, [0, 1, 2]),  # floor(3/2) = 1 positive, 2 negatives
        ([0, 0, 0, 0, 1, 1, 1, 1], 4, [0, 1, 4, 5]),
    ],
)
def test_select_first(pool, n, expected):
    assert select_group(pool, n) == expected


def test_select_random_is_a_valid_split_and_reproducible():
    pool = [1, 0] * 8
    a = select_group(pool, 4, policy="random", rng=random.Random(7))
    b = select_group(pool, 4, policy="random", rng=random.Random(7))
    assert a == b and sum(pool[i] for i in a) == 2 and len(set(a)) == 4
    draws = {tuple(select_group(pool, 4, policy="random", rng=s)) for s in range(20)}
    assert len(draws) > 5  # really random across seeds


@settings(max_examples=400, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=40), st.integers(2, 12), st.sampled_from(["first", "random"]),
       st.integers(0, 1000))
def test_selection_properties(pool, n, policy, seed):
    if len(pool) < n:
        with pytest.raises(ValueError):
            select_group(pool, n, policy=policy, rng=seed)
        return
    idx = select_group(pool, n, policy=policy, rng=seed)
    assert len(idx) == n and len(set(idx)) == n and all(0 <= i < len(pool) for i in idx)
    assert idx == sorted(idx)
    n_pos, n_neg = sum(pool), len(pool) - sum(pool)
    kept_pos = sum(pool[i] for i in idx)
    if n_pos >= n // 2 and n_neg >= n - n // 2:
        assert kept_pos == n // 2  # the balance split whenever the pool allows it
    if n_pos and n_neg:
        assert 0 < kept_pos < n  # both classes whenever the pool has both
    # the count of positives is the spec's: min(floor(n/2), #pos) topped up with positives first
    k_pos = min(n // 2, n_pos)
    k_neg = min(n - k_pos, n_neg)
    assert kept_pos == k_pos + min(n - k_pos - k_neg, n_pos - k_pos)
    if policy == "first":  # the earliest of each class
        pos_idx = [i for i, p in enumerate(pool) if p]
        neg_idx = [i for i, p in enumerate(pool) if not p]
        assert [i for i in idx if pool[i]] == pos_idx[:kept_pos]
        assert [i for i in idx if not pool[i]] == neg_idx[: n - kept_pos]
    else:
        assert idx == select_group(pool, n, policy=policy, rng=seed)  # reproducible by seed


# --- PromptPool -------------------------------------------------------------------------------------------------


def test_pool_resolves_and_keeps_statistics_of_every_sample():
    pool = PromptPool(Seq(n=4, round_size=4, max_rounds=3))
    pool.add_round([1, 1, 1, 1], [1, 1, 1, 1], items="abcd")
    assert not pool.done and pool.outcome == "active" and pool.next_round_size() == 4
    pool.add_round([0, 1, 0, 1], [0, 1, 0, 1], items="efgh")
    assert pool.resolved and pool.done and pool.round_resolved == 2 and pool.samples == 8
    assert pool.select() == [0, 1, 4, 6]  # a, b positive; e, g negative
    assert [pool.items[i] for i in pool.select()] == ["a", "b", "e", "g"]
    # 6 ones, 2 zeros: mean 0.75, unbiased var = (6 - 36/8) / 7
    assert pool.mean == pytest.approx(0.75)
    assert pool.std == pytest.approx(((6 - 36 / 8) / 7) ** 0.5)
    with pytest.raises(ValueError, match="already done"):
        pool.add_round([1], [1])


def test_pool_of_one_has_mean_zero_std_one():
    pool = PromptPool(Seq(n=2, round_size=1, max_rounds=4))
    pool.add_round([1.0], [0.7])
    assert (pool.count, pool.mean, pool.std) == (1, 0.0, 1.0)


def test_failed_samples_never_enter_the_pool_but_the_round_completes():
    pool = PromptPool(Seq(n=2, round_size=4, max_rounds=2))
    pool.add_round([1, None, 0, 1], [1.0, None, float("nan"), 1.0], items=[0, 1, 2, 3])
    assert pool.rounds == 1 and pool.samples == 4 and pool.failed == 2 and pool.count == 2
    assert pool.items == [0, 3] and not pool.resolved  # two positives, no negative yet
    pool.add_round([0, 0, 0, 0], [0, 0, 0, 0])
    assert pool.resolved and pool.mean == pytest.approx(2 / 6)


def test_too_few_valid_samples_is_a_failed_prompt():
    pool = PromptPool(Seq(n=4, round_size=4, max_rounds=1))
    pool.add_round([1, 0, 1, 0], [1, None, None, 0])
    assert pool.done and pool.outcome == "failed" and pool.select() == []


def test_pos_mode_waits_for_n_samples_even_after_a_positive():
    # first round of 2 finds a positive, but no group of 4 exists yet: the prompt stays active
    pool = PromptPool(Seq(n=4, mode="pos", round_size=2, first_round_size=2, max_rounds=4))
    pool.add_round([1, 0], [1, 0])
    assert not pool.done
    pool.add_round([0, 0], [0, 0])
    assert pool.resolved and pool.round_resolved == 2 and pool.select() == [0, 1, 2, 3]


def test_random_selection_of_a_pool_is_drawn_once():
    pool = PromptPool(Seq(n=2, round_size=8, max_rounds=1, selection="random"), rng=make_rng(3, "p"))
    pool.add_round([1, 0] * 4, [1, 0] * 4)
    assert pool.select() == pool.select()


# --- simulate ---------------------------------------------------------------------------------------------------


def test_simulate_by_hand_both_modes_resolved_and_unresolved():
    streams = [
        [1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0],  # balance: resolved in round 2
        [0] * 12,  # never resolves
        [0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1],  # balance: 2nd positive in round 3
    ]
    bal = simulate(streams, n=4, round_size=4, max_rounds=3, mode="balance")
    assert [r.samples for r in bal] == [8, 12, 12]
    assert [r.rounds for r in bal] == [2, 3, 3]
    assert [r.resolved for r in bal] == [True, False, True]
    assert [r.kept for r in bal] == [[0, 1, 4, 6], [0, 1, 2, 3], [0, 1, 5, 8]]
    assert [r.outcome for r in bal] == ["resolved", "kept", "resolved"]
    assert bal[0].pool_mean == pytest.approx(6 / 8) and bal[1].pool_mean == 0.0 and bal[1].pool_std == 0.0
    assert bal[2].pool_mean == pytest.approx(5 / 12)

    pos = simulate(streams, n=4, round_size=4, max_rounds=3, mode="pos")
    assert [r.samples for r in pos] == [4, 12, 8]
    assert [r.kept for r in pos] == [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 5]]

    dropped = simulate(streams, n=4, round_size=4, max_rounds=3, mode="balance", unresolved="drop")
    assert dropped[1].kept == [] and dropped[1].outcome == "dropped" and dropped[1].samples == 12
    assert dropped[0].kept == bal[0].kept


def test_simulate_first_round_size():
    # first round 4 (all wrong), later rounds of 2: resolved by the 2nd round's two positives
    res = simulate([[0, 0, 0, 0, 1, 1, 0, 0]], n=4, round_size=2, first_round_size=4, max_rounds=3, mode="balance")
    assert (res[0].samples, res[0].rounds, res[0].kept) == (6, 2, [0, 1, 4, 5])


def test_simulate_stream_too_short():
    with pytest.raises(ValueError, match=r"reward_streams\[0\]"):
        simulate([[0, 0]], n=2, round_size=4, max_rounds=1, mode="balance")


@st.composite
def sim_setup(draw):
    n = draw(st.integers(2, 8))
    m = draw(st.integers(1, 10))
    first = draw(st.one_of(st.none(), st.integers(1, 10)))
    rounds = draw(st.integers(1, 5))
    if (first or m) + m * (rounds - 1) < n:
        rounds = -(-(n - (first or m)) // m) + 1
    P = draw(st.integers(1, 5))
    length = (first or m) + m * (rounds - 1)
    rate = st.floats(0, 1)
    streams = [[float(draw(st.floats(0, 1)) < p) for _ in range(length)] for p in [draw(rate) for _ in range(P)]]
    kw = dict(n=n, round_size=m, first_round_size=first, max_rounds=rounds,
              mode=draw(st.sampled_from(["balance", "pos"])), unresolved=draw(st.sampled_from(["keep", "drop"])),
              selection=draw(st.sampled_from(["first", "random"])), seed=draw(st.integers(0, 99)))
    return streams, kw


@settings(max_examples=300, deadline=None)
@given(sim_setup())
def test_simulate_properties(setup):
    streams, kw = setup
    res = simulate(streams, **kw)
    n, m, first = kw["n"], kw["round_size"], kw["first_round_size"] or kw["round_size"]
    for stream, r in zip(streams, res):
        # samples are the first round plus whole later rounds, bounded by the rounds allowed
        assert r.samples == first + m * (r.rounds - 1) <= first + m * (kw["max_rounds"] - 1)
        drawn = stream[: r.samples]
        # pool statistics use every generated sample, not only the kept ones
        if r.samples >= 2:
            assert r.pool_mean == pytest.approx(statistics.mean(drawn))
            assert r.pool_std == pytest.approx(statistics.stdev(drawn), abs=1e-9)
        # a resolved prompt stops at the first round after which the rule holds
        holds = [exit_reached(int(sum(stream[: first + m * k])), first + m * k - int(sum(stream[: first + m * k])),
                              mode=kw["mode"], n=n) and first + m * k >= n for k in range(r.rounds)]
        assert r.resolved == holds[-1] and not any(holds[:-1])
        if r.outcome == "dropped":
            assert r.kept == [] and kw["unresolved"] == "drop" and not r.resolved
        else:
            assert len(r.kept) == n and len(set(r.kept)) == n and all(i < r.samples for i in r.kept)
            kept = [drawn[i] for i in r.kept]
            if 0 < sum(drawn) < len(drawn):
                assert 0 < sum(kept) < n  # both classes whenever the pool has both
    # per-prompt outcomes do not depend on the other prompts (random selection is keyed by prompt position)
    for p, stream in enumerate(streams):
        others = [[1.0 - x for x in s] for s in streams]
        others[p] = stream
        assert simulate(others, **kw)[p] == res[p]
    # the same config and seed give the same samples selected
    assert simulate(streams, **kw) == res


@settings(max_examples=100, deadline=None)
@given(sim_setup(), st.randoms(use_true_random=False))
def test_outcome_does_not_depend_on_completion_order(setup, rnd):
    """Drive one PromptPool per prompt, completing rounds in a random interleaving (as the async schedule does):
    each prompt ends exactly as when run alone."""
    streams, kw = setup
    alone = simulate(streams, **kw)
    config = Seq(n=kw["n"], round_size=kw["round_size"], first_round_size=kw["first_round_size"],
                       max_rounds=kw["max_rounds"], mode=kw["mode"], unresolved=kw["unresolved"],
                       selection=kw["selection"], seed=kw["seed"])
    pools = [PromptPool(config, rng=make_rng(kw["seed"], p)) for p in range(len(streams))]
    cursor = [0] * len(streams)
    while any(not pool.done for pool in pools):
        p = rnd.choice([i for i, pool in enumerate(pools) if not pool.done])
        size = pools[p].next_round_size()
        chunk = streams[p][cursor[p] : cursor[p] + size]
        pools[p].add_round(chunk, chunk, items=range(cursor[p], cursor[p] + size))
        cursor[p] += size
    for pool, r in zip(pools, alone):
        assert (pool.samples, pool.resolved, [pool.items[i] for i in pool.select()]) == (r.samples, r.resolved, r.kept)


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: exit_reached(1, 1, mode="both", n=4), ["mode", "'both'", "'balance'", "'pos'"]),
        (lambda: exit_reached(1, 1, mode="pos", n=1), ["n=1", ">= 2"]),
        (lambda: select_group([1, 0], 2, policy="best"), ["policy", "'best'", "'first'", "'random'"]),
        (lambda: select_group([1, 0], 3), ["2 samples", "n=3"]),
        (lambda: Seq(n=4, round_size=0), ["ada.round_size=0", ">= 1"]),
        (lambda: Seq(n=4, max_rounds=0), ["ada.max_rounds=0", ">= 1"]),
        (lambda: Seq(n=1), ["n_samples_per_prompt", "=1", ">= 2"]),
        (lambda: Seq(n=8, round_size=2, max_rounds=3), ["6 samples", "n=8"]),
        (lambda: Seq(n=4, unresolved="retry"), ["ada.unresolved", "'retry'", "'keep'", "'drop'"]),
        (lambda: Seq(n=4, baseline="batch"), ["ada.baseline", "'pool'", "'group'"]),
        (lambda: Seq(n=4, schedule="eager"), ["ada.schedule", "'async'", "'sync'"]),
        (lambda: simulate([[1, 0]], n=2, round_size=2, max_rounds=0, mode="pos"), ["ada.max_rounds=0"]),
        (lambda: simulate([[1, 0]], n=2, round_size=0, max_rounds=1, mode="pos"), ["ada.round_size=0"]),
    ],
)
def test_bad_input_names_parameter_value_and_accepted(call, words):
    with pytest.raises(ValueError) as e:
        call()
    for word in words:
        assert word in str(e.value)


def test_pool_metrics_by_hand():
    cfg = Seq(n=2, round_size=2, max_rounds=2)
    a = PromptPool(cfg)  # resolved in round 1: rewards 1, 0; lengths 3, 5
    a.add_round([1, 0], [1, 0], lengths=[3, 5])
    b = PromptPool(cfg)  # never resolves, kept: four wrong answers of 4 tokens each
    b.add_round([0, 0], [0, 0], lengths=[4, 4])
    b.add_round([0, 0], [0, 0], lengths=[4, 4])
    c = PromptPool(cfg)  # a failed sample in round 1, resolved in round 2
    c.add_round([1, None], [1, None], lengths=[2, 6])
    c.add_round([0, 1], [0, 1], lengths=[1, 1])
    m = pool_metrics([a, b, c], max_rounds=2)
    assert m["ada/samples_generated"] == 10 and m["ada/tokens_generated"] == 3 + 5 + 16 + 2 + 6 + 1 + 1
    assert m["ada/samples_per_prompt_mean"] == pytest.approx(10 / 3) and m["ada/samples_per_prompt_max"] == 4
    assert m["ada/rounds_mean"] == pytest.approx(5 / 3)
    assert m["ada/resolved_share"] == pytest.approx(2 / 3) and m["ada/unresolved_kept"] == 1
    assert m["ada/failed_samples"] == 1 and m["ada/failed_prompts"] == 0
    assert (m["ada/resolved_at_round_1"], m["ada/resolved_at_round_2"]) == pytest.approx((1 / 3, 1 / 3))
    assert m["ada/nonzero_adv_group_share"] == pytest.approx(2 / 3)
    assert m["ada/first_round_signal_share"] == pytest.approx(1 / 3)  # only a's first round had both classes
    # c keeps its first positive (2 tokens) and first negative (1 token); a keeps both (3 + 5)
    assert m["ada/eta"] == pytest.approx((3 + 5 + 2 + 1) / 34)
    # every generated sample with a reward counts for the policy quality: 1 + 0 + 2 positives of 2 + 4 + 3 valid
    assert m["ada/reward_mean_generated"] == pytest.approx(3 / 9) and m["ada/pass_rate_generated"] == pytest.approx(3 / 9)
