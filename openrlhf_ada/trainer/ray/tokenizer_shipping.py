"""The tokenizer shipped to each engine process once, not with every request.

Upstream's `_dispatch_prompts_to_vllm` passes `hf_tokenizer=self.tokenizer` in every `generate_responses.remote()`,
so Ray pickles the whole tokenizer (a vocabulary of 49k-150k entries: megabytes, a tenth of a second or more) in the
trainer for every request, and every engine unpickles it again; the rounds of Reinforce-Ada multiply the requests.

`TokenizerHandle(tokenizer)` puts the tokenizer into Ray's object store once and pickles as a key and a reference to
that object (a few hundred bytes). Unpickling it in a process (`_resolve`) gives the tokenizer itself, fetched from
the object store the first time the process sees the key and taken from the process's own cache after that; so the
receiving method (upstream's executor, `generate_stream`) gets a real tokenizer, as before. An engine that restarts
starts with an empty cache and fetches it again.

`ShippingEngine` stands in for one engine inside upstream's dispatch: it passes every call on, with the handle in
place of `hf_tokenizer`. Only Ray actors get it (`is_remote_engine`): an engine called in-process receives the
tokenizer itself.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

import ray

_CACHE_SIZE = 4  # tokenizers kept per process (one per trainer using the engine; a few across test runs)
_cache: "OrderedDict[str, object]" = OrderedDict()
_lock = threading.Lock()


def _put(obj):
    return ray.put(obj)


def _get(ref):
    return ray.get(ref)


def _resolve(key: str, boxed: list):
    """Unpickling a TokenizerHandle: the tokenizer behind `key`, fetched once per process. `boxed` holds the object
    reference inside a list, so that Ray ships it as a reference instead of resolving it as an argument."""
    with _lock:
        tokenizer = _cache.get(key)
        if tokenizer is not None:
            _cache.move_to_end(key)
            return tokenizer
    tokenizer = _get(boxed[0])
    with _lock:
        _cache[key] = tokenizer
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return tokenizer


class TokenizerHandle:
    """A tokenizer in Ray's object store; pickles small and unpickles to the tokenizer (module docstring)."""

    def __init__(self, tokenizer):
        self.key = uuid.uuid4().hex
        self.ref = _put(tokenizer)

    def __reduce__(self):
        return _resolve, (self.key, [self.ref])


def is_remote_engine(engine) -> bool:
    """A Ray actor, or a wrapper of one that names what it wraps as `actor` (wrappers of wrappers included): what Ray
    pickles the arguments for."""
    for _ in range(8):
        if isinstance(engine, ray.actor.ActorHandle):
            return True
        engine = getattr(engine, "actor", None)
        if engine is None:
            return False
    return False


class _ShippingCall:
    def __init__(self, method, handle: TokenizerHandle):
        self.method, self.handle = method, handle

    def remote(self, *args, **kwargs):
        if "hf_tokenizer" in kwargs:
            kwargs["hf_tokenizer"] = self.handle
        return self.method.remote(*args, **kwargs)


class ShippingEngine:
    """An engine as upstream's dispatch sees it (its load and `generate_responses`), with the tokenizer handle in
    place of the tokenizer in every request."""

    def __init__(self, engine, handle: TokenizerHandle):
        self.get_num_unfinished_requests = engine.get_num_unfinished_requests
        self.generate_responses = _ShippingCall(engine.generate_responses, handle)
