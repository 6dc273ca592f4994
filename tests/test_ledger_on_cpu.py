"""The step ledger's sample identity on the real cluster pipeline (tests/test_pipeline_on_cpu.py's harness): the
synchronous trainer, 2 policy ranks under ZeRO-2 with dynamic batching, and a data size whose end is a short step
the project cuts. The checks on hand-made counts and on upstream's balance_experiences and replay buffer are in
tests/test_ledger.py; the async trainer's ledger rows are checked in test_compatibility_on_cpu.py's two-rank run, and
train_local's in test_local_recovery_on_cpu.py.
"""

from __future__ import annotations

import pytest
import siblings

from openrlhf_ada.trainer.ledger import (
    PROMPT_IN,
    PROMPT_OUT,
    SAMPLE_IN,
    SAMPLE_OUT,
    SAMPLES_TRAINED,
    SAMPLES_TRAINED_BY_RANKS,
    prompt_metric,
    sample_metric,
)
from openrlhf_ada.trainer.ray.ppo_actor import DROP_SAMPLE_ENV

_p = siblings.load("test_pipeline_on_cpu.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_two_ranks_with_dynamic_batching_train_every_sample_and_a_lost_one_stops_the_run(tmp_path, tiny_llama_path):
    """n = 4, --rollout.batch_size 4, --train.batch_size 8 (4 samples a rank per slice), 2 ranks, ZeRO-2, dynamic
    batching, 3 prompts and 2 episodes. Step 1 (episode 1): the data runs out after 3 prompts, 12 samples, which the
    short-step cut makes 8 (lcm(n 4, ranks 2, train batch 8) = 8; 1 group held back): 4 a rank, one slice each, all
    trained. Step 2 (episode 2): the held-back group and the 3 prompts again, 16 samples, 8 a rank.

    Negative control (DROP_SAMPLE_ENV, inert unless set): before update 2, rank 1's replay buffer loses one sample.
    Upstream trains on every rank the slices the smallest share fills: rank 1's 7 fill one, so each rank trains 4, 8
    of 16, without an error. The ledger stops the run at step 2 naming both terms and the ranks' counts; step 2 has
    no checkpoint and no metrics row."""
    data = _p.write_prompts(tmp_path / "prompts.jsonl", 3)
    flags = _p.common_flags(tiny_llama_path, data, tmp_path, n=4, batch=4) + [
        "--algo.advantage.estimator", "dr_grpo", "--algo.kl.init_coef", "0", "--actor.num_gpus_per_node", "2",
        "--vllm.num_engines", "1", "--train.batch_size", "8", "--ds.zero_stage", "2", "--train.dynamic_batch_enable",
        "--train.max_tokens_per_gpu", "48", "--train.num_episodes", "2", "--ckpt.save_steps", "1",
    ]
    run = _p.launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log", env={DROP_SAMPLE_ENV: "2:1"})
    assert run.returncode != 0, run.tail()
    assert "zero_stage=2," in run.log and "short step at the end of the data: 2 groups trained now, 1 held back" \
        in run.log, run.tail()
    assert "removed one sample from rank 1's replay buffer before update 2" in run.log, run.tail()

    rows = _p.jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1], rows
    assert rows[0]["rollout/num_samples"] == rows[0][SAMPLES_TRAINED] == rows[0][SAMPLES_TRAINED_BY_RANKS] == 8
    # the generator's side of step 1: 3 prompts drawn, 2 groups trained, 1 carried into step 2; 12 samples generated
    # (fixed n keeps them all), 8 trained, 4 carried. Step 2's generator check (with epoch 0's coverage: 3 prompts
    # drawn, 3 trained, the carried group counted where it is trained) passes: the run stops at the ranks' check
    assert [rows[0][prompt_metric(t)] for t in (*PROMPT_IN, *PROMPT_OUT)] == [3, 0, 2, 0, 0, 0, 0, 0, 0, 1], rows[0]
    assert [rows[0][sample_metric(t)] for t in (*SAMPLE_IN, *SAMPLE_OUT)] == [12, 0, 8, 0, 0, 0, 4], rows[0]
    assert "coverage does not balance" not in run.log and "prompt ledger" not in run.log, run.tail()
    assert (tmp_path / "ckpt" / "_actor" / "latest").read_text().strip() == "global_step1"

    assert (f"LedgerError: step 2: the sample ledger does not balance: {SAMPLES_TRAINED} = 16 (the samples the "
            f"generator handed to the trainer) but {SAMPLES_TRAINED_BY_RANKS} = 8 (the samples the actor ranks "
            "updated on) (per rank: 4, 4): 8 sample(s) handed to the trainer were not trained on") in run.log, \
        run.tail()
