"""`AdaRolloutRayActor`: OpenRLHF's RolloutRayActor (vLLM) with
- the reward guard (per-call timeout and result checks, see reward_guard.py) in place of upstream's executor, with
  the timeout from `reward_timeout` or the env var OPENRLHF_ADA_REWARD_TIMEOUT (the cluster launcher sets it, since
  upstream's create_vllm_engines passes no extra arguments);
- `load_weights_from_file`: loading new policy weights on any device (upstream's weight sync allocates on CUDA),
  used by the single-machine trainer.
The cluster launcher points upstream's `vllm_engine.RolloutRayActor` at this class, so create_vllm_engines builds it.
"""

import os

import ray
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
from openrlhf.utils.agent import SingleTurnAgentExecutor

from openrlhf_ada.trainer.ray.reward_guard import GuardedRewardExecutor
from openrlhf_ada.trainer.ray.weight_sync import reload_weights_from_file

DEFAULT_REWARD_TIMEOUT = 60.0


def reward_timeout_from_env(value=None) -> float:
    return float(value if value is not None else os.environ.get("OPENRLHF_ADA_REWARD_TIMEOUT", DEFAULT_REWARD_TIMEOUT))


def guard_executor(executor, remote_rm_url, timeout: float):
    """Upstream's single-turn executor becomes the guarded one; a user's agent executor is left as it is."""
    if type(executor) is SingleTurnAgentExecutor and remote_rm_url:
        return GuardedRewardExecutor(remote_rm_url, timeout=timeout)
    return executor


class _AdaRolloutRayActor(RolloutRayActor.__ray_actor_class__):
    async def __init__(self, *args, reward_timeout=None, **kwargs):
        await super().__init__(*args, **kwargs)
        self.executor = guard_executor(self.executor, kwargs.get("remote_rm_url"), reward_timeout_from_env(reward_timeout))

    async def load_weights_from_file(self, path: str) -> None:
        await self.llm.collective_rpc(reload_weights_from_file, args=(path,))
        await self.llm.reset_prefix_cache()

    async def check_health(self) -> None:
        """Raises when the vLLM engine core inside this actor has died (the actor itself may still answer)."""
        await self.llm.check_health()

    async def reseed(self, epoch: int) -> None:
        """vLLM is seeded once at start (a per-request seed fails on its CPU backend); nothing to do per step."""


AdaRolloutRayActor = ray.remote(_AdaRolloutRayActor)
