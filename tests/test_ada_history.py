"""Per-prompt history (`--ada.history`): the key, the posterior, the first round size, skips, the store and its
plain-dict form, and `simulate` over epochs. Expected values are derived by hand (Beta moments telescope:
E[p^k] = prod_{i<k} (a+i)/(a+b+i)) or from an independent Monte Carlo estimate."""

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.history import (
    EpochRecord,
    HistoryConfig,
    PromptHistory,
    first_round_for,
    posterior,
    prompt_key,
    round_schedule,
    signal_probability,
    skip_decision,
)
from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq
from openrlhf_ada.algorithms.simulation import simulate

BAL = dict(n=4, round_size=8, max_rounds=4, mode="balance")


# --- key --------------------------------------------------------------------------------------------------------

def test_prompt_key_is_sha256_and_the_same_in_another_process():
    assert prompt_key("hello") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    code = "from openrlhf_ada.algorithms.history import prompt_key; print(prompt_key('Solve 2 + 2 = ?'))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout.strip() for seed in ("1", "2")}
    assert outs == {prompt_key("Solve 2 + 2 = ?")}
    with pytest.raises(ValueError, match="str"):
        prompt_key(b"bytes")


# --- posterior, probabilities, sizes ----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 4, 9, 31])
def test_signal_probability_uniform_prior(k):
    # p ~ uniform: E[p^k] = E[(1-p)^k] = 1 / (k + 1)
    assert signal_probability(k, 1.0, 1.0) == pytest.approx(1 - 2 / (k + 1))


def test_signal_probability_by_hand_and_by_monte_carlo():
    # Beta(2, 5), k = 6: E[p^6] = (2*3*4*5*6*7) / (7*8*9*10*11*12) = 5040 / 665280; E[(1-p)^6] = (5*6) / (11*12)
    assert signal_probability(6, 2.0, 5.0) == pytest.approx(1 - 5040 / 665280 - 30 / 132)
    # an independent estimate: draw p, then 7 samples
    rng = random.Random(0)
    hits, trials = 0, 40000
    for _ in range(trials):
        p = rng.betavariate(3.5, 1.5)
        draws = [rng.random() < p for _ in range(7)]
        hits += any(draws) and not all(draws)
    assert signal_probability(7, 3.5, 1.5) == pytest.approx(hits / trials, abs=0.015)
    assert signal_probability(0, 2.0, 2.0) == 0.0 and signal_probability(1, 2.0, 2.0) == 0.0


def test_posterior_discounts_older_epochs_and_ignores_the_present():
    cfg = HistoryConfig(prior_a=1.0, prior_b=1.0, decay=0.5)
    records = [EpochRecord(0, 3, 1), EpochRecord(1, 0, 4), EpochRecord(2, 9, 9)]
    # at epoch 2: epoch 1 counts fully, epoch 0 half; epoch 2 itself is not read
    assert posterior(records, 2, cfg) == (1 + 0.5 * 3 + 0, 1 + 0.5 * 1 + 4)
    assert posterior(records, 0, cfg) == (1.0, 1.0)


def test_first_round_size_by_hand():
    # one earlier epoch with 4 correct and 4 wrong: Beta(5, 5). P(both classes among k) = 1 - 2 E[p^k]:
    # E[p^4] = 5*6*7*8 / (10*11*12*13) = 0.0979 -> 0.804; k = 5: E[p^5] = 0.0979 * 9/14 -> 0.874; k = 6: -> 0.916
    records = [EpochRecord(0, 4, 4)]
    sizes = {t: first_round_for(records, 1, config=HistoryConfig(target=t), n=4, cap=32) for t in (0.8, 0.85, 0.9)}
    assert sizes == {0.8: 4, 0.85: 5, 0.9: 6}
    # never below n: P(both among 2) = 1 - 2 * (5*6)/(10*11) = 0.4545 would already pass a target of 0.4
    assert first_round_for(records, 1, config=HistoryConfig(target=0.4), n=4, cap=32) == 4
    # no earlier record, target 0, or unreachable (32 wrong before: Beta(1, 33); E[(1-p)^32] = 33/65): configured
    assert first_round_for([], 1, config=HistoryConfig(target=0.9), n=4, cap=32) is None
    assert first_round_for(records, 0, config=HistoryConfig(target=0.9), n=4, cap=32) is None
    assert first_round_for(records, 1, config=HistoryConfig(target=0.0), n=4, cap=32) is None
    assert signal_probability(32, 1.0, 33.0) < 1 - 33 / 65 + 1e-12
    assert first_round_for([EpochRecord(0, 0, 32)], 1, config=HistoryConfig(target=0.5), n=4, cap=32) is None


@pytest.mark.parametrize("first,cap,rounds,expected", [
    (8, 32, 4, [8, 8, 8, 8]),  # the authors' schedule back
    (5, 32, 4, [5, 9, 9, 9]),
    (12, 32, 4, [12, 7, 7, 6]),
    (32, 32, 4, [32]),
    (40, 32, 4, [32]),  # clipped to the cap
    (30, 32, 4, [30, 1, 1]),
    (4, 16, 1, [4]),
])
def test_round_schedule(first, cap, rounds, expected):
    assert round_schedule(first, cap, rounds) == expected


def test_pool_with_its_own_first_round_keeps_the_cap_and_the_rounds():
    pool = PromptPool(Seq(**{k: v for k, v in BAL.items()}), first_round=12)
    sizes = []
    while not pool.done:
        sizes.append(pool.next_round_size())
        pool.add_round([0] * sizes[-1], [0] * sizes[-1])
    assert sizes == [12, 7, 7, 6] and pool.samples == 32 and pool.rounds == 4 and pool.outcome == "kept"
    whole = PromptPool(Seq(**BAL), first_round=32)
    whole.add_round([0] * 32, [0] * 32)
    assert whole.done and whole.rounds == 1  # the cap is used up: no further round


# --- skips ------------------------------------------------------------------------------------------------------

def test_skip_only_saturated_prompts_in_their_last_window():
    always = HistoryConfig(skip=1.0, window=1)
    assert skip_decision([EpochRecord(0, 8, 0)], 1, "k", config=always, seed=0)  # all correct
    assert skip_decision([EpochRecord(0, 0, 32)], 1, "k", config=always, seed=0)  # all wrong
    assert not skip_decision([EpochRecord(0, 7, 1)], 1, "k", config=always, seed=0)  # signal
    assert not skip_decision([], 1, "k", config=always, seed=0)
    assert not skip_decision([EpochRecord(0, 8, 0)], 0, "k", config=always, seed=0)  # its own epoch is not read
    assert not skip_decision([EpochRecord(0, 8, 0)], 1, "k", config=HistoryConfig(skip=0.0), seed=0)
    two = HistoryConfig(skip=1.0, window=2, keep=4)
    assert not skip_decision([EpochRecord(0, 8, 0)], 1, "k", config=two, seed=0)  # one record only
    assert not skip_decision([EpochRecord(0, 3, 5), EpochRecord(1, 8, 0)], 2, "k", config=two, seed=0)
    assert skip_decision([EpochRecord(0, 0, 8), EpochRecord(2, 8, 0)], 3, "k", config=two, seed=0)


def test_skip_probability_is_the_configured_share_and_reproducible():
    cfg = HistoryConfig(skip=0.3)
    keys = [prompt_key(f"q{i}") for i in range(4000)]
    decisions = [skip_decision([EpochRecord(0, 0, 8)], 1, k, config=cfg, seed=7) for k in keys]
    share = sum(decisions) / len(keys)
    assert abs(share - 0.3) < 4 * (0.3 * 0.7 / 4000) ** 0.5
    assert decisions == [skip_decision([EpochRecord(0, 0, 8)], 1, k, config=cfg, seed=7) for k in keys]
    other_epoch = [skip_decision([EpochRecord(0, 0, 8)], 2, k, config=cfg, seed=7) for k in keys]
    assert other_epoch != decisions  # a fresh draw each epoch: a skipped prompt is re-probed later


# --- the store --------------------------------------------------------------------------------------------------

def test_store_records_trims_and_round_trips_through_json():
    h = PromptHistory(HistoryConfig(keep=2))
    h.record("a", 0, 1, 3)
    h.record("a", 0, 2, 0)  # the same epoch again: counts add up
    h.record("a", 1, 0, 4)
    h.record("a", 3, 5, 5)  # kept: the last two
    h.record("b", 2, 0, 8)
    assert h.get("a") == [EpochRecord(1, 0, 4), EpochRecord(3, 5, 5)] and len(h) == 2
    data = json.loads(json.dumps(h.to_dict()))
    assert data == {"format": 1, "prompts": {"a": [[1, 0, 4], [3, 5, 5]], "b": [[2, 0, 8]]}}
    back = PromptHistory.from_dict(data, HistoryConfig(keep=2))
    assert back.records == h.records
    with pytest.raises(ValueError, match="epochs only go up"):
        h.record("a", 2, 1, 1)
    with pytest.raises(ValueError, match="format 1"):
        PromptHistory.from_dict({"prompts": {}})
    with pytest.raises(ValueError, match=r"'a'.*\[1, 2\]"):
        PromptHistory.from_dict({"format": 1, "prompts": {"a": [[1, 2]]}})


@pytest.mark.parametrize("kwargs,words", [
    (dict(history_target=1.0), ["ada.history_target=1.0", "[0, 1)"]),
    (dict(history_target=-0.1), ["ada.history_target=-0.1"]),
    (dict(history_skip=1.5), ["ada.history_skip=1.5", "[0, 1]"]),
    (dict(history_window=0), ["ada.history_window=0", ">= 1"]),
    (dict(history="on"), ["ada.history='on'", "True, False"]),
])
def test_bad_history_settings_name_the_flag(kwargs, words):
    with pytest.raises(ValueError) as e:
        Seq(n=4, **kwargs)
    for word in words:
        assert word in str(e.value)


# --- simulate over epochs ---------------------------------------------------------------------------------------

def test_simulate_with_history_by_hand():
    h = PromptHistory(HistoryConfig(target=0.9, skip=1.0))
    keys = ["mixed", "easy", "hard"]
    epoch0 = [[1, 0] * 16, [1] * 32, [0] * 32]
    first = simulate(epoch0, **BAL, history=h, prompt_keys=keys, epoch=0)
    assert first == simulate(epoch0, **BAL)  # no record yet: exactly the authors' procedure
    assert h.to_dict()["prompts"] == {"mixed": [[0, 4, 4]], "easy": [[0, 32, 0]], "hard": [[0, 0, 32]]}
    # epoch 1: "mixed" has Beta(5, 5) -> a first round of 6, then [9, 9, 8]; its stream needs 2 rounds (6 correct,
    # then 2 wrong). "easy" and "hard" were saturated: skipped (probability 1).
    epoch1 = [[1] * 6 + [0] * 26, [1] * 32, [0] * 32]
    res = simulate(epoch1, **BAL, history=h, prompt_keys=keys, epoch=1)
    assert (res[0].first_round, res[0].samples, res[0].rounds, res[0].kept) == (6, 15, 2, [0, 1, 6, 7])
    assert [r.skipped for r in res] == [False, True, True] and res[1].outcome == "skipped" and res[1].samples == 0
    assert h.get("easy") == [EpochRecord(0, 32, 0)]  # nothing recorded for a skipped epoch


@st.composite
def epochs_setup(draw):
    P = draw(st.integers(1, 5))
    epochs = draw(st.integers(1, 3))
    rates = [draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0])) for _ in range(P)]
    rnd = random.Random(draw(st.integers(0, 10**6)))
    streams = [[[float(rnd.random() < p) for _ in range(32)] for p in rates] for _ in range(epochs)]
    lengths = [[[rnd.randint(1, 60) for _ in range(32)] for _ in range(P)] for _ in range(epochs)]
    cfg = HistoryConfig(target=draw(st.sampled_from([0.0, 0.5, 0.9])), skip=draw(st.sampled_from([0.0, 0.5, 1.0])),
                        window=draw(st.integers(1, 2)))
    kw = dict(n=4, round_size=draw(st.sampled_from([4, 8])), max_rounds=draw(st.sampled_from([2, 4])),
              first_round_size=8, mode=draw(st.sampled_from(["balance", "pos"])), seed=draw(st.integers(0, 5)))
    return streams, lengths, cfg, kw, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(epochs_setup(), st.randoms(use_true_random=False))
def test_history_decisions_do_not_depend_on_the_order_of_prompts(setup, rnd):
    """Each prompt's plan and result depend on its own record and stream only: shuffling the prompts of every epoch
    (keys travel with their streams) changes no prompt's result and no record."""
    streams, lengths, cfg, kw, cancel = setup
    keys = [prompt_key(f"prompt {i}") for i in range(len(streams[0]))]
    h1, h2 = PromptHistory(cfg), PromptHistory(cfg)
    cap = kw["first_round_size"] + kw["round_size"] * (kw["max_rounds"] - 1)
    for e, (ss, ls) in enumerate(zip(streams, lengths)):
        ordered = simulate(ss, **kw, history=h1, prompt_keys=keys, epoch=e, length_streams=ls, cancel=cancel)
        perm = list(range(len(ss)))
        rnd.shuffle(perm)
        shuffled = simulate([ss[i] for i in perm], **kw, history=h2, prompt_keys=[keys[i] for i in perm], epoch=e,
                            length_streams=[ls[i] for i in perm], cancel=cancel)
        for k, i in enumerate(perm):
            assert shuffled[k] == ordered[i]
        for r, s in zip(ordered, ss):
            assert r.samples <= cap  # the per-prompt cap holds whatever the first round
            if r.kept and r.num_pos and r.num_neg:
                assert 0 < sum(s[j] for j in r.kept) < kw["n"]  # both classes in the pool -> both in the group
    assert h1.to_dict() == h2.to_dict()


# --- flags ------------------------------------------------------------------------------------------------------

def test_flags_build_the_config_defaults_off():
    import argparse

    from openrlhf.utils.config import hierarchize

    from openrlhf_ada.args import add_project_args, seq_config

    parser = add_project_args(argparse.ArgumentParser())
    parser.add_argument("--rollout.n_samples_per_prompt", type=int, default=4)
    off = seq_config(hierarchize(parser.parse_args(["--ada.enable"])))
    assert (off.cancel, off.cancel_order, off.history) == (False, "arrival", False)
    on = seq_config(hierarchize(parser.parse_args([
        "--ada.enable", "--ada.cancel", "--ada.cancel_order", "request", "--ada.history", "--ada.history_target", "0",
        "--ada.history_skip", "0.9", "--ada.history_window", "2"])))
    assert (on.cancel, on.cancel_order, on.history) == (True, "request", True)
    assert on.history_config == HistoryConfig(target=0.0, skip=0.9, window=2)
    text = parser.format_help()
    for flag in ("--ada.cancel ", "--ada.cancel_order", "--ada.history ", "--ada.history_target", "--ada.history_skip",
                 "--ada.history_window"):
        assert flag in text
