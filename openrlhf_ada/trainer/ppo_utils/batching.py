"""How many samples every data-parallel rank can split evenly."""

from __future__ import annotations

import math


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
