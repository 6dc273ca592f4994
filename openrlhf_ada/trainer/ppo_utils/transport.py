"""How a step's rounds reach the engines and come back: a transport the generator gives each step.

A step (round_loop.py) decides which prompts get which next round; the transport carries them and feeds what comes
back into each prompt's pool. Two transports, chosen once from the flags:

- `RoundTransport`: each round as one call of upstream's `_dispatch_prompts_to_vllm` per round size (its
  least-loaded-engine balancing), the whole round back at once (`PromptPool.add_round`);
- `StreamTransport` (`--ada.cancel`): each round as one Ray streaming call, `generate_stream` of the project's engine
  actor (openrlhf_ada/trainer/ray/vllm_engine.py), to the engine upstream's least-loaded choice picks. The samples
  come back as they are generated and scored, each message of the stream with every sample finished since the
  previous one (one `ray.get` per message, not per sample), and each sample goes into the pool at once
  (`PromptPool.add_sample`). When the pool says the prompt is resolved, `cancel_stream` aborts the round's outstanding
  requests; the stream's last message says how many were cancelled and the tokens they had generated, which close the
  round (`end_round`). A lost engine's requests that had not come back run again on another one.

Both give the step the same four things: `round_size` (the requests a dispatch sends for a prompt), `send` (the
calls, as (reference, prompt) pairs to wait on), `message_ref` (what to `ray.get` for a reference's next message),
`feed` (a message into its pool: is the round over?), plus `runs_again` after a lost engine and `close` at the end of
a step. The step keeps the waiting (`ray.wait`, `ray.get`) and everything the pools decide.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional

from openrlhf_ada.trainer.ppo_utils.sample_record import penalised


class RoundTransport:
    """Each round as one upstream call per round size; the whole round comes back in one message."""

    def __init__(self, generator):
        self.gen = generator

    def round_size(self, item) -> int:
        """Requests of the prompt's next round."""
        return item.pool.next_round_size()

    def send(self, items: list, size: int, generate_kwargs: dict) -> list:
        """One upstream call for every prompt's round of `size` requests; returns [(reference, prompt)]."""
        refs = self.gen._dispatch_prompts_to_vllm(
            [it.prompt for it in items],
            [it.label for it in items],
            images=[it.image for it in items],
            n_samples_per_prompt=size,
            **generate_kwargs,
        )
        return list(zip(refs, items))

    def message_ref(self, ref):
        return ref

    def feed(self, item, message, records_of: Callable) -> bool:
        """A whole round, in request order, into the prompt's pool; the round is over."""
        records = records_of(message)
        item.pool.add_round(
            scores=[r.score for r in records],
            rewards=penalised(records, self.gen.args),
            items=records,
            lengths=[r.length for r in records],
        )
        return True

    def runs_again(self, item) -> bool:
        """After a lost engine: the whole round runs again elsewhere."""
        return True

    def close(self, items) -> None:
        """Nothing runs on after a step: each round was one call."""


@dataclass
class OpenStream:
    """A prompt's open round as a stream: the engine it runs on, its group id (unique in the run), its requests not
    back yet, and whether its cancel was sent."""

    engine: object = None
    group: Optional[str] = None
    outstanding: set = field(default_factory=set)
    cancel_sent: bool = False
    streams: int = 0  # streams started for this prompt (group ids stay unique when a round is run again)


class StreamTransport:
    """`--ada.cancel`: one stream per round, each sample into the pool as it comes, the rest cancelled once the prompt
    is resolved (module docstring)."""

    def __init__(self, generator):
        self.gen = generator
        self.run = uuid.uuid4().hex[:12]  # keeps the streams' group ids unique across steps
        self.open: Dict[int, OpenStream] = {}  # uid -> the prompt's open round

    def _stream(self, item) -> OpenStream:
        return self.open.setdefault(item.uid, OpenStream())

    def round_size(self, item) -> int:
        """A new round's requests, or (a round run again after a lost engine) its requests not back yet."""
        stream = self._stream(item)
        if not stream.outstanding:
            stream.outstanding = set(range(item.pool.start_round()))
        return len(stream.outstanding)

    def send(self, items: list, size: int, generate_kwargs: dict) -> list:
        return dispatch_streams(self.gen, items, [self._stream(it) for it in items], size, generate_kwargs, self.run)

    def message_ref(self, ref):
        return next(ref)

    def feed(self, item, message: dict, records_of: Callable) -> bool:
        """One message of a round's stream: every sample the engine finished since its previous message, each
        entering the pool on its own as if it had come alone (the exit rule and the failed share are checked after
        each), and in the stream's last message the end of the round. Returns whether the round is over."""
        last = "end" in message
        for sample in message["samples"]:
            self._add_sample(item, sample["index"], sample["response"], records_of, more_to_come=not last)
        if not last:
            return False
        self._stream(item).outstanding.clear()  # every request came back or was cancelled
        item.pool.end_round(cancelled_tokens=int(message["cancelled_tokens"]))
        return True

    def _add_sample(self, item, index: int, response: dict, records_of: Callable, more_to_come: bool) -> None:
        """One streamed sample into its prompt's pool. The first sample that resolves the prompt cancels the round's
        outstanding requests at once, unless its stream has already ended (nothing is left to cancel then)."""
        stream = self._stream(item)
        stream.outstanding.discard(index)
        (r,) = records_of([response])
        stop = item.pool.add_sample(index, r.score, penalised([r], self.gen.args)[0], item=r, length=r.length)
        if stop and more_to_come and not stream.cancel_sent:
            stream.engine.cancel_stream.remote(stream.group)
            stream.cancel_sent = True

    def runs_again(self, item) -> bool:
        """After a lost engine: the requests that had not come back run again, unless the prompt had stopped (the
        rest was being cancelled) or every request was back; then the round is over (what the lost engine had
        generated for it is unknown: not counted)."""
        stream = self._stream(item)
        if stream.outstanding and not item.pool.should_cancel:
            return True
        stream.outstanding.clear()
        item.pool.end_round()
        return False

    def close(self, items) -> None:
        """A step that ends (or fails) leaves nothing generating: cancel the streams still running."""
        for item in items:
            stream = self._stream(item)
            try:
                stream.engine.cancel_stream.remote(stream.group)
            except Exception:  # noqa: BLE001 (a dead engine generates nothing anyway)
                pass


# -- one stream per round, through upstream's own dispatch -------------------------------------------------------------
class _StreamStarter:
    """Stands in for one engine's `generate_responses` inside upstream's `_dispatch_prompts_to_vllm`: the call upstream
    makes for a prompt starts that prompt's stream (`generate_stream`) on the engine instead. `calls` is shared by
    every engine's starter and yields the (prompt, open round) pairs in the order upstream dispatches them."""

    def __init__(self, engine, calls: Iterator, run: str):
        self.engine, self.calls, self.run = engine, calls, run

    def remote(self, *, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None):
        item, stream = next(self.calls)
        assert prompt == item.prompt, "upstream's dispatch no longer follows the order of the prompts"
        stream.streams += 1
        stream.engine, stream.cancel_sent = self.engine, False
        stream.group = f"{self.run}:{item.uid}:{item.pool.rounds}:{stream.streams}"
        return self.engine.generate_stream.remote(stream.group, prompt, label, sampling_params, max_length,
                                                  hf_tokenizer, sorted(stream.outstanding), images)


class _StreamingEngine:
    """An engine as upstream's dispatch sees it: its load (`get_num_unfinished_requests`) and a `generate_responses`
    that starts a stream."""

    def __init__(self, engine, calls: Iterator, run: str):
        self.actor = engine  # what tokenizer_shipping.is_remote_engine looks at
        self.get_num_unfinished_requests = engine.get_num_unfinished_requests
        self.generate_responses = _StreamStarter(engine, calls, run)


def dispatch_streams(generator, items: list, streams: List[OpenStream], size: int, generate_kwargs: dict,
                     run: str) -> list:
    """Start one `generate_stream` per prompt for the requests of its open round that are not back yet (`size`: the
    round size, for upstream's load estimate). Engines, their order and the sampling parameters come from upstream's
    `_dispatch_prompts_to_vllm` itself, run with each engine behind a `_StreamingEngine`. `run` keeps the streams'
    group ids unique across steps. Returns [(stream, item)]."""
    engines, calls = generator.vllm_engines, iter(list(zip(items, streams)))
    generator.vllm_engines = [_StreamingEngine(e, calls, run) for e in engines]
    try:
        refs = generator._dispatch_prompts_to_vllm([it.prompt for it in items], [it.label for it in items],
                                                   images=[it.image for it in items], n_samples_per_prompt=size,
                                                   **generate_kwargs)
    finally:
        generator.vllm_engines = engines
    return list(zip(refs, items))
