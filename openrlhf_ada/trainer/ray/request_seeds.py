"""`RequestSeeds`: a sampling seed for every generation request, from (seed, step, prompt tokens, k).

The k-th request for a prompt within a step gets the seed hash(seed, step, prompt tokens, k). Its sample then
depends neither on the other prompts of the step nor on the order in which the engine schedules them, so:

- two runs with the same `--train.seed` draw the same samples wherever their sampling is the same (the same prompt
  in the same step, its first k requests), whatever else differs between them: a paired comparison's two runs share
  their first draws;
- an evaluation pass reseeded with a fixed seed (`--eval.avg_seed`) draws the same samples for the same weights in
  every run, so the evaluation's own draws no longer add noise between the runs of a comparison.

Both engines of the single-machine trainer use it: transformers' (`hf_engine.py`, always) and vLLM's
(`vllm_engine.py`, with `request_seeds=True`, through `SamplingParams.seed`). `reseed(step, seed)` starts a step:
the counters restart and the seeds depend on the new step (and on `seed` where given, else the engine's own).
"""

from __future__ import annotations

import hashlib
from typing import Dict, Optional, Sequence, Tuple


def derive_seed(*keys) -> int:
    """A 63-bit seed from any tuple of plain values (stable across processes and Python versions: no `hash`)."""
    return int.from_bytes(hashlib.sha256(repr(keys).encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class RequestSeeds:
    """The seeds of one engine's requests: `next(prompt_token_ids)` for each request, `reseed` at each step."""

    def __init__(self, seed: int):
        self.seed = seed
        self.epoch = 0
        self._epoch_seed = seed  # the current step's: `seed`, unless reseed was given another
        self._counts: Dict[Tuple[int, ...], int] = {}

    def reseed(self, epoch: int, seed: Optional[int] = None) -> None:
        self.epoch, self._counts = epoch, {}
        self._epoch_seed = self.seed if seed is None else seed

    def next(self, prompt_token_ids: Sequence[int]) -> int:
        """The seed of this prompt's next request in the current step."""
        key = tuple(int(t) for t in prompt_token_ids)
        k = self._counts.get(key, 0)
        self._counts[key] = k + 1
        return derive_seed(self._epoch_seed, self.epoch, key, k)
