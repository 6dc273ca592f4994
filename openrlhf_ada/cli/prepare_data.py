"""``python -m openrlhf_ada.cli.prepare_data {kk,countdown,shapes,hf}``: prompt datasets (jsonl) for OpenRLHF's trainer.

The flags; the datasets, their rows and the checks of the flag values are openrlhf_ada/data/prepare.py.
"""

from __future__ import annotations

import argparse
import sys

from openrlhf_ada.data import prepare

PROG = "python -m openrlhf_ada.cli.prepare_data"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", required=True, help="output .jsonl file (parent folders are created)")
    common.add_argument("--seed", type=int, default=42, help="random seed; same seed and flags -> same file (default 42)")
    common.add_argument("--eval-size", type=_non_negative, default=0,
                        help="also write this many further, distinct items to an eval file (default 0: none)")
    common.add_argument("--eval-out", default=None, help="eval file path (default: <out without .jsonl>.eval.jsonl)")
    common.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Write prompt datasets (jsonl with fields input, label, datasource[, images]) for OpenRLHF. "
        "Train with --data.prompt_dataset OUT --data.input_key input --data.label_key label "
        "--data.apply_chat_template --reward.remote_url openrlhf_ada/rewards/<kk|countdown|math>.py.",
    )
    sub = parser.add_subparsers(dest="task", required=True, metavar="{kk,countdown,shapes,hf}")

    kk = sub.add_parser("kk", parents=[common], help="Knights and Knaves puzzles (reasoning-gym)",
                        description="Knights-and-Knaves puzzles from reasoning-gym, people counts in equal shares "
                        "over --min-people..--max-people (ADORA's text experiments: 3 to 7). Reward: rewards/kk.py.")
    kk.add_argument("--size", type=_positive, default=1000, help="number of training items (default 1000)")
    kk.add_argument("--min-people", type=int, default=3, help="fewest inhabitants per puzzle, 2..12 (default 3)")
    kk.add_argument("--max-people", type=int, default=7, help="most inhabitants per puzzle, 2..12 (default 7)")
    kk.add_argument("--depth", type=_positive, default=2, help="maximum nesting depth of a statement (default 2)")
    kk.add_argument("--width", type=_positive, default=2, help="maximum operands of an and/or statement (default 2)")

    cd = sub.add_parser("countdown", parents=[common], help="countdown arithmetic tasks (reasoning-gym)",
                        description="Countdown: reach a target with the given numbers and + - * /. Numbers and "
                        "reachable targets from reasoning-gym's generator. Reward: rewards/countdown.py.")
    cd.add_argument("--size", type=_positive, default=1000, help="number of training items (default 1000)")
    cd.add_argument("--min-numbers", type=int, default=3, help="fewest numbers per task, >= 2 (default 3)")
    cd.add_argument("--max-numbers", type=int, default=4, help="most numbers per task (default 4)")
    cd.add_argument("--min-value", type=_positive, default=1, help="smallest number (default 1)")
    cd.add_argument("--max-value", type=_positive, default=99, help="largest number (default 99)")
    cd.add_argument("--min-target", type=_positive, default=10, help="smallest target (default 10)")
    cd.add_argument("--max-target", type=_positive, default=100, help="largest target (default 100)")
    cd.add_argument("--use-all", action="store_true",
                    help="every number must be used exactly once (default: each at most once)")

    sh = sub.add_parser("shapes", parents=[common], help="the colour of a shape in a picture (vision-language)",
                        description="Generated pictures of one coloured square or circle (red, green, blue or "
                        "yellow); the answer is the colour, in one word. Images embedded as PNG data URIs; train a "
                        "vision-language model with --data.image_key images --data.max_images_per_prompt 1. A task "
                        "a tiny model can learn. Reward: rewards/shapes.py.")
    sh.add_argument("--size", type=_positive, default=256, help="number of training items (default 256)")
    sh.add_argument("--image-size", type=_positive, default=56, help="pictures are N x N pixels (default 56)")

    hf = sub.add_parser("hf", parents=[common], help="a Hugging Face dataset (math or vision-language math)",
                        description="Rows of a Hugging Face dataset (Hub name or local file/folder) as math prompts "
                        "answered in \\boxed{}; an image column makes it vision-language (images embedded as "
                        "base64). Needs network for Hub names: fails at once when offline. Reward: rewards/math.py.")
    hf.add_argument("--name", required=True,
                    help="Hub dataset name (open-r1/OpenR1-Math-220k, hiyouga/geometry3k) or a local path: a "
                    ".json/.jsonl/.csv/.parquet/.arrow file, a save_to_disk folder or a downloaded dataset folder")
    hf.add_argument("--config", default=None, help="dataset configuration name (default: the dataset's default)")
    hf.add_argument("--split", default="train", help="split to read (default train)")
    hf.add_argument("--size", type=_positive, default=None, help="number of training items (default: all rows)")
    hf.add_argument("--problem-key", default=None,
                    help=f"problem column (default: first of {', '.join(prepare.PROBLEM_KEYS)})")
    hf.add_argument("--answer-key", default=None,
                    help=f"answer column (default: first of {', '.join(prepare.ANSWER_KEYS)}); '#### x' keeps x, a full "
                    "solution keeps its last \\boxed{} content")
    hf.add_argument("--image-key", default=None,
                    help=f"image column (default: first of {', '.join(prepare.IMAGE_KEYS)} if present; none: text only)")
    hf.add_argument("--datasource", default=None, help="datasource name written to each row (default: last part of --name)")
    hf.add_argument("--connect-timeout", type=float, default=5.0,
                    help="seconds to wait for a connection to the Hub before giving up (default 5)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        prepare.run(args)
    except prepare.PrepareDataError as exc:
        print(f"{PROG} {args.task}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
