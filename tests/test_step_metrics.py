"""The step's Reinforce-Ada and fault metrics travel beside the samples (`StepSamples.metrics`), not in any sample's
`info`, and reach the cluster trainers' status under the names users have always seen (`ada_eta`,
`fault_failed_share`, ...: docs/metrics.md).

The generator runs on the fixed engine of tests/test_trained_batch_record.py (no Ray, no vLLM): the j-th answer to
prompt i has 2 + (3i + 5j) % 7 tokens and reward 1 when (5j + 3i) % 8 < RIGHT_OF_8[i % 5]. With fixed n = 4 the first
step asks prompts 0..3 for answers j = 0..3 each and keeps them all, so every metric of that step can be counted by
hand from that rule (`by_hand`), independently of the code that computes it.

What the cluster trainer logs for a step is what upstream's actor averages over the trained samples' `info` (every
tensor, sample-weighted) plus what the project's trainer adds to the status from beside the samples
(`ppo_trainer.beside_samples`): `logged_row` builds the same union, so the test holds the values whichever way
they travel.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from siblings import load
from transformers import AutoTokenizer

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_trainer import beside_samples
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator, mean_over_samples

record = load("test_trained_batch_record.py")
fake_ray = record.fake_ray
DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path):
    return AutoTokenizer.from_pretrained(tiny_llama_path)


def first_step(flags, tokenizer):
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4", "--rollout.micro_batch_size", "2",
        "--rollout.max_new_tokens", "8", "--actor.num_gpus_per_node", "1", "--train.seed", "7", *flags,
    ])
    loader = [([i], [f"prompt {i}"], [f"label {i}"], [None]) for i in range(8)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader, eval_dataloader=None,
                                 tokenizer=tokenizer, vllm_engines=[record.Engine()])
    samples, *_ = gen.generate_samples(**record.GEN)
    return samples


def logged_row(samples) -> dict:
    """The step's status as the cluster trainer logs it: every `info` tensor's mean over the samples (upstream's
    actor), then what the project's trainer adds from beside the samples."""
    row = {key: torch.cat([e.info[key].float().reshape(-1) for e in samples]).mean().item()
           for key in samples[0].info if isinstance(samples[0].info[key], torch.Tensor)}
    row.update(beside_samples(samples))
    return row


def by_hand() -> dict:
    """The first fixed-n step's metrics, counted from the engine's rule (module docstring)."""
    lengths = {(i, j): 2 + (3 * i + 5 * j) % 7 for i in range(4) for j in range(4)}
    right = {(i, j): (5 * j + 3 * i) % 8 < record.RIGHT_OF_8[i % 5] for i in range(4) for j in range(4)}
    mixed = [i for i in range(4) if 0 < sum(right[i, j] for j in range(4)) < 4]
    tokens = sum(lengths.values())
    return {
        "ada_prompts": 4.0, "ada_prompts_consumed": 4.0, "ada_samples_generated": 16.0,
        "ada_samples_per_prompt_mean": 4.0, "ada_samples_per_prompt_max": 4.0,
        "ada_tokens_generated": float(tokens),
        "ada_reward_mean_generated": sum(right.values()) / 16, "ada_pass_rate_generated": sum(right.values()) / 16,
        "ada_nonzero_adv_group_share": len(mixed) / 4,
        "ada_eta": sum(lengths[i, j] for i in mixed for j in range(4)) / tokens,
        "ada_failed_samples": 0.0, "ada_failed_prompts": 0.0, "ada_dynamic_filtered": 0.0,
        "fault_failed_share": 0.0, "fault_engine_failures": 0.0,
    }


def test_the_hand_counts():
    """`by_hand` against counts done on paper. Lengths 2 + (3i + 5j) % 7 for j = 0..3: prompt 0: 2, 7, 5, 3 (17);
    1: 5, 3, 8, 6 (22); 2: 8, 6, 4, 2 (20); 3: 4, 2, 7, 5 (18): 77 tokens. Right when (5j + 3i) % 8 < RIGHT_OF_8[i]:
    prompt 0 never; 1: 3, 0, 5, 2 < 1 at j = 1; 2: 6, 3, 0, 5 < 4 at j = 1, 2; 3: 1, 6, 3, 0 < 7 always: 7 of 16,
    prompts 1 and 2 mixed, whose 22 + 20 tokens are eta's numerator."""
    expected = by_hand()
    assert expected["ada_tokens_generated"] == 77
    assert expected["ada_reward_mean_generated"] == 7 / 16
    assert expected["ada_nonzero_adv_group_share"] == 2 / 4
    assert expected["ada_eta"] == 42 / 77


def test_fixed_n_step_metrics_reach_the_status_with_their_values(tokenizer, fake_ray):
    samples = first_step(["--algo.advantage.estimator", "group_norm"], tokenizer)
    row = logged_row(samples)
    for key, value in by_hand().items():
        assert row[key] == pytest.approx(value, abs=1e-6), key
    assert row["ada_generation_seconds"] >= 0
    # none of them is a sample's: only the group id and the pool statistics are in info
    assert not [k for k in samples[0].info if k.startswith(("ada_", "fault_")) and k in row
                and k not in ("ada_group", "ada_pool_count", "ada_pool_mean", "ada_pool_std", "ada_samples",
                              "ada_pool_index", "ada_pool_pass_rate")]
    # they go through upstream's async queue with the samples (pickled)
    assert pickle.loads(pickle.dumps(samples)).metrics == samples.metrics


def documented_ada_keys() -> set:
    """The `ada_*` metric names of docs/metrics.md's table (`_max` after `ada_samples_per_prompt_mean /`: its
    sibling; `ada_resolved_at_round_K` for K = 1)."""
    keys = set()
    for line in DOCS.read_text().splitlines():
        if not line.startswith("| `ada_"):
            continue
        first = line.split("|")[1]
        names = re.findall(r"`([a-z_]+)`", first)
        keys.update(names)
        if "ada_samples_per_prompt_mean" in names:
            keys.add("ada_samples_per_prompt_max")
    keys.discard("_max")
    keys.discard("ada_resolved_at_round_K")
    keys.add("ada_resolved_at_round_1")
    return keys


@pytest.mark.parametrize("flags, keys", [
    ([*record.SEQ, "--ada.mode", "pos", "--ada.history", "--ada.cancel"],
     {"ada_resolved_share", "ada_resolved_at_round_1", "ada_rounds_mean", "ada_unresolved_kept", "ada_eta",
      "ada_cancelled_requests", "ada_skipped_prompts", "ada_epoch", "ada_alloc_cov_n_r", "ada_first_round_signal_share"}),
    ([*record.EST, "--ada.est_preset", "paper"], {"ada_est_p_hat_mean", "ada_est_seen_share", "ada_alloc_median"}),
])
def test_the_documented_keys_arrive(flags, keys, tokenizer, fake_ray):
    row = logged_row(first_step([*flags, "--algo.advantage.estimator", "dr_grpo"], tokenizer))
    assert keys <= set(row), keys - set(row)


def test_every_documented_ada_key_arrives_in_one_of_the_runs(tokenizer, fake_ray):
    rows = {}
    for flags in ([*record.SEQ, "--ada.mode", "pos", "--ada.history", "--ada.cancel"],
                  [*record.EST, "--ada.est_preset", "paper"]):
        rows.update(logged_row(first_step([*flags, "--algo.advantage.estimator", "dr_grpo"], tokenizer)))
    documented = documented_ada_keys()
    assert len(documented) > 25, documented  # the table was read
    # ada_prompt_weight is the experience maker's, per sample in info (it weights each sample's advantage)
    missing = documented - set(rows) - {"ada_prompt_weight"}
    assert not missing, missing


def test_mean_over_samples_by_hand():
    """Groups of 4 and 2 samples from two steps: a = (4 * 1 + 2 * 4) / 6 = 2; b only in the second step's group:
    (2 * 3) / 6 = 1 (a metric a group lacks counts 0 for its samples, as a key missing from some samples' info)."""
    assert mean_over_samples([(4, {"a": 1.0}), (2, {"a": 4.0, "b": 3.0})], 6) == {"a": 2.0, "b": 1.0}
    assert mean_over_samples([], 0) == {}
