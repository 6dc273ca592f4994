"""What a short step at the end of the data leaves to upstream's trainer, on 2 actor ranks: DeepSpeed's gradient
accumulation stays aligned with the rollout steps, and metrics reduced across ranks keep their names.

A rank trains its share of a step in micro-batches of --train.micro_batch_size and DeepSpeed steps the optimizer every
gradient-accumulation-steps (gas = --train.batch_size / (micro-batch x ranks)) micro-batches, counting them across
rollout steps. A short step that is not a whole number of train batches leaves a partial accumulation that the next
step's micro-batches complete: every later optimizer step mixes two rollout steps. Upstream reduces each micro-batch's
metric dict across ranks value by value in the dict's order, and a micro-batch's `info` keys come in the order of its
first sample: samples whose keys come in different orders (a reward file's extra_logs that vary) make ranks add
values of different metrics.

The cut arithmetic and the key order have fast tests here; the pipeline test is one real run of the cluster
launcher (tests/test_pipeline_on_cpu.py's harness) that shows both.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import siblings
import torch
from openrlhf.trainer.ppo_utils.experience import Experience, make_experience_batch

from openrlhf_ada.trainer.ppo_utils.batching import data_parallel_unit, short_step_unit, usable_samples
from openrlhf_ada.trainer.ppo_utils.samples_generator import uniform_info_keys


def args_for(*, n, dp, rollout_micro, train_batch, dynamic=False, ref_dp=None, critic_dp=None):
    """The flags batching.py reads, as upstream's parser nests them."""
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, micro_batch_size=rollout_micro),
        train=SimpleNamespace(batch_size=train_batch, dynamic_batch_enable=dynamic),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1),
        actor=SimpleNamespace(num_nodes=1, num_gpus_per_node=dp),
        ref=SimpleNamespace(num_nodes=1, num_gpus_per_node=ref_dp or dp),
        critic=SimpleNamespace(num_nodes=1, num_gpus_per_node=critic_dp or dp,
                               model_name_or_path="critic" if critic_dp else None),
        algo=SimpleNamespace(kl=SimpleNamespace(init_coef=0.01 if ref_dp else 0.0)),
    )


def optimizer_steps_and_leftover(samples: int, dp: int, micro: int, train_batch: int):
    """Upstream's actor arithmetic for one step of `samples` split evenly over `dp` ranks: each rank's micro-batches
    (its DataLoader drops a partial last one) and DeepSpeed's gas = train batch / (micro x dp). Returns (optimizer
    steps, micro-batches left accumulating)."""
    micro_batches = samples // dp // micro
    gas = train_batch // (micro * dp)
    return micro_batches // gas, micro_batches % gas


# -- the cut arithmetic, by hand ------------------------------------------------------------------------------------


def test_the_shipped_eight_gpu_script_cuts_a_short_step_to_whole_train_batches():
    """examples/scripts/train_reinforce_ada.sh on 8 GPUs: n 4, rollout micro-batch 16, train batch 512, train
    micro-batch 4. The data-parallel unit is lcm(4, 8 x 16) = 128: a short step of 384 samples gives each rank 48
    samples = 12 micro-batches of the 512 / (4 x 8) = 16 it accumulates, so the next step's first 4 complete this
    one's optimizer step. The short-step unit is lcm(128, 512) = 512."""
    args = args_for(n=4, dp=8, rollout_micro=16, train_batch=512)
    assert data_parallel_unit(args) == 128
    assert optimizer_steps_and_leftover(384, dp=8, micro=4, train_batch=512) == (0, 12)  # the drift
    assert short_step_unit(args) == 512
    assert optimizer_steps_and_leftover(512, dp=8, micro=4, train_batch=512) == (1, 0)
    # dynamic batching: ranks need only whole groups and the same sample count, lcm(4, 8) = 8; upstream trains
    # whole --train.batch_size / ranks slices of each rank's share (replay_buffer.setup_dynamic_batch), so 384 would
    # train nothing; the unit is lcm(8, 512) = 512 again
    dynamic = args_for(n=4, dp=8, rollout_micro=16, train_batch=512, dynamic=True)
    assert data_parallel_unit(dynamic) == 8 and short_step_unit(dynamic) == 512


@pytest.mark.parametrize("n, dp, rollout_micro, train_batch, micro, expected", [
    # lcm(6, 2 x 4) = 24, lcm(24, 16) = 48: 24 per rank = 12 micro-batches of 2, gas 16 / (2 x 2) = 4
    (6, 2, 4, 16, 2, 48),
    # lcm(4, 2 x 4) = 8, and 32 is a multiple of it: the tests' pipeline shape (train micro-batch 1: gas 16)
    (4, 2, 4, 32, 1, 32),
    # a train batch smaller than the data-parallel unit: lcm(8, 3 x 8) = 24, lcm(24, 12) = 24 (two train batches)
    (8, 3, 8, 12, 2, 24),
])
def test_the_short_step_unit_is_whole_train_batches_that_every_rank_splits(n, dp, rollout_micro, train_batch, micro,
                                                                            expected):
    unit = short_step_unit(args_for(n=n, dp=dp, rollout_micro=rollout_micro, train_batch=train_batch))
    assert unit == expected
    steps, left = optimizer_steps_and_leftover(unit, dp=dp, micro=micro, train_batch=train_batch)
    assert left == 0 and steps == unit // train_batch


def test_the_unit_covers_the_reference_and_critic_ranks():
    """Reference on 3 ranks, critic on 5, actor on 2, rollout micro-batch 1, n 2, train batch 4: lcm(2, 2, 3, 5, 4)
    = 60."""
    args = args_for(n=2, dp=2, rollout_micro=1, train_batch=4, ref_dp=3, critic_dp=5)
    assert short_step_unit(args) == 60


@pytest.mark.parametrize("sizes, unit, expected", [
    ([3, 6, 4, 4, 4, 3], 8, 24),  # ends 3, 9, 13, 17, 21, 24: only 24 is a multiple of 8
    ([3, 5, 8, 2], 8, 16),  # ends 3, 8, 16, 18: 8 and 16, the longer run
    ([4, 4, 4], 16, 0),  # ends 4, 8, 12: none
])
def test_est_trains_the_longest_run_of_whole_groups_that_is_whole_units(sizes, unit, expected):
    assert usable_samples(sizes, unit) == expected


# -- the info key order --------------------------------------------------------------------------------------------


def sample(**info) -> Experience:
    return Experience(sequences=torch.zeros(1, 3, dtype=torch.long), info={k: torch.tensor([v]) for k, v in info.items()})


def test_every_sample_gets_the_same_key_order_so_micro_batches_agree_across_ranks():
    """A reward file logs `correct` only for right answers, `length` for every answer. A right answer's info then
    reads (reward, correct, length), a wrong one's (reward, length) and `correct` is filled in. A micro-batch's keys
    come in its first sample's order (upstream's make_experience_batch): a rank whose micro-batch starts with a wrong
    answer and one whose starts with a right one must still list the keys alike."""
    right = sample(reward=1.0, correct=100.0, length=7.0)
    wrong = sample(reward=0.0, length=5.0)
    filled = uniform_info_keys([right, wrong])
    assert filled == ["correct"] and wrong.info["correct"].item() == 0.0
    assert list(right.info) == list(wrong.info)
    rank0 = make_experience_batch([right, wrong])
    rank1 = make_experience_batch([wrong, right])
    assert list(rank0.info) == list(rank1.info)
    # the order is a property of the keys, not of which sample came first
    again = [sample(length=1.0, reward=0.0), sample(correct=2.0, reward=1.0, length=3.0)]
    uniform_info_keys(again)
    assert [list(e.info) for e in again] == [list(right.info)] * 2


# -- the pipeline: one run of the cluster launcher on 2 ranks -------------------------------------------------------


def pipeline_harness():
    """tests/test_pipeline_on_cpu.py's helpers (launch, common_flags, jsonl_rows, ...): pytest imports test files
    by path (--import-mode=importlib), so this one is loaded the same way."""
    return siblings.load("test_pipeline_on_cpu.py")


# One prompt ("right-*") is answered right by every sample, the others by none. A right answer logs `correct_hundred`
# = 100 first and `always_one` = 1 after it; a wrong one only `always_one`. The trained mean of `always_one` is 1 and
# that of `correct_hundred` 100 x the share of right answers, whichever rank holds the right prompt; values reduced
# under each other's names show as anything else.
VARYING_KEYS_REWARD = """
import torch


def reward_func(queries, prompts, labels):
    right = labels[0].startswith("right")
    t = torch.tensor([float(right)])
    extra = {"correct_hundred": torch.tensor([100.0])} if right else {}
    extra["always_one"] = torch.tensor([1.0])
    return {"rewards": t, "scores": t, "extra_logs": extra}
"""


def deepspeed_global_steps(ckpt: Path) -> list:
    """DeepSpeed's optimizer step count of each actor rank in the latest checkpoint (global_steps in the model-states
    file every ZeRO-3 rank writes)."""
    tag = (ckpt / "_actor" / "latest").read_text().strip()
    files = sorted((ckpt / "_actor" / tag).glob("*model_states.pt"))
    return [torch.load(f, map_location="cpu", weights_only=False)["global_steps"] for f in files]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_short_steps_keep_accumulation_whole_and_metric_names_right_on_two_ranks(tmp_path, tiny_llama_path):
    """2 actor ranks (ZeRO-3), one engine, fixed n = 4, batch 8 (32 samples a step), train batch 32 in micro-batches
    of 1 (gas 32 / (1 x 2) = 16), rollout micro-batches of 4 (data-parallel unit lcm(4, 2 x 4) = 8), 2 episodes of
    6 prompts: each episode is one short step of 24 samples (3 data-parallel units, 3/4 of a train batch).

    Cut to whole train batches, episode 1 trains nothing and carries its 6 groups into episode 2, whose first step is
    those 6 and 2 new prompts (32 samples, one optimizer step); episode 2's last 4 groups are held back and dropped
    (the last episode). DeepSpeed's step count then equals the whole train batches of the logged steps. Before the
    cut, each episode trained 24 samples (12 micro-batches per rank): the second completed the first's accumulation,
    one optimizer step for no whole train batch.

    Train micro-batches of 1 make every sample a micro-batch of its own: at each position where one rank trains a
    right answer and the other a wrong one, keys in each sample's own order would be reduced crosswise. (Before the
    sorted order a run logged always_one 17.5 and correct_hundred 0.53 where the share of right answers was 1/6, and
    ended with DeepSpeed at 1 optimizer step for 0 whole train batches.)"""
    harness = pipeline_harness()
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"input": f"Say a number {i}:", "label": "right-0" if i == 0 else f"wrong-{i}"})
                            + "\n" for i in range(6)))
    reward = tmp_path / "varying_keys_reward.py"
    reward.write_text(VARYING_KEYS_REWARD)
    flags = harness.common_flags(tiny_llama_path, str(data), tmp_path, reward=str(reward)) + [
        "--algo.advantage.estimator", "dr_grpo", "--algo.kl.init_coef", "0", "--actor.num_gpus_per_node", "2",
        "--vllm.num_engines", "1", "--train.micro_batch_size", "1", "--train.num_episodes", "2",
        "--ckpt.save_steps", "1",
    ]
    run = harness.launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    harness.assert_ok(run)
    rows = harness.jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")
    assert rows, run.tail()

    # metric names: each row's reduced values under their own names
    for row in rows:
        assert row["always_one"] == pytest.approx(1.0), (row["step"], row["always_one"], row["correct_hundred"])
        assert row["correct_hundred"] == pytest.approx(100 * row["rollout/reward_mean"]), row["step"]

    # accumulation: one optimizer step per whole train batch
    whole_batches = sum(int(r["rollout/num_samples"]) // 32 for r in rows)
    assert deepspeed_global_steps(tmp_path / "ckpt") == [whole_batches] * 2, [r["rollout/num_samples"] for r in rows]
    assert [r["rollout/num_samples"] for r in rows] == [32]
    assert "short step at the end of the data: 0 groups trained now, 6 held back" in run.log
    assert "short step at the end of the data: 0 groups trained now, 4 held back" in run.log
    # the right prompt is among the 6 carried groups, and maybe among the 2 new ones: 1 or 2 of 8 groups right
    assert rows[0]["rollout/reward_mean"] in (1 / 8, 2 / 8)
