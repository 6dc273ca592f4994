"""Samples without a usable reward, counted by reason, and the rule that stops a step on them.

Upstream swallows a reward function's exception and leaves the sample's reward None; the project's reward guard
(openrlhf_ada/trainer/ray/reward_guard.py) also marks timeouts and non-finite values with a fail code. A step
judges the failed share as samples come back (`--fault.max_failed_share`) and stops with one failing input as the
example, so that a broken reward function is found in the first round, not after a run of zero rewards."""

from __future__ import annotations

from typing import Callable, List, Optional

import torch
from openrlhf.trainer.ppo_utils.experience import Experience

from openrlhf_ada.trainer.ppo_utils.sample_record import SampleRecord
from openrlhf_ada.trainer.ray.reward_guard import FAIL_CODES, FAIL_NAMES


def scalar(value: Optional[torch.Tensor]) -> Optional[float]:
    """The one number of a per-sample tensor (an Experience of one sample holds shape [1]); None stays None."""
    return None if value is None else float(value.reshape(-1)[0].item())


def rewards_of(samples: List[Experience]) -> List[Optional[float]]:
    """Each sample's reward as a number, in order (None where the reward failed)."""
    return [scalar(s.rewards) for s in samples]


def sample_score(e: Experience) -> Optional[float]:
    """The verifier outcome that classifies a sample (its score; its reward when the reward file gives no score)."""
    return scalar(e.scores) if e.scores is not None else scalar(e.rewards)


def reward_failed(e: Experience) -> bool:
    """The sample got no usable reward: None (the reward function raised) or not finite."""
    return e.rewards is None or not torch.isfinite(e.rewards).all()


class FailureLog:
    """Samples of one step without a usable reward: counted by reason; one kept as an example for the error, built
    into its `Experience` by `build` (the response -> upstream's Experience) only when the error is raised."""

    def __init__(self, build: Callable[[dict], Experience]):
        self.total = self.failed = 0
        self.by_reason: dict = {}
        self.example: Optional[SampleRecord] = None
        self.build = build

    def record(self, records: List[SampleRecord]) -> None:
        for r in records:
            self.total += 1
            if r.failed:
                self.failed += 1
                reason = FAIL_NAMES.get(r.fail_code, "raised")
                self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
                if self.example is None:
                    self.example = r

    def metrics(self) -> dict:
        """The failed share and a count per reason: every reason every step (the same keys in every sample)."""
        out = {"fault/failed_share": self.failed / self.total if self.total else 0.0}
        for reason in FAIL_CODES:
            out[f"fault/failed_{reason}"] = float(self.by_reason.get(reason, 0))
        return out

    def check(self, limit: float, reward_url, tokenizer, min_samples: int = 1) -> None:
        """Stop when more than `limit` of the samples back so far failed, once at least `min_samples` are back."""
        if self.total >= min_samples and self.failed / self.total > limit:
            self.stop(f"{self.failed} of {self.total} samples of this step so far ({self.failed / self.total:.0%}) "
                      f"got no usable reward from {reward_url} (limit --fault.max_failed_share {limit})", tokenizer)

    def stop(self, what: str, tokenizer) -> None:
        e = self.build(self.example.response)
        response = tokenizer.decode(e.sequences[0][e.action_mask[0].nonzero().flatten() + 1], skip_special_tokens=True)
        raise RuntimeError(
            f"{what}; reasons: {self.by_reason}. One failing input: prompt={e.prompts[0]!r}, label={e.labels[0]!r}, "
            f"response={response[:500]!r}. Fix the reward function (it must return one finite number per sample, "
            "within --fault.reward_timeout seconds) and restart (--ckpt.load_enable continues from the last "
            "checkpoint)."
        )
