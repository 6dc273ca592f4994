"""Streaming is a transport and fixed n a strategy: the steps have no branch of their own for either.

The generator chooses the step (`FixedNStep`, `RoundStep`, `EstStep`) and the transport (`RoundTransport`,
`StreamTransport` for --ada.cancel) once from the flags; the record test (test_trained_batch_record.py) holds that the
batches they train are unchanged, this file that the choice is made there and nowhere in a step.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.est_step import EstStep
from openrlhf_ada.trainer.ppo_utils.round_loop import FixedNStep, RoundStep
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ppo_utils.transport import RoundTransport, StreamTransport

STEPS = Path(__file__).resolve().parent.parent / "openrlhf_ada" / "trainer" / "ppo_utils"
BRANCH = re.compile(r"\bstreaming\b|\.cancel\b|gen\.ada\b|\.ada is None|\.ada is not None")


def code_of(path: Path) -> str:
    """A module's code without its docstrings and comments (which may well name --ada.cancel)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)


@pytest.mark.parametrize("module", ["round_loop.py", "est_step.py"])
def test_no_step_branches_on_streaming_or_on_fixed_n(module):
    found = [line.strip() for line in code_of(STEPS / module).splitlines() if BRANCH.search(line)]
    assert not found, found


def test_the_branch_pattern_finds_what_it_is_for():
    for line in ("if self.streaming:", "if self.config.cancel:", "weighted = self.gen.ada is not None",
                 "if gen.ada is None:"):
        assert BRANCH.search(line), line
    text = (STEPS / "round_loop.py").read_text()  # its docstring names --ada.cancel; its code does not
    assert "--ada.cancel" in text and "--ada.cancel" not in code_of(STEPS / "round_loop.py")


@pytest.mark.parametrize("flags, step, transport", [
    ([], FixedNStep, RoundTransport),
    (["--ada.enable"], RoundStep, RoundTransport),
    (["--ada.enable", "--ada.cancel"], RoundStep, StreamTransport),
    (["--ada.enable", "--ada.strategy", "est"], EstStep, RoundTransport),
])
def test_the_generator_chooses_the_step_and_the_transport_once(flags, step, transport, monkeypatch):
    import openrlhf_ada.trainer.ppo_utils.samples_generator as module

    monkeypatch.setattr(module, "check_streaming_engines", lambda engines: None)
    args = parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
                       "--rollout.n_samples_per_prompt", "4", "--algo.advantage.estimator", "group_norm", *flags])
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=[], eval_dataloader=None,
                                 tokenizer=None, vllm_engines=[])
    assert gen.step_class is step and gen.transport_class is transport


def test_each_strategy_config_holds_only_its_own_settings():
    """Seq's rounds, Est's allocation and fixed n's single round are three configs: none carries a field of another
    strategy, and none says which strategy it is (its type does)."""
    from dataclasses import fields

    from openrlhf_ada.algorithms.reinforce_ada import Est, FixedN, Seq

    seq, est, fixed = ({f.name for f in fields(c)} for c in (Seq, Est, FixedN))
    rounds = {"mode", "round_size", "first_round_size", "max_rounds", "unresolved", "selection", "baseline", "schedule",
              "cancel", "cancel_order", "history_target"}
    allocation = {"preset", "allocation", "n_min", "n_max", "decay", "alpha", "beta", "eps"}
    assert rounds <= seq and not seq & allocation and not any(name.startswith("est_") for name in seq)
    assert allocation <= est and not est & rounds
    assert fixed == {"n", "seed", "positive_threshold"}
    assert "strategy" not in seq | est | fixed


@pytest.mark.parametrize("flag, value", [("mode", "pos"), ("round_size", "4"), ("first_round_size", "4"),
                                         ("max_rounds", "2"), ("unresolved", "drop"), ("selection", "random"),
                                         ("baseline", "group"), ("schedule", "sync")])
def test_est_refuses_the_flags_of_seqs_rounds(flag, value, capsys):
    """Est has no rounds, so a flag of Seq's rounds would do nothing with it: refused at start-up, naming both."""
    with pytest.raises(SystemExit):
        parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
                    "--rollout.n_samples_per_prompt", "4", "--algo.advantage.estimator", "dr_grpo", "--ada.enable",
                    "--ada.strategy", "est", f"--ada.{flag}", value])
    err = capsys.readouterr().err
    assert f"--ada.{flag} {value}" in err and "--ada.strategy est" in err


@pytest.mark.parametrize("n, flags, expected", [
    (4, [], ("fixed_n", True, False)),
    (4, ["--ada.enable"], ("seq", True, False)),
    (4, ["--ada.enable", "--ada.history"], ("seq", True, True)),
    (4, ["--ada.enable", "--ada.strategy", "est"], ("est", False, True)),
    (1, [], None),
])
def test_the_strategy_is_chosen_once_from_the_flags(n, flags, expected):
    """(name, carries a short step's leftover groups, keeps a history); n = 1 is upstream's generation."""
    from openrlhf_ada.trainer.ppo_utils.strategy import choose_sampling

    args = parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
                       "--rollout.n_samples_per_prompt", str(n),
                       "--algo.advantage.estimator", "group_norm" if n > 1 else "reinforce", *flags])
    sampling = choose_sampling(args)
    got = None if sampling is None else (sampling.name, sampling.carries_short_step, sampling.keeps_history)
    assert got == expected
