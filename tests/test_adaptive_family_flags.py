"""Knapsack-RL's allocation (`--ada.est_allocation knapsack`) and GRESO's skip (`--ada.skip greso`) as flags: what
both parsers accept and refuse at start-up, the configs they build, and the samples generator's GRESO state through
a checkpoint (the same decisions after save, load and continue). The skip and the allocation themselves are checked
by hand in tests/test_greso.py and tests/test_knapsack.py; end to end in tests/test_est_on_cpu.py and
tests/test_cancel_history_on_cpu.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from openrlhf_ada.algorithms.greso import GresoConfig, GresoState
from openrlhf_ada.algorithms.skip_rules import SKIP_RULES, GresoSkip, HistorySkip, SkipRule, register_skip_rule
from openrlhf_ada.args import add_project_args, greso_config, sampling_config
from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

MODEL = str(Path(__file__).resolve().parent)  # any local folder: parsing loads nothing (train_local wants a folder)
BASE = ["--actor.model_name_or_path", MODEL, "--reward.remote_url", "http://localhost:5000/r",
        "--rollout.n_samples_per_prompt", "4", "--algo.advantage.estimator", "dr_grpo"]
EST = ["--ada.enable", "--ada.strategy", "est"]


@pytest.fixture(params=["launcher", "train_local"])
def parse(request, tmp_path):
    """Each trainer's parser (with its checks); train_local also checks that the prompt file exists."""
    if request.param == "launcher":
        return parse_args
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"input": "1 + 1 =", "label": "2"}) + "\n")
    return lambda argv: parse_local_args(argv + ["--data.prompt_dataset", str(data)])


# -- knapsack ---------------------------------------------------------------------------------------------------------
def test_knapsack_takes_the_presets_bounds_or_the_flags(parse):
    est = sampling_config(parse(BASE + EST + ["--ada.est_allocation", "knapsack"])).resolved
    assert (est.allocation, est.n_min, est.n_max, est.baseline) == ("knapsack", 2, 32, "group")  # the paper preset's
    est = sampling_config(parse(BASE + EST + ["--ada.est_allocation", "knapsack", "--ada.est_min", "3",
                                         "--ada.est_max", "6"])).resolved
    assert (est.n_min, est.n_max) == (3, 6)
    # 4 prompts at budget 4: 16 samples within [3, 6]; p = 1/2 is worth most (its increments 1/32 and 1/64 from
    # 3 samples), then 1/6, then 5/6; p = 1 is worth nothing at any count: it keeps 3
    counts = est.allocate([0.5, 1.0, 1 / 6, 5 / 6], 4)
    assert sum(counts) == 16 and min(counts) >= 3 and max(counts) <= 6 and counts[1] == 3
    authors = sampling_config(parse(BASE + EST + ["--ada.est_preset", "authors", "--ada.est_allocation",
                                             "knapsack"])).resolved
    assert (authors.allocation, authors.n_min, authors.n_max, authors.baseline) == ("knapsack", 1, None, "authors")


def test_an_explicit_eps_with_knapsack_is_refused(parse, refused):
    refused(parse, BASE + EST + ["--ada.est_allocation", "knapsack", "--ada.est_eps", "0.1"],
            ["--ada.est_eps with --ada.est_allocation knapsack", "drop --ada.est_eps"])


def test_the_help_names_knapsack_and_what_it_leaves_to_the_preset(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "knapsack (Knapsack-RL's" in text and "replaces only the preset's allocation" in text
    assert "knapsack allocations have none and refuse it" in text  # --ada.est_eps


# -- GRESO ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", [[], ["--ada.enable"], EST, ["--ada.enable", "--ada.history"]],
                         ids=["fixed_n", "seq", "est", "seq_history"])
def test_greso_composes_with_fixed_n_seq_and_est(parse, setting):
    args = parse(BASE + setting + ["--ada.skip", "greso", "--ada.greso_target", "0.4"])
    assert greso_config(args) == GresoConfig(target=0.4)
    assert greso_config(parse(BASE + setting)) is None  # the default: no skip


@pytest.mark.parametrize("flags,words", [
    (["--ada.greso_target", "0.4"], ["--ada.greso_target 0.4 only acts with --ada.skip greso"]),
    (["--ada.skip", "greso", "--ada.greso_target", "1.5"], ["--ada.greso_target 1.5", "numbers in [0, 1]"]),
    (["--ada.skip", "greso", "--ada.enable", "--ada.history", "--ada.history_skip", "1"],
     ["--ada.history_skip 1.0 with --ada.skip greso", "replaces --ada.history's"]),
    (["--ada.skip", "greso", "--ada.enable", "--ada.history", "--ada.history_window", "2"],
     ["--ada.history_window 2 with --ada.skip greso"]),
    (["--ada.skip", "greso", "--rollout.n_samples_per_prompt", "1", "--algo.advantage.estimator", "reinforce"],
     ["--ada.skip greso with --rollout.n_samples_per_prompt 1", "n >= 2"]),
], ids=["target_alone", "target_range", "history_skip", "history_window", "one_sample"])
def test_greso_refusals(parse, refused, flags, words):
    refused(parse, BASE + flags, words)


def test_greso_with_a_reward_model_is_refused(refused):
    argv = [a for a in BASE if a not in ("--reward.remote_url", "http://localhost:5000/r")]
    refused(parse_args, argv + ["--reward.model_name_or_path", "rm", "--ada.skip", "greso"],
            ["--ada.skip greso with --reward.model_name_or_path", "drop --ada.skip greso"])


def generator(*flags):
    args = parse_args(BASE + ["--actor.num_gpus_per_node", "1", *flags])
    return RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=None, eval_dataloader=None,
                                  tokenizer=None, vllm_engines=[])


@pytest.mark.parametrize("flags", [[], ["--ada.enable", "--ada.history"], EST], ids=["fixed_n", "seq_history", "est"])
def test_greso_state_resumes_with_the_history_and_decides_alike(flags):
    """40 prompts over epochs 0-2: the even ones all correct every epoch (an easy streak of 3), the odd ones
    saturated twice then mixed (no streak). Two steps of epoch 1 whose groups are 1 all-correct, 1 all-wrong and
    1 mixed: both shares (1/3) reach their targets (0.25 x 1/3 and 0.25 x 2/3), so p_easy and p_hard go
    0.5 -> 0.49 -> 0.48; a step of epoch 0 changes nothing. A generator restored from the first one's state_dict
    (through JSON) has the same history and p_e, skips the same prompts in epoch 3, and after the same next step
    the same in epoch 4. With --ada.history the history's own skip is off (GRESO's replaces it)."""
    first = generator("--ada.skip", "greso", *flags)
    assert isinstance(first.skip_rule, GresoSkip)
    assert first.skip_rule.state == GresoState(0.5, 0.5) and first.history is not None
    assert first.history.config.skip == 0.0
    keys = [f"prompt {i}" for i in range(40)]
    for epoch in range(3):
        for i, key in enumerate(keys):
            first.history.record(key, epoch, *((4, 0) if i % 2 == 0 or epoch < 2 else (2, 2)))
    step = [(4, 0), (0, 4), (2, 2)]
    assert first.skip_rule.after_step(step, 0, 5) == {"ada/greso_skipped": 5.0, "ada/epoch": 0.0,
                                                      "ada/greso_p_easy": 0.5, "ada/greso_p_hard": 0.5}
    first.skip_rule.after_step(step, 1, 0)
    assert first.skip_rule.after_step(step, 1, 0) == pytest.approx(
        {"ada/greso_skipped": 0.0, "ada/epoch": 1.0, "ada/greso_p_easy": 0.48, "ada/greso_p_hard": 0.48})

    state = json.loads(json.dumps(first.state_dict()))
    assert state["greso"] == {"format": 1, "p_easy": pytest.approx(0.48), "p_hard": pytest.approx(0.48)}
    second = generator("--ada.skip", "greso", *flags)
    second.load_state_dict(state)
    assert second.skip_rule.state == first.skip_rule.state and second.history.to_dict() == first.history.to_dict()
    for epoch in (3, 4):
        decisions = [[gen.skip_rule.skips(gen.history, key, epoch) for key in keys] for gen in (first, second)]
        assert decisions[0] == decisions[1]
        assert not any(decisions[0][1::2])  # the mixed last group: no streak, never skipped
        assert any(decisions[0][0::2])  # a streak of 3 at p_easy < 0.5: skipped with probability > 0.87
        for gen in (first, second):
            gen.skip_rule.after_step([(2, 2)] * 3, epoch, 0)  # no zero-variance group: both p_e one step up
    assert first.skip_rule.state == second.skip_rule.state == GresoState(pytest.approx(0.50), pytest.approx(0.50))


def test_a_checkpoint_without_greso_state_starts_from_the_initial_one():
    gen = generator("--ada.skip", "greso")
    gen.skip_rule.state = GresoState(0.3, 0.2)
    gen.load_state_dict({"step": 3, "epoch": 1, "in_epoch": True})
    assert gen.skip_rule.state == GresoState(0.5, 0.5)
    # --ada.skip none: the history's own skip, which keeps nothing without --ada.history and checkpoints nothing
    none = generator()
    assert isinstance(none.skip_rule, HistorySkip) and none.history is None
    assert set(none.state_dict()) == {"step", "epoch", "in_epoch"}


def test_a_registered_skip_rule_is_a_choice_and_the_generator_runs_it(refused):
    """A toy rule registered for this test: prompts whose key ends in an odd digit are skipped. It is a choice of
    --ada.skip with its help, the samples generator builds it (keeping the history it asks for, whose own skip it
    leaves as the flags set it: 0.5 by default) and asks it per prompt; unregistered, the flag refuses it."""

    @register_skip_rule("odd_keys", "prompts whose key ends in an odd digit")
    class OddKeys(SkipRule):
        keeps_history = True

        def skips(self, history, key, epoch):
            return key[-1] in "13579"

    try:
        parser = add_project_args(argparse.ArgumentParser())
        skip = next(a for a in parser._actions if "--ada.skip" in a.option_strings)
        assert skip.choices == ("none", "greso", "odd_keys")
        assert "or odd_keys (prompts whose key ends in an odd digit)" in skip.help
        gen = generator("--ada.skip", "odd_keys")
        assert isinstance(gen.skip_rule, OddKeys) and gen.skip_rule.seed == 42
        assert gen.history is not None and gen.history.config.skip == 0.5
        assert [gen.skip_rule.skips(gen.history, key, 0) for key in ("p1", "p2", "p3")] == [True, False, True]
        assert gen.skip_rule.after_step([(1, 1)], 0, 2) == {}
        assert set(gen.state_dict()) == {"step", "epoch", "in_epoch", "history"}
    finally:
        SKIP_RULES.unregister("odd_keys")
    refused(parse_args, BASE + ["--ada.skip", "odd_keys"], ["--ada.skip", "invalid choice", "'odd_keys'"])
