"""One training generation step of Reinforce-Ada rounds, as named phases on a small step-state object.

`RoundStep(generator, ...).run()` is the whole step, top to bottom:

    draw       prompts from the data (with --ada.history or --ada.skip greso: a skipped one counted and replaced)
    dispatch   each prompt's next round to the engines, through the step's transport (transport.py)
    collect    what comes back: a whole round, or one message of a stream (every sample the engine finished
               since its last one), for every one ready at a wait (a lost engine's round runs again)
    decide     per prompt: a done pool is settled, an active one waits for its next round
    release    which next rounds go out now: the ONE place the schedules differ (async at once, sync at the barrier)
    settle     a done prompt: its group selected, dropped, filtered, or held back for failed rewards
    build      the experiences the trainer gets: each accepted prompt's group, in the order drawn, with its group
               id and pool statistics

`RoundStep` is Reinforce-Ada Seq's step. A strategy that decides each prompt's pool otherwise overrides the step's
few hooks (`open_pools`, `lost`, `strategy_metrics`, `logged_metrics`): Reinforce-Ada-Est is `EstStep`
(est_step.py), whose pools are one round of an allocated count; fixed n (Reinforce-Ada off) is `FixedNStep`, whose
pools are one round of n (`FixedN`) and whose metrics leave out round and resolution counts.

Every per-prompt decision is the prompt's `PromptPool` (openrlhf_ada/algorithms/reinforce_ada.py); this module only
moves data between the pools and the engines:

- rounds go to the engines upstream's `_dispatch_prompts_to_vllm` picks (its least-loaded-engine balancing) with
  `n_samples_per_prompt` set to the round size; each sample that comes back enters its pool as a light
  `SampleRecord` (reward, score, length, truncation: sample_record.py), and only the samples a settled prompt keeps
  are built into `Experience`s, by upstream's `_process_response_into_experience` (about one in five at n = 4);
- schedule `async` (default): a prompt's next round is dispatched as soon as its previous round is scored; `sync`:
  every active prompt's round finishes before any next round starts (the authors' scheduling). Both give the same
  per-prompt outcome for the same rewards;
- a sample without a reward (upstream swallows reward-function exceptions and leaves reward=None) is counted as
  failed and never enters a group; its round still completes. Failed rewards stop the step as soon as enough
  samples are back to judge (`--fault.max_failed_share`), and a step draws at most one batch of replacements for
  prompts lost to them;
- dropped prompts (`--ada.unresolved drop`), prompts that cannot form a group (too many failed samples) and groups
  removed by `--algo.dynamic_filtering_enable` (applied to the selected group) are replaced from the dataloader;
  when it runs out, every group already accepted is returned;
- with `--ada.history`, the generator's `PromptHistory` (keyed by `prompt_key`, the sha256 of the prompt text)
  plans every prompt as it is drawn: a skipped prompt is counted (`ada/skipped_prompts`) and the next one taken;
  the others get their first round from the plan. Each finished pool is recorded for the current epoch;
- with `--ada.skip greso` (any strategy, fixed n too), the generator decides each drawn prompt's skip from its
  groups of earlier epochs in the same history (GRESO's probability, `algorithms/greso.py`) before any plan; a
  skipped prompt is counted (`ada/greso_skipped`) and the next one taken, and after the step the generator moves
  p_easy / p_hard by the step's rolled-out groups (`ada/greso_p_easy`, `ada/greso_p_hard`);
- the kept samples of each accepted prompt, contiguous, in the order the prompts were drawn; each sample's `info`
  carries its group's id (`ada_group`: what every consumer after the build reads the groups from) and the pool
  statistics (for the pool baseline). The step's Reinforce-Ada metrics are not in any sample: the generator notes
  them once per group (`note_group_metrics`) and hands them over beside the samples (`StepSamples.metrics`).

How rounds reach the engines and come back is the transport the generator gives the step (transport.py): one call
per engine for the rounds a dispatch gives it, each round back whole as soon as it is done (`RoundTransport`), or
with `--ada.cancel` one stream per round whose rest is cancelled once the prompt is resolved (`StreamTransport`). The step only waits on what the transport sent (`ray.wait`, `ray.get`)
and hands each message back to it; docs/algorithms.md explains the cancel order and its trade-off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional

import ray
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.samples_generator import _collect_prompt_batch
from openrlhf.utils.logging_utils import init_logger
from tqdm import tqdm

from openrlhf_ada.algorithms.estimate import allocation_metrics
from openrlhf_ada.algorithms.history import prompt_key
from openrlhf_ada.algorithms.reinforce_ada import PromptPool, make_rng, pool_metrics
from openrlhf_ada.trainer.ppo_utils.batching import trained_group_sizes
from openrlhf_ada.trainer.ppo_utils.sample_failures import FailureLog
from openrlhf_ada.trainer.ppo_utils.sample_record import SampleRecord, record_of
from openrlhf_ada.trainer.ppo_utils.stall_watch import StallWatch

logger = init_logger(__name__)

#: The metrics a fixed-n step (one round of n per prompt, Reinforce-Ada off) logs: round and resolution counts say
#: nothing there.
FIXED_N_METRICS = {
    "ada/prompts", "ada/samples_generated", "ada/tokens_generated", "ada/samples_per_prompt_mean",
    "ada/samples_per_prompt_max", "ada/failed_prompts", "ada/failed_samples", "ada/nonzero_adv_group_share",
    "ada/eta", "ada/reward_mean_generated", "ada/pass_rate_generated", "ada/dynamic_filtered",
    "ada/prompts_consumed", "ada/generation_seconds",
}

ENGINE_ERRORS = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.RayTaskError)


@dataclass(frozen=True)
class Drawn:
    """A prompt taken from the data, before its pool is opened (`first`: its first round's size from the history's
    plan, or None)."""

    uid: int
    prompt: str
    label: str
    image: object
    key: Optional[str]
    first: Optional[int]


@dataclass
class ActivePrompt:
    """A prompt being sampled in this step: its data and its pool (what a stream needs is the transport's)."""

    uid: int
    prompt: str
    label: str
    image: object
    pool: PromptPool
    key: Optional[str] = None  # prompt_key(prompt), with --ada.history


class RoundStep:
    """The state of one training generation step, and its phases as methods (module docstring).

    `generator` is the project's samples generator: it owns what outlives a step (the engines, the step counter
    that seeds the per-prompt generators, the epoch, the history, groups carried from a short step), changed only
    through its own methods (`begin_step`, `prompts_drawn`, `take_skipped`, `hold_skipped`, and `new_group_id` for
    each built group) and its `skip_rule` (`skips`, `after_step`), and the engine-fault
    handling (`_drop_dead_engines`, `_check_stalled`). What the step found (`pools`, `logged`) the
    generator reads from the step when it ends."""

    title = "Reinforce-Ada"  # in the step's log line
    progress_title = "Generate samples (Reinforce-Ada)"

    def __init__(self, generator, transport, dataloader_iter, num_prompts: int, dynamic_filtering,
                 generate_kwargs: dict):
        gen = self.gen = generator
        self.transport = transport  # how rounds reach the engines and come back (transport.py)
        self.config = gen.pool_config
        self.step, self.carried = gen.begin_step()  # carried: whole groups held back from the last short step
        self.step_seed = (self.config.seed, self.step)
        self.generate_kwargs = {k: v for k, v in generate_kwargs.items() if k != "n_samples_per_prompt"}
        self.started = time.time()
        self.history = gen.history
        self.dataloader_iter, self.dynamic_filtering = dataloader_iter, dynamic_filtering
        self.num_prompts = num_prompts - len(trained_group_sizes(self.carried))
        self.prompts_consumed = self.next_uid = 0
        self.exhausted = False
        self.finished: List[ActivePrompt] = []  # every prompt processed this step, in the order finished
        self.accepted: dict = {}  # uid -> kept experiences
        self.filtered = self.engine_failures = self.lost_to_failures = self.skipped = 0
        self.held_back: List[int] = []  # prompts lost to failed rewards, not yet replaced
        # judge the failed share once this many samples are back (a reward that always fails stops in round 1)
        self.min_judged = max(16, 2 * gen.args.rollout.n_samples_per_prompt)
        self.failures = FailureLog(build=self.experience)
        self.pending: dict = {}  # the transport's reference (an engine's rounds, or a round's stream) -> {uid: prompt}
        self.to_dispatch: List[ActivePrompt] = []  # next rounds (and replacements) decided in this wait
        self.waiting_round: List[ActivePrompt] = []  # sync schedule: prompts whose next round waits for the barrier
        self.refill = 0  # replacement prompts to draw after this wait
        self.pbar = None
        self.epoch = gen.epoch  # the pass over the data the prompts being drawn come from
        # what the step found, read by the generator when it ends
        self.pools: Optional[List[PromptPool]] = None  # every prompt's pool, in the order drawn
        self.logged: Optional[dict] = None  # the step's metrics
        self.max_rounds = self.config.max_rounds  # the rounds a prompt may take (the metrics count each)
        self.origin: dict = {}  # uid -> (epoch, prompt key): where the step ledger counts the prompt's outcome

    # -- the step, top to bottom --------------------------------------------------------------------------------
    def run(self):
        """Returns (experiences, prompts consumed, data exhausted), as upstream's `_generate_vllm` does."""
        active = self.draw(self.num_prompts)
        if not active:  # the data ran out (prompts skipped by the history on the way count in the next step)
            self.gen.hold_skipped(self.skipped)
            return self.carried, self.prompts_consumed, True
        self.skipped += self.gen.take_skipped()
        self.pbar = tqdm(total=self.num_prompts, desc=self.progress_title)
        self.dispatch(active)
        watch = StallWatch(self.gen.fault, self.gen.vllm_engines)  # progress: a rollout back, or a token anywhere
        try:
            while self.pending:
                ready = self.wait_ready(watch.interval)
                if not ready:
                    self.gen._check_stalled(watch, sum(len(items) for items in self.pending.values()))  # rounds
                for ref in ready:
                    for item in self.collect(ref, watch):
                        self.decide(item)
                self.replace_held_back()
                self.to_dispatch += self.draw(self.refill)
                self.refill = 0
                batch = self.release()
                if batch:
                    self.dispatch(batch)
        finally:  # a step that ends (or fails) leaves nothing generating
            self.transport.close([item for items in self.pending.values() for item in items.values()])
        self.pbar.close()
        metrics = self.metrics()
        return self.build(metrics), self.prompts_consumed, self.exhausted

    def wait_ready(self, timeout: float) -> list:
        """Every round (or stream) with something ready now, in one call; only when none is, wait up to `timeout`
        for the first. (One sample per wait would make the waits grow as samples x open streams.)"""
        refs = list(self.pending)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not ready:
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        return ready

    # -- draw ---------------------------------------------------------------------------------------------------
    def draw(self, count: int) -> List[ActivePrompt]:
        """`count` prompts from the data (fewer when it runs out); with --ada.skip greso each may be skipped first,
        with --ada.history each is planned; a skipped one is counted and replaced by the next."""
        gen, cfg = self.gen, self.config
        out = []
        while len(out) < count and not self.exhausted:
            prompts, labels, images, self.exhausted = _collect_prompt_batch(self.dataloader_iter, count - len(out))
            self.epoch = gen.prompts_drawn(len(prompts))
            self.prompts_consumed += len(prompts)
            for p, lab, img in zip(prompts, labels, images):
                key = first = None
                if self.history is not None:
                    key = prompt_key(p)
                origin = (self.epoch, key or prompt_key(p))
                gen.ledger_drawn(*origin)
                if gen.skip_rule is not None and gen.skip_rule.skips(self.history, key, self.epoch):
                    self.skipped += 1
                    gen.ledger_outcome("skipped", *origin)
                    continue
                if cfg.history:
                    plan = self.history.plan(key, self.epoch, n=cfg.n, cap=cfg.max_samples, seed=cfg.seed)
                    if plan.skip:
                        self.skipped += 1
                        gen.ledger_outcome("skipped", *origin)
                        continue
                    first = plan.first_round
                self.origin[self.next_uid] = origin
                out.append(Drawn(self.next_uid, p, lab, img, key, first))
                self.next_uid += 1
        return self.open_pools(out)

    def open_pools(self, drawn: List["Drawn"]) -> List[ActivePrompt]:
        """Each drawn prompt with its pool: rounds under the step's config, the first one sized by the history's
        plan when it made one."""
        return [ActivePrompt(d.uid, d.prompt, d.label, d.image,
                             PromptPool(self.config, rng=make_rng(*self.step_seed, d.uid), first_round=d.first),
                             d.key) for d in drawn]

    # -- dispatch -----------------------------------------------------------------------------------------------
    def dispatch(self, batch: List[ActivePrompt]) -> None:
        """Send each prompt's next round through the transport, prompts of one round size together (upstream's
        dispatch takes one n)."""
        by_size = {}
        for item in batch:
            by_size.setdefault(self.transport.round_size(item), []).append(item)
        for size, items in by_size.items():
            self.pending.update((ref, {item.uid: item for item in sent})
                                for ref, sent in self.transport.send(items, size, self.generate_kwargs))

    # -- collect ------------------------------------------------------------------------------------------------
    def collect(self, ref, watch: StallWatch) -> List[ActivePrompt]:
        """Take the next message of `ref` (whole rounds of an engine's call, or some samples of a round's stream)
        into its prompts' pools, one `ray.get`. Returns the prompts whose rounds are over (to be decided); a prompt
        whose round goes on (more of its stream to come) or runs again (a lost engine) is not among them."""
        items = self.pending[ref]
        try:
            message = ray.get(self.transport.message_ref(ref))
        except ENGINE_ERRORS as e:
            return self.engine_lost(ref, items, e)
        watch.progress()
        over = self.transport.feed(items, message, self.records_of)
        for item in over:
            del items[item.uid]
        if not items:
            self.pending.pop(ref)
        return over

    def engine_lost(self, ref, items: dict, error) -> List[ActivePrompt]:
        """An engine died mid-call (its actor, or the vLLM engine core inside a live actor): the rounds not back yet
        are lost, not counted, and run again elsewhere (a stream: only its requests that had not come back,
        `runs_again`). A task error with every engine healthy is a bug, raised as it is."""
        self.pending.pop(ref, None)
        if not self.gen._drop_dead_engines(error) and isinstance(error, ray.exceptions.RayTaskError):
            raise error
        self.engine_failures += 1
        over = []
        for item in items.values():
            if self.transport.runs_again(item):
                self.to_dispatch.append(item)
            else:
                over.append(item)
        return over

    def records_of(self, responses) -> List[SampleRecord]:
        """The records of a whole round (or of one streamed sample), counted and judged for failed rewards."""
        records = [record_of(r, self.generate_kwargs) for r in responses]
        self.gen.ledger_samples("generated", len(records))
        self.failures.record(records)
        self.failures.check(self.gen.fault.max_failed_share, self.gen.args.reward.remote_url, self.gen.tokenizer,
                            min_samples=self.min_judged)
        return records

    def experience(self, response: dict) -> Experience:
        """A sample's `Experience`, built by upstream's `_process_response_into_experience` (kept samples only)."""
        return self.gen._process_response_into_experience(response, **self.generate_kwargs)

    # -- decide and release -------------------------------------------------------------------------------------
    def decide(self, item: ActivePrompt) -> None:
        """A prompt's round is over: settle it when its pool is done, else it needs its next round."""
        if item.pool.done:
            self.refill += self.settle(item)
            self.pbar.update(1 if item.uid in self.accepted else 0)
        else:
            self.to_dispatch.append(item)

    def replace_held_back(self) -> None:
        """Prompts lost to failed rewards are replaced once the failed share has been judged acceptable on enough
        samples (or nothing else runs)."""
        if self.held_back and (self.failures.total >= self.min_judged or not self.pending):
            self.refill += len(self.held_back)
            self.held_back.clear()

    def release(self) -> List[ActivePrompt]:
        """The rounds to send now. The one place the schedules differ: async sends every next round (and
        replacement) at once; sync holds them until every round in flight is back (the authors' barrier)."""
        batch, self.to_dispatch = self.to_dispatch, []
        if self.config.schedule == "async":
            return batch
        self.waiting_round += batch
        if self.pending:
            return []
        batch, self.waiting_round = self.waiting_round, []
        return batch

    # -- settle -------------------------------------------------------------------------------------------------
    def settle(self, item: ActivePrompt) -> int:
        """Record a prompt whose pool is done and select its group; return how many replacement prompts it needs
        (1 for a dropped or filtered prompt, else 0; a prompt lost to failed rewards is held back instead)."""
        self.finished.append(item)
        if self.history is not None:
            self.history.record(item.key, self.epoch, item.pool.num_pos, item.pool.num_neg)
        kept = [item.pool.items[i] for i in item.pool.select()]  # their records
        # the step ledger: every generated sample the pool does not keep is released now (those without a reward
        # and late ones it discarded, which never entered it, included); the kept ones too if the group is filtered
        pool = item.pool
        self.gen.ledger_samples("released", len(pool.items) - len(kept) + pool.discarded + pool.failed)
        self.gen.ledger_samples("cancelled", pool.cancelled)
        if not kept:
            self.lost(item)
        # only the kept samples live on (in `accepted`, then the trained batch); the pool keeps its statistics
        item.pool.items = [None] * len(item.pool.items)
        if not kept:
            if item.pool.outcome == "failed":  # too few samples with a reward to form a group
                self.lost_to_failures += 1
                if self.lost_to_failures > self.num_prompts:  # at most one batch of replacements for failed rewards
                    self.failures.stop(
                        f"{self.lost_to_failures} prompts of this step could not form a group because their samples "
                        f"got no usable reward from {self.gen.args.reward.remote_url} (at most {self.num_prompts} "
                        f"are replaced per step; {self.failures.failed} of {self.failures.total} samples failed)",
                        self.gen.tokenizer)
                self.held_back.append(item.uid)
                self.gen.ledger_outcome("failed", *self.origin[item.uid])
                return 0
            self.gen.ledger_outcome("dropped", *self.origin[item.uid])
            return 1  # dropped
        if self.dynamic_filtering:
            lo, hi = self.gen.args.algo.dynamic_filtering_range
            mean_score = sum(r.score for r in kept)
            mean_score /= len(kept)
            if not (lo < mean_score < hi):
                self.filtered += 1
                self.gen.ledger_samples("released", len(kept))
                self.gen.ledger_outcome("filtered", *self.origin[item.uid])
                self.lost(item)
                return 1
        self.accepted[item.uid] = [self.experience(r.response) for r in kept]  # the only samples built
        return 0

    def lost(self, item: ActivePrompt) -> None:
        """A prompt settled without a trained group (dropped, failed or filtered): its replacement is drawn later.
        Nothing to note here (a strategy that sizes each prompt does, EstStep)."""

    # -- build --------------------------------------------------------------------------------------------------
    def metrics(self) -> dict:
        """The step's metrics (`logged`, the generator's `last_metrics`, with `pools`, its `last_pools`); a failed share
        over the limit stops the step here, whatever the number of samples."""
        gen = self.gen
        self.pools = [item.pool for item in sorted(self.finished, key=lambda it: it.uid)]  # in the order drawn
        metrics = pool_metrics(self.pools, self.max_rounds, skipped=self.skipped)
        if self.pools:
            metrics.update(allocation_metrics([pool.samples for pool in self.pools],
                                              [pool.sum / pool.count if pool.count else 0.0 for pool in self.pools]))
        metrics.update(self.strategy_metrics())
        self.failures.check(gen.fault.max_failed_share, gen.args.reward.remote_url, gen.tokenizer)
        metrics.update(self.failures.metrics())
        metrics["fault/engine_failures"] = float(self.engine_failures)
        metrics["ada/dynamic_filtered"] = float(self.filtered)
        metrics["ada/prompts_consumed"] = float(self.prompts_consumed)
        metrics["ada/generation_seconds"] = time.time() - self.started
        if self.history is not None:
            metrics["ada/epoch"] = float(self.epoch)
        logged = self.logged_metrics()
        if logged is not None:
            metrics = {k: v for k, v in metrics.items() if k in logged or k.startswith("fault/")}
        if gen.skip_rule is not None:
            metrics.update(gen.skip_rule.after_step([(pool.num_pos, pool.num_neg) for pool in self.pools], self.epoch,
                                                    self.skipped))
        self.logged = metrics
        return metrics

    def strategy_metrics(self) -> dict:
        """Metrics of the sampling strategy itself, besides the pools' (none for Seq's rounds)."""
        return {}

    def logged_metrics(self) -> Optional[set]:
        """The metric names this step logs (besides fault/*); None: all."""
        return None

    def build(self, metrics: dict) -> List[Experience]:
        """The carried groups, then the kept samples of each accepted prompt in the order drawn, each with its group's
        id (`ada_group`, a new one per group from the generator: every consumer reads the groups from it) and its
        pool's statistics (for the pool baseline) in `info`. A value the samples share is one tensor, shared: nothing
        changes an `info` tensor in place, and the micro-batches concatenate them into new ones. The step's metrics
        stay out of `info` (one value per step, not per sample): the generator notes them for each group built
        (`note_group_metrics`) and hands them over beside the samples it returns."""
        out: List[Experience] = list(self.carried)
        weighted = self.config.weight_kind != "none"
        for item in sorted(self.finished, key=lambda it: it.uid):
            kept = self.accepted.get(item.uid)
            if not kept:
                continue
            pool = item.pool
            group = self.gen.new_group_id()
            self.gen.ledger_group(group, *self.origin[item.uid])
            self.gen.note_group_metrics(group, metrics)
            pool_info = {"ada_group": group,
                         "ada_pool_count": torch.tensor([float(pool.count)]), "ada_pool_mean": torch.tensor([pool.mean]),
                         "ada_pool_std": torch.tensor([pool.std]), "ada_samples": torch.tensor([float(pool.samples)])}
            if weighted:  # the pass rate --ada.prompt_weight reads
                pool_info["ada_pool_pass_rate"] = torch.tensor([pool.num_pos / pool.count])
            for index, e in zip(pool.select(), kept):
                e.info["ada_pool_index"] = torch.tensor([float(index)])
                e.info.update(pool_info)
            out.extend(kept)
        logger.info(
            f"{self.title} step {self.step}: {len(self.accepted)} groups "
            f"from {self.prompts_consumed} prompts, {int(metrics.get('ada/samples_generated', 0))} samples, "
            f"eta={metrics.get('ada/eta', 0):.3f}" + (f", {self.skipped} skipped" if self.history is not None
                                                       else "")
        )
        return out


class FixedNStep(RoundStep):
    """Fixed n (Reinforce-Ada off): each prompt one round of n samples, every one kept as its group (the pools of
    `FixedN`), through the same loop, so failed rewards, dead engines and the metrics are handled
    alike. Round and resolution counts say nothing here: the step logs `FIXED_N_METRICS`."""

    title = "Fixed-n"
    progress_title = "Generate samples"

    def logged_metrics(self) -> Optional[set]:
        return FIXED_N_METRICS
