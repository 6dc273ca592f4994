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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

import ray
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
from openrlhf.utils.logging_utils import init_logger
from tqdm import tqdm

from openrlhf_ada.algorithms.reinforce_ada import AdaConfig, PromptPool, make_rng, step_metrics
from openrlhf_ada.args import ada_config, fault_config
from openrlhf_ada.trainer.ray.reward_guard import FAIL_NAMES

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
        out = {"fault/failed_share": self.failed / self.total if self.total else 0.0}
        for reason, count in self.by_reason.items():
            out[f"fault/failed_{reason}"] = float(count)
        return out

    def check(self, limit: float, reward_url, tokenizer) -> None:
        if not self.total or self.failed / self.total <= limit:
            return
        e = self.example
        response = tokenizer.decode(e.sequences[0][e.action_mask[0].nonzero().flatten() + 1], skip_special_tokens=True)
        raise RuntimeError(
            f"{self.failed} of {self.total} samples this step ({self.failed / self.total:.0%}) got no usable reward "
            f"from {reward_url} (limit --fault.max_failed_share {limit}); reasons: {self.by_reason}. One failing "
            f"input: prompt={e.prompts[0]!r}, label={e.labels[0]!r}, response={response[:500]!r}. Fix the reward "
            "function (it must return one finite number per sample, within --fault.reward_timeout seconds)."
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
        self._in_eval = False
        self._step = 0  # counts training generation calls; keys the per-prompt random generators
        self.last_metrics: dict = {}

    @classmethod
    def from_upstream(cls, generator: SamplesGenerator) -> "AdaSamplesGenerator":
        """Build from an upstream SamplesGenerator that an upstream constructor already made."""
        return cls(
            strategy=generator.strategy,
            prompts_dataloader=generator.prompts_dataloader,
            eval_dataloader=generator.eval_dataloader,
            tokenizer=generator.tokenizer,
            vllm_engines=generator.vllm_engines,
        )

    @torch.no_grad()
    def generate_eval_samples(self, **generate_kwargs) -> List[Experience]:
        self._in_eval = True  # evaluation generation stays upstream's
        try:
            return super().generate_eval_samples(**generate_kwargs)
        finally:
            self._in_eval = False

    def _generate_vllm(
        self, dataloader_iter, num_prompts: int, dynamic_filtering, **generate_kwargs
    ) -> Tuple[List[Experience], int, bool]:
        if self._in_eval or self.rounds is None:
            return super()._generate_vllm(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)
        return self._generate_rounds(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)

    # -- faults ---------------------------------------------------------------------------------------------------
    def _drop_dead_engines(self, error) -> None:
        """Keep only the engines that still answer; with none left, stop with a clear error."""
        alive = []
        for engine in self.vllm_engines:
            try:
                ray.get(engine.get_num_unfinished_requests.remote(), timeout=30)
                alive.append(engine)
            except Exception:  # dead, or not answering: either way it gets no more work
                pass
        logger.warning(f"rollout engine lost ({type(error).__name__}); {len(alive)} of {len(self.vllm_engines)} "
                       "engines left; its rounds go to the others")
        self.vllm_engines[:] = alive
        if not alive:
            raise RuntimeError(
                f"every rollout engine has died (last error: {type(error).__name__}: {error}); nothing can generate. "
                "Check the engines' logs (out of memory?) and restart from the last checkpoint."
            ) from error

    def _check_stalled(self, last_progress: float, pending: int) -> None:
        if time.time() - last_progress > self.fault.engine_timeout:
            raise TimeoutError(
                f"no rollout came back for {self.fault.engine_timeout:.0f}s ({pending} requests pending on "
                f"{len(self.vllm_engines)} engines): the engines look hung. Raise --fault.engine_timeout for very "
                "long generations, or check the engine logs."
            )

    # -----------------------------------------------------------------------------------------------------------
    def _generate_rounds(self, dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs):
        ada = self.rounds
        self._step += 1
        step_seed = (ada.seed, self._step)
        generate_kwargs = {k: v for k, v in generate_kwargs.items() if k != "n_samples_per_prompt"}
        started = time.time()

        prompts_consumed = 0
        exhausted = False
        next_uid = 0
        finished: List[_Prompt] = []  # every prompt processed this step, in the order drawn
        accepted: dict = {}  # uid -> kept experiences
        filtered = engine_failures = 0

        def draw(count: int) -> List[_Prompt]:
            nonlocal prompts_consumed, exhausted, next_uid
            if count <= 0 or exhausted:
                return []
            prompts, labels, images, exhausted = _collect_prompt_batch(dataloader_iter, count)
            prompts_consumed += len(prompts)
            out = []
            for p, lab, img in zip(prompts, labels, images):
                pool = PromptPool(ada, rng=make_rng(*step_seed, next_uid))
                out.append(_Prompt(next_uid, p, lab, img, pool))
                next_uid += 1
            return out

        pending = {}  # ray ref -> _Prompt

        def dispatch(batch: List[_Prompt]) -> None:
            by_size = {}
            for item in batch:
                by_size.setdefault(item.pool.next_round_size(), []).append(item)
            for size, items in by_size.items():
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
            nonlocal filtered
            finished.append(item)
            kept = [item.pool.items[i] for i in item.pool.select()]
            if not kept:
                return 1  # dropped or failed
            if dynamic_filtering:
                lo, hi = self.args.algo.dynamic_filtering_range
                mean_score = sum(_score(e) for e in kept)
                mean_score /= len(kept)
                if not (lo < mean_score < hi):
                    filtered += 1
                    return 1
            accepted[item.uid] = kept
            return 0

        active = draw(num_prompts)
        if not active:
            return [], 0, True
        pbar = tqdm(total=num_prompts, desc="Generate samples (Reinforce-Ada)" if self.ada else "Generate samples")
        waiting_round: List[_Prompt] = []  # sync schedule: prompts whose next round waits for the barrier
        dispatch(active)
        failures = _FailureLog()
        last_progress = time.time()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=10.0)
            to_dispatch: List[_Prompt] = []
            refill = 0
            if not ready:
                self._check_stalled(last_progress, len(pending))
            for ref in ready:
                item = pending.pop(ref)
                try:
                    responses = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    # the engine died mid-round: the round is lost, not counted; run it again elsewhere
                    self._drop_dead_engines(e)
                    engine_failures += 1
                    to_dispatch.append(item)
                    continue
                last_progress = time.time()
                experiences = [self._process_response_into_experience(r, **generate_kwargs) for r in responses]
                failures.record(experiences)
                item.pool.add_round(
                    scores=[_score(e) for e in experiences],
                    rewards=[_scalar(e.rewards) for e in experiences],
                    items=experiences,
                    lengths=[int(e.response_length.reshape(-1)[0].item()) for e in experiences],
                )
                if item.pool.done:
                    refill += finish(item)
                    pbar.update(1 if item.uid in accepted else 0)
                elif ada.schedule == "async":
                    to_dispatch.append(item)
                else:
                    waiting_round.append(item)
            to_dispatch += draw(refill)
            if ada.schedule == "sync":
                # the barrier: next rounds (and replacements) start only when every round in flight is back
                waiting_round += to_dispatch
                to_dispatch = []
                if not pending:
                    to_dispatch, waiting_round = waiting_round, []
            if to_dispatch:
                dispatch(to_dispatch)
        pbar.close()

        metrics = step_metrics([item.pool for item in finished], ada.max_rounds)
        failures.check(self.fault.max_failed_share, self.args.reward.remote_url, self.tokenizer)
        metrics.update(failures.metrics())
        metrics["fault/engine_failures"] = float(engine_failures)
        metrics["ada/dynamic_filtered"] = float(filtered)
        metrics["ada/prompts_consumed"] = float(prompts_consumed)
        metrics["ada/generation_seconds"] = time.time() - started
        if self.ada is None:  # fixed n: round and resolution counts say nothing
            metrics = {k: v for k, v in metrics.items() if k in FIXED_N_METRICS or k.startswith("fault/")}
        self.last_metrics = metrics

        out: List[Experience] = []
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
        )
        return out, prompts_consumed, exhausted
