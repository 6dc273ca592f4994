"""Is the training signal plausible? Per-step checks of the rewards and of what the reward file reported.

Why: a reward file that does not fit the dataset (another task's labels, null labels) gives every sample reward 0
without failing, so the run trains on nothing for hours and no fault counter moves. Two symptoms are cheap to see:

- the reward file says so itself: the project's reward files mark a sample whose label they cannot read with
  ``extra_logs["<task>_reason"] == REASON_CODES["bad_label"]`` (openrlhf_ada.rewards._common); any reward file may
  instead report ``extra_logs["bad_label"]`` (or ``"<anything>_bad_label"``) > 0;
- every reward of several consecutive steps is the same number: no group has an advantage, nothing is learned.

Everything here is plain Python over per-sample ``info`` mappings (OpenRLHF's ``Experience.info``: upstream copies a
reward file's ``extra_logs`` into it, one value per sample), with no Ray and no trainer: `reward_file_logs` gives
the step's mean of every reward-file key for the metrics, and `observe` takes the previous `SignalState` and a
step's samples and returns the next state, the step's metrics and the warnings to print. Both trainers can call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from openrlhf_ada.rewards._common import REASON_CODES

BAD_LABEL_CODE = float(REASON_CODES["bad_label"])
# info keys that the trainers, upstream or the reward guard set: everything else came from the reward file
TRAINER_INFO_KEYS = frozenset({
    "reward", "score", "response_clip_ratio", "reward_failed", "reward_fail_code", "kl", "return",
    "group_reward_std", "logprobs_diff", "ppo_clip_ratio", "ppo_kl", "vllm_kl", "is_filter_ratio",
    "response_length", "total_length",
})
TRAINER_INFO_PREFIXES = ("ada_", "adora_", "fault_")
METRIC_PREFIX = "reward_file/"


@dataclass(frozen=True)
class SignalWatchConfig:
    """constant_steps: warn when every reward of this many consecutive steps is the same value;
    bad_label_every: after the first bad-label warning, repeat it at most once per this many steps."""

    constant_steps: int = 3
    bad_label_every: int = 50

    def __post_init__(self):
        if self.constant_steps < 1 or self.bad_label_every < 1:
            raise ValueError(f"SignalWatchConfig: constant_steps and bad_label_every must be >= 1, got {self}")


@dataclass(frozen=True)
class SignalState:
    """What the checks remember between steps (small, JSON-able: it goes into a checkpoint)."""

    constant_streak: int = 0  # consecutive steps whose rewards were all equal to constant_value
    constant_value: Optional[float] = None
    bad_label_samples: int = 0  # samples with a bad label so far
    bad_label_warned_step: Optional[int] = None


def _value(x: Any) -> Optional[float]:
    """The first number of a tensor / list / number (upstream stores each sample's value as tensor([v]))."""
    if x is None:
        return None
    if hasattr(x, "reshape"):
        x = x.reshape(-1)
        if len(x) == 0:
            return None
        x = x[0]
    elif isinstance(x, (list, tuple)):
        if not x:
            return None
        x = x[0]
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def is_reward_file_key(key: str) -> bool:
    return key not in TRAINER_INFO_KEYS and not key.startswith(TRAINER_INFO_PREFIXES)


def reward_file_values(info: Mapping[str, Any]) -> Iterator[Tuple[str, float]]:
    """(key, number) for each finite value the reward file put in this sample's extra_logs."""
    for key, raw in info.items():
        if is_reward_file_key(key):
            value = _value(raw)
            if value is not None:
                yield key, value


def reward_file_logs(infos: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
    """Mean over the samples of every key the reward file put in extra_logs, as ``reward_file/<key>``."""
    sums: Dict[str, Tuple[float, int]] = {}
    for info in infos:
        for key, value in reward_file_values(info):
            total, count = sums.get(key, (0.0, 0))
            sums[key] = (total + value, count + 1)
    return {f"{METRIC_PREFIX}{key}": total / count for key, (total, count) in sorted(sums.items())}


def bad_label_reason(info: Mapping[str, Any]) -> Optional[str]:
    """The extra_logs key by which the reward file marked this sample's label as unreadable, or None."""
    for key, value in reward_file_values(info):
        if key.endswith("_reason") and value == BAD_LABEL_CODE:
            return f"{key} = bad_label"
        if (key == "bad_label" or key.endswith("_bad_label")) and value > 0:
            return f"{key} > 0"
    return None


def observe(
    state: SignalState,
    *,
    step: int,
    rewards: Sequence[float],
    infos: Sequence[Mapping[str, Any]],
    labels: Sequence[Any] = (),
    config: SignalWatchConfig = SignalWatchConfig(),
) -> Tuple[SignalState, Dict[str, float], List[str]]:
    """One step's checks. `rewards`, `infos` and `labels` are per sample (the samples trained on). Returns the new
    state, metrics (``signal/bad_label_share``, ``signal/constant_reward_steps``) and warnings (strings to print)."""
    warnings: List[str] = []
    bad = [(i, reason) for i, info in enumerate(infos) if (reason := bad_label_reason(info)) is not None]
    total_bad = state.bad_label_samples + len(bad)
    warned = state.bad_label_warned_step
    if bad and (warned is None or step - warned >= config.bad_label_every):
        index, reason = bad[0]
        example = repr(labels[index])[:200] if index < len(labels) else "?"
        warnings.append(
            f"WARNING step {step}: the reward file reported {len(bad)} of {len(infos)} samples with a label it cannot "
            f"read ({reason}; {total_bad} so far), e.g. label {example}. These samples get the lowest reward: check "
            "--data.label_key and that the reward file is the one for this dataset."
        )
        warned = step

    values = [float(r) for r in rewards]
    if values and len(set(values)) == 1:
        streak = state.constant_streak + 1 if state.constant_value == values[0] else 1
        constant = values[0]
    else:
        streak, constant = 0, None
    k = config.constant_steps
    if streak and (streak == k or (streak > k and streak % (10 * k) == 0)):
        warnings.append(
            f"WARNING step {step}: every reward of the last {streak} steps was {constant:g}: no sample is better than "
            "another, so nothing is learned. Check that the reward file matches the dataset (labels, answer format, "
            "the reward_file/* metrics) and that the model can solve some prompts at all."
        )
    metrics = {
        "signal/bad_label_share": len(bad) / len(infos) if infos else 0.0,
        "signal/constant_reward_steps": float(streak),
    }
    new_state = replace(state, constant_streak=streak, constant_value=constant, bad_label_samples=total_bad,
                        bad_label_warned_step=warned)
    return new_state, metrics, warnings
