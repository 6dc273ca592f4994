"""Reinforce-Ada and Reinforce-Ada-Est run on given reward streams, for tests and benchmarks: `simulate` drives the
trainers' `PromptPool` (exit rule, rounds, group selection, cancel, the per-prompt history) over fixed sequences of
rewards, `simulate_est` one Est step (the estimator, the allocation rule, the history's counts). Nothing in the
trainers calls it. Pure python/torch: no Ray, no vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from openrlhf_ada.algorithms.estimate import EstConfig, pass_rate_estimate
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory
from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq, make_rng


@dataclass(frozen=True)
class SimResult:
    """What `simulate` reports for one prompt. `kept` indexes the prompt's reward stream (generation order)."""

    samples: int
    rounds: int
    resolved: bool
    kept: List[int]
    pool_mean: float
    pool_std: float
    outcome: str
    num_pos: int
    num_neg: int
    round_resolved: Optional[int]
    # with lengths, cancel or history (defaults otherwise):
    tokens: int = 0  # generated tokens, cancelled requests' partial tokens included
    cancelled: int = 0  # requests cancelled
    discarded: int = 0  # samples that came back but did not enter the pool
    finished: Tuple[int, ...] = ()  # stream indices of the samples that came back, in arrival order
    first_round: Optional[int] = None  # size of the first round drawn (None: skipped)
    skipped: bool = False  # skipped by the history (nothing drawn)


def simulate(
    reward_streams: Sequence[Sequence[float]],
    *,
    n: int,
    round_size: int,
    max_rounds: int,
    mode: str,
    positive_threshold: float = Seq.positive_threshold,
    first_round_size: Optional[int] = None,
    unresolved: str = Seq.unresolved,
    selection: str = Seq.selection,
    seed: int = 0,
    length_streams: Optional[Sequence[Sequence[int]]] = None,
    cancel: bool = Seq.cancel,
    cancel_order: str = Seq.cancel_order,
    history: Optional[PromptHistory] = None,
    prompt_keys: Optional[Sequence[str]] = None,
    epoch: int = 0,
) -> List[SimResult]:
    """Run the per-prompt procedure on given reward sequences (stream p = the rewards prompt p would produce, in
    generation order; each round takes the next round-size values; rewards double as scores). Drives PromptPool.
    A stream too short for the rounds the prompt needs is a ValueError.

    `length_streams` (same shape): each sample's response length in tokens, counted in `tokens`.
    `cancel` (needs lengths): the round's requests all start together and decode at the same token rate, so request
    j finishes at time L_j (ties in request order); samples are fed to the pool in that order, and at the sample that
    resolves the prompt every outstanding request is cancelled, having generated as many tokens as that sample
    (verifier time is not modelled). Cancelled requests still consume their stream values, so every setting reads
    the same outcomes. `history`: a PromptHistory for `epoch`, keyed by `prompt_keys` (default: the stream
    position); each prompt is skipped or gets its first round from it, and its outcome is recorded into it (the
    history is updated in place). Its config gives the target / skip / window."""
    if cancel and length_streams is None:
        raise ValueError("simulate(cancel=True) needs length_streams: samples arrive in the order of their lengths")
    hist = history.config if history is not None else HistoryConfig()
    config = Seq(
        n=n,
        mode=mode,
        round_size=round_size,
        first_round_size=first_round_size,
        max_rounds=max_rounds,
        positive_threshold=positive_threshold,
        unresolved=unresolved,
        selection=selection,
        seed=seed,
        cancel=bool(cancel),
        cancel_order=cancel_order,
        history=history is not None,
        history_target=hist.target,
        history_skip=hist.skip,
        history_window=hist.window,
    )
    if prompt_keys is not None and len(prompt_keys) != len(reward_streams):
        raise ValueError(f"prompt_keys has {len(prompt_keys)} keys for {len(reward_streams)} reward streams")
    results = []
    for p, stream in enumerate(reward_streams):
        key = str(prompt_keys[p]) if prompt_keys is not None else str(p)
        first = None
        if history is not None:
            plan = history.plan(key, epoch, n=n, cap=config.max_samples, seed=seed)
            if plan.skip:
                results.append(SimResult(0, 0, False, [], 0.0, 1.0, "skipped", 0, 0, None, skipped=True))
                continue
            first = plan.first_round
        lens = length_streams[p] if length_streams is not None else None
        pool = PromptPool(config, rng=make_rng(seed, p), first_round=first)
        pos, finished, first_drawn = 0, [], None
        while not pool.done:
            size = pool.next_round_size()
            first_drawn = size if first_drawn is None else first_drawn
            chunk = list(stream[pos : pos + size])
            if len(chunk) < size or (lens is not None and len(lens) < pos + size):
                raise ValueError(
                    f"reward_streams[{p}] has {len(stream)} rewards"
                    + (f" and length_streams[{p}] {len(lens)} lengths" if lens is not None else "")
                    + f"; round {pool.rounds + 1} needs {pos + size}"
                )
            if cancel:
                finished += _stream_round(pool, chunk, list(lens[pos : pos + size]), pos)
            else:
                pool.add_round(chunk, chunk, items=range(pos, pos + size),
                               lengths=None if lens is None else lens[pos : pos + size])
                finished += range(pos, pos + size)
            pos += size
        if history is not None:
            history.record(key, epoch, pool.num_pos, pool.num_neg)
        results.append(
            SimResult(
                samples=pool.samples,
                rounds=pool.rounds,
                resolved=pool.resolved,
                kept=[pool.items[i] for i in pool.select()],
                pool_mean=pool.mean,
                pool_std=pool.std,
                outcome=pool.outcome,
                num_pos=pool.num_pos,
                num_neg=pool.num_neg,
                round_resolved=pool.round_resolved,
                tokens=pool.tokens,
                cancelled=pool.cancelled,
                discarded=pool.discarded,
                finished=tuple(finished),
                first_round=first_drawn,
            )
        )
    return results


def simulate_est(
    reward_streams: Sequence[Sequence[float]],
    *,
    config: EstConfig,
    history: PromptHistory,
    prompt_keys: Sequence[str],
    epoch: int = 0,
    positive_threshold: float = Seq.positive_threshold,
    length_streams: Optional[Sequence[Sequence[int]]] = None,
) -> List[SimResult]:
    """One Reinforce-Ada-Est step over the given prompts (stream p = the rewards prompt p would produce; rewards
    double as scores): p_hat from the history's Ada-EMA counts (unseen: the prior), the counts allocated for a step of
    config.budget x prompts (the config's allocation rule), each prompt's first N_x stream values all kept, and each outcome
    recorded into the history for `epoch` (updated in place; its config must have `ema` on). A stream shorter than
    its count is a ValueError."""
    if not history.config.ema:
        raise ValueError("simulate_est needs a PromptHistory whose config has ema=True (the estimator's counts)")
    if len(prompt_keys) != len(reward_streams):
        raise ValueError(f"prompt_keys has {len(prompt_keys)} keys for {len(reward_streams)} reward streams")
    if not reward_streams:
        return []
    counts = [history.ema_counts(str(k)) for k in prompt_keys]
    p_hat = pass_rate_estimate([c[0] for c in counts], [c[1] for c in counts], config.alpha, config.beta)
    sizes = config.allocate(p_hat, len(reward_streams))
    results = []
    for p, (stream, size) in enumerate(zip(reward_streams, sizes)):
        chunk = [float(x) for x in stream[:size]]
        lens = [int(x) for x in length_streams[p][:size]] if length_streams is not None else [0] * size
        if len(chunk) < size or len(lens) < size:
            raise ValueError(f"reward_streams[{p}] has {len(stream)} rewards; its count is {size}")
        num_pos = sum(x > positive_threshold for x in chunk)
        history.record(str(prompt_keys[p]), epoch, num_pos, size - num_pos)
        mean = sum(chunk) / size
        std = math.sqrt(max(sum((x - mean) ** 2 for x in chunk) / (size - 1), 0.0)) if size > 1 else 1.0
        results.append(SimResult(samples=size, rounds=1, resolved=0 < num_pos < size, kept=list(range(size)),
                                 pool_mean=mean, pool_std=std, outcome="kept", num_pos=num_pos,
                                 num_neg=size - num_pos, round_resolved=None, tokens=sum(lens),
                                 finished=tuple(range(size)), first_round=size))
    return results


def _stream_round(pool: PromptPool, chunk: List[float], lens: List[int], offset: int) -> List[int]:
    """One round under the simulator's timing model: all requests start together at the same token rate, request
    j finishes at time lens[j] (ties in request order). Feeds the pool in finishing order until it says cancel;
    each outstanding request has then generated as many tokens as the sample that stopped the prompt. Returns the
    stream indices that came back, in arrival order."""
    size = pool.start_round()
    order = sorted(range(size), key=lambda j: (int(lens[j]), j))
    for rank, j in enumerate(order):
        if pool.add_sample(j, chunk[j], chunk[j], item=offset + j, length=int(lens[j])):
            pool.end_round(cancelled_tokens=int(lens[j]) * (size - rank - 1))
            return [offset + i for i in order[: rank + 1]]
    pool.end_round()
    return [offset + i for i in order]
