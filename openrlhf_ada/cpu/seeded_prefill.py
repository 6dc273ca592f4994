"""vLLM's engine arguments that per-request seeds need on CPU: whole prefills, no chunked ones.

Why: after a step in which a request's prompt was only partly prefilled (chunked prefill: the step's token budget
ran out inside the prompt), vLLM discards the token it sampled for that request and rewinds the request's own
generator (vllm/v1/worker/gpu_model_runner.py, ``_bookkeeping_sync``: ``gen.set_offset(gen.get_offset() - 4)``). A
request sampled with its own seed (``SamplingParams.seed``, what ``--local.request_seeds`` sets) has such a generator,
and on CPU it is a ``torch.Generator`` on the CPU, which has no offset: the engine core dies with "CPU Generator does
not use offset" at the first prompt that is split, which a batch of a few hundred requests reaches at once. With
chunked prefill off, every prompt is prefilled in one step and nothing is rewound; the budget per step is then at
least the context length, as vLLM sets it itself where it turns chunked prefill off on CPU (MLA models).

On a GPU nothing here applies (CUDA generators have offsets): `seeded_request_kwargs` returns nothing there.
"""

from __future__ import annotations

#: vllm's default token budget per step for an engine on CPU (engine/arg_utils.py, the LLM class)
CPU_BATCHED_TOKENS = 4096


def seeded_request_kwargs(max_model_len: int) -> dict:
    """The engine arguments for requests with their own seeds: chunked prefill off and a token budget per step of at
    least `max_model_len` (vLLM refuses less without chunking) on CPU; {} where torch sees a CUDA device."""
    import torch

    if torch.cuda.is_available():
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(int(max_model_len), CPU_BATCHED_TOKENS)}
