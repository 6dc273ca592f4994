"""A generated sample as a prompt's pool needs it: its reward, score, length, truncation and failure, read from the
engine's response without building upstream's `Experience` (tensors, masks, padding) for it.

Reinforce-Ada generates several samples for each one it trains (about five at n = 4), and a pool decides on numbers
only. So a sample that comes back becomes a `SampleRecord` (those numbers and the response itself), and only the
samples a pool keeps are built into `Experience`s, by upstream's own `_process_response_into_experience`, when their
prompt settles.

The response is as the engine actor sent it: its token ids and log-probs as int32 / float32 arrays
(trainer/ray/responses.py), about 8 bytes per token where upstream's lists took about 68; `held_bytes` counts what a
pool's records hold (tests/test_pool_memory.py, benchmarks/cluster_scale.py). A settled prompt's records are
dropped at once, the kept ones once built.

The numbers are the ones upstream's `Experience` of the sample would hold, read back as Python numbers: a reward or
score as `torch.tensor([value])` stores it (a float as float32), and the response length as upstream counts it (from
the first to the last action token inside the context window `max_len`). The pools therefore decide exactly as they
would on the experiences. `penalised_rewards` applies upstream's length penalties with upstream's own function.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import List, Optional, Sequence

import numpy as np
import torch
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties
from openrlhf.trainer.ppo_utils.length_penalty import logger as length_penalty_logger

#: upstream's `_process_response_into_experience` context window when the generate kwargs name none
DEFAULT_MAX_LEN = 2048
_INT64 = (-(2**63), 2**63)


def held(value) -> Optional[float]:
    """`value` as a one-element tensor of upstream's `torch.tensor([value])` holds it, read back as a float (None stays
    None): a Python float rounded to float32, a bool or an int exactly; anything else goes through torch itself."""
    if value is None:
        return None
    kind = type(value)
    if kind is float:
        try:
            return struct.unpack("f", struct.pack("f", value))[0]
        except OverflowError:  # beyond float32's range: torch stores an infinity
            return math.copysign(math.inf, value)
    if kind is bool or (kind is int and _INT64[0] <= value < _INT64[1]):
        return float(value)
    return float(torch.tensor([value]).reshape(-1)[0].item())


def response_length(response: dict, max_len: Optional[int]) -> int:
    """Upstream's response length: from the first to the last token covered by an action range, counted among the
    tokens 1 .. max_len - 1 of the observation (its action mask is cut to [1:max_len]); 0 when none is covered."""
    window = range(len(response["observation_tokens"]))[1:max_len]
    first = last = None
    for start, end in response["action_ranges"]:
        covered = range(len(response["observation_tokens"]))[start:end]
        lo, hi = max(covered.start, window.start), min(covered.stop, window.stop)
        if lo < hi:
            first = lo if first is None else min(first, lo)
            last = hi - 1 if last is None else max(last, hi - 1)
    return 0 if first is None else last - first + 1


@dataclass(frozen=True)
class SampleRecord:
    """One generated sample: what the pool, the failure count and the length penalties read, and the response its
    `Experience` is built from if it is kept."""

    response: dict
    reward: Optional[float]  # None: the reward function failed
    score: Optional[float]  # the verifier outcome that classifies the sample (its reward when there is no score)
    length: int
    truncated: bool
    failed: bool  # no usable reward: None, or not finite
    fail_code: int  # the reward guard's code of a failed sample (1, "raised", when it gave none)


def record_of(response: dict, generate_kwargs: dict) -> SampleRecord:
    """The record of one engine response, under the generate kwargs its Experience would be built with."""
    reward = held(response.get("reward", None))
    score = held(response.get("scores", None))
    failed = reward is None or not math.isfinite(reward)
    code = 1
    logs = response.get("extra_logs", {})
    if failed and "reward_fail_code" in logs:
        value = logs["reward_fail_code"]
        if isinstance(value, torch.Tensor):
            value = value.flatten()[0].item()
        code = int(held(value) or 1)
    return SampleRecord(response, reward, reward if score is None else score,
                        response_length(response, generate_kwargs.get("max_len", DEFAULT_MAX_LEN)),
                        bool(response.get("truncated", False)), failed, code)


def penalised_rewards(rewards: Sequence[Optional[float]], lengths: Sequence[int], truncated: Sequence[bool],
                      args) -> List[Optional[float]]:
    """Each sample's reward after upstream's length penalties (--reward.stop_properly_penalty_coef,
    --reward.overlong_buffer_len ...), computed by upstream's own `apply_length_penalties` on one stand-in holding the
    samples with a reward (float32, as an Experience holds them); None stays None. The samples themselves keep their
    raw rewards (the experience maker penalises the kept ones later, as upstream does); the pool statistics use these,
    so that with a pool equal to the kept group the pool baseline is upstream's."""
    out = list(rewards)
    if getattr(args.reward, "overlong_buffer_len", None) is None and \
            getattr(args.reward, "stop_properly_penalty_coef", None) is None:
        return out
    valid = [i for i, r in enumerate(rewards) if r is not None]
    if not valid:
        return out
    stand_in = SimpleNamespace(rewards=torch.tensor([rewards[i] for i in valid], dtype=torch.float32), info={},
                               response_length=torch.tensor([lengths[i] for i in valid]),
                               truncated=torch.tensor([bool(truncated[i]) for i in valid]))
    level = length_penalty_logger.level
    length_penalty_logger.setLevel("WARNING")  # it logs a line per call: per round here, per step in the maker
    try:
        apply_length_penalties([stand_in], args)
    finally:
        length_penalty_logger.setLevel(level)
    for i, value in zip(valid, stand_in.rewards.tolist()):
        out[i] = value
    return out


def penalised(records: Sequence[SampleRecord], args) -> List[Optional[float]]:
    """`penalised_rewards` of records."""
    return penalised_rewards([r.reward for r in records], [r.length for r in records],
                             [r.truncated for r in records], args)


def held_bytes(records: Sequence[Optional[SampleRecord]]) -> int:
    """The bytes `records` hold in this process: each record, its response dict and everything in it (keys, strings,
    numbers, lists and tuples with their items, nested dicts; an array as its header plus its buffer, a tensor as
    its storage), every object counted once however many records share it (a small int, a key string). None (a
    released sample) holds nothing. What a pool holds of its samples until its prompt settles: divided by the
    response tokens held, the bytes per held token the pool-memory test and benchmarks/cluster_scale.py report."""
    seen, stack, total = set(), [r for r in records if r is not None], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):  # getsizeof counts the buffer only when the array owns it
            total += sys.getsizeof(obj) + (obj.nbytes if obj.base is not None else 0)
        elif isinstance(obj, torch.Tensor):
            total += sys.getsizeof(obj) + obj.untyped_storage().nbytes()
        elif isinstance(obj, SampleRecord):
            total += sys.getsizeof(obj) + sys.getsizeof(vars(obj))
            stack.extend(vars(obj).values())
        elif isinstance(obj, dict):
            total += sys.getsizeof(obj)
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            total += sys.getsizeof(obj)
            stack.extend(obj)
        else:
            total += sys.getsizeof(obj)
    return total


def held_tokens(records: Sequence[Optional[SampleRecord]]) -> int:
    """The token ids `records` hold (each response's `observation_tokens`: prompt and response), None holding none."""
    return sum(len(r.response["observation_tokens"]) for r in records if r is not None)
