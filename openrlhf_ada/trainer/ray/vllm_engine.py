"""`LocalRolloutRayActor`: OpenRLHF's RolloutRayActor (vLLM) plus what a single-machine run needs on any device:
loading new policy weights from a file (upstream's weight sync allocates on CUDA)."""

import ray
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

from openrlhf_ada.trainer.ray.weight_sync import reload_weights_from_file


class _LocalRolloutRayActor(RolloutRayActor.__ray_actor_class__):
    async def load_weights_from_file(self, path: str) -> None:
        await self.llm.collective_rpc(reload_weights_from_file, args=(path,))
        await self.llm.reset_prefix_cache()

    async def reseed(self, epoch: int) -> None:
        """vLLM is seeded once at start (a per-request seed fails on its CPU backend); nothing to do per step."""


LocalRolloutRayActor = ray.remote(_LocalRolloutRayActor)
