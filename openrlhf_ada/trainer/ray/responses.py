"""A response as the project's engine actors hand it back: upstream's response dict with its token ids and log-probs
as numpy arrays (`compact_response`), and the same dict with Python lists again where upstream builds a trained
sample from it (`listed_response`).

Why. Upstream's executors return `observation_tokens` and `rollout_log_probs` as Python lists: about 36 bytes per
token id (an 8-byte pointer to a 28-byte int object) and 32 per log-prob. Reinforce-Ada's pools hold every sample of
an unsettled prompt, about five per kept one, so at cluster shape those lists were most of the trainer's memory. As
arrays a token id takes 4 bytes (int32) and a log-prob 4 (float32).

Nothing trained changes. Token ids fit int32 (a vocabulary has far fewer than 2**31 entries; an id outside int32's
range is refused, not wrapped). Upstream builds the log-probs tensor with `torch.tensor(list)`, which stores a list
of Python floats as float32 (torch's default dtype, which neither upstream nor the project changes); numpy's float64
-> float32 cast rounds to nearest-even as torch's does, so the float32 array holds exactly the values upstream's
tensor would (vLLM's log-probs are float32 to begin with: nothing is rounded at all). A log-prob list without any
float (a custom executor's ints) is left a list: upstream would build an integer tensor from it. `listed_response`
gives back lists whose values are those of the arrays, so upstream's `_process_response_into_experience` builds the
same tensors from it bit for bit.

One function, `compact_response`, formats every response the engine actors send (the vLLM actor's
`generate_responses` and `generate_stream`, the transformers actor's `generate_responses`) and the benchmark's
stand-in engines' answers (benchmarks/cluster_scale.py), so the benchmark measures the format the real engines send.
This module needs numpy only: no vLLM, no GPU.
"""

from __future__ import annotations

import numpy as np

TOKEN_DTYPE = np.int32
LOG_PROB_DTYPE = np.float32
_TOKEN_RANGE = (np.iinfo(TOKEN_DTYPE).min, np.iinfo(TOKEN_DTYPE).max)


def token_array(tokens) -> np.ndarray:
    """Token ids (a list, or any integer array) as an int32 array; raises ValueError for an id outside int32."""
    if isinstance(tokens, np.ndarray) and tokens.dtype == TOKEN_DTYPE:
        return tokens
    wide = np.asarray(tokens, dtype=np.int64)
    if wide.ndim != 1:
        raise ValueError(f"token ids must be one sequence, got shape {wide.shape}")
    if wide.size and (wide.min() < _TOKEN_RANGE[0] or wide.max() > _TOKEN_RANGE[1]):
        raise ValueError(f"token ids outside int32: {int(wide.min())} .. {int(wide.max())}")
    return wide.astype(TOKEN_DTYPE)


def log_prob_array(values):
    """Log-probs as a float32 array, rounded as `torch.tensor(values)` rounds them (module docstring); None stays
    None, and values without a float (torch would make integers of them) stay as they are."""
    if values is None or (isinstance(values, np.ndarray) and values.dtype == LOG_PROB_DTYPE):
        return values
    wide = np.asarray(values)
    if wide.dtype.kind != "f" or wide.ndim != 1:
        return values
    with np.errstate(over="ignore"):  # beyond float32's range: an infinity, as torch stores it
        return wide.astype(LOG_PROB_DTYPE)


def compact_response(response: dict) -> dict:
    """A copy of upstream's response dict with `observation_tokens` as int32 and `rollout_log_probs` as float32
    arrays (the other entries shared with `response`)."""
    out = dict(response)
    out["observation_tokens"] = token_array(response["observation_tokens"])
    out["rollout_log_probs"] = log_prob_array(response.get("rollout_log_probs"))
    return out


def listed_response(response: dict) -> dict:
    """The response as upstream's executors made it: its arrays back as Python lists of the same values (a copy;
    `response` itself unchanged). Lists pass through."""
    out = dict(response)
    for key in ("observation_tokens", "rollout_log_probs"):
        if isinstance(out.get(key), np.ndarray):
            out[key] = out[key].tolist()
    return out
