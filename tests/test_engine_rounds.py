"""The engine actors' `generate_rounds` (several prompts' rounds in one call) on asyncio, without Ray or vLLM: which
rounds each message carries and when, a request that raises, and a call that is dropped.

The actor is `_GuardedRolloutRayActor` itself (and the transformers actor's method, the same function) with a
scripted executor: the request for sample j of prompt "p<i>" waits until the test opens gate (i, j), then returns
`{"i": i, "j": j}` with the token ids 10 i + j, 1 and a log-prob -j / 8 (a gate set to fail makes it raise instead).
Requests whose gates open together finish in the same event-loop turn, as samples of one vLLM step do. Expected
messages are derived by hand in each test.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import numpy as np
import pytest

from openrlhf_ada.trainer.ray.hf_engine import _HFRolloutActor
from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor


class Gate:
    def __init__(self):
        self.event, self.fail = asyncio.Event(), False

    def open(self, fail=False):
        self.fail = fail
        self.event.set()


class ScriptedExecutor:
    """Sample j of prompt "p<i>" (j counted per prompt, in the order the requests start) waits on gate (i, j)."""

    def __init__(self, gates):
        self.gates, self.started, self.order, self.cancelled = gates, {}, [], []

    async def execute(self, *, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images):
        i = int(prompt[1:])
        j = self.started[i] = self.started.get(i, -1) + 1
        self.order.append((i, j))
        gate = self.gates[i, j]
        try:
            await gate.event.wait()
        except asyncio.CancelledError:
            self.cancelled.append((i, j))
            raise
        if gate.fail:
            raise RuntimeError(f"request {i}/{j} failed")
        return {"i": i, "j": j, "label": label, "observation_tokens": [10 * i + j, 1],
                "rollout_log_probs": [0.0, -j / 8]}


def make_actor(gates, cls=_GuardedRolloutRayActor):
    actor = object.__new__(cls)  # its __init__ starts an engine; generate_rounds needs only the executor
    actor.executor = ScriptedExecutor(gates)
    return actor


def rounds_of(counts):
    """The rounds as the trainer sends them: (key, prompt, label, samples, images), key "k<i>"."""
    return [(f"k{i}", f"p{i}", f"l{i}", n, None) for i, n in enumerate(counts)]


def gates_for(counts):
    return {(i, j): Gate() for i, n in enumerate(counts) for j in range(n)}


def summary(message):
    """A message as (key, [(i, j), ...]) per round."""
    return [(key, [(r["i"], r["j"]) for r in responses]) for key, responses in message["rounds"]]


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize("cls", [_GuardedRolloutRayActor, _HFRolloutActor], ids=["vllm", "hf"])
def test_each_round_comes_back_as_soon_as_its_own_samples_are_back(cls):
    """Rounds of 2, 3 and 2 samples. Prompt 1's samples finish first, but its round is not back until its third one;
    prompt 2's round finishes meanwhile and comes back alone, without waiting for prompt 0 or 1. Then prompts 0 and 1
    finish in the same turn: one message with both, in the order sent. The requests start in the order sent, round
    by round."""

    async def run():
        counts = (2, 3, 2)
        gates = gates_for(counts)
        actor = make_actor(gates, cls)
        call = actor.generate_rounds(rounds_of(counts), None, 64, None)
        first = asyncio.ensure_future(call.__anext__())
        await settle()
        assert actor.executor.order == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
        gates[1, 0].open(), gates[1, 1].open()
        await settle()
        assert not first.done()  # prompt 1 still waits for its third sample
        gates[2, 1].open(), gates[2, 0].open()
        message = await first
        assert summary(message) == [("k2", [(2, 0), (2, 1)])]  # request order, whatever order they finished in
        for key in ((0, 0), (0, 1), (1, 2)):
            gates[key].open()
        message = await call.__anext__()
        assert summary(message) == [("k0", [(0, 0), (0, 1)]), ("k1", [(1, 0), (1, 1), (1, 2)])]
        with pytest.raises(StopAsyncIteration):
            await call.__anext__()

    asyncio.run(run())


def test_responses_come_back_compact_and_a_round_of_no_samples_at_once():
    """Each response's token ids as int32 and its log-probs as float32 arrays (responses.py), the label passed on; a
    round of 0 samples comes back in the first message, without waiting for any request."""

    async def run():
        counts = (0, 1)
        gates = gates_for(counts)
        call = make_actor(gates).generate_rounds(rounds_of(counts), None, 64, None)
        message = await call.__anext__()
        assert summary(message) == [("k0", [])]
        gates[1, 0].open()
        (key, (response,)), = (await call.__anext__())["rounds"]
        assert key == "k1" and response["label"] == "l1"
        assert response["observation_tokens"].dtype == np.int32 and response["observation_tokens"].tolist() == [10, 1]
        assert response["rollout_log_probs"].dtype == np.float32 and response["rollout_log_probs"].tolist() == [0, 0]

    asyncio.run(run())


def test_a_request_that_raises_ends_the_call_after_the_rounds_finished_before_it():
    """Prompt 0's round finishes in the same turn as prompt 1's second request fails: prompt 0's round comes back,
    then the call raises the request's error, and prompt 2's request, still waiting, is cancelled."""

    async def run():
        counts = (1, 2, 1)
        gates = gates_for(counts)
        actor = make_actor(gates)
        call = actor.generate_rounds(rounds_of(counts), None, 64, None)
        first = asyncio.ensure_future(call.__anext__())
        await settle()
        gates[0, 0].open(), gates[1, 1].open(fail=True)
        assert summary(await first) == [("k0", [(0, 0)])]
        with pytest.raises(RuntimeError, match="request 1/1 failed"):
            await call.__anext__()
        await settle()
        assert sorted(actor.executor.cancelled) == [(1, 0), (2, 0)]

    asyncio.run(run())


def test_a_dropped_call_leaves_nothing_generating():
    """The trainer drops the call after its first message: the requests still waiting are cancelled."""

    async def run():
        counts = (1, 2)
        gates = gates_for(counts)
        actor = make_actor(gates)
        call = actor.generate_rounds(rounds_of(counts), None, 64, None)
        first = asyncio.ensure_future(call.__anext__())
        await settle()
        gates[0, 0].open()
        assert summary(await first) == [("k0", [(0, 0)])]
        await call.aclose()
        await settle()
        assert sorted(actor.executor.cancelled) == [(1, 0), (1, 1)]

    asyncio.run(run())


class Response(dict):
    """A response the test can hold a weak reference to (a plain dict cannot be)."""


def test_a_round_sent_back_is_no_longer_held_by_the_call():
    """Rounds of 2 and 1 samples; prompt 0's round finishes and is sent back while prompt 1's request still waits.
    Once the trainer has the message (and drops it), nothing in the running call holds prompt 0's responses: the
    call keeps only the rounds not yet sent back, not every response until its last round."""

    async def run():
        counts = (2, 1)
        gates = gates_for(counts)
        actor = make_actor(gates)
        made = {}
        execute = actor.executor.execute

        async def execute_weakly(**kwargs):
            response = Response(await execute(**kwargs))
            made[response["i"], response["j"]] = weakref.ref(response)
            return response

        actor.executor.execute = execute_weakly
        call = actor.generate_rounds(rounds_of(counts), None, 64, None)
        first = asyncio.ensure_future(call.__anext__())
        await settle()
        gates[0, 0].open(), gates[0, 1].open()
        assert summary(await first) == [("k0", [(0, 0), (0, 1)])]
        del first
        gc.collect()
        assert made[0, 0]() is None and made[0, 1]() is None  # let go while the call goes on
        gates[1, 0].open()
        assert summary(await call.__anext__()) == [("k1", [(1, 0)])]
        with pytest.raises(StopAsyncIteration):
            await call.__anext__()

    asyncio.run(run())
