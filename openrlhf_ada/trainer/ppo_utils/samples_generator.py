"""`AdaSamplesGenerator`: upstream's SamplesGenerator with Reinforce-Ada's adaptive multi-round sampling.

Only the training generation step changes (`_generate_vllm` outside evaluation). Per step, each prompt gets a
`PromptPool` (openrlhf_ada.algorithms.reinforce_ada), which decides everything: round sizes, the exit rule, the
outcome and the kept group. This class only moves data:

- rounds go out through upstream's `_dispatch_prompts_to_vllm` (its least-loaded-engine balancing) with
  `n_samples_per_prompt` set to the round size, and come back through `_process_response_into_experience`;
- schedule `async` (default): a prompt's next round is dispatched as soon as its previous round is scored; `sync`:
  every active prompt's round finishes before any next round starts (the authors' scheduling). Both give the same
  per-prompt outcome for the same rewards;
- a sample without a reward (upstream swallows reward-function exceptions and leaves reward=None) is counted as
  failed and never enters a group; its round still completes;
- dropped prompts (`--ada.unresolved drop`), prompts that cannot form a group (too many failed samples) and groups
  removed by `--algo.dynamic_filtering_enable` (applied to the selected group) are replaced from the dataloader;
  when it runs out, every group already accepted is returned;
- exactly n samples per accepted prompt, contiguous, in the order the prompts were drawn; each sample's `info`
  carries the pool statistics (for the pool baseline) and the step's Reinforce-Ada metrics (for logging).

Without --ada.enable, training generation runs through the same loop as one round of n samples per prompt
(`fixed_n_config`): the groups are upstream's, and failed rewards, dead engines and metrics are handled alike.

Two options (off by default; off, the loop is exactly the above):
- `--ada.cancel`: each round of a prompt goes out as one Ray streaming call, `generate_stream` of the project's
  engine actor (openrlhf_ada/trainer/ray/vllm_engine.py), to the engine upstream's least-loaded choice picks; the
  samples come back one at a time as they are generated and scored, and each goes into the pool at once
  (`PromptPool.add_sample`). When the pool says the prompt is resolved, `cancel_stream` aborts the round's
  outstanding requests; the stream's last message says how many were cancelled and the tokens they had generated,
  which close the round (`end_round`). Rounds stay the budget and the schedule (async or sync as above). A sample
  without a reward is a failed one as before; the failed share is judged after every sample. A lost engine's
  requests that had not come back run again on another one (a prompt that had already stopped just closes its
  round). A step that fails cancels the streams still running.
- `--ada.history`: a `PromptHistory` (keyed by `prompt_key`, the sha256 of the prompt text) plans every prompt as
  it is drawn: a skipped prompt is counted (`ada/skipped_prompts`) and the next one taken; the others get their
  first round from the plan. Each finished pool is recorded for the current epoch: a pass over the data, counted
  when a fresh iterator of the prompt loader yields its first prompt. The history, the epoch and the generation
  counter are the generator's `state_dict()`, which both trainers save with every checkpoint.

What reaches upstream's trainer is made safe for it (`generate_samples`):
- every sample of a step carries the same `info` keys (a step may mix two generation calls, and upstream's
  replay buffer splits a batch by key; ranks with different keys would issue mismatched collectives);
- a short step at the end of the data (drop mode, filtering, failures) holds a whole number of `batch_unit`s: the
  trainer sets the unit so that every data-parallel rank gets the same number of full micro-batches; the groups
  left over go into the next episode's first step;
- upstream's dynamic-filtering pass rate counts groups, not samples.
Failed rewards stop the step as soon as enough samples have come back to judge (`--fault.max_failed_share`), and a
step draws at most one batch of replacement prompts for prompts lost to failed rewards. Evaluation leaves out the
prompts whose samples got no reward (counted and logged) instead of crashing upstream's metrics.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import List, Optional, Tuple

import ray
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties
from openrlhf.trainer.ppo_utils.length_penalty import logger as length_penalty_logger
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
from openrlhf.utils.logging_utils import init_logger
from tqdm import tqdm

from openrlhf_ada.algorithms.history import PromptHistory, prompt_key
from openrlhf_ada.algorithms.reinforce_ada import AdaConfig, PromptPool, make_rng, step_metrics
from openrlhf_ada.args import ada_config, fault_config
from openrlhf_ada.trainer.ppo_utils.stall_watch import StallWatch
from openrlhf_ada.trainer.ray.reward_guard import FAIL_CODES, FAIL_NAMES

logger = init_logger(__name__)


FIXED_N_METRICS = {
    "ada/prompts", "ada/samples_generated", "ada/tokens_generated", "ada/samples_per_prompt_mean",
    "ada/samples_per_prompt_max", "ada/failed_prompts", "ada/failed_samples", "ada/nonzero_adv_group_share",
    "ada/eta", "ada/reward_mean_generated", "ada/pass_rate_generated", "ada/dynamic_filtered",
    "ada/prompts_consumed", "ada/generation_seconds",
}


def fixed_n_config(n: int, seed: int) -> AdaConfig:
    """Plain GRPO-style sampling as a PromptPool schedule: one round of n, every group kept as it is."""
    return AdaConfig(n=n, enable=False, mode="pos", round_size=n, max_rounds=1, unresolved="keep",
                     selection="first", baseline="group", seed=seed)


@dataclass
class _Prompt:
    uid: int
    prompt: str
    label: str
    image: object
    pool: PromptPool
    key: Optional[str] = None  # prompt_key(prompt), with --ada.history
    # --ada.cancel: the open round's stream (engine, group id), its requests not back yet, and the cancel sent
    engine: object = None
    group: Optional[str] = None
    outstanding: set = field(default_factory=set)
    cancel_sent: bool = False
    streams: int = 0  # streams started for this prompt (group ids stay unique when a round is run again)


def _scalar(value: Optional[torch.Tensor]) -> Optional[float]:
    return None if value is None else float(value.reshape(-1)[0].item())


def _score(e: Experience) -> Optional[float]:
    """The verifier outcome that classifies a sample (its score; its reward when the reward file gives no score)."""
    return _scalar(e.scores) if e.scores is not None else _scalar(e.rewards)


class _FailureLog:
    """Samples of one step without a usable reward: counted by reason; one kept as an example for the error."""

    def __init__(self):
        self.total = self.failed = 0
        self.by_reason: dict = {}
        self.example: Optional[Experience] = None

    def record(self, experiences: List[Experience]) -> None:
        for e in experiences:
            self.total += 1
            if e.rewards is None or not torch.isfinite(e.rewards).all():
                self.failed += 1
                code = int(_scalar(e.info.get("reward_fail_code")) or 1) if "reward_fail_code" in e.info else 1
                reason = FAIL_NAMES.get(code, "raised")
                self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
                if self.example is None:
                    self.example = e

    def metrics(self) -> dict:
        """The failed share and a count per reason: every reason every step (the same keys in every sample)."""
        out = {"fault/failed_share": self.failed / self.total if self.total else 0.0}
        for reason in FAIL_CODES:
            out[f"fault/failed_{reason}"] = float(self.by_reason.get(reason, 0))
        return out

    def check(self, limit: float, reward_url, tokenizer, min_samples: int = 1) -> None:
        """Stop when more than `limit` of the samples back so far failed, once at least `min_samples` are back."""
        if self.total >= min_samples and self.failed / self.total > limit:
            self.stop(f"{self.failed} of {self.total} samples of this step so far ({self.failed / self.total:.0%}) "
                      f"got no usable reward from {reward_url} (limit --fault.max_failed_share {limit})", tokenizer)

    def stop(self, what: str, tokenizer) -> None:
        e = self.example
        response = tokenizer.decode(e.sequences[0][e.action_mask[0].nonzero().flatten() + 1], skip_special_tokens=True)
        raise RuntimeError(
            f"{what}; reasons: {self.by_reason}. One failing input: prompt={e.prompts[0]!r}, label={e.labels[0]!r}, "
            f"response={response[:500]!r}. Fix the reward function (it must return one finite number per sample, "
            "within --fault.reward_timeout seconds) and restart (--ckpt.load_enable continues from the last "
            "checkpoint)."
        )


def uniform_info_keys(samples: List[Experience]) -> List[str]:
    """Give every sample the same `info` keys, a missing one as 0.0; returns the keys that had to be filled.

    Upstream merges a batch's `info` per key and splits it again by position (`split_experience_batch`): a key
    that only some samples carry raises "Size of info[k] (1) does not match batch_size (2)", and data-parallel ranks
    holding different keys would reduce different metric dicts. The project's own keys are the same every step; a
    reward file's extra_logs may not be."""
    keys = set().union(*(e.info.keys() for e in samples)) if samples else set()
    filled = set()
    for e in samples:
        for key in keys - e.info.keys():
            e.info[key] = torch.zeros(1)
            filled.add(key)
    return sorted(filled)


def penalised_rewards(experiences: List[Experience], args) -> List[Optional[float]]:
    """Each sample's reward after upstream's length penalties (--reward.stop_properly_penalty_coef,
    --reward.overlong_buffer_len ...), computed by upstream's own `apply_length_penalties` on stand-ins, so the
    samples themselves keep their raw rewards (the experience maker penalises the kept ones later, as upstream does).
    The pool statistics use these: with a pool equal to the kept group the pool baseline is then upstream's."""
    raw = [_scalar(e.rewards) for e in experiences]
    if getattr(args.reward, "overlong_buffer_len", None) is None and \
            getattr(args.reward, "stop_properly_penalty_coef", None) is None:
        return raw
    valid = [i for i, r in enumerate(raw) if r is not None]
    stand_ins = [SimpleNamespace(rewards=experiences[i].rewards.clone().float(), info={},
                                 response_length=experiences[i].response_length, truncated=experiences[i].truncated)
                 for i in valid]
    level = length_penalty_logger.level
    length_penalty_logger.setLevel("WARNING")  # it logs a line per call: per round here, per step in the maker
    try:
        apply_length_penalties(stand_ins, args)
    finally:
        length_penalty_logger.setLevel(level)
    out = list(raw)
    for i, stand_in in zip(valid, stand_ins):
        out[i] = _scalar(stand_in.rewards)
    return out


class LoaderWithSamplerState:
    """Upstream's prompt dataloader with the samples generator's state inside its state_dict.

    Both upstream trainers checkpoint `prompts_dataloader.state_dict()` with every step (sync: PPOTrainer.fit;
    async: GenerateSamplesActor.fit builds the client states) and give it back to `load_state_dict` on resume. The
    sampler's state belongs to the same moment as the data position, so it travels with it, under one key that
    this wrapper adds and removes; everything else is the loader's."""

    KEY = "openrlhf_ada_sampler"

    def __init__(self, loader, generator: "AdaSamplesGenerator"):
        self._loader, self._generator = loader, generator

    def state_dict(self) -> dict:
        return {**self._loader.state_dict(), self.KEY: self._generator.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        sampler = state.pop(self.KEY, None)
        self._loader.load_state_dict(state)
        if sampler is not None:
            self._generator.load_state_dict(sampler)

    def __iter__(self):
        return iter(self._loader)

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def resume_hint(args) -> str:
    """Where the cluster trainer's last checkpoint is and how to continue from it (upstream writes the tag of the
    newest DeepSpeed checkpoint into <ckpt.path>/_actor/latest)."""
    latest = os.path.join(args.ckpt.path, "_actor", "latest")
    if not os.path.isfile(latest):
        return (f"none in {args.ckpt.path} yet (--ckpt.save_steps {args.ckpt.save_steps}); a restart begins at step "
                "1")
    with open(latest) as f:
        tag = f.read().strip()
    return f"{tag} in {os.path.join(args.ckpt.path, '_actor')}; restart with the same flags plus --ckpt.load_enable"


def probe_engines(engines, timeout: float) -> Tuple[list, List[str]]:
    """Ask every rollout engine for a health check (`check_health`, else upstream's `get_num_unfinished_requests`).
    Returns (the engines that answered, one line per engine that did not: dead actor, dead vLLM engine core inside a
    live actor (a RayTaskError), or no answer within `timeout` seconds)."""
    alive, lost = [], []
    for i, engine in enumerate(engines):
        check = getattr(engine, "check_health", None) or engine.get_num_unfinished_requests
        try:
            ray.get(check.remote(), timeout=timeout)
            alive.append(engine)
        except Exception as e:  # noqa: BLE001 - any failure to answer means the engine can take no more work
            said = str(getattr(e, "cause", None) or e)  # a RayTaskError's own first line is only its header
            lost.append(f"rollout engine {i} of {len(engines)} ({engine}): {type(e).__name__}: "
                        f"{said.splitlines()[0][:300] if said else ''}")
    return alive, lost


def data_parallel_unit(args) -> int:
    """Samples in the smallest batch that every data-parallel rank of every model group can split evenly: whole
    groups of n, and the same number of full rollout micro-batches per rank (upstream hands micro-batches to ranks
    round-robin in chunks; fewer micro-batches than ranks raises "Insufficient batch size", an uneven count makes
    ZeRO-3 ranks wait for each other's collectives)."""
    n = args.rollout.n_samples_per_prompt
    shards = args.ds.ring_attn_size * args.ds.tensor_parallel_size
    ranks = [args.actor.num_nodes * args.actor.num_gpus_per_node // shards]
    if args.algo.kl.init_coef > 0:
        ranks.append(args.ref.num_nodes * args.ref.num_gpus_per_node // shards)
    if getattr(args.critic, "model_name_or_path", None):
        ranks.append(args.critic.num_nodes * args.critic.num_gpus_per_node // shards)
    unit = n
    for dp in ranks:
        per = dp if args.train.dynamic_batch_enable else dp * args.rollout.micro_batch_size
        unit = math.lcm(unit, max(1, per))
    return unit


def check_streaming_engines(engines) -> None:
    """--ada.cancel needs engines that hand samples back one by one and cancel requests: the project's
    AdaRolloutRayActor (vLLM). Raises ValueError naming the others."""
    lacking = [f"engine {i} ({engine})" for i, engine in enumerate(engines)
               if not (hasattr(engine, "generate_stream") and hasattr(engine, "cancel_stream"))]
    if lacking:
        raise ValueError(
            f"--ada.cancel needs rollout engines that stream samples and cancel requests (openrlhf_ada's "
            f"AdaRolloutRayActor on vLLM); {', '.join(lacking)} cannot. Use the project's launchers "
            "(train_ppo_ray, train_local --local.engine vllm) or drop --ada.cancel."
        )


class AdaSamplesGenerator(SamplesGenerator):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ada = ada_config(self.args) if self.args.ada.enable else None
        # Without Reinforce-Ada, training generation is one round of n per prompt through the same machinery, so
        # failed rewards, dead engines, metrics and ordering are handled alike (n = 1 stays upstream's path).
        n = self.args.rollout.n_samples_per_prompt
        self.rounds = self.ada or (fixed_n_config(n, seed=getattr(self.args.train, "seed", 42)) if n >= 2 else None)
        self.fault = fault_config(self.args)
        self.batch_unit = n  # a short step holds a multiple of this many samples (the cluster trainers set it)
        self._carry: List[Experience] = []  # whole groups held back from a short step for the next one
        self._in_eval = False
        self._step = 0  # counts training generation calls; keys the per-prompt random generators
        self.last_metrics: dict = {}
        self.lost_engines: List[str] = []  # what happened to each engine dropped so far
        # The cluster trainers stop at once when an engine is lost: the policy actor's weight sync still addresses
        # it (a dead member of the sync group makes the broadcast raise or hang). train_local goes on with the rest.
        self.stop_on_engine_loss = False
        # --ada.history: what each prompt showed in earlier epochs; the epoch is the pass over the data that the
        # prompts being drawn come from (counted from 0 when a fresh loader iterator yields its first prompt)
        self.history = PromptHistory(self.ada.history_config) if self.ada is not None and self.ada.history else None
        self._epoch = -1
        self._epoch_pending = False  # a fresh iterator: its first prompt starts the next epoch
        self._resume_in_epoch = False  # after load_state_dict: the next iterator continues the saved epoch
        self._skipped_carry = 0  # prompts skipped by a call that found no prompt left to sample
        self.last_pools: List[PromptPool] = []  # the pools of the last training step (benchmarks, tests)
        if self.ada is not None and self.ada.cancel:
            check_streaming_engines(self.vllm_engines)

    @classmethod
    def from_upstream(cls, generator: SamplesGenerator, batch_unit: Optional[int] = None) -> "AdaSamplesGenerator":
        """Build from an upstream SamplesGenerator that an upstream constructor already made; `batch_unit`: see
        data_parallel_unit."""
        new = cls(
            strategy=generator.strategy,
            prompts_dataloader=generator.prompts_dataloader,
            eval_dataloader=generator.eval_dataloader,
            tokenizer=generator.tokenizer,
            vllm_engines=generator.vllm_engines,
        )
        if batch_unit is not None:
            new.batch_unit = batch_unit
        return new

    # -- checkpoint state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What a checkpoint must hold of the sampler besides the data position (plain JSON-able values): the
        generation-call counter that seeds each step's per-prompt random generators, the epoch (and whether the
        data iterator was inside it), and with --ada.history the per-prompt history. Groups held back from a short
        step are not saved (a resumed run starts its episode without them; they are logged when held back)."""
        state = {"step": self._step, "epoch": self._epoch,
                 "in_epoch": getattr(self, "_dataloader_iter", None) is not None and not self._epoch_pending}
        if self.history is not None:
            state["history"] = self.history.to_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self._step = int(state.get("step", 0))
        self._epoch = int(state.get("epoch", -1))
        # the loader's own state says where the data continues: inside the saved epoch, or (its iterator was spent)
        # at the start of the next one, which its first prompt then opens
        self._resume_in_epoch = bool(state.get("in_epoch", False))
        self._epoch_pending = False
        if self.history is not None:
            saved = state.get("history")
            self.history = (PromptHistory.from_dict(saved, self.ada.history_config) if saved is not None
                            else PromptHistory(self.ada.history_config))
            if saved is None:
                logger.warning("--ada.history: the checkpoint holds no prompt history (written without "
                               "--ada.history); it starts empty")
        self._dataloader_iter = None

    @torch.no_grad()
    def generate_samples(self, **generate_kwargs):
        """Upstream's (its buffering of over-sampled groups included), plus what keeps upstream's trainer safe: the
        same info keys in every sample, a short step cut to whole `batch_unit`s (the rest carried into the next
        episode), and the dynamic-filtering pass rate in groups."""
        if getattr(self, "_dataloader_iter", None) is None and not getattr(self, "_sample_buffer", None):
            # upstream starts a fresh iterator of the prompt loader now: a new pass over the data, unless it
            # continues the epoch a checkpoint was taken in
            self._epoch_pending = not self._resume_in_epoch
            self._resume_in_epoch = False
        samples, pass_rate, consumed, exhausted = super().generate_samples(**generate_kwargs)
        full = self.args.rollout.batch_size * self.args.rollout.n_samples_per_prompt
        if self.rounds is not None and samples and len(samples) < full:
            usable = len(samples) // self.batch_unit * self.batch_unit
            if usable < len(samples):
                n = self.args.rollout.n_samples_per_prompt
                self._carry = samples[usable:]
                samples = samples[:usable]
                logger.warning(
                    f"short step at the end of the data: {len(samples) // n} groups trained now, "
                    f"{len(self._carry) // n} held back for the next episode's first step (dropped if this was the "
                    f"last episode), so that every data-parallel rank gets the same number of full micro-batches "
                    f"(a multiple of {self.batch_unit} samples)"
                )
        filled = uniform_info_keys(samples)
        if filled:
            logger.warning(f"info keys missing from some samples of this step, set to 0: {filled} (a reward file "
                           "whose extra_logs keys vary between samples?)")
        if pass_rate is not None:  # upstream divides samples by prompts: n times too large
            pass_rate = pass_rate / self.args.rollout.n_samples_per_prompt
        return samples, pass_rate, consumed, exhausted

    @torch.no_grad()
    def generate_eval_samples(self, **generate_kwargs) -> List[Experience]:
        """Upstream's evaluation generation, minus the prompts with a sample whose reward failed (upstream's
        compute_eval_metrics would stop on the None: "Could not infer dtype of NoneType"); they are counted and
        logged, and the metrics describe the rest."""
        self._in_eval = True  # evaluation generation stays upstream's
        try:
            samples = super().generate_eval_samples(**generate_kwargs)
        finally:
            self._in_eval = False
        n = generate_kwargs.get("n_samples_per_prompt", self.args.rollout.n_samples_per_prompt)
        kept, failed_samples, failed_prompts = [], 0, 0
        for i in range(0, len(samples), n):  # upstream returns each prompt's n samples together
            group = samples[i : i + n]
            bad = sum(e.rewards is None or not torch.isfinite(e.rewards).all() for e in group)
            if bad:
                failed_samples += bad
                failed_prompts += 1
            else:
                kept.extend(group)
        self.last_eval_failures = {"eval_failed_samples": float(failed_samples),
                                   "eval_failed_prompts": float(failed_prompts)}
        if failed_samples:
            logger.warning(f"evaluation: {failed_samples} of {len(samples)} samples got no reward from "
                           f"{self.args.reward.remote_url}; their {failed_prompts} prompts are left out of the eval "
                           f"metrics, which describe the other {len(kept) // n} prompts")
        return kept

    def _generate_vllm(
        self, dataloader_iter, num_prompts: int, dynamic_filtering, **generate_kwargs
    ) -> Tuple[List[Experience], int, bool]:
        if self._in_eval or self.rounds is None:
            return super()._generate_vllm(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)
        return self._generate_rounds(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)

    # -- faults ---------------------------------------------------------------------------------------------------
    def _drop_dead_engines(self, error) -> List[str]:
        """Keep only the engines that still answer a health check; returns what happened to the others. With none
        left, stop with a clear error. An engine whose vLLM engine core died inside a live Ray actor fails the check
        too (its calls raise a RayTaskError, not a RayActorError)."""
        alive, lost = probe_engines(self.vllm_engines, timeout=30)
        self.lost_engines.extend(lost)
        if lost and self.stop_on_engine_loss:
            raise RuntimeError(
                f"lost {'; '.join(lost)}. The run stops here: the weight sync after this step would wait for the "
                f"lost engine. Last checkpoint: {resume_hint(self.args)}. Error that revealed it: "
                f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            ) from error
        for what in lost:
            logger.warning(f"{what}; its rounds go to the other engines")
        self.vllm_engines[:] = alive
        if not alive:
            raise RuntimeError(
                f"every rollout engine has died (last error: {type(error).__name__}: {error}); nothing can generate. "
                "Check the engines' logs (out of memory?) and restart from the last checkpoint."
            ) from error
        return lost

    def _check_stalled(self, watch: StallWatch, pending: int) -> None:
        """Called when the loop's wait brought no rollout back: poll the engines' token counts (StallWatch) and raise
        TimeoutError, saying what was seen, when nothing progressed for the timeout; `pending`: rounds in flight."""
        if watch.poll():
            return
        silence, timeout = watch.silence(), watch.timeout()
        if silence <= timeout:
            return
        refs = [engine.get_num_unfinished_requests.remote() for engine in self.vllm_engines]
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=5.0)[0]) if refs else set()
        unfinished = []
        for ref in refs:
            try:
                unfinished.append(str(ray.get(ref)) if ref in ready else "?")
            except Exception:  # noqa: BLE001 - a dead actor answers nothing
                unfinished.append("?")
        if self.fault.engine_timeout is not None:
            limit = f"--fault.engine_timeout {timeout:g}"
        elif watch.token_progress():
            limit = f"the default --fault.engine_timeout, {timeout:.0f}s while every engine reports its tokens"
        else:
            limit = (f"the default --fault.engine_timeout, {timeout:.0f}s for one whole response of "
                     f"{self.fault.max_new_tokens} tokens, as not every engine reports its tokens")
        raise TimeoutError(
            f"no token was generated and no rollout came back for {silence:.1f}s ({limit}): {pending} rounds in "
            f"flight; {watch.describe(unfinished)}. The engines look hung: check their logs. If they are only slow, "
            "raise the limit with --fault.engine_timeout S (seconds)."
        )

    # -- --ada.cancel: per-sample streams -------------------------------------------------------------------------
    def _dispatch_streams(self, items: List[_Prompt], size: int, generate_kwargs: dict) -> list:
        """Start one `generate_stream` per prompt for the requests of its open round that are not back yet (`size`:
        the round size, for upstream's load estimate). Engines, their order and the sampling parameters come from
        upstream's `_dispatch_prompts_to_vllm` itself: it runs with each engine standing in behind a small proxy
        whose `generate_responses.remote(...)` starts the stream instead. Returns [(stream, item)]."""
        engines, calls = self.vllm_engines, iter(items)
        run = self._stream_run

        class _Start:
            def __init__(self, engine):
                self.engine = engine

            def remote(self, *, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None):
                item = next(calls)
                assert prompt == item.prompt, "upstream's dispatch no longer follows the order of the prompts"
                item.streams += 1
                item.engine, item.cancel_sent = self.engine, False
                item.group = f"{run}:{item.uid}:{item.pool.rounds}:{item.streams}"
                return self.engine.generate_stream.remote(item.group, prompt, label, sampling_params, max_length,
                                                          hf_tokenizer, sorted(item.outstanding), images)

        class _Engine:
            def __init__(self, engine):
                self.get_num_unfinished_requests = engine.get_num_unfinished_requests
                self.generate_responses = _Start(engine)

        self.vllm_engines = [_Engine(e) for e in engines]
        try:
            streams = self._dispatch_prompts_to_vllm([it.prompt for it in items], [it.label for it in items],
                                                     images=[it.image for it in items], n_samples_per_prompt=size,
                                                     **generate_kwargs)
        finally:
            self.vllm_engines = engines
        return list(zip(streams, items))

    # -----------------------------------------------------------------------------------------------------------
    def _generate_rounds(self, dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs):
        ada = self.rounds
        self._step += 1
        step_seed = (ada.seed, self._step)
        generate_kwargs = {k: v for k, v in generate_kwargs.items() if k != "n_samples_per_prompt"}
        started = time.time()
        streaming = ada.cancel  # samples come back one by one; a resolved prompt's outstanding requests are cancelled
        self._stream_run = uuid.uuid4().hex[:12]
        history = self.history

        carried, self._carry = self._carry, []  # whole groups held back from the last episode's short step
        num_prompts -= len(carried) // self.args.rollout.n_samples_per_prompt
        prompts_consumed = 0
        exhausted = False
        next_uid = 0
        finished: List[_Prompt] = []  # every prompt processed this step, in the order finished
        accepted: dict = {}  # uid -> kept experiences
        filtered = engine_failures = lost_to_failures = skipped = 0
        held_back: List[int] = []  # prompts lost to failed rewards, not yet replaced
        # judge the failed share once this many samples are back (a reward that always fails stops in round 1)
        min_judged = max(16, 2 * self.args.rollout.n_samples_per_prompt)

        def draw(count: int) -> List[_Prompt]:
            """`count` prompts from the data (fewer when it runs out); with --ada.history each is planned first, and
            a skipped one is counted and replaced by the next."""
            nonlocal prompts_consumed, exhausted, next_uid, skipped
            out = []
            while len(out) < count and not exhausted:
                prompts, labels, images, exhausted = _collect_prompt_batch(dataloader_iter, count - len(out))
                if prompts and self._epoch_pending:
                    self._epoch += 1
                    self._epoch_pending = False
                self._epoch = max(self._epoch, 0)
                prompts_consumed += len(prompts)
                for p, lab, img in zip(prompts, labels, images):
                    key = first = None
                    if history is not None:
                        key = prompt_key(p)
                        plan = history.plan(key, self._epoch, n=ada.n, cap=ada.max_samples, seed=ada.seed)
                        if plan.skip:
                            skipped += 1
                            continue
                        first = plan.first_round
                    pool = PromptPool(ada, rng=make_rng(*step_seed, next_uid), first_round=first)
                    out.append(_Prompt(next_uid, p, lab, img, pool, key))
                    next_uid += 1
            return out

        pending = {}  # ray ref (a round) or stream (--ada.cancel) -> _Prompt

        def dispatch(batch: List[_Prompt]) -> None:
            by_size = {}
            for item in batch:
                if streaming:
                    if not item.outstanding:  # a new round; one run again after a lost engine keeps its requests
                        item.outstanding = set(range(item.pool.start_round()))
                    size = len(item.outstanding)
                else:
                    size = item.pool.next_round_size()
                by_size.setdefault(size, []).append(item)
            for size, items in by_size.items():
                if streaming:
                    pending.update(self._dispatch_streams(items, size, generate_kwargs))
                    continue
                refs = self._dispatch_prompts_to_vllm(
                    [it.prompt for it in items],
                    [it.label for it in items],
                    images=[it.image for it in items],
                    n_samples_per_prompt=size,
                    **generate_kwargs,
                )
                pending.update(zip(refs, items))

        def finish(item: _Prompt) -> int:
            """Record a prompt whose pool is done; return how many replacement prompts it needs (0 or 1)."""
            nonlocal filtered, lost_to_failures
            finished.append(item)
            if history is not None:
                history.record(item.key, self._epoch, item.pool.num_pos, item.pool.num_neg)
            kept = [item.pool.items[i] for i in item.pool.select()]
            if not kept:
                if item.pool.outcome == "failed":  # too few samples with a reward to form a group
                    lost_to_failures += 1
                    if lost_to_failures > num_prompts:  # at most one batch of replacements for failed rewards
                        failures.stop(f"{lost_to_failures} prompts of this step could not form a group because "
                                      f"their samples got no usable reward from {self.args.reward.remote_url} (at "
                                      f"most {num_prompts} are replaced per step; {failures.failed} of "
                                      f"{failures.total} samples failed)", self.tokenizer)
                    held_back.append(item.uid)  # replaced once the failed share has been judged acceptable
                    return 0
                return 1  # dropped
            if dynamic_filtering:
                lo, hi = self.args.algo.dynamic_filtering_range
                mean_score = sum(_score(e) for e in kept)
                mean_score /= len(kept)
                if not (lo < mean_score < hi):
                    filtered += 1
                    return 1
            accepted[item.uid] = kept
            return 0

        def experiences_of(responses) -> List[Experience]:
            """Experiences of a whole round (or of one streamed sample), counted and judged for failed rewards."""
            experiences = [self._process_response_into_experience(r, **generate_kwargs) for r in responses]
            failures.record(experiences)
            failures.check(self.fault.max_failed_share, self.args.reward.remote_url, self.tokenizer,
                           min_samples=min_judged)
            return experiences

        active = draw(num_prompts)
        if not active:  # the data ran out (prompts skipped by the history on the way count in the next step)
            self._skipped_carry += skipped
            return carried, prompts_consumed, True
        skipped += self._skipped_carry
        self._skipped_carry = 0
        pbar = tqdm(total=num_prompts, desc="Generate samples (Reinforce-Ada)" if self.ada else "Generate samples")
        waiting_round: List[_Prompt] = []  # sync schedule: prompts whose next round waits for the barrier
        failures = _FailureLog()
        dispatch(active)
        watch = StallWatch(self.fault, self.vllm_engines)  # progress: a rollout back, or a token on any engine
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=watch.interval)
                to_dispatch: List[_Prompt] = []
                refill = 0
                if not ready:
                    self._check_stalled(watch, len(pending))
                for ref in ready:
                    item = pending[ref] if streaming else pending.pop(ref)
                    try:
                        message = ray.get(next(ref) if streaming else ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                            ray.exceptions.RayTaskError) as e:
                        # an engine died mid-round (its actor, or the vLLM engine core inside a live actor): the
                        # round is lost, not counted, and runs again elsewhere (--ada.cancel: only its requests that
                        # had not come back). A task error with every engine healthy is a bug.
                        pending.pop(ref, None)
                        if not self._drop_dead_engines(e) and isinstance(e, ray.exceptions.RayTaskError):
                            raise
                        engine_failures += 1
                        if not streaming or (item.outstanding and not item.pool.should_cancel):
                            to_dispatch.append(item)
                            continue
                        # --ada.cancel: the prompt had stopped (the rest was being cancelled) or every request was
                        # back: the round is over (what the lost engine had generated for it is unknown: not counted)
                        item.outstanding.clear()
                        item.pool.end_round()
                    else:
                        watch.progress()
                        if not streaming:  # a whole round, in request order
                            experiences = experiences_of(message)
                            item.pool.add_round(
                                scores=[_score(e) for e in experiences],
                                rewards=penalised_rewards(experiences, self.args),
                                items=experiences,
                                lengths=[int(e.response_length.reshape(-1)[0].item()) for e in experiences],
                            )
                        elif "end" not in message:  # one sample of the round, as it finished and was scored
                            item.outstanding.discard(message["index"])
                            (e,) = experiences_of([message["response"]])
                            stop = item.pool.add_sample(message["index"], _score(e),
                                                        penalised_rewards([e], self.args)[0], item=e,
                                                        length=int(e.response_length.reshape(-1)[0].item()))
                            if stop and not item.cancel_sent:  # resolved: cancel the round's outstanding requests
                                item.engine.cancel_stream.remote(item.group)
                                item.cancel_sent = True
                            continue
                        else:  # the round's stream is over: every request came back or was cancelled
                            pending.pop(ref)
                            item.outstanding.clear()
                            item.pool.end_round(cancelled_tokens=int(message["cancelled_tokens"]))
                    if item.pool.done:
                        refill += finish(item)
                        pbar.update(1 if item.uid in accepted else 0)
                    elif ada.schedule == "async":
                        to_dispatch.append(item)
                    else:
                        waiting_round.append(item)
                if held_back and (failures.total >= min_judged or not pending):
                    refill += len(held_back)  # the share check has passed on enough samples (or nothing else runs)
                    held_back.clear()
                to_dispatch += draw(refill)
                if ada.schedule == "sync":
                    # the barrier: next rounds (and replacements) start only when every round in flight is back
                    waiting_round += to_dispatch
                    to_dispatch = []
                    if not pending:
                        to_dispatch, waiting_round = waiting_round, []
                if to_dispatch:
                    dispatch(to_dispatch)
        finally:
            for item in pending.values() if streaming else ():  # a failed step leaves nothing generating
                try:
                    item.engine.cancel_stream.remote(item.group)
                except Exception:  # noqa: BLE001 (a dead engine generates nothing anyway)
                    pass
        pbar.close()

        self.last_pools = [item.pool for item in sorted(finished, key=lambda it: it.uid)]  # in the order drawn
        metrics = step_metrics(self.last_pools, ada.max_rounds, skipped=skipped)
        failures.check(self.fault.max_failed_share, self.args.reward.remote_url, self.tokenizer)
        metrics.update(failures.metrics())
        metrics["fault/engine_failures"] = float(engine_failures)
        metrics["ada/dynamic_filtered"] = float(filtered)
        metrics["ada/prompts_consumed"] = float(prompts_consumed)
        metrics["ada/generation_seconds"] = time.time() - started
        if history is not None:
            metrics["ada/epoch"] = float(self._epoch)
        if self.ada is None:  # fixed n: round and resolution counts say nothing
            metrics = {k: v for k, v in metrics.items() if k in FIXED_N_METRICS or k.startswith("fault/")}
        self.last_metrics = metrics

        out: List[Experience] = list(carried)
        for item in sorted(finished, key=lambda it: it.uid):
            kept = accepted.get(item.uid)
            if not kept:
                continue
            pool = item.pool
            for index, e in zip(pool.select(), kept):
                e.info["ada_pool_index"] = torch.tensor([float(index)])
                e.info["ada_pool_count"] = torch.tensor([float(pool.count)])
                e.info["ada_pool_mean"] = torch.tensor([pool.mean])
                e.info["ada_pool_std"] = torch.tensor([pool.std])
                e.info["ada_samples"] = torch.tensor([float(pool.samples)])
                for key, value in metrics.items():
                    e.info[key.replace("/", "_")] = torch.tensor([float(value)])
            out.extend(kept)
        logger.info(
            f"{'Reinforce-Ada' if self.ada else 'Fixed-n'} step {self._step}: {len(accepted)} groups from {prompts_consumed} prompts, "
            f"{int(metrics.get('ada/samples_generated', 0))} samples, eta={metrics.get('ada/eta', 0):.3f}"
            + (f", {skipped} skipped (history)" if history is not None else "")
        )
        return out, prompts_consumed, exhausted
