"""A new exit rule or ADORA rule is one registered function: registered, it is a choice of its flag (with its help),
the frozen config accepts it, and the pure algorithm code (PromptPool through `simulate`, `adora_weights`) applies it.
Expected outcomes are derived by hand."""

import argparse

import pytest

from openrlhf_ada.algorithms.adora import ADORA_RULES, AdoraConfig, adora_weights, register_adora_rule, table_weights
from openrlhf_ada.algorithms.reinforce_ada import EXIT_RULES, Seq, exit_reached, register_exit_rule
from openrlhf_ada.algorithms.simulation import simulate
from openrlhf_ada.args import add_project_args


@pytest.fixture
def two_pos():
    """A toy exit rule, registered for one test: the prompt is resolved once its pool holds two correct samples."""

    @register_exit_rule("two_pos", ">= 2 correct")
    def two_positives(num_pos, num_neg, n):
        return num_pos >= 2

    yield two_positives
    EXIT_RULES.unregister("two_pos")


def flag(name):
    parser = add_project_args(argparse.ArgumentParser())
    return next(a for a in parser._actions if name in a.option_strings)


def test_a_registered_exit_rule_is_a_choice_of_the_flag_with_its_help(two_pos):
    mode = flag("--ada.mode")
    assert mode.choices == ("balance", "pos", "two_pos")
    assert mode.help == ("Exit rule: balance (>= floor(n/2) correct and >= n - floor(n/2) wrong), pos (>= 1 correct) "
                         "or two_pos (>= 2 correct)")
    assert Seq(n=4, mode="two_pos").mode == "two_pos"


def test_a_registered_exit_rule_decides_the_rounds_end_to_end(two_pos):
    """n = 4, rounds of 4, at most 3 rounds; rewards double as scores (positive above 0.5).
    Prompt 0: round 1 = 1,0,0,0 (one correct: pos would stop, two_pos goes on), round 2 = 1,0,0,0 -> two correct
    after 8 samples: resolved in round 2. The group: k_pos = min(2, 2) = 2 positives (pool indices 0 and 4) and
    k_neg = 2 negatives, the earliest (1 and 2).
    Prompt 1: 0,0,0,1 then 0,0,0,0 then 0,0,0,0: one correct in 12 samples, unresolved after 3 rounds, kept:
    its one positive (3) and the three earliest negatives (0, 1, 2)."""
    streams = [[1, 0, 0, 0, 1, 0, 0, 0, 9, 9, 9, 9], [0, 0, 0, 1] + [0] * 8]
    two, pos = (simulate(streams, n=4, round_size=4, max_rounds=3, mode=mode) for mode in ("two_pos", "pos"))
    assert [(r.rounds, r.outcome, r.round_resolved, r.kept) for r in two] == [
        (2, "resolved", 2, [0, 1, 2, 4]), (3, "kept", None, [0, 1, 2, 3])]
    assert [(r.rounds, r.outcome) for r in pos] == [(1, "resolved"), (1, "resolved")]  # the built-in rule still works
    assert exit_reached(2, 0, mode="two_pos", n=4) and not exit_reached(1, 9, mode="two_pos", n=4)


def test_an_unregistered_exit_rule_is_refused_naming_the_registered_ones(two_pos):
    EXIT_RULES.unregister("two_pos")
    with pytest.raises(ValueError, match=r"ada\.mode='two_pos' is not supported; accepted values: 'balance', 'pos'"):
        Seq(n=4, mode="two_pos")
    with pytest.raises(ValueError, match="already registered"):
        register_exit_rule("pos", "again")(lambda num_pos, num_neg, n: True)
    register_exit_rule("two_pos", ">= 2 correct")(two_pos)  # the fixture unregisters it again


def test_a_registered_adora_rule_is_a_choice_and_weighs_the_groups():
    """A toy rule that attenuates every group except the advantageous ones, degenerate ones included. Groups (n = 3,
    lengths by hand): [1, 0, 0] lengths [9, 4, 6]: maxPos 9 > meanNeg 5, advantageous -> boost; [0, 0, 0]: no
    positive -> lam (llm: lam too); [1, 1, 1]: no usable negative -> lam (llm: boost)."""

    @register_adora_rule("strict", "only advantageous groups -> boost")
    def strict(stats, lam, boost):
        return table_weights(stats, advantageous=boost, other=lam, no_pos=lam, no_neg=lam)

    try:
        variant = flag("--adora.variant")
        assert variant.choices == ("llm", "vl", "paper_llm", "paper_vl", "strict")
        assert ", vl (vision trainer: no positive -> boost, no usable negative -> lam), " in variant.help
        assert variant.help.endswith(" or strict (only advantageous groups -> boost)")
        assert AdoraConfig(variant="strict").variant == "strict"
        scores, lengths = [[1, 0, 0], [0, 0, 0], [1, 1, 1]], [[9, 4, 6], [5, 5, 5], [5, 5, 5]]
        assert adora_weights(scores, lengths, variant="strict", lam=0.1, boost=2.0).tolist() == pytest.approx(
            [2.0, 0.1, 0.1])
        assert adora_weights(scores, lengths, variant="llm", lam=0.1, boost=2.0).tolist() == pytest.approx(
            [2.0, 0.1, 2.0])
    finally:
        ADORA_RULES.unregister("strict")
    assert flag("--adora.variant").choices == ("llm", "vl", "paper_llm", "paper_vl")


def test_an_adora_rule_of_the_wrong_shape_is_refused_naming_it():
    register_adora_rule("flat", "one weight for the batch")(lambda stats, lam, boost: table_weights(
        stats, advantageous=boost, other=lam, no_pos=lam, no_neg=boost).sum())
    try:
        with pytest.raises(ValueError, match=r"ADORA rule 'flat' returned .*shape \[2\]"):
            adora_weights([[1, 0], [0, 1]], [[3, 2], [2, 3]], variant="flat")
    finally:
        ADORA_RULES.unregister("flat")


def test_a_registered_allocation_rule_is_a_choice_of_the_flag_and_allocates():
    """A toy allocation rule: everything beyond n_min goes to the hardest prompt (lowest p_hat, first on ties)."""
    from openrlhf_ada.algorithms.estimate import ALLOCATION_RULES, EstConfig, register_allocation_rule

    @register_allocation_rule("hardest", "all extra samples to the hardest prompt")
    def hardest(p_hat, total, *, n_min, n_max, eps):
        counts = [n_min] * len(p_hat)
        counts[int(p_hat.argmin())] += total - n_min * len(p_hat)
        return counts

    try:
        choices = flag("--ada.est_allocation").choices
        assert choices == ("inv_sqrt", "authors", "knapsack", "hardest")
        assert "hardest (all extra samples to the hardest prompt)" in flag("--ada.est_allocation").help
        # 3 prompts, budget 4: 12 samples, 2 each, the 6 left to p_hat 0.1
        config = EstConfig(budget=4, allocation="hardest")
        assert config.allocate([0.5, 0.1, 0.9], 3) == [2, 8, 2]
    finally:
        ALLOCATION_RULES.unregister("hardest")
    with pytest.raises(ValueError, match=r"ada\.est_allocation='hardest' is not supported"):
        EstConfig(budget=4, allocation="hardest")
