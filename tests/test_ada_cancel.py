"""Stopping inside a round (`--ada.cancel`): PromptPool fed sample by sample, the simulator's timing model, token
accounting, and the properties that tie it to the authors' algorithm (same rounds, same coverage; in request order
and balance mode the very same trained group). Expected values are derived by hand in the comments."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq, make_rng, pool_metrics
from openrlhf_ada.algorithms.simulation import simulate

BAL = dict(n=4, round_size=8, max_rounds=4, mode="balance")


# --- by hand ----------------------------------------------------------------------------------------------------

def test_arrival_order_by_hand():
    # lengths 5 3 9 1 7 2 8 4, rewards 1 0 1 1 0 0 1 0. Arrival (shortest first): #3 (+, t=1), #5 (-, 2), #1 (-, 3),
    # #7 (-, 4), #0 (+, 5): now 2 positives and 3 negatives -> stop at t = 5. #4, #6, #2 are cancelled, each having
    # generated 5 tokens: 15. Tokens: 1 + 2 + 3 + 4 + 5 + 15 = 30. Pool in arrival order 3 5 1 7 0; group: the two
    # earliest positives (#3, #0) and negatives (#5, #1).
    stream, lengths = [1, 0, 1, 1, 0, 0, 1, 0], [5, 3, 9, 1, 7, 2, 8, 4]
    r = simulate([stream], **BAL, length_streams=[lengths], cancel=True)[0]
    assert (r.samples, r.rounds, r.resolved, r.round_resolved) == (8, 1, True, 1)
    assert r.finished == (3, 5, 1, 7, 0) and r.cancelled == 3 and r.discarded == 0
    assert r.tokens == 30
    assert sorted(r.kept) == [0, 1, 3, 5]
    assert (r.num_pos, r.num_neg, r.pool_mean) == (2, 3, pytest.approx(2 / 5))
    # cancel off: every request finishes, 39 tokens, the group of the earliest requests (#0, #2 and #1, #4)
    off = simulate([stream], **BAL, length_streams=[lengths])[0]
    assert off.tokens == 39 and off.cancelled == 0 and off.kept == [0, 1, 2, 4]


def test_request_order_by_hand():
    # lengths 6 1 2 3 4 9 9 9, rewards 1 1 0 0 1 0 0 1.
    # arrival: #1 (+), #2 (-), #3 (-), #4 (+) at t = 4: stop; #0, #5, #6, #7 cancelled with 4 tokens each.
    stream, lengths = [1, 1, 0, 0, 1, 0, 0, 1], [6, 1, 2, 3, 4, 9, 9, 9]
    arr = simulate([stream], **BAL, length_streams=[lengths], cancel=True)[0]
    assert arr.tokens == 1 + 2 + 3 + 4 + 4 * 4 and arr.cancelled == 4 and sorted(arr.kept) == [1, 2, 3, 4]
    # request order: #1..#4 wait for #0 (t = 6); then #0 +, #1 +, #2 -, #3 - -> the rule holds after #3. #4 came
    # back but lies beyond the run: discarded. #5, #6, #7 cancelled at t = 6 (18 tokens).
    req = simulate([stream], **BAL, length_streams=[lengths], cancel=True, cancel_order="request")[0]
    assert req.tokens == 1 + 2 + 3 + 4 + 6 + 3 * 6
    assert (req.cancelled, req.discarded, req.kept) == (3, 1, [0, 1, 2, 3])
    assert (req.num_pos, req.num_neg) == (2, 2)


def test_unresolved_round_runs_to_the_end_and_the_next_round_is_cut():
    # round 1 (4 requests): all wrong, nothing cancelled. Round 2: lengths 2 1 3 4 -> #5 (+, t=1), #4 (+, t=2): the
    # pool holds 4 wrong and 2 correct: stop; #6 and #7 cancelled with 2 tokens each.
    stream, lengths = [0, 0, 0, 0, 1, 1, 0, 1], [10, 10, 10, 10, 2, 1, 3, 4]
    r = simulate([stream], n=4, round_size=4, max_rounds=3, mode="balance", length_streams=[lengths], cancel=True)[0]
    assert (r.rounds, r.round_resolved, r.cancelled) == (2, 2, 2)
    assert r.tokens == 40 + 1 + 2 + 2 * 2
    assert r.finished == (0, 1, 2, 3, 5, 4)


def test_pool_fed_by_hand_with_a_failed_sample_and_late_arrivals():
    cfg = Seq(n=2, round_size=4, max_rounds=2, cancel=True)
    pool = PromptPool(cfg)
    assert pool.start_round() == 4
    assert pool.add_sample(2, 1.0, 1.0, item="c", length=3) is False
    assert pool.add_sample(0, None, None, item="a", length=7) is False  # failed: counted, not in the pool
    assert pool.add_sample(3, 0.0, 0.0, item="d", length=8) is True  # 1 correct + 1 wrong: cancel the rest
    assert pool.should_cancel and not pool.done
    assert pool.add_sample(1, 1.0, 1.0, item="b", length=9) is True  # finished before the cancel took effect
    pool.end_round(cancelled_tokens=0)
    assert pool.done and pool.resolved and (pool.failed, pool.discarded, pool.cancelled) == (1, 1, 0)
    assert pool.items == ["c", "d"] and pool.tokens == 3 + 7 + 8 + 9
    assert [pool.items[i] for i in pool.select()] == ["c", "d"]


def test_pool_metrics_count_cancelled_and_discarded_only_with_the_options_on():
    on = Seq(n=2, round_size=4, max_rounds=1, cancel=True)
    a = PromptPool(on)
    a.start_round()
    a.add_sample(1, 1.0, 1.0, length=2)
    assert a.add_sample(3, 0.0, 0.0, length=5)
    a.end_round(cancelled_tokens=10)  # two requests cancelled at t = 5
    m = pool_metrics([a], max_rounds=1, skipped=3)
    assert (m["ada/cancelled_requests"], m["ada/cancelled_tokens"], m["ada/discarded_samples"]) == (2, 10, 0)
    assert m["ada/tokens_generated"] == 17 and m["ada/skipped_prompts"] == 3 and m["ada/skipped_share"] == 3 / 4
    assert m["ada/eta"] == pytest.approx(7 / 17)  # the kept pair (2 + 5 tokens) of all 17
    b = PromptPool(Seq(n=2, round_size=2, max_rounds=1))
    b.add_round([1, 0], [1, 0], lengths=[1, 1])
    assert not any("cancel" in k or "skipped" in k for k in pool_metrics([b], max_rounds=1))


# --- misuse -----------------------------------------------------------------------------------------------------

def test_per_sample_feeding_misuse_is_a_clear_error():
    pool = PromptPool(Seq(n=2, round_size=2, max_rounds=2, cancel=True))
    with pytest.raises(ValueError, match="start_round first"):
        pool.add_sample(0, 1, 1)
    with pytest.raises(ValueError, match="without an open round"):
        pool.end_round()
    pool.start_round()
    with pytest.raises(ValueError, match="round is open"):
        pool.start_round()
    with pytest.raises(ValueError, match="while a round"):
        pool.add_round([1, 0], [1, 0])
    with pytest.raises(ValueError, match=r"index=2 is invalid.*0\.\.1"):
        pool.add_sample(2, 1, 1)
    pool.add_sample(0, 1, 1)
    with pytest.raises(ValueError, match=r"index=0 is invalid.*returned: \[0\]"):
        pool.add_sample(0, 1, 1)
    with pytest.raises(ValueError, match="1 of the round's 2 requests never came back"):
        pool.end_round()
    with pytest.raises(ValueError, match="needs length_streams"):
        simulate([[1, 0]], n=2, round_size=2, max_rounds=1, mode="pos", cancel=True)
    with pytest.raises(ValueError) as e:
        Seq(n=4, cancel_order="shortest")
    assert "ada.cancel_order" in str(e.value) and "'arrival'" in str(e.value) and "'request'" in str(e.value)
    with pytest.raises(ValueError, match="ada.cancel="):
        Seq(n=4, cancel="yes")


# --- properties -------------------------------------------------------------------------------------------------

@st.composite
def streams_with_lengths(draw):
    n = draw(st.integers(2, 6))
    m = draw(st.integers(1, 9))
    first = draw(st.one_of(st.none(), st.integers(1, 9)))
    rounds = draw(st.integers(1, 5))
    if (first or m) + m * (rounds - 1) < n:
        rounds = -(-(n - (first or m)) // m) + 1
    length = (first or m) + m * (rounds - 1)
    P = draw(st.integers(1, 4))
    rates = [draw(st.floats(0, 1)) for _ in range(P)]
    streams = [[float(draw(st.floats(0, 1)) < p) for _ in range(length)] for p in rates]
    lengths = [[draw(st.integers(1, 50)) for _ in range(length)] for _ in range(P)]
    kw = dict(n=n, round_size=m, first_round_size=first, max_rounds=rounds,
              mode=draw(st.sampled_from(["balance", "pos"])), unresolved=draw(st.sampled_from(["keep", "drop"])),
              seed=draw(st.integers(0, 99)))
    return streams, lengths, kw


@settings(max_examples=300, deadline=None)
@given(streams_with_lengths(), st.sampled_from(["arrival", "request"]))
def test_cancel_keeps_rounds_and_signal_and_never_costs_more(setup, order):
    """Counts only grow within a round, so the exit rule holds mid-round exactly when it holds at the round's end:
    cancelling changes neither the rounds nor which prompts resolve, and only removes tokens. In balance mode the
    group has signal exactly when it had without cancelling; in pos mode it can lose it (the rule needs no wrong
    answer). Tokens = finished samples' lengths + (stop time x cancelled requests)."""
    streams, lengths, kw = setup
    off = simulate(streams, **kw, length_streams=lengths)
    on = simulate(streams, **kw, length_streams=lengths, cancel=True, cancel_order=order)
    for stream, lens, a, b in zip(streams, lengths, off, on):
        assert (b.samples, b.rounds, b.resolved, b.round_resolved, b.outcome) == \
            (a.samples, a.rounds, a.resolved, a.round_resolved, a.outcome)
        assert b.samples <= (kw["first_round_size"] or kw["round_size"]) + kw["round_size"] * (kw["max_rounds"] - 1)
        assert b.tokens <= a.tokens == sum(lens[: a.samples])
        assert len(b.finished) + b.cancelled == b.samples and len(set(b.finished)) == len(b.finished)
        if b.cancelled:  # the stop time is the length of the last sample that came back before it
            stop = lens[b.finished[-1]]
            assert b.tokens == sum(lens[j] for j in b.finished) + stop * b.cancelled
            assert all(lens[j] >= stop for j in set(range(b.samples)) - set(b.finished))
        else:
            assert b.tokens == a.tokens
        if a.kept:
            had_signal = len({stream[j] for j in a.kept}) > 1
            has_signal = len({stream[j] for j in b.kept}) > 1
            assert len(b.kept) == kw["n"] and set(b.kept) <= set(b.finished)
            if kw["mode"] == "balance":  # the rule implies both classes: signal is never lost
                assert has_signal == had_signal
            else:  # pos: the rule needs no wrong answer, and the cut part of the round may have held the only one
                assert has_signal <= had_signal
        if order == "request" and kw["mode"] == "balance":
            assert b.kept == a.kept  # the authors' own group, whatever the lengths


@settings(max_examples=200, deadline=None)
@given(streams_with_lengths(), st.randoms(use_true_random=False))
def test_cancel_off_per_sample_feeding_equals_add_round_in_any_arrival_order(setup, rnd):
    """Without cancel, samples fed one by one in any order give exactly the pool of add_round (request order)."""
    streams, lengths, kw = setup
    config = Seq(n=kw["n"], round_size=kw["round_size"], first_round_size=kw["first_round_size"],
                       max_rounds=kw["max_rounds"], mode=kw["mode"])
    for stream, lens in zip(streams, lengths):
        a, b, pos = PromptPool(config), PromptPool(config), 0
        while not a.done:
            size = a.next_round_size()
            a.add_round(stream[pos: pos + size], stream[pos: pos + size], items=range(pos, pos + size),
                        lengths=lens[pos: pos + size])
            assert b.start_round() == size
            order = list(range(size))
            rnd.shuffle(order)
            for j in order:
                assert b.add_sample(j, stream[pos + j], stream[pos + j], item=pos + j, length=lens[pos + j]) is False
            b.end_round()
            pos += size
        assert b.done
        for name in ("scores", "rewards", "items", "lengths", "rounds", "samples", "tokens", "num_pos",
                     "round_resolved", "first_round_signal", "mean", "std"):
            assert getattr(a, name) == getattr(b, name), name
        assert a.select() == b.select()


@settings(max_examples=100, deadline=None)
@given(streams_with_lengths(), st.sampled_from(["arrival", "request"]), st.randoms(use_true_random=False))
def test_cancel_outcome_of_a_prompt_does_not_depend_on_the_others(setup, order, rnd):
    """Each prompt's result with cancel on is the same when the other prompts change or come in another order."""
    streams, lengths, kw = setup
    kw = dict(kw, unresolved="keep")
    alone = [simulate([s], **kw, length_streams=[L], cancel=True, cancel_order=order)[0]
             for s, L in zip(streams, lengths)]
    perm = list(range(len(streams)))
    rnd.shuffle(perm)
    together = simulate([streams[i] for i in perm], **kw, length_streams=[lengths[i] for i in perm], cancel=True,
                        cancel_order=order)
    for k, i in enumerate(perm):
        assert together[k] == alone[i]


def test_random_selection_with_cancel_is_reproducible():
    rng_stream = random.Random(5)
    streams = [[float(rng_stream.random() < 0.5) for _ in range(32)] for _ in range(6)]
    lengths = [[rng_stream.randint(1, 100) for _ in range(32)] for _ in range(6)]
    a = simulate(streams, **BAL, selection="random", seed=3, length_streams=lengths, cancel=True)
    assert a == simulate(streams, **BAL, selection="random", seed=3, length_streams=lengths, cancel=True)
    pool = PromptPool(Seq(n=4, cancel=True, selection="random"), rng=make_rng(3, 0))
    assert pool.next_round_size() == 8
