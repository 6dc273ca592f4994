"""The single-machine trainer's rollout engine: started as a Ray actor (the project's vLLM engine actor, or the
transformers-backed one of `--local.engine hf`) with the KV cache sized for this machine, and stopped with the
shared-memory segments its killed vLLM processes leave behind.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: the engine's own process need not import the trainer
    from openrlhf_ada.trainer.local_trainer import LocalConfig


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
    max_model_len = config.max_model_len or args.data.max_len
    if config.request_seeds:  # on CPU: whole prefills (a seeded request's generator cannot be rewound there)
        from openrlhf_ada.cpu.seeded_prefill import seeded_request_kwargs

        common.update(seeded_request_kwargs(max_model_len))
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
        max_model_len=max_model_len, distributed_executor_backend="uni", **common)


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
