"""The CPU mode, all of it: what runs upstream's pipeline (Ray, DeepSpeed, vLLM, OpenRLHF's actors) on a machine
without a GPU, and nothing else (docs/cpu_mode.md). It acts only with `OPENRLHF_ADA_CPU=1` on a machine where torch
sees no CUDA device; wherever torch sees CUDA every part of it is inert.

patches.py (the flash-attn placeholder and the patches, in the driver, Ray's workers and vLLM's processes),
vllm_plugin.py (vLLM's plugin entry point, which carries them into vLLM's own processes; it also records engine
start-up errors, in every mode), kv_cache.py (vLLM's KV cache on CPU), local_ray.py (a private Ray cluster on this machine), shm_leftovers.py (the shared memory killed engines
leave behind).

This ``__init__`` imports nothing: vLLM's processes and Ray's workers import these modules by name, cheaply.
"""
