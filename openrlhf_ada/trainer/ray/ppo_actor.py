"""`LoraSyncPolicyModelActor`: upstream's PolicyModelActor whose weight sync sends a LoRA policy merged, and whose
update counts the samples it trained for the step's ledger (openrlhf_ada.trainer.ledger).

Upstream's `ActorPPOTrainer.broadcast_to_vllm` (trainer/ray/ppo_actor.py) sends `model.named_parameters()` as they
are. For a LoRA policy (`--ds.lora.rank > 0`) those are the adapter's float32 matrices and peft's prefixed names,
which the engines (the base model, in bfloat16) cannot load: upstream's worker asserts on the dtype, and the run
stops or hangs at its first sync. Here a LoRA policy sends the merged model instead (openrlhf_ada.trainer.ray.
lora_weights: base + scaling * B @ A under the base names, in the base dtype), through the same engine calls and
group upstream's sync uses (`update_weight` with a broadcast from rank 0, or `update_weight_cuda_ipc` where upstream
uses CUDA IPC), so the engines' receiving side is upstream's (or, on CPU, the CPU mode's) unchanged. A policy
without LoRA keeps upstream's sync.

The update (`fit`, with or without LoRA) is upstream's, with the trainer's `training_step` wrapped for its duration to
count the rows of every micro-batch it trains, per epoch; the rank's term (the smallest epoch count) is gathered over
the data-parallel group, so every rank returns every rank's count with its status (upstream's trainer keeps one
rank's status) under `ledger.RANK_COUNTS`, for the trainer's check.

The launcher puts this class where upstream's `train()` looks for the policy actor. The methods here call upstream's
functions explicitly, without zero-argument `super()` (Ray ships an actor class's inherited methods by value).
"""

from __future__ import annotations

import os

import ray
import torch
from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

from openrlhf_ada.trainer.ledger import RANK_COUNTS, rank_term
from openrlhf_ada.trainer.ray.lora_weights import is_lora_model, sync_units, unit_tensor

#: Test-only fault injection, inert unless set: "<update>:<rank>" removes one sample from that data-parallel rank's
#: replay buffer before its <update>-th update (counted from 1 in this actor process), as a loss would.
DROP_SAMPLE_ENV = "OPENRLHF_ADA_TEST_DROP_SAMPLE"


def _gathered(trainer, params):
    """The parameters gathered where they are sharded (as upstream gathers each parameter for its sync)."""
    import deepspeed

    args = trainer.strategy.args
    if args.ds.tensor_parallel_size > 1:
        return deepspeed.module_inject.layers.GatherReplacedLayerParams(list(params), trainer.actor.model.module,
                                                                        enabled=True)
    return deepspeed.zero.GatheredParameters(list(params), enabled=args.ds.zero_stage == 3)


def _broadcast(trainer, name: str, tensor: torch.Tensor, last: bool) -> None:
    """Rank 0: one tensor to every engine over the sync group (upstream's `update_weight` on the engine side)."""
    tensor = tensor.contiguous()
    refs = [engine.update_weight.remote(name, dtype=tensor.dtype, shape=tensor.shape, empty_cache=last)
            for engine in trainer.vllm_engines]
    if getattr(trainer.strategy.args.vllm, "sync_with_ray", False):
        import ray.util.collective as collective

        collective.broadcast(tensor, 0, group_name=trainer._model_update_group)
    else:
        trainer._model_update_group.broadcast(tensor, src=0, stream=torch.cuda.current_stream())
    ray.get(refs)  # an engine that failed to receive or load says why here


def _share_by_cuda_ipc(trainer, name: str, tensor: torch.Tensor, last: bool) -> None:
    """Every rank: one tensor to the engines on its GPUs through CUDA IPC handles (upstream's
    `update_weight_cuda_ipc` on the engine side)."""
    from openrlhf.trainer.ray.utils import get_physical_gpu_id
    from openrlhf.utils.distributed_util import torch_dist_barrier_and_cuda_sync
    from torch.multiprocessing.reductions import reduce_tensor

    weight = tensor.detach().clone().contiguous()  # kept alive until every engine has loaded it
    handles = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(handles, {get_physical_gpu_id(): reduce_tensor(weight)})
    if torch.distributed.get_rank() == 0:
        ipc_handles = {gpu: handle for mine in handles for gpu, handle in mine.items()}
        ray.get([engine.update_weight_cuda_ipc.remote(name, dtype=weight.dtype, shape=weight.shape,
                                                      ipc_handles=ipc_handles, empty_cache=last)
                 for engine in trainer.vllm_engines])
    torch_dist_barrier_and_cuda_sync()
    del weight


def broadcast_merged_lora(trainer) -> None:
    """The weight sync of a LoRA policy: every tensor of the merged model to every engine, as upstream's
    `broadcast_to_vllm` sends the plain model's (prefix cache reset, one engine call per tensor, the last one
    flagged so that the engines finish loading; for a vision-language model only what training changes)."""
    from openrlhf.utils.distributed_util import torch_dist_barrier_and_cuda_sync

    args = trainer.strategy.args
    rank0 = torch.distributed.get_rank() == 0
    resets = [engine.reset_prefix_cache.remote() for engine in trainer.vllm_engines] \
        if rank0 and getattr(args.vllm, "enable_prefix_caching", False) else []
    torch.cuda.empty_cache()
    units = [u for u in sync_units(trainer.actor.model.module)
             if u.trainable or not getattr(trainer.actor, "is_vlm", False)]
    send = _share_by_cuda_ipc if trainer.use_cuda_ipc else _broadcast
    for i, unit in enumerate(units, start=1):
        with _gathered(trainer, unit.params):
            if trainer.use_cuda_ipc or rank0:
                send(trainer, unit.name, unit_tensor(unit), last=i == len(units))
    if resets:
        ray.get(resets)
    torch.cuda.empty_cache()
    torch_dist_barrier_and_cuda_sync()


class SampleCounter:
    """For the duration of a `with`: the rows of every micro-batch `trainer.training_step` trains, one count per
    epoch (upstream's ppo_train numbers each epoch's micro-batches from 0)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.epochs: list = []

    def __enter__(self) -> "SampleCounter":
        trained = self.trainer.training_step
        self._own = vars(self.trainer).get("training_step")  # an instance's own wrapper, put back afterwards

        def counted(experience, kl_ctl, step, *args, **kwargs):
            status = trained(experience, kl_ctl, step, *args, **kwargs)
            if step == 0 or not self.epochs:
                self.epochs.append(0)
            self.epochs[-1] += len(experience.sequences)
            return status

        self.trainer.training_step = counted
        return self

    def __exit__(self, *exc) -> None:
        if self._own is None:
            del self.trainer.training_step  # the class's method again
        else:
            self.trainer.training_step = self._own


def data_parallel_counts(strategy, count: int) -> list:
    """Every data-parallel rank's `count`, in rank order (ranks of one ring-attention / tensor-parallel group train the
    same samples and are one data-parallel rank)."""
    group = strategy.ds_device_mesh["dp"].get_group()
    mine = torch.tensor([count], dtype=torch.long, device=torch.cuda.current_device())
    parts = [torch.zeros_like(mine) for _ in range(torch.distributed.get_world_size(group=group))]
    torch.distributed.all_gather(parts, mine, group=group)
    return [int(part.item()) for part in parts]


def _drop_sample_for_test(trainer, update: int) -> None:
    spec = os.environ.get(DROP_SAMPLE_ENV)
    if not spec:
        return
    at_update, rank = (int(x) for x in spec.split(":"))
    dp_rank = torch.distributed.get_rank(group=trainer.strategy.ds_device_mesh["dp"].get_group())
    if update == at_update and dp_rank == rank and trainer.replay_buffer.items:
        trainer.replay_buffer.items.pop()
        print(f"[openrlhf_ada] {DROP_SAMPLE_ENV}: removed one sample from rank {rank}'s replay buffer before "
              f"update {update}", flush=True)


_UpstreamPolicyModelActor = PolicyModelActor.__ray_actor_class__


class _LoraSyncPolicyModelActor(_UpstreamPolicyModelActor):
    def fit(self, kl_ctl: float = 0):
        """Upstream's update, its trained samples counted (SampleCounter) and gathered over the data-parallel ranks
        into the returned status (`ledger.RANK_COUNTS`)."""
        self._ledger_updates = getattr(self, "_ledger_updates", 0) + 1
        _drop_sample_for_test(self.trainer, self._ledger_updates)
        with SampleCounter(self.trainer) as counter:
            status = _UpstreamPolicyModelActor.fit(self, kl_ctl)
        status[RANK_COUNTS] = data_parallel_counts(self.trainer.strategy, rank_term(counter.epochs))
        return status

    def broadcast_to_vllm(self):
        if is_lora_model(self.actor.model.module):
            broadcast_merged_lora(self.trainer)
        else:
            self.trainer.broadcast_to_vllm()


LoraSyncPolicyModelActor = ray.remote(num_gpus=1)(_LoraSyncPolicyModelActor)
