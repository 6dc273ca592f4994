"""The single-machine trainer's set-up from parsed flags: the checks that need the local file system (before Ray or
a model starts), the `LocalConfig` of the --local.* flags, and the run's config.json.

`python -m openrlhf_ada.cli.train_local` (the entry point) parses the flags with these checks and builds the run;
`LocalTrainer` (local_trainer.py) trains it.
"""

from __future__ import annotations

import json
import os

from openrlhf_ada.data.loading import problems_digest
from openrlhf_ada.trainer.local_trainer import LocalConfig, _flat


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
    if args.local.skip_base_eval and args.local.max_steps == 0:
        raise ValueError("--local.skip_base_eval with --local.max_steps 0: nothing would be evaluated; drop one")
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
                       eval_at_tokens=float(loc.eval_at_tokens), request_seeds=bool(loc.request_seeds),
                       skip_base_eval=bool(loc.skip_base_eval))


def write_run_config(args, output_dir: str, eval_dataset=None) -> str:
    """<output_dir>/config.json: every flag of the run as a dotted key (what wandb's config holds), and with
    --eval.dataset the held-out problems' count and digest (`eval.problems`, `eval.problems_sha256`); what
    `compare --group-by` and the seed pairing read from a local run. A resumed run rewrites it."""
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
