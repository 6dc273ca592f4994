"""Recovery on the real single-machine trainer (local Ray, the transformers engine, a tiny llama): a failed step
never damages the last good checkpoint and resume reproduces the uninterrupted run, its learning-rate schedule
included; an earlier run is replaced only
when asked; the reward file's extra_logs reach the metrics and a wrong signal is reported; data errors print one
line."""

import contextlib
import io
import json
import math
import textwrap

import pytest

from openrlhf_ada.cli.train_local import main, parse_local_args, run
from openrlhf_ada.trainer.local_trainer import LocalTrainer
from openrlhf_ada.trainer.metrics_log import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# 1 when the response starts with a digit; with BREAK_AFTER set, every call after that many raises (the engine keeps
# one copy of the module per run, so the counter counts the run's reward calls)
REWARD = textwrap.dedent('''
    import threading
    import torch

    BREAK_AFTER = {break_after}
    _lock, _calls = threading.Lock(), [0]

    def reward_func(queries, prompts, labels):
        with _lock:
            _calls[0] += 1
            calls = _calls[0]
        if BREAK_AFTER is not None and calls > BREAK_AFTER:
            raise RuntimeError("reward service down")
        response = queries[0][len(prompts[0]):]
        t = torch.tensor([1.0 if response[:1].isdigit() else 0.0])
        return {{"rewards": t, "scores": t, "extra_logs": {{"digit_found": t.clone()}}}}
''')
KEYS = ["reward_mean", "generated_tokens", "generated_tokens_total", "policy_loss", "response_length_mean",
        "reward_file/digit_found", "actor_lr"]
# upstream's schedule over the 6-step runs below (one optimizer step per step: 16 samples, one window)
SCHEDULE = ["--actor.lr_scheduler", "cosine_with_min_lr", "--actor.lr_warmup_ratio", "0.3",
            "--actor.min_lr_ratio", "0.2"]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery")
    with open(root / "data.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"input": f"Say a number {i}:", "label": "d"}) + "\n")
    return root


def reward_file(task, break_after=None):
    path = task / "reward.py"
    path.write_text(REWARD.format(break_after=break_after))
    return str(path)


def argv(task, tiny_llama_path, out, steps, *flags):
    # fixed n (GRPO): exactly 4 prompts x 4 samples = 16 reward calls per step
    return ["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", str(task / "data.jsonl"),
            "--data.label_key", "label", "--reward.remote_url", str(task / "reward.py"),
            "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "4",
            "--rollout.batch_size", "4", "--rollout.max_new_tokens", "3", "--data.max_len", "64",
            "--actor.adam.lr", "1e-2", "--local.engine", "hf", "--local.max_steps", str(steps),
            "--local.output_dir", str(out), *flags]


def state_of(out):
    return json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())


def same_rows(a, b, steps):
    by_step_a, by_step_b = {r["step"]: r for r in a}, {r["step"]: r for r in b}
    for step in steps:
        ra, rb = by_step_a[step], by_step_b[step]
        assert {k: ra[k] for k in KEYS} == pytest.approx({k: rb[k] for k in KEYS}, rel=1e-6, abs=1e-9), step


@pytest.fixture(scope="module")
def straight(task, tiny_llama_path, ray_local):
    """The uninterrupted 6-step run (--ckpt.load_enable on a fresh folder: no checkpoint, so it starts fresh)."""
    reward_file(task)
    out = task / "straight"
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        run(parse_local_args(argv(task, tiny_llama_path, out, 6, "--ckpt.save_steps", "-1", "--ckpt.load_enable",
                                  *SCHEDULE)))
    assert "--ckpt.load_enable: no checkpoint found" in log.getvalue() and "starting fresh" in log.getvalue()
    rows = read_metrics(str(out))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    return rows


def test_the_learning_rate_follows_the_schedule(straight):
    """cosine_with_min_lr over T = 6 optimizer steps, W = ceil(0.3 x 6) = 2 of them warming up: after k steps the
    rate is lr x k / W while k < W, then lr x (0.2 + 0.8 x (1 + cos(pi x (k - W) / (T - W))) / 2); step s logs it
    after its k = s optimizer steps, as upstream logs actor_lr: 5e-3, 1e-2, 8.828e-3, 6e-3, 3.172e-3, 2e-3."""
    lr, total, warm = 1e-2, 6, 2
    expected = [lr * k / warm if k < warm else
                lr * (0.2 + 0.8 * (1 + math.cos(math.pi * (k - warm) / (total - warm))) / 2) for k in range(1, 7)]
    assert expected[2] == pytest.approx(8.828e-3, abs=1e-6)
    assert [r["actor_lr"] for r in straight] == pytest.approx(expected, rel=1e-9)


def test_a_reward_failing_at_step_5_keeps_step_4_and_resume_reproduces_the_run(task, tiny_llama_path, ray_local,
                                                                                  straight, capsys):
    out = task / "broken"
    reward_file(task, break_after=4 * 16)  # steps 1-4 score normally, the first call of step 5 raises
    with pytest.raises(RuntimeError):
        run(parse_local_args(argv(task, tiny_llama_path, out, 6, "--ckpt.save_steps", "3", *SCHEDULE)))
    err = capsys.readouterr().err
    assert "checkpoint of the last completed step 4 written" in err
    state = state_of(out)
    # by hand: 4 completed steps x 4 prompts = 16 prompts consumed (not the prompts step 5 drew before it failed)
    assert (state["global_step"], state["loader"], state["generator"]["step"]) == (4, {"episode": 0, "consumed": 16}, 4)
    assert [r["step"] for r in read_metrics(str(out))] == [1, 2, 3, 4]

    reward_file(task)  # fixed
    run(parse_local_args(argv(task, tiny_llama_path, out, 6, "--ckpt.save_steps", "3", "--ckpt.load_enable",
                              *SCHEDULE)))
    resumed = read_metrics(str(out))
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5, 6]
    same_rows(straight, resumed, range(1, 7))
    assert state_of(out)["global_step"] == 6 and state_of(out)["loader"] == {"episode": 0, "consumed": 24}


def test_a_step_that_fails_mid_update_leaves_the_last_checkpoint_as_it_was(task, tiny_llama_path, ray_local,
                                                                             straight, monkeypatch, capsys):
    out = task / "interrupted"
    reward_file(task)
    real_update = LocalTrainer.update

    def update_then_second_signal(self, experiences):
        stats = real_update(self, experiences)
        if self.global_step == 4:  # step 5's optimizer step has run: the model is past step 4 now
            raise KeyboardInterrupt
        return stats

    monkeypatch.setattr(LocalTrainer, "update", update_then_second_signal)
    with pytest.raises(KeyboardInterrupt):
        run(parse_local_args(argv(task, tiny_llama_path, out, 6, "--ckpt.save_steps", "3", *SCHEDULE)))
    err = capsys.readouterr().err
    assert "step 5 failed after it had started to change the model; the checkpoint of step 3" in err
    assert "is kept as it was" in err
    state = state_of(out)
    assert (state["global_step"], state["loader"]) == (3, {"episode": 0, "consumed": 12})
    assert [r["step"] for r in read_metrics(str(out))] == [1, 2, 3, 4]  # step 4 completed but was not saved

    monkeypatch.setattr(LocalTrainer, "update", real_update)
    run(parse_local_args(argv(task, tiny_llama_path, out, 6, "--ckpt.save_steps", "3", "--ckpt.load_enable",
                              *SCHEDULE)))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4, 5, 6]  # step 4's first row was dropped
    same_rows(straight, read_metrics(str(out)), range(1, 7))


WRONG_SIGNAL_REWARD = textwrap.dedent('''
    import torch

    def reward_func(queries, prompts, labels):
        zero = torch.tensor([0.0])
        return {"rewards": zero, "scores": zero,
                "extra_logs": {"demo_reason": torch.tensor([8.0]), "demo_answer_found": torch.tensor([1.0])}}
''')


def test_a_wrong_signal_is_reported_and_extra_logs_reach_the_metrics(task, tiny_llama_path, ray_local, capsys):
    (task / "reward.py").write_text(WRONG_SIGNAL_REWARD)  # every label "unreadable", every reward 0
    out = task / "wrong"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4}\n')  # an earlier run
    flags = ["--ckpt.save_steps", "-1", "--rollout.n_samples_per_prompt", "2", "--rollout.batch_size", "2",
             "--rollout.micro_batch_size", "4", "--train.max_epochs", "2"]
    run(parse_local_args(argv(task, tiny_llama_path, out, 3, *flags, "--local.overwrite")))
    err = capsys.readouterr().err
    assert "WARNING step 1: the reward file reported 4 of 4 samples with a label it cannot read" in err
    assert "demo_reason = bad_label" in err and "label 'd'" in err
    assert "WARNING step 3: every reward of the last 3 steps was 0" in err
    rows = read_metrics(str(out))
    assert [r["step"] for r in rows] == [1, 2, 3]  # the earlier run's rows are replaced (--local.overwrite)
    for row in rows:
        assert row["reward_file/demo_reason"] == 8.0 and row["reward_file/demo_answer_found"] == 1.0
        assert row["signal/bad_label_share"] == 1.0
    assert [r["signal/constant_reward_steps"] for r in rows] == [1, 2, 3]
    assert [r["actor_lr"] for r in rows] == [1e-2] * 3  # train_local's default: a constant rate
    # the step ledger: 2 prompts x 2 samples handed to the update, each trained once per step over its 2 epochs
    assert [(r["ledger/samples_trained"], r["ledger/samples_trained_by_ranks"]) for r in rows] == [(4.0, 4.0)] * 3


def test_data_errors_found_after_parsing_print_one_line(task, tiny_llama_path, capsys):
    reward_file(task)
    with open(task / "long.jsonl", "w") as f:
        f.write(json.dumps({"input": "x" * 300, "label": "d"}) + "\n")
    args = argv(task, tiny_llama_path, task / "long", 1)
    args[args.index("--data.prompt_dataset") + 1] = str(task / "long.jsonl")
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert "every prompt of --data.prompt_dataset is longer than 61 tokens" in err  # 64 - 3, by hand
