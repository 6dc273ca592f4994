"""LoRA policies (`--ds.lora.rank`) with vLLM engines, through the cluster pipeline on CPU (OPENRLHF_ADA_CPU=1).

The engines hold the base model; a LoRA policy's weight sync sends the merged model (openrlhf_ada.trainer.ray.
ppo_actor), which is checked on the synced policy, as tests/test_pipeline_on_cpu.py checks every sync: with
`--algo.advantage.is_correction_level token` upstream logs `vllm_kl`, the mean difference between the engine's
rollout log-probs and the actor's for the same tokens, which stays near zero only if the engines run the actor's
(merged) policy. And a sync the engines cannot load (upstream's own trainer sends the adapter's float32 matrices
under peft's names) stops the run within seconds with the engine's error, instead of leaving the trainer waiting in
the broadcast.

The ADORA + Seq + cancel run also scores with an HTTP reward server (tests/test_compatibility_on_cpu.py's
`RewardServer`, upstream's remote reward protocol): the "HTTP reward server x Seq + cancel" cell of
docs/compatibility.md.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import siblings

pipeline = siblings.load("test_pipeline_on_cpu.py")
compat = siblings.load("test_compatibility_on_cpu.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REFUSAL = "lora_A.default.weight arrives as torch.float32, the vLLM engine runs torch.bfloat16"
LORA = ["--ds.lora.rank", "8", "--ds.lora.alpha", "16", "--actor.adam.lr", "1e-2"]


def test_lora_with_adora_and_reinforce_ada_syncs_the_merged_policy(tmp_path, tiny_llama_path):
    """ADORA + Reinforce-Ada Seq with --ada.cancel (rounds of 8, cut once a prompt's samples meet the balance rule),
    a LoRA actor (ZeRO-3), a reference model and one vLLM engine; 16 prompts in batches of 8 -> 2 steps. The engine
    samples step 2 from the weights synced after step 1: its log-probs match the actor's (`vllm_kl` near zero), while
    the actor has moved away from the reference, which is the policy a stale engine would still run: with that engine
    `vllm_kl` would be -`logprobs_diff` (rollout = reference log-probs), far outside the bound.
    The rewards come from an HTTP reward server (each label's calls alternate right, wrong: 2.5, 0.5): it scored the
    samples that finished (every started request less the cancelled ones; a request cancelled while its reward was
    on the way may have been scored too), and each trained group is 2 + 2 of its rewards."""
    server = compat.RewardServer()
    try:
        run = _lora_run(tmp_path, tiny_llama_path, server.url)
    finally:
        server.httpd.shutdown()
    pipeline.assert_ok(run)
    assert "lora_A" in run.log  # upstream's actor printed its LoRA layers: the policy really is a LoRA model
    rows = pipeline.jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["rollout/num_samples"] for r in rows] == [32, 32]
    for row in rows:
        assert not [k for k in pipeline.ADA_KEYS + pipeline.ADORA_KEYS if row.get(k) is None], row["step"]
        # 8 prompts x 8 requests started, of which at least 4 per prompt entered its pool: the cancel path ran
        not_admitted = row["ada_cancelled_requests"] + row["ada_discarded_samples"]
        assert row["ada_samples_generated"] == 8 * 8 and 0 < not_admitted <= 8 * 4, row
        # the trained rewards are the server's: every group 2 + 2 of 2.5 and 0.5
        assert row["rollout/reward_mean"] == pytest.approx((compat.RIGHT + compat.WRONG) / 2, abs=1e-4), row
    generated = sum(r["ada_samples_generated"] for r in rows)
    finished = generated - sum(r["ada_cancelled_requests"] for r in rows)
    assert finished <= server.calls("mixed") <= generated, (server.calls("mixed"), finished, generated)
    assert rows[0]["actor_grad_norm"] > 0
    assert pipeline.sync_is_real({r["step"]: r["vllm_kl"] for r in rows}), [r["vllm_kl"] for r in rows]
    # step 2 is sampled after the first sync; a stale engine would have given vllm_kl = -logprobs_diff there
    assert abs(rows[1]["logprobs_diff"]) > 5 * pipeline.SYNC_KL_LIMIT, rows[1]["logprobs_diff"]
    assert (tmp_path / "model" / "adapter_config.json").exists()  # upstream's final save: the adapter


def _lora_run(tmp_path, tiny_llama_path, reward: str):
    data = pipeline.write_prompts(tmp_path / "prompts.jsonl", 16)
    flags = pipeline.common_flags(tiny_llama_path, data, tmp_path, reward=reward) + LORA + [
        "--algo.advantage.estimator", "dr_grpo", "--actor.num_gpus_per_node", "1", "--ref.num_gpus_per_node", "1",
        "--vllm.num_engines", "1", "--algo.kl.init_coef", "0.01", "--algo.kl.use_loss", "--algo.kl.estimator", "k3",
        "--algo.advantage.is_correction_level", "token",
        "--adora.enable", "--ada.enable", "--ada.round_size", "8", "--ada.max_rounds", "3", "--ada.cancel",
    ]
    return pipeline.launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")


def test_a_sync_the_engine_cannot_load_stops_the_run_in_seconds_with_its_error(tmp_path, tiny_llama_path):
    """Upstream's own trainer with a LoRA actor sends the adapter's own float32 matrices to an engine that runs the
    bfloat16 base model. The engine refuses the first of them; the run stops within seconds of that refusal, the
    engine's error in its output. (It used to wait in the broadcast for the engine, which had given up before
    receiving: half an hour, the gloo group's timeout, with nothing on the driver.)"""
    data = pipeline.write_prompts(tmp_path / "prompts.jsonl", 16)
    flags = pipeline.upstream_grpo_flags(tiny_llama_path, data, tmp_path) + LORA
    env = {**pipeline.os.environ, "OPENRLHF_ADA_CPU": "1", "PYTHONUNBUFFERED": "1"}
    log_path = tmp_path / "run.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", "openrlhf_ada.cli.train_ppo_ray_upstream", *flags], env=env,
                                cwd=pipeline.ROOT, stdout=log, stderr=subprocess.STDOUT)
        refused_at = None  # when the engine's refusal first showed in the run's output
        try:
            deadline = time.time() + 600
            while proc.poll() is None and time.time() < deadline:
                if refused_at is None and REFUSAL in log_path.read_text(encoding="utf-8", errors="replace"):
                    refused_at = time.time()
                if refused_at is not None and time.time() - refused_at > 30:
                    break
                time.sleep(0.5)
        finally:
            still_running = proc.poll() is None
            if still_running:  # the launcher shuts down the Ray it started when it is told to stop
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    text = log_path.read_text(encoding="utf-8", errors="replace")
    assert refused_at is not None, text[-4000:]
    assert not still_running, f"still running {time.time() - refused_at:.0f} s after the engine's error:\n{text[-4000:]}"
    assert proc.returncode != 0
    driver_error = text[text.rfind("Traceback"):]  # the launcher's own error, the last in its output
    assert REFUSAL in driver_error, driver_error[-4000:]
