"""Refusals for `--ada.cancel` / `--ada.history` combinations that would do nothing or cannot work, before Ray or a
model starts (the cluster launcher's and train_local's parsers), and the samples generator's own check of its
engines."""

from types import SimpleNamespace

import pytest

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

BASE = ["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--algo.advantage.estimator", "dr_grpo", "--rollout.n_samples_per_prompt", "4"]


@pytest.mark.parametrize("extra,words", [
    (["--ada.cancel"], ["--ada.cancel", "needs --ada.enable"]),
    (["--ada.history"], ["--ada.history", "needs --ada.enable"]),
    (["--ada.enable", "--ada.cancel_order", "request"], ["--ada.cancel_order request", "only acts with --ada.cancel"]),
    (["--ada.enable", "--ada.history_target", "0.9"], ["--ada.history_target 0.9", "only act(s) with --ada.history"]),
    (["--ada.enable", "--ada.history_skip", "0.9", "--ada.history_window", "2"],
     ["--ada.history_skip 0.9, --ada.history_window 2", "--ada.history"]),
    (["--ada.enable", "--ada.history", "--ada.history_skip", "2"], ["ada.history_skip=2.0", "[0, 1]"]),
])
def test_cancel_and_history_misuse_is_refused_while_parsing(extra, words, refused):
    refused(parse_args, BASE + extra, words)


def test_the_options_parse_together_with_what_they_need():
    args = parse_args(BASE + ["--ada.enable", "--ada.cancel", "--ada.cancel_order", "request", "--ada.history",
                              "--ada.history_target", "0.9", "--ada.history_skip", "0.25", "--ada.history_window", "2"])
    assert (args.ada.cancel, args.ada.cancel_order, args.ada.history, args.ada.history_skip) == (True, "request", True,
                                                                                                  0.25)


def test_train_local_refuses_cancel_with_the_transformers_engine(tmp_path, capsys):
    argv = ["--actor.model_name_or_path", str(tmp_path), "--data.prompt_dataset", str(tmp_path / "none.jsonl"),
            "--reward.remote_url", "http://localhost:5000/get_reward", "--algo.advantage.estimator", "group_norm",
            "--rollout.n_samples_per_prompt", "4", "--ada.enable", "--ada.cancel", "--local.engine", "hf",
            "--local.output_dir", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as e:
        parse_local_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--ada.cancel needs the vLLM engine" in err and "--local.engine vllm" in err


def make(flags, engine):
    return RoundsSamplesGenerator(strategy=SimpleNamespace(args=parse_args(BASE + flags)), prompts_dataloader=[],
                                  eval_dataloader=None, tokenizer=None, vllm_engines=[engine])


def test_the_generator_refuses_engines_that_cannot_stream():
    """Upstream's engine (generate_responses only) is refused with --ada.cancel, naming it; without it every strategy
    takes it (a call per round, upstream's)."""
    plain = SimpleNamespace(generate_responses=None, get_num_unfinished_requests=None)  # upstream's methods only
    with pytest.raises(ValueError, match=r"--ada\.cancel needs rollout engines that stream.*engine 0"):
        make(["--ada.enable", "--ada.cancel"], plain)
    for flags in ([], ["--ada.enable"], ["--ada.enable", "--ada.strategy", "est"]):
        make(flags, plain)
