"""The engine actor's `generate_stream` (--ada.cancel) on asyncio, without Ray or vLLM: which samples each message
carries, the cancel and its token count, and a request that raises.

The actor is `_GuardedRolloutRayActor` itself with a scripted executor and a stand-in for vLLM's engine: request k
produces 3 tokens, waits until the test opens its gate, then produces 5 more and returns `{"k": k}` with the
8 token ids 10 k, ..., 10 k + 7 and their log-probs -k - t / 8 (a gate set to
fail makes it raise instead). Requests whose gates open together finish in the same event-loop turn, as samples of
one vLLM step do. Expected messages are derived by hand in each test.
"""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor

GROUP = "run:0:1:1"


class Gate:
    def __init__(self):
        self.event, self.fail = asyncio.Event(), False

    def open(self, fail=False):
        self.fail = fail
        self.event.set()


class FakeLLM:
    """vLLM's AsyncLLMEngine as the executor sees it: outputs of 3 tokens, then (after the gate) of 8."""

    async def generate(self, k, gate):
        yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=[0] * 3)])
        await gate.event.wait()
        if gate.fail:
            raise RuntimeError(f"request {k} failed")
        yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=[0] * 8)])


class ScriptedExecutor:
    """The k-th request of the stream runs on the engine behind gate k."""

    def __init__(self, gates):
        self.gates, self.calls = gates, itertools.count()

    async def execute(self, *, llm_engine, **_):
        k = next(self.calls)
        async for _ in llm_engine.llm.generate(k, self.gates[k]):
            pass
        return {"k": k, "observation_tokens": [10 * k + t for t in range(8)],
                "rollout_log_probs": [-k - t / 8 for t in range(8)]}


def make_actor(gates):
    actor = object.__new__(_GuardedRolloutRayActor)  # its __init__ starts vLLM; generate_stream needs only these
    actor.executor, actor.llm, actor._streams = ScriptedExecutor(gates), FakeLLM(), {}
    return actor


def start(actor, requests=4):
    return actor.generate_stream(GROUP, "p", "l", None, 64, None, list(range(requests)))


def samples(message):
    return [(s["index"], s["response"]["k"]) for s in message["samples"]]


def test_samples_that_finish_together_are_one_message_and_a_cancel_counts_the_rest():
    """Requests 0 and 1 finish together: one message with both (two messages before). Then the stream is cancelled
    while 2 and 3 wait at their gates with 3 tokens each: the last message has no sample, 2 cancelled, 6 tokens."""

    async def run():
        gates = [Gate() for _ in range(4)]
        actor = make_actor(gates)
        stream = start(actor)
        gates[0].open()
        gates[1].open()
        first = await stream.__anext__()
        cancelled = await actor.cancel_stream(GROUP)
        last = await stream.__anext__()
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        return first, cancelled, last, actor._streams

    first, cancelled, last, streams = asyncio.run(run())
    assert list(first) == ["samples"] and samples(first) == [(0, 0), (1, 1)]
    for sample in first["samples"]:  # handed back compact: int32 ids and float32 log-probs of the same values
        k, response = sample["index"], sample["response"]
        assert response["observation_tokens"].dtype == np.int32 and response["rollout_log_probs"].dtype == np.float32
        assert response["observation_tokens"].tolist() == [10 * k + t for t in range(8)]
        assert response["rollout_log_probs"].tolist() == [-k - t / 8 for t in range(8)]  # eighths: exact in float32
    assert cancelled == 2
    assert last == {"samples": [], "end": True, "cancelled": 2, "cancelled_tokens": 6}
    assert streams == {}  # the group is forgotten once its stream is over


def test_a_sample_is_handed_back_as_soon_as_it_finishes_and_the_last_batch_closes_the_round():
    """Gates opened 2, then 0, then 1 and 3 together, each time after the previous message was taken: three
    messages, [2], [0], then [1, 3] in request order carrying the end of the round (nothing cancelled)."""

    async def run():
        gates = [Gate() for _ in range(4)]
        stream = start(make_actor(gates))
        out = []
        for opened in ([2], [0], [1, 3]):
            for k in opened:
                gates[k].open()
            out.append(await stream.__anext__())
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        return out

    out = asyncio.run(run())
    assert [samples(m) for m in out] == [[(2, 2)], [(0, 0)], [(1, 1), (3, 3)]]
    assert ["end" in m for m in out] == [False, False, True]
    assert (out[-1]["cancelled"], out[-1]["cancelled_tokens"]) == (0, 0)


def test_a_request_that_raises_ends_the_stream_after_the_samples_before_it():
    """0, 1 (raising) and 2 finish together: the message hands back 0 only (in request order the failure comes next),
    then the stream raises; request 3, still generating, is cancelled and the group forgotten."""

    async def run():
        gates = [Gate() for _ in range(4)]
        actor = make_actor(gates)
        stream = start(actor)
        gates[0].open()
        gates[1].open(fail=True)
        gates[2].open()
        first = await stream.__anext__()
        tasks = {index: task for task, (index, _) in actor._streams[GROUP].items()}
        with pytest.raises(RuntimeError, match="request 1 failed"):
            await stream.__anext__()
        await asyncio.sleep(0)  # the cancel of request 3 takes effect
        return first, actor, tasks

    first, actor, tasks = asyncio.run(run())
    assert samples(first) == [(0, 0)] and "end" not in first
    assert tasks[3].cancelled() and not tasks[2].cancelled()
    assert actor._streams == {}
