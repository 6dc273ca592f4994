"""What the trainer process spends per step, counted (never timed): tokenizer shipments, waits on the engines, and
what the samples generator keeps after a step.

No Ray here: `ray` in the round loop and in upstream's dispatch is replaced by `FakeRay`, whose object references are
ready at once, and the engines are `FakeEngine`s that pickle each request as Ray would (`pickle.dumps` of the call's
arguments, unpickled again on the "engine" side). A stream's messages are those of the project's own engine actor
(`generate_stream` of vllm_engine.py, run on asyncio with a scripted executor in place of vLLM): every sample of a round
is ready at once, as when they finish in the same engine step; a whole round is the actor's own `generate_responses` on
the same executor (both hand back compact responses, trainer/ray/responses.py). tokenizer_shipping's object store is a
dict.
The counts are known by hand: 10 prompts, n = 4, one round of 4 each (the scripted rewards 1,0,1,0 resolve every
prompt at its 4th sample under the balance rule).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import pickle
import types
from types import SimpleNamespace

import openrlhf.trainer.ppo_utils.samples_generator as upstream_generator
import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils import round_loop
from openrlhf_ada.trainer.ppo_utils import samples_generator as project_generator
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ray import tokenizer_shipping
from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor

PROMPTS = 10
N = 4
GEN = dict(max_len=64, max_new_tokens=8, min_new_tokens=8, temperature=1.0, top_p=1.0)

serialised = {"tokenizer": 0}


class CountingTokenizer:
    """Counts how often it is pickled; unpickles to a plain namespace (all a fake engine needs)."""

    pad_token_id = 0

    def __reduce__(self):
        serialised["tokenizer"] += 1
        return SimpleNamespace, ()


class Ref:
    def __init__(self, value):
        self.value = value


class Stream:
    """A streaming call's generator: its messages, each ready at once."""

    def __init__(self, messages):
        self.messages = list(messages)

    def __next__(self):
        return Ref(self.messages.pop(0))


class FakeRay:
    exceptions = round_loop.ray.exceptions

    def __init__(self):
        self.waits = self.gets = 0

    def wait(self, refs, num_returns=1, timeout=None, **_):
        self.waits += 1
        ready = [r for r in refs if not isinstance(r, Stream) or r.messages][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(self, x, timeout=None):
        self.gets += 1
        return [r.value for r in x] if isinstance(x, list) else x.value


def response(prompt, label, k):
    reward = float(label.split(",")[k % 4])
    return {"prompt": prompt, "label": label, "observation_tokens": list(range(4 + 8)), "action_ranges": [(4, 12)],
            "reward": reward, "scores": reward, "rollout_log_probs": None, "truncated": False, "extra_logs": {}}


def engine_messages(group, prompt, label, sampling_params, max_length, hf_tokenizer, indices, images=None,
                    respond=None) -> list:
    """The messages of the engine actor's own `generate_stream` for these requests, its executor answering the k-th
    request of the stream with `respond(prompt, label, k)` (default `response`) at once (no vLLM, no Ray)."""
    actor = object.__new__(_GuardedRolloutRayActor)  # its __init__ starts vLLM; generate_stream needs only these
    calls = itertools.count()
    respond = respond or response

    async def execute(*, prompt, label, **_):
        return respond(prompt, label, next(calls))

    actor.executor, actor.llm, actor._streams = SimpleNamespace(execute=execute), SimpleNamespace(), {}

    async def run():
        return [m async for m in actor.generate_stream(group, prompt, label, sampling_params, max_length,
                                                       hf_tokenizer, indices, images)]

    return asyncio.run(run())


def engine_responses(prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None,
                     respond=None) -> list:
    """What the engine actor's own `generate_responses` returns for these requests (compact responses), its executor
    answering the k-th request with `respond(prompt, label, k)` (default `response`) at once (no vLLM, no Ray)."""
    actor = object.__new__(_GuardedRolloutRayActor)  # its __init__ starts vLLM; generate_responses needs the executor
    calls = itertools.count()
    respond = respond or response

    async def execute(*, prompt, label, **_):
        return respond(prompt, label, next(calls))

    actor.executor = SimpleNamespace(execute=execute)
    return asyncio.run(actor.generate_responses(prompt, label, sampling_params, max_length, hf_tokenizer,
                                                num_samples, images))


def engine_rounds(rounds, sampling_params, max_length, hf_tokenizer, respond=None) -> list:
    """The messages of the engine actor's own `generate_rounds` for these rounds, its executor answering the k-th
    request of a prompt in the call with `respond(prompt, label, k)` (default `response`) at once (no vLLM, no Ray)."""
    actor = object.__new__(_GuardedRolloutRayActor)  # its __init__ starts vLLM; generate_rounds needs the executor
    made = {}
    respond = respond or response

    async def execute(*, prompt, label, **_):
        k = made[prompt] = made.get(prompt, -1) + 1
        return respond(prompt, label, k)

    actor.executor = SimpleNamespace(execute=execute)

    async def run():
        return [m async for m in actor.generate_rounds(rounds, sampling_params, max_length, hf_tokenizer)]

    return asyncio.run(run())


class FakeEngine:
    """generate_responses / generate_rounds / generate_stream with Ray's pickling of the arguments; answers at once."""

    def __init__(self):
        self.calls = {}  # method -> calls
        self.tokenizers_seen = []
        outer = self

        class Method:
            def __init__(self, fn):
                self.fn = fn

            def remote(self, *args, **kwargs):
                outer.calls[self.fn.__name__] = outer.calls.get(self.fn.__name__, 0) + 1
                args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))  # what Ray does to every argument
                return self.fn(*args, **kwargs)

        def responses(*, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None):
            self.tokenizers_seen.append(hf_tokenizer)
            return Ref(engine_responses(prompt, label, sampling_params, max_length, hf_tokenizer, num_samples,
                                        images))

        def stream(group, prompt, label, sampling_params, max_length, hf_tokenizer, indices, images=None):
            self.tokenizers_seen.append(hf_tokenizer)
            return Stream(engine_messages(group, prompt, label, sampling_params, max_length, hf_tokenizer, indices,
                                          images))

        def rounds(rounds, sampling_params, max_length, hf_tokenizer):
            self.tokenizers_seen.append(hf_tokenizer)
            return Stream(engine_rounds(rounds, sampling_params, max_length, hf_tokenizer))

        self.generate_responses = Method(responses)
        self.generate_rounds = Method(rounds)
        self.generate_stream = Method(stream)
        def cancel(group):
            return Ref(0)

        def load():
            return Ref(0)

        self.cancel_stream = Method(cancel)
        self.get_num_unfinished_requests = Method(load)


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(round_loop, "ray", fake)
    monkeypatch.setattr(upstream_generator, "ray", fake)
    store = {}

    def put(obj):
        key = f"obj{len(store)}"
        store[key] = pickle.dumps(obj)
        return key

    monkeypatch.setattr(tokenizer_shipping, "_put", put)
    monkeypatch.setattr(tokenizer_shipping, "_get", lambda key: pickle.loads(store[key]))
    monkeypatch.setattr(project_generator, "is_remote_engine", lambda engine: True)
    serialised["tokenizer"] = 0
    return fake


def make_generator(engines, *flags):
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--algo.advantage.estimator", "dr_grpo", "--rollout.n_samples_per_prompt", str(N),
        "--rollout.batch_size", str(PROMPTS), "--actor.num_gpus_per_node", "1", *flags,
    ])
    loader = [([i], [f"prompt {i}"], ["1,0,1,0"], [None]) for i in range(PROMPTS)]
    return RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader,
                                  eval_dataloader=None, tokenizer=CountingTokenizer(), vllm_engines=engines)


ADA = ["--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "2"]


@pytest.mark.parametrize("flags", [[], ADA, ADA + ["--ada.cancel"]], ids=["fixed_n", "ada", "ada_cancel"])
def test_the_tokenizer_is_serialised_once_per_run_not_per_request(fake_ray, flags):
    """Two steps, 10 rounds each, over two engines: the tokenizer is pickled once (into the object store), and each
    engine call carries the handle (a call per engine per step for whole rounds, 5 rounds each as upstream's balance
    splits them; a call per round for streams); every engine call still receives a tokenizer."""
    engines = [FakeEngine(), FakeEngine()]
    gen = make_generator(engines, *flags)
    for _ in range(2):
        gen._dataloader_iter = None  # a fresh pass over the 10 prompts
        samples, *_ = gen.generate_samples(**GEN)
        assert len(samples) == PROMPTS * N
        assert all(p.rounds == 1 for p in gen.last_pools)  # resolved in round 1, as scripted
    calls = 2 * PROMPTS if "--ada.cancel" in flags else 2 * len(engines)
    assert [e.calls.get("responses", 0) for e in engines] == [0, 0]
    assert sum(e.calls.get("rounds", 0) + e.calls.get("stream", 0) for e in engines) == calls
    assert serialised["tokenizer"] == 1  # 20 before: one per request
    seen = [t for e in engines for t in e.tokenizers_seen]
    assert len(seen) == calls and all(isinstance(t, SimpleNamespace) for t in seen)


@pytest.mark.parametrize("flags", [[], ADA + ["--ada.cancel"]], ids=["rounds", "streams"])
def test_one_wait_collects_everything_that_is_ready(fake_ray, flags):
    """Everything is ready at once: the 10 rounds come back in one wait (10 before); the 10 streams too, each stream's
    4 samples and the end of its round being one message (5 waits before, a message per sample and one for the end;
    50 before that, one wait per message)."""
    gen = make_generator([FakeEngine()], *flags)
    samples, *_ = gen.generate_samples(**GEN)
    assert len(samples) == PROMPTS * N
    assert fake_ray.waits == 1


def test_a_stream_s_samples_that_finish_together_cost_one_ray_get(fake_ray):
    """--ada.cancel, every sample of a round finishing at once: the engine sends each stream's 4 samples and the end
    of its round as one message, so the trainer makes one ray.get per stream: 10 for the step (50 before: one per
    sample, one per end), plus the one of upstream's dispatch reading the engines' load. Each sample still enters its pool on its own: every prompt resolves at its 4th sample, with
    nothing left to cancel (no cancel_stream call), and trains its 4 samples with pool mean 2/4."""
    engine = FakeEngine()
    gen = make_generator([engine], *ADA, "--ada.cancel")
    samples, *_ = gen.generate_samples(**GEN)
    assert fake_ray.gets == PROMPTS + 1
    assert engine.calls == {"load": 1, "stream": PROMPTS}  # no cancel_stream
    assert len(samples) == PROMPTS * N
    assert [e.rewards.item() for e in samples[:N]] == [1.0, 0.0, 1.0, 0.0]
    pools = gen.last_pools
    assert all((p.count, p.mean, p.cancelled, p.discarded, p.rounds) == (4, 0.5, 0, 0, 1) for p in pools)
    assert gen.last_metrics["ada/samples_generated"] == PROMPTS * N and gen.last_metrics["ada/cancelled_requests"] == 0


def reachable_experiences(root) -> list:
    """Experience objects reachable from `root` through instances, containers and their attributes (not through
    modules, classes or functions, which reach everything)."""
    skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    seen, stack, found = {id(root)}, [root], []
    while stack:
        obj = stack.pop()
        if isinstance(obj, Experience):
            found.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, skip):
                seen.add(id(ref))
                stack.append(ref)
    return found


@pytest.mark.parametrize("flags", [[], ADA, ADA + ["--ada.cancel"]], ids=["fixed_n", "ada", "ada_cancel"])
def test_after_a_step_the_generator_keeps_no_sample(fake_ray, flags):
    """The trained samples go to the caller; the generator keeps only statistics (its last_pools hold no sample), so
    nothing of a step's 40 samples (about 110 KB each at 4k tokens) lives on through the next step."""
    gen = make_generator([FakeEngine()], *flags)
    samples, *_ = gen.generate_samples(**GEN)
    assert len(samples) == PROMPTS * N and all(isinstance(e.sequences, torch.Tensor) for e in samples)
    assert len(gen.last_pools) == PROMPTS and all(p.count == N for p in gen.last_pools)
    assert reachable_experiences(gen) == []
    assert all(it is None for p in gen.last_pools for it in p.items)


def test_an_engine_without_generate_rounds_gets_a_call_per_round_and_the_same_samples(fake_ray):
    """Upstream's own engine has only `generate_responses`: the round loop sends it a call per round (10), and trains
    the same samples as with the project's engine's one call per engine (1 call)."""
    trained = {}
    for kind in ("rounds", "upstream"):
        engine = FakeEngine()
        if kind == "upstream":
            del engine.generate_rounds
        gen = make_generator([engine], *ADA)
        samples, *_ = gen.generate_samples(**GEN)
        calls = {k: v for k, v in engine.calls.items() if k in ("responses", "rounds")}
        assert calls == ({"rounds": 1} if kind == "rounds" else {"responses": PROMPTS})
        trained[kind] = [(e.sequences.tolist(), e.rewards.tolist()) for e in samples]
    assert len(trained["rounds"]) == PROMPTS * N and trained["rounds"] == trained["upstream"]
