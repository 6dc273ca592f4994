"""Reinforce-Ada-Est as its authors built it (`--ada.est_preset authors`), Est with ADORA, and the check that Est is
estimating at all. Expected counts and advantages are derived by hand from the authors' arithmetic in the comments
(RLHFlow/Reinforce-Ada, branch hanze: verl/trainer/ppo/ray_trainer_ema.py, verl/trainer/ppo/core_algos.py)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms.adora import AdoraConfig, ragged_group_stats, ragged_sample_weights
from openrlhf_ada.algorithms.baselines import group_index, pad_groups
from openrlhf_ada.algorithms.estimate import (
    ALLOCATION_RULES,
    EST_PRESETS,
    EstConfig,
    SeenWatch,
    allocate_authors,
    authors_baseline,
    pass_rate_estimate,
)
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory
from openrlhf_ada.algorithms.reinforce_ada import Est, PromptPool
from openrlhf_ada.algorithms.simulation import simulate_est


def authors_counts(history, budget, alpha=1.0, beta=16.0):
    """The authors' allocation for prompts with the given (N_total, N_pos)."""
    p_hat = pass_rate_estimate([h[0] for h in history], [h[1] for h in history], alpha, beta)
    return allocate_authors(p_hat, budget * len(history), n_min=1).tolist()


# -- the allocation, by hand ----------------------------------------------------------------------------------------
def test_authors_allocation_by_hand():
    # Four prompts, round_repeat (budget) 8: total 32, each gets 1, remaining R = 28.
    # p_hat = (1 + N_pos) / (17 + N_total): unseen 1/17, (8, 8) 9/25, (8, 0) 1/25, (8, 4) 5/25
    # w = 1/p_hat = 17, 25/9, 25, 5; sum = 47 + 25/9 = 448/9; shares R w / sum = w x 9/16:
    # 9.5625, 1.5625, 14.0625, 2.8125; floors 9, 1, 14, 2 (26); leftover 2 by fraction, descending:
    # .8125 (prompt 3), then .5625 twice (prompts 0 and 1: a tie, the stable sort keeps batch order -> prompt 0)
    # counts 1 + 9 + 1 = 11, 1 + 1 = 2, 1 + 14 = 15, 1 + 2 + 1 = 4
    assert authors_counts([(0, 0), (8, 8), (8, 0), (8, 4)], 8) == [11, 2, 15, 4]
    # the same prompts in another order: now the (8, 8) prompt comes first of the tied pair and takes the sample
    assert authors_counts([(8, 0), (8, 8), (0, 0), (8, 4)], 8) == [15, 3, 10, 4]
    # Two prompts, budget 4: total 8, R = 6; w = 25/9, 25 (sum 250/9); shares 0.6, 5.4; floors 0, 5; the one left
    # goes to the larger fraction (.6): counts 2, 6
    assert authors_counts([(8, 8), (8, 0)], 4) == [2, 6]
    # budget 2: R = 2, shares 0.2, 1.8, floors 0, 1, the one left to .8: the easy prompt keeps its one sample
    assert authors_counts([(8, 8), (8, 0)], 2) == [1, 3]
    # unseen prompts all share the prior: the budget each (R = 7 P, shares 7 each)
    for P in (1, 3, 7, 11):
        assert authors_counts([(0, 0)] * P, 8) == [8] * P
    # their weight floors p_hat at 1e-6: 1/1e-6 = 1e6 against 1/1 = 1; R = 2 x 2 - 2 = 2, shares 1.999998,
    # 0.000002; floors 1, 0, the one left to the larger fraction .999998
    assert allocate_authors(torch.tensor([1e-9, 1.0]), 4, n_min=1).tolist() == [3, 1]
    with pytest.raises(ValueError, match="cannot give"):
        allocate_authors(torch.tensor([0.5, 0.5]), 1, n_min=1)


def test_the_allocation_rules_are_registered_and_chosen_by_the_config():
    assert ALLOCATION_RULES.names()[:2] == ("inv_sqrt", "authors")
    paper, authors = EstConfig.from_preset("paper", 4), EstConfig.from_preset("authors", 4)
    p_hat = pass_rate_estimate([8, 8], [8, 0], 1.0, 16.0)
    assert authors.allocate(p_hat, 2) == [2, 6]
    # the paper's rule on the same p_hat = 9/25, 1/25: w = 1/sqrt(p) + 0.01 = 1.67667, 5.01; shares of 8 (within
    # [2, 32]): 8 w / 6.68667 = 2.006, 5.994; floors 2, 5; the one left to .994 -> 2, 6 as well
    assert paper.allocate(p_hat, 2) == [2, 6]
    # at budget 2 the authors' rule goes down to one sample (the paper's keeps 2 each: 2, 2)
    assert EstConfig.from_preset("authors", 2).allocate(p_hat, 2) == [1, 3]
    with pytest.raises(ValueError, match="budget"):
        EstConfig.from_preset("paper", 1)  # the paper's est_min 2 > a budget of 1


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=12),
       st.integers(1, 12), st.integers(1, 3))
def test_authors_allocation_properties(raw, budget, n_min):
    """Sum = budget x P, each >= n_min, monotone (a lower p_hat never gets fewer), at most one above the floor."""
    history = [(float(max(t, p)), float(min(t, p))) for t, p in raw]  # N_pos <= N_total
    budget = max(budget, n_min)
    p_hat = pass_rate_estimate([h[0] for h in history], [h[1] for h in history], 1.0, 16.0)
    counts = allocate_authors(p_hat, budget * len(history), n_min=n_min).tolist()
    assert sum(counts) == budget * len(history) and min(counts) >= n_min
    w = [1 / float(p) for p in p_hat]
    for i in range(len(w)):
        for j in range(len(w)):
            if p_hat[i] < p_hat[j]:
                assert counts[i] >= counts[j], (p_hat.tolist(), counts)
    remaining = (budget - n_min) * len(w)
    for c, wi in zip(counts, w):  # floor(share) or floor(share) + 1
        share = remaining * wi / sum(w)
        assert share - 1 - 1e-6 < c - n_min < share + 1 + 1e-6


# -- the advantage, by hand -------------------------------------------------------------------------------------------
def test_authors_advantage_by_hand():
    # groups of 1, 4 and 3 samples; rewards (= scores) 0/1, correct above 0.7
    r = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    sizes = [1, 4, 3]
    positive = [x > 0.7 for x in r]
    # group of one: mean 0 -> advantage r = 1; group [0, 1, 1, 0]: mean 2/4; group [0, 0, 0]: mean 0
    assert authors_baseline(r, group_index(sizes), positive).tolist() == [1.0, -0.5, 0.5, 0.5, -0.5, 0.0, 0.0, 0.0]
    # with the std: group [0, 1, 1, 0] unbiased std sqrt((4 x 0.25) / 3) = 0.57735 -> +-0.5 / (0.57735 + 1e-6);
    # group [0, 0, 0]: std 0 clamped to 1e-6, its centred rewards are 0; group of one: std 1 -> 1 / (1 + 1e-6)
    out = authors_baseline(r, group_index(sizes), positive, norm_by_std=True).tolist()
    assert out[0] == pytest.approx(1 / (1 + 1e-6))
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert out[1:5] == pytest.approx([-a, a, a, -a], rel=1e-6)
    assert out[5:] == [0.0, 0.0, 0.0]
    # shaped rewards: the mean is the share of correct samples (> 0.7), not the mean reward
    shaped = authors_baseline([0.8, 0.2, 0.9], [0, 0, 0], [True, False, True]).tolist()
    assert shaped == pytest.approx([0.8 - 2 / 3, 0.2 - 2 / 3, 0.9 - 2 / 3], abs=1e-6)


def test_authors_preset_resolves_every_setting_and_flags_override_it():
    est = Est(n=8, preset="authors").resolved
    assert (est.allocation, est.n_min, est.n_max, est.decay, est.alpha, est.beta, est.baseline) == (
        "authors", 1, None, 0.9, 1.0, 16.0, "authors")
    assert Est(n=8, preset="authors").weight_kind == "none"
    assert Est(n=8).weight_kind == "inv_sqrt_pass_rate"  # the paper preset, as before
    assert Est(n=8, preset="authors", beta=4.0).resolved.beta == 4.0
    assert Est(n=8, preset="authors").history_config.ema_decay == 0.9
    assert EST_PRESETS["paper"].n_min == EstConfig(budget=8).n_min == 2  # EstConfig's defaults are the paper's
    with pytest.raises(ValueError, match="est_min"):  # a group baseline needs two samples
        Est(n=8, allocation="authors", n_min=1)


def test_a_one_sample_group_is_a_pool_and_a_simulated_step():
    from openrlhf_ada.algorithms.reinforce_ada import FixedN

    pool = PromptPool(FixedN(1))
    pool.add_round([1.0], [1.0], items=["a"])
    assert pool.done and pool.select() == [0] and pool.outcome == "resolved" and (pool.mean, pool.std) == (0.0, 1.0)
    failed = PromptPool(FixedN(1))
    failed.add_round([None], [None])
    assert failed.outcome == "failed" and failed.select() == []
    # three prompts, budget 4, the authors' preset, over two epochs
    config = EstConfig.from_preset("authors", 4)
    history = PromptHistory(HistoryConfig(ema=True, ema_decay=config.decay))
    streams = [[1.0] * 12, [0.0] * 12, [1.0, 0.0] * 6]
    keys = ["easy", "hard", "mixed"]
    # epoch 0: unseen, 4 each; recorded easy (4, 4), hard (4, 0), mixed (4, 2)
    assert [r.samples for r in simulate_est(streams, config=config, history=history, prompt_keys=keys)] == [4, 4, 4]
    # epoch 1: p_hat = 5/21, 1/21, 3/21 -> w = 4.2, 21, 7 (sum 32.2); R = 12 - 3 = 9; shares 1.174, 5.870, 1.957;
    # floors 1, 5, 1 (7); the 2 left to .957 (mixed) and .870 (hard): counts 2, 7, 3
    second = simulate_est(streams, config=config, history=history, prompt_keys=keys, epoch=1)
    assert [r.samples for r in second] == [2, 7, 3]
    # the counts after it, one update each: easy 0.9 x 4 + 2 = 5.6 (all correct), hard 0.9 x 4 + 7 = 10.6, mixed
    # 0.9 x 4 + 3 = 6.6 with 0.9 x 2 + 2 = 3.8 correct (its first three samples 1, 0, 1)
    assert history.ema_counts("easy") == pytest.approx((5.6, 5.6))
    assert history.ema_counts("hard") == pytest.approx((10.6, 0.0))
    assert history.ema_counts("mixed") == pytest.approx((6.6, 3.8))
    # budget 2 after (8, 8) and (8, 0): the easy prompt gets one sample, a group of one (std 1 by convention)
    h = PromptHistory(HistoryConfig(ema=True))
    h.record("e", 0, 8, 0)
    h.record("h", 0, 0, 8)  # Ada-EMA counts (8, 8) and (8, 0)
    one = simulate_est([[1.0] * 4, [0.0] * 4], config=EstConfig.from_preset("authors", 2), history=h,
                       prompt_keys=["e", "h"], epoch=1)
    assert [(r.samples, r.pool_std) for r in one] == [(1, 1.0), (3, 0.0)]


# -- ADORA on groups of varying size, by hand -------------------------------------------------------------------------
def test_adora_on_groups_of_varying_size_by_hand():
    # group 0 (3 samples): correct length 5, wrong 3 and 4 -> maxPos 5 > meanNeg 3.5: advantageous, boost 1
    # group 1 (1 sample): one correct, no wrong -> "no usable negative": llm rule boost 1, vl rule lam
    # group 2 (4 samples): correct 9; wrong 1, 9 (truncated: left out), 2 -> meanNeg 1.5 < 9: boost 1
    # group 3 (1 sample): wrong -> no positive: llm lam 0.1, vl boost 1
    scores = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    lengths = [5, 3, 4, 2, 9, 1, 9, 2, 7]
    truncated = [False] * 6 + [True, False, False]
    sizes = [3, 1, 4, 1]
    stats = ragged_group_stats(scores, lengths, truncated, sizes, positive_threshold=0.5)
    assert stats.max_pos.tolist() == [5.0, 2.0, 9.0, -math.inf]
    assert stats.mean_neg[[0, 2]].tolist() == [3.5, 1.5] and math.isnan(stats.mean_neg[1])
    assert stats.pass_rate.tolist() == pytest.approx([1 / 3, 1.0, 1 / 4, 0.0])  # each group's own size
    common = dict(scores=scores, rewards=scores, lengths=lengths, truncated=truncated, sizes=sizes, step=1)
    llm = ragged_sample_weights(AdoraConfig(enable=True), **common)
    assert llm.tolist() == pytest.approx([1.0] * 8 + [0.1])
    vl = ragged_sample_weights(AdoraConfig(enable=True, variant="vl"), **common)
    assert vl.tolist() == pytest.approx([1.0] * 3 + [0.1] + [1.0] * 5)
    assert ragged_sample_weights(AdoraConfig(enable=True, start_step=2), **common).tolist() == [1.0] * 9

    # a custom function is called once per group size, with that size's groups as [P_k, k]
    calls = []

    def weight_func(s, r, lens, trunc, step):
        calls.append(tuple(s.shape))
        return lens.sum(-1)  # [P_k]: each group's total length

    custom = ragged_sample_weights(AdoraConfig(enable=True), weight_func=weight_func, **common)
    assert sorted(calls) == [(1, 3), (1, 4), (2, 1)]
    assert custom.tolist() == [12.0] * 3 + [2.0] + [21.0] * 4 + [7.0]


def test_pad_groups_by_hand():
    values, mask = pad_groups(torch.tensor([1, 2, 3, 4]), [1, 3])
    assert values.tolist() == [[1, 0, 0], [2, 3, 4]] and mask.tolist() == [[True, False, False], [True] * 3]


# -- is Est estimating? ---------------------------------------------------------------------------------------------
def test_seen_watch_warns_once_after_a_run_of_unseen_steps():
    watch = SeenWatch(steps=3, below=0.05)
    assert watch.observe(0, 64, 10_000) is None and watch.observe(1, 64, 10_000) is None  # 1/64 <= 5%
    assert watch.observe(10, 64) is None  # a step with history ends the run
    assert [watch.observe(0, 64, 10_000) for _ in range(2)] == [None, None]
    message = watch.observe(0, 64, 10_000)
    assert "3 steps in a row" in message and "0 of 64" in message and "10000 prompts" in message
    assert "157 steps" in message and "--train.num_episodes" in message  # ceil(10000 / 64)
    assert watch.observe(0, 64, 10_000) is None  # once


# -- the flags ------------------------------------------------------------------------------------------------------
def parse(*extra, estimator="dr_grpo"):
    from openrlhf_ada.launcher import parse_args

    return parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/r",
                       "--rollout.n_samples_per_prompt", "8", "--algo.advantage.estimator", estimator,
                       "--ada.enable", "--ada.strategy", "est", *extra])


def test_authors_preset_flags():
    from openrlhf_ada.args import sampling_config

    ns = parse("--ada.est_preset", "authors")
    assert sampling_config(ns).resolved.allocation == "authors" and sampling_config(ns).weight_kind == "none"
    assert parse("--ada.est_preset", "authors", estimator="group_norm").ada.est_preset == "authors"
    for bad, estimator in ((["--ada.est_preset", "authors"], "rloo"),  # their advantage is GRPO's
                           (["--ada.est_preset", "authors", "--ada.est_max", "16"], "dr_grpo"),  # no cap
                           (["--ada.est_allocation", "authors", "--ada.est_eps", "0.1"], "dr_grpo"),
                           (["--ada.est_preset", "nobody"], "dr_grpo")):
        with pytest.raises(SystemExit):
            parse(*bad, estimator=estimator)


def test_the_prompt_weight_on_group_norm_warns_that_it_compounds(caplog):
    with caplog.at_level(logging.WARNING, logger="openrlhf_ada.args"):
        parse(estimator="group_norm")
    assert "compounds a normalisation" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="openrlhf_ada.args"):
        parse(estimator="dr_grpo")
        parse("--ada.prompt_weight", "none", estimator="group_norm")
    assert "compounds" not in caplog.text


# -- the experience maker: the authors' advantage and ADORA on a one-sample group, by hand -----------------------------
def est_experiences():
    """Two groups in rollout order, [1.0] (a group of one, length 5) and [0.0, 1.0, 0.0] (lengths 7, 2, 9), split
    into two micro-batches out of rollout order, as upstream's split leaves them."""
    rewards, lengths = [1.0, 0.0, 1.0, 0.0], [5, 7, 2, 9]
    pool = {"ada_group": [0, 1, 1, 1], "ada_pool_index": [0, 0, 1, 2], "ada_pool_count": [1, 3, 3, 3], "ada_pool_mean": [1.0, 1 / 3, 1 / 3, 1 / 3],
            "ada_pool_std": [1.0, 0.57735, 0.57735, 0.57735], "ada_pool_pass_rate": [1.0, 1 / 3, 1 / 3, 1 / 3]}
    from openrlhf.trainer.ppo_utils.experience import Experience

    batches = []
    for part in ([2, 0], [3, 1]):
        mask = torch.zeros(len(part), 12, dtype=torch.bool)
        for row, i in enumerate(part):
            mask[row, : lengths[i]] = True
        batches.append(Experience(
            action_mask=mask, rewards=torch.tensor([rewards[i] for i in part]),
            scores=torch.tensor([rewards[i] for i in part]),
            response_length=torch.tensor([float(lengths[i]) for i in part]),
            truncated=torch.zeros(len(part), dtype=torch.bool), kl=torch.zeros(len(part), 12), index=list(part),
            info={k: torch.tensor([float(v[i]) for i in part]) for k, v in pool.items()}))
    return batches


def est_advantages(*flags):
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker

    args = parse("--rollout.micro_batch_size", "2", "--adora.enable", *flags)
    maker = AdoraPoolExperienceMaker(None, None, None, None, FixedKLController(0.0), type("S", (), {"args": args})(),
                                     None)
    out = maker.compute_advantages_and_returns(est_experiences())
    by_index = {i: (e.advantages[row, 0].item(), e.info) for e in out for row, i in enumerate(e.index)}
    return [by_index[i][0] for i in range(4)], by_index[0][1]


def test_the_maker_trains_the_authors_advantage_with_adora_on_groups_of_varying_size():
    # ADORA (llm): the group of one is correct with no wrong answer -> boost 1; group [0, 1, 0] has maxPos 2 <
    # meanNeg (7 + 9) / 2 = 8 -> lam 0.1
    # authors (dr_grpo): group of one: r - 0 = 1; the other: mean 1/3 -> -1/3, 2/3, -1/3, times 0.1
    adv, info = est_advantages("--ada.est_preset", "authors")
    assert adv == pytest.approx([1.0, -1 / 30, 2 / 30, -1 / 30], abs=1e-6)
    assert info["adora_weight_mean"][0].item() == pytest.approx((1.0 + 0.1) / 2)
    assert info["adora_no_pos_share"][0].item() == 0.0 and info["adora_no_usable_neg_share"][0].item() == 0.5
    # the paper's preset on the same samples: the group of one gets 0; the other the same centring times the weight
    # 1/sqrt(1/3) + 0.01 = 1.74205 and ADORA's 0.1
    adv, _ = est_advantages()
    w = math.sqrt(3) + 0.01
    assert adv == pytest.approx([0.0, -w / 30, 2 * w / 30, -w / 30], abs=1e-6)


def test_the_short_step_cut_keeps_whole_groups_of_one():
    """At the end of the data the longest run of whole groups holding a multiple of the unit is trained: sizes
    1, 3, 1, 2 end at 1, 4, 5, 7; unit 4 -> the first two groups (4 samples); unit 1 -> all of them. Est carries
    nothing: the rest is dropped."""
    from types import SimpleNamespace

    from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

    ids = [0, 1, 1, 1, 2, 3, 3]
    samples = [SimpleNamespace(info={"ada_group": torch.tensor([g])}) for g in ids]
    gen = SimpleNamespace(batch_unit=4, carries_short_step=False, _carry=[])
    assert RoundsSamplesGenerator._cut_short_step(gen, samples) == samples[:4]
    assert gen._carry == []
    gen = SimpleNamespace(batch_unit=1, carries_short_step=False, _carry=[])
    assert RoundsSamplesGenerator._cut_short_step(gen, samples) == samples
