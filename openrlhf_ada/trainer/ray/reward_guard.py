"""`GuardedRewardExecutor`: upstream's SingleTurnAgentExecutor with a time limit on the reward function and a check
of what it returned.

Upstream swallows an exception in the reward call and leaves reward=None; a reward function that hangs blocks the
sample forever, and one that returns NaN, a string or a tensor of the wrong shape flows into training. Here every
such call yields reward=None (the samples generator counts the sample as failed and never puts it in a group) and
`extra_logs["reward_failed"] = 1`, `extra_logs["reward_fail_code"] = <code>` (numbers, as upstream's logging needs;
a successful result carries neither, so nothing logs a constant 0).

The time limit (`--fault.reward_timeout`) is the reward function's own running time: each call runs in a thread of
its own, at most `max_concurrent` at a time, and the clock starts when the call starts, not while it waits for a
slot. A call that times out gives its slot back (its thread cannot be killed and finishes in the background), so a
reward that hangs on some inputs does not starve the others, as it would in asyncio's shared thread pool. HTTP
reward servers keep upstream's own policy (a 180 s timeout per request, 5 tries); only their results are checked.
"""

import asyncio
import math
import os
import threading

import torch
from openrlhf.utils.agent import SingleTurnAgentExecutor
from openrlhf.utils.logging_utils import init_logger

from openrlhf_ada.args import FaultConfig

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
    return {"rewards": rewards, "scores": scores, "extra_logs": dict(result.get("extra_logs") or {})}


def _settle(future: asyncio.Future, result, error) -> None:
    if not future.done():  # a timed-out call's future is already cancelled
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class GuardedRewardExecutor(SingleTurnAgentExecutor):
    def __init__(self, remote_rm_url=None, timeout: float = FaultConfig.reward_timeout,
                 max_concurrent: int | None = None):
        super().__init__(remote_rm_url)
        self.timeout = timeout
        # as many concurrent calls as asyncio.to_thread's pool would run (upstream's way of calling the function)
        self.max_concurrent = max_concurrent or min(32, (os.cpu_count() or 1) + 4)
        self._slots: asyncio.Semaphore | None = None  # made in the engine's event loop on first use

    async def _timed_call(self, queries, prompts, labels):
        """One reward-function call in a thread of its own, timed from the moment it starts."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        async with self._slots:
            loop = asyncio.get_running_loop()
            done = loop.create_future()

            def run():
                try:
                    outcome = (self.reward_func(queries, prompts, labels), None)
                except BaseException as e:  # noqa: BLE001 (handed to the waiting coroutine)
                    outcome = (None, e)
                try:
                    loop.call_soon_threadsafe(_settle, done, *outcome)
                except RuntimeError:  # a timed-out call that outlived its event loop: nobody waits for it
                    pass

            threading.Thread(target=run, name="reward_func", daemon=True).start()
            return await asyncio.wait_for(done, self.timeout)

    async def _fetch_rewards_via_func(self, queries_list, prompts_list, labels_list):
        async def one(query, prompt, label):
            try:
                result = await self._timed_call([query], [prompt], [label])
            except asyncio.TimeoutError:
                logger.warning(f"reward function ran longer than {self.timeout}s (label {label!r}); the sample counts "
                               "as failed")
                return _failure("timeout")
            except Exception as e:
                logger.warning(f"reward function raised {type(e).__name__}: {e}; the sample counts as failed")
                return _failure("raised")
            return check_reward_result(result)

        return await asyncio.gather(*(one(q, p, lab) for q, p, lab in zip(queries_list, prompts_list, labels_list)))

    async def _fetch_rewards_via_http(self, queries_list, prompts_list, labels_list):
        try:  # upstream's own timeout and retries
            results = await super()._fetch_rewards_via_http(queries_list, prompts_list, labels_list)
        except Exception as e:
            logger.warning(f"reward server call failed ({type(e).__name__}: {e}); the sample counts as failed")
            return [_failure("raised") for _ in queries_list]
        return [check_reward_result(r) for r in results]
