"""`RoundsSamplesGenerator`: upstream's SamplesGenerator with Reinforce-Ada's adaptive multi-round sampling.

Only the training generation step changes (`_generate_vllm` outside evaluation): it runs one step of the strategy
chosen once from the flags (strategy.py: `RoundStep` for Seq's rounds, `FixedNStep` without --ada.enable, both
round_loop.py; `EstStep` for `--ada.strategy est`, est_step.py), given the transport of `--ada.cancel`
(transport.py). Each prompt's `PromptPool` (openrlhf_ada.algorithms.reinforce_ada) decides round
sizes, the exit rule, the outcome and the kept group, and the step only moves data between pools and engines.
Without --ada.enable, training generation runs through the same loop as one round of n samples per prompt
(`FixedN`): the groups are upstream's, and failed rewards, dead engines and metrics are handled alike.
With n = 1, or when a reward model scores the samples after generation (`scored_by_reward_model`), it is upstream's.

What outlives a step lives here: the generation-call counter that seeds the per-prompt generators, the epoch (a
pass over the data, counted when a fresh iterator of the prompt loader yields its first prompt), the
`PromptHistory` of --ada.history (and of Est and --ada.skip greso), GRESO's p_easy / p_hard (`GresoState`), and
groups carried from a short step. They are the generator's `state_dict()`,
which both trainers save with every checkpoint. So does the engine-fault handling: a dead engine is dropped (or,
in the cluster trainers, stops the run), and a step whose engines show no progress fails (`StallWatch`).

What reaches upstream's trainer is made safe for it (`generate_samples`):
- every sample of a step carries the same `info` keys, in one order (a step may mix two generation calls, and
  upstream's replay buffer splits a batch by key; ranks reduce a micro-batch's metrics value by value in the order of
  its first sample's keys);
- every trained sample carries its group's id (`info["ada_group"]`, a new one per group of the run: the step's
  build stamps it, and on upstream's generation path `_generate_vllm` does, a prompt's n samples being its group);
  what comes after reads the groups from it;
- a short step at the end of the data (drop mode, filtering, failures) holds a whole number of `batch_unit`s, one
  cut over whole groups for every strategy: the cluster trainers set the unit to whole train batches that every
  data-parallel rank splits alike (batching.short_step_unit), so DeepSpeed's gradient accumulation stays aligned
  with the rollout steps; the groups left over go into the next episode's first step (Est, and upstream's generation
  path, drop them, logged);
- upstream's dynamic-filtering pass rate counts groups, not samples;
- the step ledger's generator side (trainer/ledger.py): what became of every prompt drawn and every sample generated,
  counted where it happens (the step's draw, settle and build through `ledger_*`, the carry, the cut and upstream's
  buffer here), checked at the end of every call, each epoch's coverage once its last prompt is settled, and handed
  over beside the samples (`StepSamples.ledger`), never in their `info`;
- the step's Reinforce-Ada and fault metrics (`ada/*`, `fault/*`: one value per step) travel the same way
  (`StepSamples.metrics`), not in every kept sample's `info`: each group built notes its step's metrics, and the
  metrics handed over are their mean over the trained samples (what upstream's mean of a per-sample `info` value
  gave when they rode in `info`, a step's samples coming from one step or, carried groups and upstream's buffer of
  over-sampled groups, from several).
Evaluation leaves out the prompts whose samples got no reward (counted and logged) instead of crashing upstream's
metrics.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Tuple

import ray
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf.utils.logging_utils import init_logger

from openrlhf_ada.algorithms.estimate import SeenWatch
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory, prompt_key
from openrlhf_ada.algorithms.reinforce_ada import PromptPool
from openrlhf_ada.args import fault_config, skip_rule
from openrlhf_ada.trainer import ledger
from openrlhf_ada.trainer.ppo_utils.batching import group_ids, trained_group_sizes, usable_samples
from openrlhf_ada.trainer.ppo_utils.sample_failures import reward_failed
from openrlhf_ada.trainer.ppo_utils.stall_watch import StallWatch
from openrlhf_ada.trainer.ppo_utils.strategy import choose_sampling
from openrlhf_ada.trainer.ppo_utils.transport import StreamTransport
from openrlhf_ada.trainer.ray.engine_health import check_streaming_engines, lost_engines_message, probe_engines
from openrlhf_ada.trainer.ray.responses import listed_response
from openrlhf_ada.trainer.ray.tokenizer_shipping import ShippingEngine, TokenizerHandle, is_remote_engine

logger = init_logger(__name__)


class StepSamples(list):
    """A training step's samples, as `generate_samples` returns them, with the generator's step ledger (`ledger`:
    its metrics, docs/metrics.md) and the step's Reinforce-Ada and fault metrics (`metrics`, named as the generator's
    `last_metrics`: `ada/eta`, `fault/failed_share`, ...) beside them and not in any sample's `info`: the cluster
    trainers log both with the step's status, and they travel with the samples to upstream's async training actor.
    A step's metrics cost one small dict per step this way; in `info` they were one tensor per metric per sample,
    concatenated, shipped and padded with every batch."""

    ledger: Dict[str, float] = {}
    metrics: Dict[str, float] = {}


def mean_over_samples(per_group: List[Tuple[int, dict]], total: int) -> Dict[str, float]:
    """The mean over `total` samples of metrics noted per group: `per_group` is (the group's sample count, its
    metrics) for every group; a metric a group lacks counts 0 for its samples (as `uniform_info_keys` fills a key
    missing from some samples). Keys in the order they first appear."""
    sums: Dict[str, float] = {}
    for size, metrics in per_group:
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + size * float(value)
    return {key: value / total for key, value in sums.items()} if total else {}


def dataset_prompt_counts(loader) -> Optional[Counter]:
    """The training data's prompts by prompt key, with their multiplicities, where the loader says them without
    being iterated (upstream's PromptDataset keeps `prompts`; a plain list of batches, the tests'); None otherwise."""
    for attr in ("_loader", "loader"):  # loader_state.LoaderWithSamplerState wraps upstream's DataLoader
        loader = getattr(loader, attr, loader)
    prompts = getattr(getattr(loader, "dataset", None), "prompts", None)
    if prompts is None and isinstance(loader, (list, tuple)):
        prompts = [p for batch in loader for p in batch[1]]
    if prompts is None or not all(isinstance(p, str) for p in prompts):
        return None
    return Counter(prompt_key(p) for p in prompts)


def uniform_info_keys(samples: List[Experience]) -> List[str]:
    """Give every sample the same `info` keys in the same (sorted) order, a missing one as 0.0; returns the keys that
    had to be filled.

    Upstream merges a batch's `info` per key and splits it again by position (`split_experience_batch`): a key
    that only some samples carry raises "Size of info[k] (1) does not match batch_size (2)". Each actor rank then
    batches its micro-batches with the keys in the order of their first sample (`make_experience_batch`) and reduces
    the metric dict across ranks value by value in that order (`strategy.all_reduce`): samples whose keys came in
    different orders would have ranks add values of different metrics, logged under the wrong names. The project's
    own keys are the same every step; a reward file's extra_logs may not be (a key only for right answers)."""
    keys = sorted(set().union(*(e.info.keys() for e in samples))) if samples else []
    filled = set()
    for e in samples:
        filled.update(key for key in keys if key not in e.info)
        ordered = {key: e.info[key] if key in e.info else torch.zeros(1) for key in keys}
        e.info.clear()
        e.info.update(ordered)
    return sorted(filled)


class RoundsSamplesGenerator(SamplesGenerator):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The strategy, chosen once (strategy.py): fixed n, Seq or Est, each its config, its step and the transport
        # of --ada.cancel; None: upstream's own generation (n = 1, or a reward model scores after generation).
        # Without Reinforce-Ada, training generation is one round of n per prompt through the same machinery, so
        # failed rewards, dead engines, metrics and ordering are handled alike.
        self.sampling = choose_sampling(self.args)
        n = self.args.rollout.n_samples_per_prompt
        self.pool_config = self.sampling.config if self.sampling is not None else None
        self.fault = fault_config(self.args)
        self.batch_unit = n  # a short step holds a multiple of this many samples (the cluster trainers set it)
        # the pass over the data (from 0) whose end ends the run: what a step holds back then is never trained (the
        # cluster trainers: --train.num_episodes - 1); None: the run ends otherwise (train_local, at its max steps)
        self.last_pass: Optional[int] = None
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
        # --ada.strategy est keeps its estimator (Ada-EMA counts) in the same history, and --ada.skip greso reads
        # the groups of earlier epochs from it (GRESO's skip then replaces --ada.history's own)
        self.skip_rule = skip_rule(self.args, seed=self.pool_config.seed) if self.pool_config is not None else None
        history_config = self.pool_config.history_config if self.pool_config is not None else HistoryConfig()
        if self.skip_rule is not None:
            history_config = self.skip_rule.history_config(history_config)
        keep_history = self.sampling is not None and self.sampling.keeps_history
        keep_history = keep_history or (self.skip_rule is not None and self.skip_rule.keeps_history)
        self.history = PromptHistory(history_config) if keep_history else None
        self.last_group_sizes: List[int] = []  # sizes of the last training step's groups, in order (from their ids)
        self._groups_made = 0  # group ids handed out so far: each group of the run gets its own (`new_group_id`)
        # a short step's groups after its cut wait for the next episode's first step where the strategy says so
        self.carries_short_step = self.sampling is not None and self.sampling.carries_short_step
        # each training step: the strategy's step over its transport
        self.step_class = self.sampling.step if self.sampling is not None else None
        self.transport_class = self.sampling.transport if self.sampling is not None else None
        self.est_watch = SeenWatch()  # est: warns once when the estimator keeps finding no history
        self._epoch = -1
        self._epoch_pending = False  # a fresh iterator: its first prompt starts the next epoch
        self._resume_in_epoch = False  # after load_state_dict: the next iterator continues the saved epoch
        self._skipped_carry = 0  # prompts skipped by a call that found no prompt left to sample
        # the pools of the last training step (benchmarks, tests, metrics): statistics only, their samples released
        # when each prompt was settled (the step's trained samples are what generate_samples returned)
        self.last_pools: List[PromptPool] = []
        # the step ledger (trainer/ledger.py): this call's terms, the terms of calls that returned no samples (logged
        # with the next step that does), the last step's metrics; per epoch the prompts drawn and their outcomes by
        # prompt key, and where each built group's prompt came from (its epoch and key) until it is trained or cut
        self._tally: Dict[str, Counter] = {"prompts": Counter(), "samples": Counter()}
        self._ledger_pending: Counter = Counter()
        self._ledger_epoch: Dict[str, float] = {}  # the last epoch checked since the last step, logged with the next
        self.last_ledger: Dict[str, float] = {}
        self._cover_drawn: Dict[int, Counter] = {}
        self._cover_out: Dict[int, Dict[str, Counter]] = {}
        self._epochs_done: set = set()  # epochs whose loader ran out
        self._epochs_resumed: set = set()  # epochs a checkpoint resumed mid-way: their first part is not seen
        self._group_origin: Dict[int, Tuple[int, str]] = {}
        self._dataset_counts: Optional[Counter] = None
        self._dataset_known = False
        self._group_metrics: Dict[int, dict] = {}  # group id -> its step's metrics, until the group is handed over
        self._tokenizer_handle: Optional[TokenizerHandle] = None  # the tokenizer in Ray's object store, put once
        if self.transport_class is StreamTransport:
            check_streaming_engines(self.vllm_engines)

    @classmethod
    def from_upstream(cls, generator: SamplesGenerator, batch_unit: Optional[int] = None) -> "RoundsSamplesGenerator":
        """Build from an upstream SamplesGenerator that an upstream constructor already made; `batch_unit`: see
        batching.short_step_unit."""
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
        data iterator was inside it), with --ada.history (Est, --ada.skip greso) the per-prompt history, and with
        --ada.skip greso GRESO's p_easy and p_hard. Groups held back from a short step are not saved (a resumed run
        starts its episode without them; they are logged when held back)."""
        state = {"step": self._step, "epoch": self._epoch,
                 "in_epoch": getattr(self, "_dataloader_iter", None) is not None and not self._epoch_pending}
        if self.history is not None:
            state["history"] = self.history.to_dict()
        if self.skip_rule is not None:
            state.update(self.skip_rule.state_dict())
        return state

    def load_state_dict(self, state: dict) -> None:
        self._step = int(state.get("step", 0))
        self._epoch = int(state.get("epoch", -1))
        # the loader's own state says where the data continues: inside the saved epoch, or (its iterator was spent)
        # at the start of the next one, which its first prompt then opens
        self._resume_in_epoch = bool(state.get("in_epoch", False))
        if self._resume_in_epoch:
            self._epochs_resumed.add(self._epoch)
        self._epoch_pending = False
        if self.history is not None:
            saved, config = state.get("history"), self.history.config
            self.history = PromptHistory.from_dict(saved, config) if saved is not None else PromptHistory(config)
            if saved is None:
                logger.warning("--ada.history: the checkpoint holds no prompt history (written without "
                               "--ada.history, --ada.strategy est or --ada.skip greso); it starts empty")
        if self.skip_rule is not None:
            self.skip_rule.load_state_dict(state)
        self._dataloader_iter = None

    @torch.no_grad()
    def generate_samples(self, **generate_kwargs):
        """Upstream's (its buffering of over-sampled groups included), plus what keeps upstream's trainer safe: the
        same info keys in the same order in every sample, a short step cut to whole `batch_unit`s (the rest carried
        into the next episode), and the dynamic-filtering pass rate in groups. The samples come back as a
        `StepSamples` with the step's ledger and metrics beside them."""
        if getattr(self, "_dataloader_iter", None) is None and not getattr(self, "_sample_buffer", None):
            # upstream starts a fresh iterator of the prompt loader now: a new pass over the data, unless it
            # continues the epoch a checkpoint was taken in
            self._epoch_pending = not self._resume_in_epoch
            self._resume_in_epoch = False
        buffered = list(getattr(self, "_sample_buffer", None) or [])
        self._tally = {"prompts": Counter(), "samples": Counter()}
        self._count_groups("carried_in", buffered)  # upstream's buffer of over-sampled groups, from an earlier call
        samples, pass_rate, consumed, exhausted = super().generate_samples(**generate_kwargs)
        # what this call holds back for a later step is never trained when none follows: the run's last pass ended
        run_ends = exhausted and self.last_pass is not None and self._epoch >= self.last_pass
        held = "left_at_end" if run_ends else "carried_out"
        self._count_groups(held, getattr(self, "_sample_buffer", None) or [])
        full = self.args.rollout.batch_size * self.args.rollout.n_samples_per_prompt
        if samples and len(samples) < full:
            kept = self._cut_short_step(samples)
            # the groups after the cut: carried (fixed n, Seq) or cut, a loss the ledger names (Est)
            self._count_groups(held if self.carries_short_step else "cut", samples[len(kept):])
            samples = kept
        self._count_groups("trained", samples)
        if run_ends:
            self._leave_at_end()
        if exhausted and self._epoch >= 0:
            self._epochs_done.add(self._epoch)
        samples = self._close_ledger(samples)
        self.last_group_sizes = trained_group_sizes(samples)
        self._close_metrics(samples)
        filled = uniform_info_keys(samples)
        if filled:
            logger.warning(f"info keys missing from some samples of this step, set to 0: {filled} (a reward file "
                           "whose extra_logs keys vary between samples?)")
        if pass_rate is not None:  # upstream divides samples by prompts: n times too large
            pass_rate = pass_rate / self.args.rollout.n_samples_per_prompt
        return samples, pass_rate, consumed, exhausted

    def _cut_short_step(self, samples: List[Experience]) -> List[Experience]:
        """A short step at the end of the data, for every strategy: the longest leading run of whole groups (read
        from the samples' group ids) holding a multiple of `batch_unit` samples (whole train batches that every rank
        splits alike) is trained. The groups after it are held back for the next episode's first step where the
        strategy carries them (`carries_short_step`), else dropped; logged either way."""
        sizes = trained_group_sizes(samples)
        usable = usable_samples(sizes, self.batch_unit)
        if usable == len(samples):
            return samples
        trained, rest = samples[:usable], samples[usable:]
        groups = len(trained_group_sizes(trained))
        if self.carries_short_step:
            self._carry = rest
            what = "held back for the next episode's first step (dropped if this was the last episode)"
        else:
            what = f"dropped ({len(rest)} samples)"
        logger.warning(f"short step at the end of the data: {groups} groups trained now, {len(sizes) - groups} {what}, "
                       f"so that the step is whole train batches that every data-parallel rank splits alike (a "
                       f"multiple of {self.batch_unit} samples)")
        return trained

    def _leave_at_end(self) -> None:
        """The run's last pass ended: the groups a short step held back for a next step are let go (counted as
        `left_at_end` where the call counted them; upstream's buffer of accepted groups is empty whenever a pass ends)
        and named in a warning, so that the last epoch's coverage closes now and nothing is silently generated and
        never trained."""
        if not self._carry:
            return
        logger.warning(f"the run ends with {len(group_ids(self._carry))} prompt group(s) ({len(self._carry)} samples) "
                       "generated and never trained: the last step of the last pass held them back (a step is whole "
                       "train batches that every rank splits alike) and no step follows. They are counted as "
                       "ledger/prompts_left_at_end and ledger/samples_left_at_end")
        self._carry = []

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
            bad = sum(reward_failed(e) for e in group)
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

    def _dispatch_prompts_to_vllm(self, prompts, labels, *, images=None, **generate_kwargs):
        """Upstream's dispatch, with the tokenizer shipped to each engine process once (tokenizer_shipping.py)
        instead of pickled into every request."""
        engines = self.vllm_engines
        if not any(is_remote_engine(e) for e in engines):
            return super()._dispatch_prompts_to_vllm(prompts, labels, images=images, **generate_kwargs)
        if self._tokenizer_handle is None:
            self._tokenizer_handle = TokenizerHandle(self.tokenizer)
        self.vllm_engines = [ShippingEngine(e, self._tokenizer_handle) if is_remote_engine(e) else e for e in engines]
        try:
            return super()._dispatch_prompts_to_vllm(prompts, labels, images=images, **generate_kwargs)
        finally:
            self.vllm_engines = engines

    def _process_response_into_experience(self, response, **generate_kwargs) -> Experience:
        """Upstream's, on the response as upstream's executors make it: the engine actors send token ids and
        log-probs as arrays (trainer/ray/responses.py), which the pools hold until their prompt settles; here, where
        a kept sample is built (and on upstream's own generation path), they become the lists upstream builds its
        tensors from, of the same values, so the `Experience` is bit for bit the one a list response gives."""
        return super()._process_response_into_experience(listed_response(response), **generate_kwargs)

    def _generate_vllm(
        self, dataloader_iter, num_prompts: int, dynamic_filtering, **generate_kwargs
    ) -> Tuple[List[Experience], int, bool]:
        if self._in_eval:
            return super()._generate_vllm(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)
        if self.pool_config is None:  # upstream's generation: each prompt's n samples together, a group each
            samples, consumed, exhausted = super()._generate_vllm(dataloader_iter, num_prompts, dynamic_filtering,
                                                                  **generate_kwargs)
            n = self.args.rollout.n_samples_per_prompt
            self.ledger_samples("generated_upstream", len(samples))
            ids = [self.new_group_id() for _ in range(0, len(samples), n)]
            for i, e in enumerate(samples):
                e.info["ada_group"] = ids[i // n]
            return samples, consumed, exhausted
        step = self.step_class(self, self.transport_class(self), dataloader_iter, num_prompts, dynamic_filtering,
                               generate_kwargs)
        try:
            return step.run()
        finally:  # what the step found, as far as it got (a step stopped by failed rewards has its pools)
            if step.pools is not None:
                self.last_pools = step.pools
            if step.logged is not None:
                self.last_metrics = step.logged

    # -- the step ledger (trainer/ledger.py): counted where each event happens --------------------------------------
    def ledger_drawn(self, epoch: int, key: str) -> None:
        """A prompt taken from the data (the round loop's draw), in `epoch`."""
        self._tally["prompts"]["drawn"] += 1
        self._cover_drawn.setdefault(epoch, Counter())[key] += 1

    def ledger_outcome(self, outcome: str, epoch: int, key: str) -> None:
        """A drawn prompt's final outcome without a trained group (skipped, filtered, failed, dropped; cut: the
        generator's)."""
        self._tally["prompts"][outcome] += 1
        self._cover_out.setdefault(epoch, {}).setdefault(outcome, Counter())[key] += 1

    def ledger_samples(self, term: str, count: int) -> None:
        """Samples generated, released (generated, not kept) or cancelled (requests that never came back)."""
        self._tally["samples"][term] += count

    def ledger_group(self, group: torch.Tensor, epoch: int, key: str) -> None:
        """A built group: its prompt's epoch and key, for the outcome the group meets later (trained, cut)."""
        self._group_origin[int(group.reshape(-1)[0])] = (epoch, key)

    def _count_groups(self, term: str, samples: List[Experience]) -> None:
        """Whole groups at one of the generator's own events (trained, carried in or out, cut): prompt and sample
        terms, and for trained and cut groups their prompts' outcomes in their epochs."""
        if not samples:
            return
        ids = group_ids(samples)
        self._tally["prompts"][term] += len(ids)
        self._tally["samples"][term] += len(samples)
        if term in ledger.OUTCOMES:
            for gid in ids:
                origin = self._group_origin.pop(gid, None)
                if origin is not None:
                    self._cover_out.setdefault(origin[0], {}).setdefault(term, Counter())[origin[1]] += 1

    def _close_ledger(self, samples: List[Experience]) -> List[Experience]:
        """The call's identities checked (LedgerError names every term), its terms added to those not yet logged,
        every finished epoch's coverage checked; a call that returns samples hands them over with its ledger
        (`StepSamples.ledger`, also `last_ledger`). Upstream's own generation path (n = 1, a reward model) knows only
        its sample terms: the samples its generation returned count as generated (the groups its dynamic filtering
        removed it does not report)."""
        tally = self._tally
        if self.pool_config is None:
            tally["samples"]["generated"] += tally["samples"].pop("generated_upstream", 0)
        step = self._step
        cancelled = tally["samples"].pop("cancelled", 0)
        metrics = ledger.check_generated_samples(step, tally["samples"])
        if self.pool_config is not None:
            metrics.update(ledger.check_prompts(step, tally["prompts"]))
            metrics[ledger.SAMPLES_CANCELLED] = float(cancelled)
        self._ledger_pending.update(metrics)
        if self.pool_config is not None:
            self._ledger_epoch.update(self._check_epochs())
        if not samples:
            return samples
        out = StepSamples(samples)
        out.ledger = {**{k: float(v) for k, v in self._ledger_pending.items()}, **self._ledger_epoch}
        self.last_ledger = out.ledger
        self._ledger_pending, self._ledger_epoch = Counter(), {}
        return out

    # -- the step's metrics, beside the samples ----------------------------------------------------------------------
    def note_group_metrics(self, group: torch.Tensor, metrics: dict) -> None:
        """A built group and its step's metrics (one dict the step's groups share), kept until the group is handed
        over: it may be carried or wait in upstream's buffer and be trained with a later call's groups."""
        self._group_metrics[int(group.reshape(-1)[0])] = metrics

    def _close_metrics(self, samples: List[Experience]) -> None:
        """Hand the step's metrics over beside the samples (`StepSamples.metrics`): their mean over the trained
        samples, each sample counting its group's step (`mean_over_samples`); then forget every group but those
        still waiting (carried, or in upstream's buffer)."""
        table = self._group_metrics
        if samples:
            per_group = [(size, table.get(gid, {})) for gid, size in zip(group_ids(samples), self.last_group_sizes)]
            samples.metrics = mean_over_samples(per_group, len(samples))
        kept = {gid: table[gid] for gid in self._waiting_group_ids() if gid in table}
        table.clear()
        table.update(kept)

    def _waiting_group_ids(self) -> List[int]:
        """The groups built but not yet handed over: carried to the next step, or in upstream's buffer."""
        return group_ids(self._carry) + group_ids(getattr(self, "_sample_buffer", None) or [])

    def _check_epochs(self) -> Dict[str, float]:
        """Coverage of every epoch whose loader ran out and whose prompts are all settled (none in a group carried
        or buffered for a later step): `ledger.check_epoch`; the last one's metrics. Each is also logged as a line
        (`ledger.describe_epoch`): the run's last epoch usually closes in a call that finds the data exhausted and
        returns no samples, after the last step was logged, so its metrics reach no tracker; the line says it was
        checked."""
        waiting = {self._group_origin.get(gid, (None,))[0] for gid in self._waiting_group_ids()}
        if not self._dataset_known:
            self._dataset_counts, self._dataset_known = dataset_prompt_counts(self.prompts_dataloader), True
        metrics: Dict[str, float] = {}
        for epoch in sorted(self._epochs_done - waiting):
            if epoch not in self._cover_drawn:
                continue
            metrics = ledger.check_epoch(epoch, self._cover_drawn.pop(epoch), self._cover_out.pop(epoch, {}),
                                         self._dataset_counts, whole=epoch not in self._epochs_resumed)
            logger.info(ledger.describe_epoch(metrics))
        return metrics

    # -- the state a step changes: through these, by the step (round_loop.RoundStep) -------------------------------
    @property
    def epoch(self) -> int:
        """The pass over the data that the prompts being drawn come from (-1 before the first prompt)."""
        return self._epoch

    def begin_step(self) -> Tuple[int, List[Experience]]:
        """A new training generation step: its number (it seeds the step's per-prompt generators) and the whole
        groups held back from the last short step, handed over to it."""
        self._step += 1
        carried, self._carry = self._carry, []
        self._count_groups("carried_in", carried)
        return self._step, carried

    def new_group_id(self) -> torch.Tensor:
        """A group id no other group of this run has (`info["ada_group"]` of each of the group's samples): groups
        stay apart however upstream's buffer or a carried short step puts steps' samples together."""
        self._groups_made += 1
        return torch.tensor([self._groups_made - 1])

    def prompts_drawn(self, count: int) -> int:
        """The step took `count` prompts from the loader (0: it had none left): the first prompt of a fresh iterator
        opens the next epoch. Returns the epoch the prompts come from."""
        if count and self._epoch_pending:
            self._epoch += 1
            self._epoch_pending = False
        self._epoch = max(self._epoch, 0)
        return self._epoch

    def hold_skipped(self, count: int) -> None:
        """Prompts skipped (history, GRESO) in a call that found no prompt left: counted in the next step."""
        self._skipped_carry += count

    def take_skipped(self) -> int:
        """The skipped prompts held from an earlier call, handed to the step that counts them."""
        count, self._skipped_carry = self._skipped_carry, 0
        return count

    # -- faults ---------------------------------------------------------------------------------------------------
    def _drop_dead_engines(self, error) -> List[str]:
        """Keep only the engines that still answer a health check; returns what happened to the others. With none
        left, stop with a clear error. An engine whose vLLM engine core died inside a live Ray actor fails the check
        too (its calls raise a RayTaskError, not a RayActorError)."""
        alive, lost = probe_engines(self.vllm_engines, timeout=30)
        self.lost_engines.extend(lost)
        if lost and self.stop_on_engine_loss:
            raise RuntimeError(
                lost_engines_message(lost, ". The run stops here: the weight sync after this step would wait for the "
                                     "lost engine", self.args)
                + f". Error that revealed it: {type(error).__name__}: "
                f"{str(error).splitlines()[0][:300] if str(error) else ''}"
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
