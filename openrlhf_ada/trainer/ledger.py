"""The step ledger: what became of a step's samples, as named counts, and the identities between them, checked every
step right after the update (before the step's checkpoint and metrics are written).

Why: a sample can be lost on its way from the generator to the actor ranks' optimizer without any error: upstream's
`balance_experiences` (with --train.dynamic_batch_enable) gives ranks unequal shares when a step's sample count is
not a multiple of the ranks, its replay buffer then trains whole --train.batch_size / ranks slices of each rank's
share only (the slices every rank can fill), and its DataLoader drops a partial last micro-batch. The project cuts
short steps so that none of this happens (trainer/ppo_utils/batching.py); the ledger checks that it did, every step,
and stops the run where it did not.

The terms (their metric names are logged every step, docs/metrics.md):

- `ledger/samples_trained`: the samples the generator handed to the trainer for the step (what `generate_samples`
  returned, after the project's short-step cut); in train_local, the samples of the experiences the step hands its
  update (the same samples, re-batched by the experience maker).
- `ledger/samples_trained_by_ranks`: the samples the actor ranks updated on, summed over the data-parallel ranks:
  each rank counts the rows of the micro-batches its `training_step` trained (after dynamic batching, packing and
  the replay buffer's split) in each epoch of the step, and its term is the smallest of those epoch counts, so that
  a sample is counted once per step with --train.max_epochs > 1 and a sample some epoch left out is missing.

The identity: samples_trained == samples_trained_by_ranks. `check_samples` is pure (counts in, metrics out, or
`LedgerError`); later terms of the generator's side (prompts drawn, trained, skipped; samples generated, released,
cancelled) and their identities belong here too.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence

SAMPLES_TRAINED = "ledger/samples_trained"
SAMPLES_TRAINED_BY_RANKS = "ledger/samples_trained_by_ranks"
#: The per-rank counts the policy actor returns with its status (every rank returns all of them); the trainer takes
#: them out before the status is logged.
RANK_COUNTS = "_ledger_samples_by_rank"


class LedgerError(RuntimeError):
    """A step's ledger does not balance: the run stops before the step's checkpoint and metrics are written."""


def count_samples(batches: Iterable) -> int:
    """Samples in a list of Experiences (one row of `sequences` per sample)."""
    return sum(len(batch.sequences) for batch in batches)


def rank_term(epoch_counts: Sequence[int]) -> int:
    """A rank's samples_trained_by_ranks term from the samples it trained in each epoch of the step: the smallest
    (0 when it trained no micro-batch at all)."""
    return min(epoch_counts) if epoch_counts else 0


def check_samples(step: int, samples_trained: int, samples_trained_by_ranks: int,
                  per_rank: Optional[Sequence[int]] = None) -> Dict[str, float]:
    """The step's two sample terms as metrics; raises LedgerError naming the step, both terms (and the per-rank
    counts, where given) when they differ."""
    if per_rank is not None and sum(per_rank) != samples_trained_by_ranks:
        raise ValueError(f"per-rank counts {list(per_rank)} do not sum to {samples_trained_by_ranks}")
    if samples_trained != samples_trained_by_ranks:
        ranks = f" (per rank: {', '.join(str(c) for c in per_rank)})" if per_rank is not None else ""
        gap = samples_trained - samples_trained_by_ranks
        what = f"{gap} sample(s) handed to the trainer were not trained on" if gap > 0 else \
            f"the ranks trained {-gap} sample(s) more than the trainer was handed"
        raise LedgerError(
            f"step {step}: the sample ledger does not balance: {SAMPLES_TRAINED} = {samples_trained} (the samples "
            f"the generator handed to the trainer) but {SAMPLES_TRAINED_BY_RANKS} = {samples_trained_by_ranks} (the "
            f"samples the actor ranks updated on){ranks}: {what}. The run stops before the step's checkpoint and "
            f"metrics are written")
    return {SAMPLES_TRAINED: float(samples_trained), SAMPLES_TRAINED_BY_RANKS: float(samples_trained_by_ranks)}
