"""How many samples a step must hold so that upstream's trainer splits it evenly: over the data-parallel ranks, and
into whole optimizer steps.

Upstream's actor trains each rank's share of a step in micro-batches of --train.micro_batch_size and lets DeepSpeed
step the optimizer every gas = --train.batch_size / (micro-batch x ranks) micro-batches, counted across rollout steps;
with --train.dynamic_batch_enable it trains whole --train.batch_size / ranks slices of each rank's share and skips the
rest. A full step is rollout.batch_size x n samples; a short step (the end of the data) is the project's to cut, and
it cuts to a multiple of `short_step_unit`: whole train batches that every rank splits alike. Anything else leaves a
partial accumulation that the next step completes (every later optimizer step then mixes two rollout steps), or
samples that dynamic batching never trains.
"""

from __future__ import annotations

import math
from typing import List, Sequence

import torch

from openrlhf_ada.algorithms.baselines import group_sizes


def data_parallel_unit(args) -> int:
    """Samples in the smallest batch that every data-parallel rank of every model group can split evenly: whole
    groups of n, and the same number of full rollout micro-batches per rank (upstream hands micro-batches to ranks
    round-robin in chunks; fewer micro-batches than ranks raises "Insufficient batch size", an uneven count makes
    ZeRO-3 ranks wait for each other's collectives)."""
    n = args.rollout.n_samples_per_prompt
    shards = args.ds.ring_attn_size * args.ds.tensor_parallel_size
    ranks = [args.actor.num_nodes * args.actor.num_gpus_per_node // shards]
    if args.algo.kl.init_coef > 0:
        ranks.append(args.ref.num_nodes * args.ref.num_gpus_per_node // shards)
    if getattr(args.critic, "model_name_or_path", None):
        ranks.append(args.critic.num_nodes * args.critic.num_gpus_per_node // shards)
    unit = n
    for dp in ranks:
        per = dp if args.train.dynamic_batch_enable else dp * args.rollout.micro_batch_size
        unit = math.lcm(unit, max(1, per))
    return unit


def short_step_unit(args) -> int:
    """What a short step holds a multiple of in the cluster trainers: whole --train.batch_size train batches that are
    also whole `data_parallel_unit`s. Each rank then holds a multiple of train batch / ranks samples, so its
    micro-batches are whole gradient-accumulation windows (and whole dynamic-batching slices)."""
    return math.lcm(data_parallel_unit(args), max(1, args.train.batch_size))


def usable_samples(group_sizes: Sequence[int], unit: int) -> int:
    """Samples in the longest leading run of whole groups (of any sizes, in order) that holds a multiple of `unit`
    samples; 0 when no run does. The one short-step cut of every strategy (fixed groups of n are one case)."""
    usable = total = 0
    for size in group_sizes:
        total += size
        if total % unit == 0:
            usable = total
    return usable


def group_ids(samples) -> List[int]:
    """The group ids of a run of whole groups, in order (one per group), read as `trained_group_sizes` reads them."""
    ids: List[int] = []
    for e in samples:
        gid = int(e.info["ada_group"].reshape(-1)[0])
        if not ids or ids[-1] != gid:
            ids.append(gid)
    return ids


def trained_group_sizes(samples) -> List[int]:
    """The sizes of a step's groups, in order, read from each sample's group id (`info["ada_group"]`, stamped by the
    samples generator when it builds the step, on every training path)."""
    if not samples:
        return []
    return group_sizes(torch.cat([e.info["ada_group"].reshape(-1) for e in samples]))
