"""How a step's rounds reach the engines and come back: a transport the generator gives each step.

A step (round_loop.py) decides which prompts get which next round; the transport carries them and feeds what comes
back into each prompt's pool. Both let upstream's `_dispatch_prompts_to_vllm` choose each prompt's engine (its
least-loaded-engine balancing, run with each engine behind a `_RecordingEngine` that notes the calls upstream makes
instead of making them), then send them their own way. Two transports, chosen once from the flags:

- `RoundTransport`: the rounds one dispatch gives an engine as ONE call, `generate_rounds` of the project's engine
  actors (trainer/ray/rounds_call.py), a Ray streaming call that hands each round back whole as soon as its samples
  are all back (`PromptPool.add_round`), so a prompt's next round never waits for another prompt's. One call per
  engine per dispatch, where upstream's dispatch makes one per prompt: Reinforce-Ada's rounds multiply the dispatches'
  prompts, not the calls. An engine without `generate_rounds` (upstream's own RolloutRayActor) gets upstream's call
  per round, `generate_responses`, its reply the whole round;
- `StreamTransport` (`--ada.cancel`): each round as one Ray streaming call, `generate_stream` of the project's engine
  actor (openrlhf_ada/trainer/ray/vllm_engine.py), to the engine upstream's least-loaded choice picks. The samples
  come back as they are generated and scored, each message of the stream with every sample finished since the
  previous one (one `ray.get` per message, not per sample), and each sample goes into the pool at once
  (`PromptPool.add_sample`). When the pool says the prompt is resolved, `cancel_stream` aborts the round's outstanding
  requests; the stream's last message says how many were cancelled and the tokens they had generated, which close the
  round (`end_round`). A lost engine's requests that had not come back run again on another one.

Both give the step the same four things: `round_size` (the requests a dispatch sends for a prompt), `send` (the
calls, as (reference, its prompts) pairs to wait on), `message_ref` (what to `ray.get` for a reference's next
message), `feed` (a message into the pools of its call's prompts not back yet, by uid: whose rounds are over?), plus `runs_again` after a lost engine
and `close` at the end of a step. The step keeps the waiting (`ray.wait`, `ray.get`) and everything the pools decide.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from openrlhf_ada.trainer.ppo_utils.sample_record import penalised


class RoundTransport:
    """The rounds one dispatch gives an engine as one streaming call; each round comes back whole, in one message with
    every other round finished by then."""

    def __init__(self, generator):
        self.gen = generator

    def round_size(self, item) -> int:
        """Requests of the prompt's next round."""
        return item.pool.next_round_size()

    def send(self, items: list, size: int, generate_kwargs: dict) -> list:
        """Every prompt's round of `size` requests, one `generate_rounds` call per engine upstream's dispatch picked
        (the rounds in the order drawn); returns [(reference, its prompts)]."""
        by_engine: Dict[int, list] = {}  # id(engine) -> [(engine, item, call)], in the order upstream dispatched
        for engine, item, call in upstream_calls(self.gen, items, size, generate_kwargs):
            by_engine.setdefault(id(engine), []).append((engine, item, call))
        sent = []
        for calls in by_engine.values():
            engine, _, first = calls[0]
            if not hasattr(engine, "generate_rounds"):  # upstream's own engine: a call per round, as its dispatch
                sent += [(engine.generate_responses.remote(**call), [item]) for _, item, call in calls]
                continue
            rounds = [(item.uid, call["prompt"], call["label"], call["num_samples"], call.get("images"))
                      for _, item, call in calls]
            ref = engine.generate_rounds.remote(rounds, first["sampling_params"], first["max_length"],
                                                first["hf_tokenizer"])
            sent.append((ref, [item for _, item, _ in calls]))
        return sent

    def message_ref(self, ref):
        """A streaming call's next message; a call of upstream's engine is its one reply."""
        return next(ref) if hasattr(ref, "__next__") else ref

    def feed(self, items: dict, message: dict, records_of: Callable) -> list:
        """Each whole round in the message, in request order, into its prompt's pool (`items`: the call's prompts not
        back yet, by uid); returns those prompts (their rounds are over)."""
        if isinstance(message, list):  # upstream's engine: one round's responses, the call's one prompt
            (uid,) = items
            message = {"rounds": [(uid, message)]}
        over = []
        for uid, responses in message["rounds"]:
            item = items[uid]
            records = records_of(responses)
            item.pool.add_round(
                scores=[r.score for r in records],
                rewards=penalised(records, self.gen.args),
                items=records,
                lengths=[r.length for r in records],
            )
            over.append(item)
        return over

    def runs_again(self, item) -> bool:
        """After a lost engine: the whole round runs again elsewhere."""
        return True

    def close(self, items) -> None:
        """Nothing to cancel: a call ends with its rounds (a step that fails leaves its engines to finish them)."""


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
        """One `generate_stream` per prompt, for the requests of its open round not back yet, on the engine upstream's
        dispatch picked; returns [(stream, [its prompt])]."""
        sent = []
        for engine, item, call in upstream_calls(self.gen, items, size, generate_kwargs):
            stream = self._stream(item)
            stream.streams += 1
            stream.engine, stream.cancel_sent = engine, False
            stream.group = f"{self.run}:{item.uid}:{item.pool.rounds}:{stream.streams}"
            ref = engine.generate_stream.remote(stream.group, call["prompt"], call["label"], call["sampling_params"],
                                                call["max_length"], call["hf_tokenizer"], sorted(stream.outstanding),
                                                call.get("images"))
            sent.append((ref, [item]))
        return sent

    def message_ref(self, ref):
        return next(ref)

    def feed(self, items: dict, message: dict, records_of: Callable) -> list:
        """One message of a round's stream (`items`: its one prompt, by uid): every sample the engine finished since
        its previous message, each entering the pool on its own as if it had come alone (the exit rule and the failed
        share are checked after each), and in the stream's last message the end of the round. Returns [the prompt]
        when its round is over, else []."""
        (item,) = items.values()
        last = "end" in message
        for sample in message["samples"]:
            self._add_sample(item, sample["index"], sample["response"], records_of, more_to_come=not last)
        if not last:
            return []
        self._stream(item).outstanding.clear()  # every request came back or was cancelled
        item.pool.end_round(cancelled_tokens=int(message["cancelled_tokens"]))
        return [item]

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


# -- upstream's dispatch, its calls noted instead of made -------------------------------------------------------------
class _RecordingCall:
    """Stands in for one engine's `generate_responses` inside upstream's `_dispatch_prompts_to_vllm`: notes the call
    upstream makes for a prompt (its keyword arguments, the tokenizer already shipped as a handle) with the engine and
    the prompt's step item, in the order upstream dispatches."""

    def __init__(self, engine, items: list, calls: list):
        self.engine, self.items, self.calls = engine, items, calls

    def remote(self, **call):
        item = self.items[len(self.calls)]
        assert call["prompt"] == item.prompt, "upstream's dispatch no longer follows the order of the prompts"
        self.calls.append((self.engine, item, call))


class _RecordingEngine:
    """An engine as upstream's dispatch sees it: its load (`get_num_unfinished_requests`) and a `generate_responses`
    that notes the call."""

    def __init__(self, engine, items: list, calls: list):
        self.actor = engine  # what tokenizer_shipping.is_remote_engine looks at
        self.get_num_unfinished_requests = engine.get_num_unfinished_requests
        self.generate_responses = _RecordingCall(engine, items, calls)


def upstream_calls(generator, items: list, size: int, generate_kwargs: dict) -> list:
    """The calls upstream's `_dispatch_prompts_to_vllm` (through the generator's own, which ships the tokenizer
    once) would make for `items`' prompts with `size` samples each, as [(engine, item, its keyword arguments)] in
    the prompts' order, none of them made: engines, their balance and the sampling parameters stay upstream's."""
    engines, calls = generator.vllm_engines, []
    generator.vllm_engines = [_RecordingEngine(e, items, calls) for e in engines]
    try:
        generator._dispatch_prompts_to_vllm([it.prompt for it in items], [it.label for it in items],
                                            images=[it.image for it in items], n_samples_per_prompt=size,
                                            **generate_kwargs)
    finally:
        generator.vllm_engines = engines
    return calls
