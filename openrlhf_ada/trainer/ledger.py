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
`LedgerError`).

The generator's side (counted where each event happens: the round loop's draw, settle and build, the samples
generator's carry and short-step cut; docs/metrics.md), checked at the end of every training generation call:

    prompts:  drawn + carried_in = trained + skipped + filtered + failed + dropped + cut + left_at_end + carried_out
    samples:  generated + carried_in = trained + released + cut + left_at_end + carried_out

`prompts_dropped` names the prompts `--ada.unresolved drop` settles without a group (replaced by the next prompt);
`prompts_cut` / `samples_cut` the groups a short step's cut removes where the strategy does not carry them (Est,
upstream's generation path): a real loss, named. `prompts_left_at_end` / `samples_left_at_end` name the groups the
run's last step holds back (a short step's rest, upstream's buffer of accepted groups) when no step follows: the run
ends with them generated and never trained. `samples_cancelled` (requests `--ada.cancel` cancelled before they
came back) is logged, not a term: those samples were never generated. And per epoch, once its last prompt is
settled: every prompt the epoch drew has exactly one final outcome, counted with multiplicities by prompt key, and
no prompt was drawn more often than the data holds it (nor, for a whole epoch, less): `epoch_unaccounted`.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, Mapping, Optional, Sequence

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


# -- the generator's side ---------------------------------------------------------------------------------------------

#: The prompt terms, left side first: drawn + carried_in = the rest.
PROMPT_IN = ("drawn", "carried_in")
PROMPT_OUT = ("trained", "skipped", "filtered", "failed", "dropped", "cut", "left_at_end", "carried_out")
#: The sample terms, left side first: generated + carried_in = the rest.
SAMPLE_IN = ("generated", "carried_in")
SAMPLE_OUT = ("trained", "released", "cut", "left_at_end", "carried_out")
SAMPLES_CANCELLED = "ledger/samples_cancelled"
#: The final outcomes of a prompt in its epoch (carried_out is not final: the group is trained in a later step).
OUTCOMES = ("trained", "skipped", "filtered", "failed", "dropped", "cut", "left_at_end")
EPOCH_UNACCOUNTED = "ledger/epoch_prompts_unaccounted"


def prompt_metric(term: str) -> str:
    return f"ledger/prompts_{term}"


def sample_metric(term: str) -> str:
    return f"ledger/samples_{term}"


def _identity(step: int, what: str, counts: Mapping[str, int], left: Sequence[str], right: Sequence[str],
              name) -> Dict[str, float]:
    """One identity, sum(left) == sum(right), over `counts` (a missing term is 0): the terms as metrics, or
    LedgerError naming the step and every term."""
    unknown = set(counts) - set(left) - set(right)
    if unknown:
        raise ValueError(f"unknown {what} ledger terms: {sorted(unknown)}")
    value = {term: int(counts.get(term, 0)) for term in (*left, *right)}
    lhs, rhs = sum(value[t] for t in left), sum(value[t] for t in right)
    if lhs != rhs:
        terms = ", ".join(f"{name(t)} = {value[t]}" for t in (*left, *right))
        raise LedgerError(
            f"step {step}: the {what} ledger does not balance: {' + '.join(left)} = {lhs} but "
            f"{' + '.join(right)} = {rhs} ({terms}): {abs(lhs - rhs)} {what} "
            f"{'unaccounted for' if lhs > rhs else 'counted twice'}. The run stops")
    return {name(t): float(v) for t, v in value.items()}


def check_prompts(step: int, counts: Mapping[str, int]) -> Dict[str, float]:
    """The step's prompt terms as metrics; LedgerError when drawn + carried_in != trained + skipped + filtered +
    failed + dropped + cut + left_at_end + carried_out."""
    return _identity(step, "prompt", counts, PROMPT_IN, PROMPT_OUT, prompt_metric)


def check_generated_samples(step: int, counts: Mapping[str, int]) -> Dict[str, float]:
    """The step's generator-side sample terms as metrics; LedgerError when generated + carried_in != trained +
    released + cut + left_at_end + carried_out."""
    return _identity(step, "sample", counts, SAMPLE_IN, SAMPLE_OUT, sample_metric)


def epoch_unaccounted(drawn: Counter, settled: Counter, dataset: Optional[Counter] = None,
                      whole: bool = False) -> int:
    """Prompts of an epoch without exactly one final outcome, counted with multiplicities by prompt key: drawn but
    not settled or settled twice (|drawn - settled| per key), drawn more often than the data holds them (a
    restarted loader), and, for a whole epoch (`whole`: the loader ran out and the epoch was not resumed from a
    checkpoint mid-way), held by the data but never drawn. `dataset`: the data's prompt counts, None when unknown."""
    return sum(_key_gap(k, drawn, settled, dataset, whole) for k in set(drawn) | set(settled) | set(dataset or ()))


def _key_gap(key, drawn: Counter, settled: Counter, dataset: Optional[Counter], whole: bool) -> int:
    """One prompt key's share of `epoch_unaccounted`."""
    gap = abs(drawn[key] - settled[key])
    if dataset is not None:
        gap += max(0, drawn[key] - dataset[key]) + (max(0, dataset[key] - drawn[key]) if whole else 0)
    return gap


def describe_epoch(metrics: Mapping[str, float]) -> str:
    """One line for an epoch's coverage metrics (`check_epoch`'s): "ledger: epoch 2 covered: 12 prompts drawn, 12
    trained, 0 skipped, ..., 0 unaccounted"."""
    outcomes = ", ".join(f"{int(metrics[f'ledger/epoch_prompts_{o}'])} {o}" for o in OUTCOMES)
    return (f"ledger: epoch {int(metrics['ledger/epoch'])} covered: {int(metrics['ledger/epoch_prompts_drawn'])} "
            f"prompts drawn, {outcomes}, {int(metrics[EPOCH_UNACCOUNTED])} unaccounted")


def check_epoch(epoch: int, drawn: Counter, outcomes: Mapping[str, Counter], dataset: Optional[Counter] = None,
                whole: bool = False) -> Dict[str, float]:
    """An epoch's coverage once its last prompt is settled: its counts as metrics (`ledger/epoch`,
    `ledger/epoch_prompts_drawn`, one `ledger/epoch_prompts_<outcome>` per outcome, `ledger/epoch_prompts_unaccounted`,
    0), or LedgerError naming the epoch, every count and some of the prompts concerned."""
    unknown = set(outcomes) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown outcomes: {sorted(unknown)}")
    settled = Counter()
    for counter in outcomes.values():
        settled.update(counter)
    missing = epoch_unaccounted(drawn, settled, dataset, whole)
    metrics = {"ledger/epoch": float(epoch), "ledger/epoch_prompts_drawn": float(sum(drawn.values()))}
    metrics.update({f"ledger/epoch_prompts_{o}": float(sum(outcomes.get(o, Counter()).values())) for o in OUTCOMES})
    metrics[EPOCH_UNACCOUNTED] = float(missing)
    if missing:
        terms = ", ".join(f"{k} = {int(v)}" for k, v in metrics.items())
        odd = sorted(k for k in set(drawn) | set(settled) | set(dataset or ())
                     if _key_gap(k, drawn, settled, dataset, whole))
        detail = "; ".join(f"{k[:12]}: data {dataset[k] if dataset is not None else '?'}, drawn {drawn[k]}, "
                           f"settled {settled[k]}" for k in odd[:5])
        raise LedgerError(
            f"epoch {epoch}: the prompt coverage does not balance: {missing} prompt(s) of the epoch have no single "
            f"outcome ({terms}; by prompt key: {detail}). The run stops")
    return metrics
