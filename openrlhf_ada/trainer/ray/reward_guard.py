"""`GuardedRewardExecutor`: upstream's SingleTurnAgentExecutor with a per-call timeout and a check of what the reward
function returned.

Upstream swallows an exception in the reward call and leaves reward=None; a reward function that hangs blocks the
sample forever, and one that returns NaN, a string or a tensor of the wrong shape flows into training. Here every
such call yields reward=None (the samples generator counts the sample as failed and never puts it in a group) and
`extra_logs["reward_failed"] = 1`, `extra_logs["reward_fail_code"] = <code>` (numbers, as upstream's logging needs).
A timed-out call's thread cannot be killed; it finishes in the background.
"""

import asyncio
import math

import torch
from openrlhf.utils.agent import SingleTurnAgentExecutor
from openrlhf.utils.logging_utils import init_logger

logger = init_logger(__name__)

FAIL_CODES = {"raised": 1, "timeout": 2, "not_a_dict": 3, "no_rewards": 4, "wrong_shape": 5, "not_finite": 6,
              "not_a_number": 7}
FAIL_NAMES = {code: name for name, code in FAIL_CODES.items()}


def _failure(reason: str) -> dict:
    return {"rewards": None, "scores": None,
            "extra_logs": {"reward_failed": 1.0, "reward_fail_code": float(FAIL_CODES[reason])}}


def _scalar(value):
    """The single number a per-sample reward call must return, or the failure reason."""
    try:
        t = torch.as_tensor(value, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        return None, "not_a_number"
    if t.numel() != 1:
        return None, "wrong_shape"
    x = t.reshape(-1)[0].item()
    if not math.isfinite(x):
        return None, "not_finite"
    return t.reshape(1), None


def check_reward_result(result) -> dict:
    """Validate one call's result ({"rewards", "scores", "extra_logs"} for ONE sample)."""
    if result is None:
        return _failure("no_rewards")
    if not isinstance(result, dict):
        return _failure("not_a_dict")
    if result.get("rewards") is None:
        return _failure("no_rewards")
    rewards, reason = _scalar(result["rewards"])
    if reason:
        return _failure(reason)
    scores = rewards
    if result.get("scores") is not None:
        scores, reason = _scalar(result["scores"])
        if reason:
            return _failure(reason)
    extra = dict(result.get("extra_logs") or {})
    extra.setdefault("reward_failed", 0.0)
    extra.setdefault("reward_fail_code", 0.0)
    return {"rewards": rewards, "scores": scores, "extra_logs": extra}


class GuardedRewardExecutor(SingleTurnAgentExecutor):
    def __init__(self, remote_rm_url=None, timeout: float = 60.0):
        super().__init__(remote_rm_url)
        self.timeout = timeout

    async def _guarded(self, call, queries, prompts, labels):
        try:
            results = await asyncio.wait_for(call(queries, prompts, labels), timeout=self.timeout)
        except asyncio.TimeoutError:
            logger.warning(f"reward call exceeded {self.timeout}s (label {labels[0]!r}); the sample counts as failed")
            return [_failure("timeout") for _ in queries]
        except Exception as e:
            logger.warning(f"reward call raised {type(e).__name__}: {e}; the sample counts as failed")
            return [_failure("raised") for _ in queries]
        return [check_reward_result(r) for r in results]

    async def _fetch_rewards_via_func(self, queries_list, prompts_list, labels_list):
        return await self._guarded(super()._fetch_rewards_via_func, queries_list, prompts_list, labels_list)

    async def _fetch_rewards_via_http(self, queries_list, prompts_list, labels_list):
        return await self._guarded(super()._fetch_rewards_via_http, queries_list, prompts_list, labels_list)
