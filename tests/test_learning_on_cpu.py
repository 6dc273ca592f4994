"""End-to-end: the single-machine loop really improves a policy, and resumes exactly.

A tiny random llama (built at test time) learns a synthetic task on CPU in a few dozen steps: the reward is 1 when
the response starts with a digit (about 3% of samples at first). The mean reward of the last steps must clearly beat
that of the first steps for GRPO, GRPO + ADORA and GRPO + Reinforce-Ada, and the same run with every advantage's sign
flipped must not improve (so the test can fail)."""

import json
import textwrap

import pytest

from openrlhf_ada.cli.train_local import parse_local_args, run
from openrlhf_ada.trainer.metrics_log import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REWARD = textwrap.dedent('''
    import torch

    def reward_func(queries, prompts, labels):
        out = []
        for query, prompt in zip(queries, prompts):
            response = query[len(prompt):] if query.startswith(prompt) else query
            out.append(1.0 if response[:1].isdigit() else 0.0)
        t = torch.tensor(out)
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')


@pytest.fixture(scope="module")
def task(tmp_path_factory, tiny_llama_path):
    root = tmp_path_factory.mktemp("toy_task")
    (root / "reward.py").write_text(REWARD)
    with open(root / "data.jsonl", "w") as f:
        for i in range(64):
            f.write(json.dumps({"input": f"Say a number {i}:", "label": "digit"}) + "\n")
    return root


def train(task, tiny_llama_path, out, *flags, steps=14, engine="hf"):
    argv = [
        "--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", str(task / "data.jsonl"),
        "--data.label_key", "label", "--reward.remote_url", str(task / "reward.py"),
        "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "8",
        "--rollout.batch_size", "8", "--rollout.max_new_tokens", "3", "--actor.adam.lr", "1e-2",
        "--local.engine", engine, "--local.max_steps", str(steps), "--local.output_dir", str(out),
        "--ckpt.save_steps", "-1", "--data.max_len", "64", *flags,
    ]
    run(parse_local_args(argv))
    return [row["reward_mean"] for row in read_metrics(str(out))]


@pytest.mark.parametrize(
    "name,flags",
    [
        ("grpo", ["--local.engine", "vllm"]),  # the vLLM engine path (its KV cache sized from the run)
        ("grpo_adora", ["--adora.enable"]),
        ("grpo_reinforce_ada", ["--ada.enable", "--ada.baseline", "group", "--rollout.n_samples_per_prompt", "4",
                                "--ada.round_size", "4", "--ada.max_rounds", "3"]),
    ],
)
def test_reward_rises(task, tiny_llama_path, ray_local, tmp_path, name, flags, shm_segments_left):
    since = shm_segments_left()
    rewards = train(task, tiny_llama_path, tmp_path / name, *flags)
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert first < 0.2 and last > first + 0.4, f"{name}: {rewards}"
    assert shm_segments_left(since) == []  # the killed vLLM engine's shared memory did not stay behind



def test_flipped_advantage_does_not_improve(task, tiny_llama_path, ray_local, tmp_path):
    rewards = train(task, tiny_llama_path, tmp_path / "flipped", "--local.advantage_sign", "-1")
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last <= first + 0.05, rewards


def test_resume_reproduces_the_uninterrupted_run(task, tiny_llama_path, ray_local, tmp_path):
    flags = ["--ada.enable", "--ada.baseline", "group", "--rollout.n_samples_per_prompt", "4", "--ada.round_size", "4",
             "--ada.max_rounds", "2", "--ada.selection", "random", "--adora.enable"]
    train(task, tiny_llama_path, tmp_path / "straight", *flags, steps=4)
    train(task, tiny_llama_path, tmp_path / "split", *flags, steps=2)
    train(task, tiny_llama_path, tmp_path / "split", *flags, "--ckpt.load_enable", steps=4)
    straight, split = read_metrics(str(tmp_path / "straight")), read_metrics(str(tmp_path / "split"))
    assert [r["step"] for r in split] == [1, 2, 3, 4]
    keys = ["reward_mean", "generated_tokens", "generated_tokens_total", "eta", "policy_loss", "ada/samples_generated",
            "response_length_mean"]
    for a, b in zip(straight, split):
        assert {k: a[k] for k in keys} == pytest.approx({k: b[k] for k in keys}, rel=1e-6, abs=1e-9), a["step"]
