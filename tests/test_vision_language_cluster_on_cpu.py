"""Vision-language training through the cluster path on this CPU machine, in the CPU mode: the tiny random Qwen2.5-VL
(tests/conftest.py's `tiny_vl_path`) with one picture per prompt.

1. The project's launcher (`python -m openrlhf_ada.cli.train_ppo_ray`): DeepSpeed ZeRO-3 on 2 actor ranks, 2 vLLM
   engines, the weight sync of the whole vision-language policy (vision tower included) after every step, ADORA's
   `paper_vl` rule and Reinforce-Ada Seq rounds with `--ada.cancel` (samples stream back from the engines one by one,
   the path that carries the picture differs from the round's batch dispatch, which the Est run below takes). Each
   prompt's picture has its own size, so its image-token count (one per 28 x 28 pixels) names the picture wherever a
   sequence goes.
   The reward file (one per engine, each a separate process) records every sample it scores: the image tokens vLLM
   expanded in the prompt (so the picture reached the engine with every round, and it was that prompt's picture) and
   the prompt's call count (kept in a file shared by the engines, so the scripted outcomes are exact whichever engine
   runs a round).
   The same run with none of the project's flags (upstream's generation of n per prompt) is checked the same way.
2. The shipped script `examples/scripts/train_adora_vl_grpo.sh`, unchanged, through `ray job submit` (what `make
   cluster-demo ARGS="--script train_adora_vl_grpo.sh"` does) on the shapes task, with Reinforce-Ada-Est added.

The trained side is checked through what upstream computes from each sample: with `--algo.advantage.is_correction_level
token`, the actor's log-probs of every sampled token (its forward takes the sample's own `mm_train_inputs`) against
vLLM's (computed with the picture the engine got): `vllm_kl` near zero at every step (VL_SYNC_KL_LIMIT), and with the
`tv` gate no token whose probabilities differ by more than TV_DELTA. A sample trained with another prompt's picture fails the actor's
forward (another image-token count) or these checks; so does a stale engine after the step-1 update, vision tower
included (the tiny model's vision tower trains: upstream freezes it only with --actor.freeze_visual_encoder).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import siblings

_p = siblings.load("test_pipeline_on_cpu.py")
assert_ok, jsonl_rows, launch = _p.assert_ok, _p.jsonl_rows, _p.launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROMPTS, NEVER, N, BATCH, MAX_NEW = 8, 2, 4, 4, 6
TV_DELTA = 0.05  # |p_vllm - p_actor| per token: bf16 on both sides stays under it; a stale engine after the step-1
# update (Adam moves every weight by about the learning rate, 2e-2) or another picture does not
# upstream's vllm_kl (the signed mean of rollout - actor log-probs): about 5e-3 at step 1 already, before any sync (bf16
# on both sides, vLLM's vision-tower kernels against transformers' eager ones; the text-only Llama gives ~2e-4)
VL_SYNC_KL_LIMIT = 0.015
ATTENUATE = 0.1  # paper_vl's weight for a group without the length advantage (--adora.attenuate's default)

# Every call appends one JSON line to LOG; COUNTS/<label> holds one byte per earlier call (an flock keeps two engines
# apart). Each round of a "mixed" prompt is 2 samples: calls 0 and 1 (round 1) are wrong, 2 and 3 (round 2) right,
# so each resolves after round 2 with 2 + 2 (the balance rule for n = 4); a "never" prompt is wrong 6 times (3 rounds)
# and its group is kept (--ada.unresolved keep) without a correct sample.
REWARD = textwrap.dedent('''
    import fcntl
    import json
    import os

    import torch

    COUNTS, LOG = {counts!r}, {log!r}


    def reward_func(queries, prompts, labels):
        label = labels[0]
        with open(os.path.join(COUNTS, label), "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            k = len(f.read())
            f.write("x")
            value = 0.0 if label.startswith("never") else float(k in (2, 3))
            with open(LOG, "a") as log:
                log.write(json.dumps({{"label": label, "call": k, "image_tokens": queries[0].count("<|image_pad|>"),
                                      "prompt_placeholders": prompts[0].count("<|image_pad|>")}}) + "\\n")
        t = torch.tensor([value])
        return {{"rewards": t, "scores": t, "extra_logs": {{}}}}
''')


def size(i: int) -> tuple:
    """Prompt i's picture size: 56 high and 56 + 28 i wide (4 + 2 i image tokens) up to i = 6 (224 x 56, the tiny
    processor's largest image without resizing: 12544 pixels), then 84 x 84 (3 x 3 = 9 image tokens)."""
    return (56 + 28 * i, 56) if i < 7 else (84, 84)


def picture(i: int):
    """Prompt i's picture (`size(i)`), its colour block in its own place."""
    from PIL import Image

    image = Image.new("RGB", size(i), (235, 235, 235))
    image.paste((40 + 25 * i, 200 - 20 * i, 90), (4 * i, 8, 4 * i + 28, 36))
    return image


def label_of(i: int) -> str:
    return f"never-{i}" if i >= PROMPTS - NEVER else f"mixed-{i}"


def image_tokens(label: str) -> int:
    """28 x 28 pixels per image token (2 x 2 patches of 14)."""
    width, height = size(int(label.split("-")[1]))
    return (width // 28) * (height // 28)


def write_data(path: Path) -> str:
    from openrlhf_ada.data.prepare import image_to_data_uri

    path.write_text("".join(json.dumps({"input": "<image>What colour is the shape?", "label": label_of(i),
                                        "images": [image_to_data_uri(picture(i))]}) + "\n" for i in range(PROMPTS)))
    return str(path)


def vl_flags(model: str, data: str, reward: str, out: Path, project: bool = True) -> list:
    """The launcher's flags; `project`: ADORA paper_vl and Seq rounds with cancel, else none of the project's."""
    return [
        "--actor.model_name_or_path", model, "--data.prompt_dataset", data, "--data.input_key", "input",
        "--data.label_key", "label", "--data.image_key", "images", "--data.max_images_per_prompt", "1",
        "--data.apply_chat_template", "--reward.remote_url", reward,
        "--rollout.n_samples_per_prompt", str(N), "--rollout.batch_size", str(BATCH), "--rollout.micro_batch_size", "4",
        "--train.batch_size", str(N * BATCH), "--train.micro_batch_size", "4", "--rollout.max_new_tokens", str(MAX_NEW),
        "--data.max_len", "96", "--ds.zero_stage", "3", "--actor.adam.lr", "2e-2", "--actor.lr_warmup_ratio", "0",
        "--vllm.gpu_memory_utilization", "0.1", "--ckpt.path", str(out / "ckpt"), "--ckpt.output_dir",
        str(out / "model"), "--logger.logging_steps", "1",
        "--actor.num_gpus_per_node", "2", "--ref.num_gpus_per_node", "2", "--vllm.num_engines", "2",
        "--algo.advantage.estimator", "group_norm", "--algo.kl.init_coef", "0",
        "--algo.advantage.is_correction_level", "token", "--algo.advantage.is_correction_gating", "tv",
        "--algo.advantage.is_correction_threshold", str(TV_DELTA),
        "--train.num_episodes", "1",
    ] + (["--adora.enable", "--adora.variant", "paper_vl",
          "--ada.enable", "--ada.round_size", "2", "--ada.max_rounds", "3", "--ada.cancel"] if project else [])


def run_launcher(tmp_path: Path, model: str, project: bool = True):
    """Launch the 8-prompt run (`vl_flags`) and check what every run must show; returns (calls, rows): the reward
    file's calls and metrics.jsonl's rows.

    Every call reached an engine with its own prompt's picture (vLLM expanded the prompt's one placeholder into the
    picture's own number of image tokens). 2 steps of 16 samples; the trained samples and the engines' samples agree
    token by token, with each sample's own picture, at step 1 (the engines' start-up weights) and step 2 (after the
    first sync of the updated policy)."""
    counts, log = tmp_path / "counts", tmp_path / "rewards.jsonl"
    counts.mkdir()
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD.format(counts=str(counts), log=str(log)))
    run = launch("openrlhf_ada.cli.train_ppo_ray", vl_flags(model, write_data(tmp_path / "data.jsonl"), str(reward),
                                                            tmp_path, project=project), tmp_path / "run.log")
    assert_ok(run)

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    for c in calls:
        assert c["image_tokens"] == image_tokens(c["label"]), c
        assert c["prompt_placeholders"] <= 1, c

    rows = jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["rollout/num_samples"] for r in rows] == [16, 16]
    assert all(abs(r["vllm_kl"]) <= VL_SYNC_KL_LIMIT for r in rows), [r["vllm_kl"] for r in rows]
    assert [r["is_filter_ratio"] for r in rows] == [0.0, 0.0], [r["is_filter_ratio"] for r in rows]
    assert rows[0]["actor_grad_norm"] > 0  # the policy moved at step 1: a stale engine would show at step 2
    return calls, rows


def test_launcher_trains_the_vision_language_model_zero3_two_engines_adora_paper_vl_and_rounds(tmp_path, tiny_vl_path):
    """8 prompts (6 resolved in round 2, 2 never) in batches of 4, n = 4: 2 steps of 16 samples on 2 ZeRO-3 ranks,
    rounds of 2 samples on 2 engines, streamed (--ada.cancel). A mixed prompt's exit holds only with its round's last
    sample, so the scripted rewards leave nothing to cancel: the counts below are exact."""
    calls, rows = run_launcher(tmp_path, tiny_vl_path)

    # Every round of every prompt reached an engine (with its picture: run_launcher). Mixed prompts: 2 rounds, never: 3.
    by_label = {}
    for c in calls:
        by_label.setdefault(c["label"], []).append(c)
    assert {label: len(cs) for label, cs in by_label.items()} == {
        label_of(i): 6 if i >= PROMPTS - NEVER else 4 for i in range(PROMPTS)}
    assert sum(r["ada_samples_generated"] for r in rows) == len(calls) == 6 * 4 + 2 * 6
    assert [r["ada_cancelled_requests"] for r in rows] == [0, 0]  # cancel on (the key is logged with it), none cut

    # ADORA paper_vl: one weight per group, 1 or ATTENUATE; the 2 groups without a correct sample are attenuated
    # (no length advantage). When every response ran to MAX_NEW (truncated: the tiny model seldom ends one), no
    # group has a usable wrong answer either, so every group is attenuated.
    assert sum(round(r["adora_no_pos_share"] * BATCH) for r in rows) == NEVER
    for r in rows:
        attenuated = r["adora_attenuated_share"]
        assert attenuated >= r["adora_no_pos_share"] - 1e-6, r
        assert r["adora_weight_mean"] == pytest.approx(1 - (1 - ATTENUATE) * attenuated, abs=1e-5), r
        if r["rollout/response_length_mean"] == MAX_NEW:
            assert attenuated == 1.0 and r["adora_weight_mean"] == pytest.approx(ATTENUATE), r


def test_launcher_trains_the_vision_language_model_with_the_projects_features_off(tmp_path, tiny_vl_path):
    """The same 8 prompts and settings with none of the project's flags: upstream's generation (one request of n = 4
    per prompt, its calls 0-3: 2 wrong, 2 right for a mixed prompt), 2 steps of 16 samples."""
    calls, rows = run_launcher(tmp_path, tiny_vl_path, project=False)
    assert sorted(c["label"] for c in calls) == sorted(label_of(i) for i in range(PROMPTS) for _ in range(N))
    assert not any(key.startswith("adora_") for r in rows for key in r), rows[0].keys()  # no ADORA weights


def test_shipped_vl_script_through_ray_job_submit_with_est(tmp_path):
    """examples/scripts/train_adora_vl_grpo.sh (GRPO + ADORA vl, ZeRO-3, colocated with sleep), unchanged, through
    `ray job submit` onto a local Ray of 2 logical GPUs (2 actor ranks, 2 engines), the CPU settings as `make
    cluster-demo --script train_adora_vl_grpo.sh` gives them: the tiny vision-language model on the shapes task (16
    prompts, 2 steps of 8 x 4), with Reinforce-Ada-Est added: at step 1 every prompt unseen, p_hat 1/2, so 4 samples
    each."""
    from openrlhf_ada.cli.cluster_demo import TINY_VL_ARGS, VL_SCRIPT, prepare
    from openrlhf_ada.cpu.local_ray import LocalRayCluster

    env_vars = {**prepare("tiny", str(tmp_path / "demo"), prompts=16, seed=0, images=True), "NUM_NODES": "1",
                "NUM_GPUS": "2", "SAVE_PATH": str(tmp_path / "run")}
    extra = TINY_VL_ARGS + ["--ada.enable", "--ada.strategy", "est", "--algo.advantage.is_correction_level", "token"]
    with LocalRayCluster(nodes=1, gpus_per_node=2, log_dir=str(tmp_path / "ray_logs")) as cluster:
        _p.submit_script(cluster, VL_SCRIPT, env_vars, extra, tmp_path / "job.log")
    rows = jsonl_rows(tmp_path / "run" / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["rollout/num_samples"] for r in rows] == [32, 32]
    assert (rows[0]["ada_alloc_min"], rows[0]["ada_alloc_max"]) == (4, 4)
    assert rows[0]["ada_est_p_hat_mean"] == pytest.approx(0.5)
    for r in rows:
        # the vl rule: a group without a correct answer keeps boost 1, the others 1 or lam 0.1
        no_pos = r["adora_no_pos_share"]
        assert no_pos + 0.1 * (1 - no_pos) - 1e-6 <= r["adora_weight_mean"] <= 1 + 1e-6, r
    assert all(abs(r["vllm_kl"]) <= VL_SYNC_KL_LIMIT for r in rows), [r["vllm_kl"] for r in rows]
    assert [r["is_filter_ratio"] for r in rows] == [0.0, 0.0]  # no token outside upstream's IS band [0.5, 5]
    assert rows[0]["actor_grad_norm"] > 0
    assert (tmp_path / "run" / "model.safetensors").exists()
