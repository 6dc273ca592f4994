"""The single-machine RL loop: the cluster trainer's sampling and advantage code, a plain-PyTorch policy update.

One step, read top to bottom in `LocalTrainer.step`:
1. generate: `RoundsSamplesGenerator` (Reinforce-Ada rounds, or upstream's fixed n) dispatching to one rollout engine
   (OpenRLHF's RolloutRayActor on vLLM, or the transformers-backed HFRolloutActor) in a local Ray;
2. score the samples under the current policy (and the frozen reference when KL is on), as upstream's
   make_experience does, then `AdoraPoolExperienceMaker.compute_advantages_and_returns` (estimators, ADORA, pool baseline);
3. update: upstream's `PolicyLoss` (clipping, token-mean), AdamW, gradient clipping, optional KL loss, and the
   learning-rate schedule (`lr_scheduler`: upstream's `--actor.lr_scheduler` / `--actor.lr_warmup_ratio` /
   `--actor.min_lr_ratio`, over the run's optimizer steps), its rate logged as `actor_lr`;
4. the engine loads the new weights (a safetensors file), metrics go to JSONL / tensorboard / wandb (with the reward
   file's own extra_logs as `reward_file/*` and the signal checks of openrlhf_ada.trainer.signal_watch, whose
   warnings go to stderr), and a checkpoint is written every `--ckpt.save_steps` steps and at the end. Resuming restores weights, optimizer,
   learning-rate schedule, data position and sampler state, so the same seed gives the same samples.

Held-out evaluation (`--eval.dataset`, see openrlhf_ada.trainer.heldout): upstream's evaluation generation and metrics
on the eval prompts (and with `--eval.avg_k` a second, seeded pass of k samples per problem for avg@k), before
training (a row of its own, step 0, when the run starts fresh; not with `--local.skip_base_eval`), after every
`--eval.steps`-th step, after each step whose running token total crosses a multiple of `--local.eval_tokens`, after
the step that first reaches `--local.eval_at_tokens`, and after the last step (`--local.max_steps`,
or the step that reached `--local.max_generated_tokens`); an evaluation's metrics (`eval/*`, `timing/eval`) join the
row of the step it follows. A run stopped by a signal is not evaluated at its end. Evaluation time is not part of any step's timing.

A checkpoint only ever describes a completed step: the trainer keeps the small per-step state (`StepState`: step,
data position, sampler step, RNG, signal checks) as it was when the last step completed, and knows whether the
model or optimizer have been touched since. After a failure or a second signal it writes that step's checkpoint only
when the model is still exactly as that step left it (a failure while generating or scoring); when the failed step
had already started the update, the previous checkpoint is left as it was. Replacing a checkpoint is crash-safe
(openrlhf_ada.trainer.checkpoint_dir).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

import numpy as np
import ray
import torch
from openrlhf.models.loss import PolicyLoss
from openrlhf.models.utils import compute_approx_kl, masked_mean
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
from safetensors.torch import save_file
from tqdm import tqdm

from openrlhf_ada.args import eval_config
from openrlhf_ada.trainer.checkpoint_dir import find_checkpoint, remove_checkpoint, write_checkpoint
from openrlhf_ada.trainer.heldout import ACCURACY, EvalLoader, avg_at_k_metrics, describe, heldout_metrics
from openrlhf_ada.trainer.metrics_log import MetricsWriter, keep_rows_up_to
from openrlhf_ada.trainer.ppo_utils.batching import trained_group_sizes
from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker
from openrlhf_ada.trainer.ppo_utils.sample_failures import rewards_of, sample_score
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.signal_watch import SignalState, observe, reward_file_logs


@dataclass(frozen=True)
class LocalConfig:
    """The --local.* flags (everything else keeps upstream's flag names and meaning)."""

    engine: str = "vllm"  # vllm | hf
    max_steps: int = 20
    output_dir: str = "runs/local"
    advantage_sign: float = 1.0  # -1 trains against the reward: a sanity check that learning comes from the signal
    gpu_memory_utilization: float = 0.3
    max_model_len: Optional[int] = None  # default: --data.max_len
    engine_cpus: float = 1.0
    overwrite: bool = False  # start over in an output folder that holds an earlier run (its checkpoint is deleted)
    max_generated_tokens: float = 0.0  # > 0: stop after the step whose running token total reaches this budget
    eval_tokens: float = 0.0  # > 0: also evaluate after each step whose running token total crosses a multiple of it
    eval_at_tokens: float = 0.0  # > 0: also evaluate once, after the step whose running token total first reaches it
    request_seeds: bool = False  # vLLM engine: a sampling seed per request from (seed, step, prompt, k)
    skip_base_eval: bool = False  # no evaluation before the first step


@dataclass(frozen=True)
class StepState:
    """Everything a checkpoint records besides model and optimizer, as it was when step `global_step` completed."""

    global_step: int
    generated_tokens_total: float
    loader: dict
    generator: dict  # RoundsSamplesGenerator.state_dict()
    torch_rng: list
    signal: dict


def optimizer_steps_per_step(args) -> int:
    """Optimizer steps of one full training step (`LocalTrainer.update`): --train.max_epochs passes over the step's
    rollout.batch_size x n samples (Est allocates as many), in micro-batches of --rollout.micro_batch_size, one
    optimizer step per window of --train.batch_size samples' micro-batches."""
    samples = args.rollout.batch_size * args.rollout.n_samples_per_prompt
    micro_batches = math.ceil(samples / args.rollout.micro_batch_size)
    return args.train.max_epochs * math.ceil(micro_batches / optimizer_window(args))


def optimizer_window(args) -> int:
    """Micro-batches per optimizer step."""
    return max(1, math.ceil(args.train.batch_size / args.rollout.micro_batch_size))


def lr_scheduler(args, optimizer, training_steps: int):
    """Upstream's learning-rate schedule (openrlhf/utils/deepspeed/deepspeed.py): transformers' `get_scheduler`
    with --actor.lr_scheduler over `training_steps` optimizer steps, of which ceil(--actor.lr_warmup_ratio x
    training_steps) warm up; the two cosine schedules with a floor end at --actor.min_lr_ratio x the rate.
    train_local's training steps are --local.max_steps x `optimizer_steps_per_step` (it starts the next pass over
    the data as needed; a short step at the end of the data, or --local.max_generated_tokens, ends it earlier)."""
    from transformers import get_scheduler

    name = args.actor.lr_scheduler
    specific = {"min_lr_rate": args.actor.min_lr_ratio} if name in ("cosine_with_min_lr",
                                                                     "cosine_warmup_with_min_lr") else {}
    return get_scheduler(name, optimizer, num_warmup_steps=math.ceil(training_steps * args.actor.lr_warmup_ratio),
                         num_training_steps=training_steps, scheduler_specific_kwargs=specific)


class LocalStrategy:
    """What OpenRLHF's datasets and experience maker expect of a strategy, for one process without DeepSpeed."""

    def __init__(self, args):
        self.args = args

    def is_rank_0(self) -> bool:
        return True

    def print(self, *msg):
        print(*msg)


class EpisodeLoader:
    """Prompt batches of one, in a seeded order per episode; `iter()` starts the next episode. Its position
    (episode, prompts consumed) is part of a checkpoint, so a resumed run draws exactly the same prompts."""

    def __init__(self, dataset, seed: int, shuffle: bool = True):
        self.dataset, self.seed, self.shuffle = dataset, seed, shuffle
        self.episode, self.consumed, self._skip = -1, 0, 0

    def __len__(self):
        return len(self.dataset)

    def __iter__(self):
        self.episode += 1
        self.consumed, skip, self._skip = self._skip, self._skip, 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            order = torch.randperm(len(order), generator=torch.Generator().manual_seed(self.seed + self.episode))
            order = order.tolist()
        for i in order[skip:]:
            self.consumed += 1
            yield self.dataset.collate_fn([self.dataset[i]])

    def state_dict(self) -> dict:
        return {"episode": self.episode, "consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        """The next `iter()` continues episode `state["episode"]` after `state["consumed"]` prompts."""
        self.episode, self._skip = state["episode"] - 1, state["consumed"]


def sequence_log_probs(model, experience: Experience) -> torch.Tensor:
    """log p(token t | tokens < t) for t >= 1, shape [B, T-1]: aligned with Experience.action_mask."""
    logits = model(experience.sequences, attention_mask=experience.attention_mask,
                   **image_inputs(model, experience)).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, experience.sequences[:, 1:].unsqueeze(-1)).squeeze(-1)


def image_inputs(model, experience: Experience) -> dict:
    """A vision-language model's image inputs for a batch, as upstream's Actor.forward builds them: every sample's
    own processor outputs (`mm_train_inputs`, made by the engine from that sample's images), concatenated in sample
    order (the model fills the image tokens of the batch, row by row, with the images in that order), and the token
    types (1: image token) of the whole sequences, prompt and response. {} for a text-only batch or model."""
    items = getattr(experience, "mm_train_inputs", None)
    if not items or not hasattr(model.config, "vision_config"):
        return {}
    from openrlhf.utils.vlm_utils import merge_mm_train_inputs

    inputs = merge_mm_train_inputs(items, experience.sequences.device)
    if not inputs:
        return {}
    types = (experience.sequences == model.config.image_token_id).to(torch.int32)
    video = getattr(model.config, "video_token_id", None)
    if video is not None:
        types[experience.sequences == video] = 2
    inputs["mm_token_type_ids" if "image_grid_thw" in inputs else "token_type_ids"] = types
    return inputs


def group_signal(samples: List[Experience], sizes: List[int]) -> List[bool]:
    """Per group (contiguous, of the given sizes in order): do the rewards differ (non-zero advantage under any group
    baseline)?"""
    rewards = rewards_of(samples)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [len(set(rewards[a : a + size])) > 1 for a, size in zip(starts, sizes)]


class LocalTrainer:
    def __init__(self, args, *, policy, reference, tokenizer, engine, prompts_dataset, config: LocalConfig,
                 eval_dataset=None):
        self.args, self.config = args, config
        self.policy, self.reference, self.tokenizer, self.engine = policy, reference, tokenizer, engine
        self.strategy = LocalStrategy(args)
        self.loader = EpisodeLoader(prompts_dataset, seed=args.train.seed)
        self.eval_loader = EvalLoader(eval_dataset) if eval_dataset is not None and len(eval_dataset) else None
        self.eval_config = eval_config(args)  # --eval.avg_k, --eval.avg_temperature, --eval.avg_seed
        self.generator = RoundsSamplesGenerator(strategy=self.strategy, prompts_dataloader=self.loader,
                                             eval_dataloader=self.eval_loader, tokenizer=tokenizer,
                                             vllm_engines=[engine])
        self.kl_ctl = FixedKLController(args.algo.kl.init_coef)
        self.maker = AdoraPoolExperienceMaker(None, None, None, None, self.kl_ctl, self.strategy, tokenizer)
        actor = args.actor
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=actor.adam.lr, betas=tuple(actor.adam.betas),
                                           weight_decay=actor.adam.weight_decay)
        # the schedule's length comes from this run's flags: a resume with another --local.max_steps stretches the rest
        self.lr_steps = config.max_steps * optimizer_steps_per_step(args)
        self.scheduler = lr_scheduler(args, self.optimizer, self.lr_steps)
        self.loss_fn = PolicyLoss(
            clip_eps_low=actor.eps_clip_low_high[0], clip_eps_high=actor.eps_clip_low_high[1],
            dual_clip=actor.dual_clip, token_level_loss=actor.loss_agg_mode == "token-mean",
            policy_loss_type=actor.policy_loss_type,
        )
        self.generate_kwargs = dict(
            do_sample=True, max_len=args.data.max_len, max_new_tokens=args.rollout.max_new_tokens,
            temperature=args.rollout.temperature, top_p=args.rollout.top_p,
        )
        self.global_step, self.generated_tokens_total = 0, 0.0
        self.signal_state = SignalState()
        os.makedirs(config.output_dir, exist_ok=True)
        self.weights_dir = tempfile.mkdtemp(prefix="openrlhf_ada_weights_", dir=_shm_or_tmp())
        self._stop_signal: Optional[int] = None
        self._completed = self.capture_state()  # the last completed step (0: nothing trained yet)
        self._model_touched = False  # model/optimizer changed since self._completed was taken
        self._saved_step = 0  # the step of the checkpoint this run wrote or resumed from
        self._tokens_before_step = 0.0  # the running token total before the current step

    # ------------------------------------------------------------------------------------------------------------
    def fit(self) -> dict:
        args, config = self.args, self.config
        resumed = self.maybe_resume()
        metrics_path = os.path.join(config.output_dir, "metrics.jsonl")
        if resumed:
            keep_rows_up_to(metrics_path, self.global_step, who="train_local")  # rows of steps after the checkpoint are redone
        elif config.overwrite:
            remove_checkpoint(args.ckpt.path)  # a crash before the first save must not resume the earlier run
        self.sync_weights()
        metrics_log = MetricsWriter(metrics_path, append=resumed)
        loggers = _Trackers(args, config.output_dir)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        pbar = None
        last = {}
        failed = True
        try:
            if self.eval_loader is not None and self.global_step == 0 and not self.config.skip_base_eval:
                # before training: a row of its own
                last = {"generated_tokens_total": 0.0, **self.evaluate()}
                metrics_log.write(0, last)
                loggers.log(0, last)
            pbar = tqdm(total=config.max_steps, initial=self.global_step, desc="train_local", dynamic_ncols=True)
            ran_out = False
            while self.global_step < config.max_steps and not self.budget_reached() and self._stop_signal is None:
                metrics = self.step()
                if metrics is None:  # the data ran out
                    ran_out = True
                    break
                if self.eval_loader is not None and self.should_evaluate():
                    metrics.update(self.evaluate())
                last = metrics
                metrics_log.write(self.global_step, metrics)
                loggers.log(self.global_step, metrics)
                pbar.update(1)
                postfix = dict(reward=f"{metrics['reward_mean']:.3f}", eta=f"{metrics['eta']:.2f}")
                if ACCURACY in metrics:
                    postfix["heldout"] = f"{metrics[ACCURACY]:.3f}"
                pbar.set_postfix(**postfix)
                if args.ckpt.save_steps > 0 and self.global_step % args.ckpt.save_steps == 0:
                    self.save_checkpoint()
            if ran_out and self.eval_loader is not None and last and self.global_step > 0 and ACCURACY not in last:
                evaluation = self.evaluate()  # the last step's row again, now with its evaluation
                last = {**last, **evaluation}
                metrics_log.write(self.global_step, last)
                loggers.log(self.global_step, evaluation)
            if self.budget_reached() and self._stop_signal is None:
                print(f"[train_local] generated-token budget reached: {self.generated_tokens_total:.0f} tokens >= "
                      f"--local.max_generated_tokens {config.max_generated_tokens:.0f} after step {self.global_step}")
            failed = False
        finally:
            if pbar is not None:
                pbar.close()
            try:
                self._final_checkpoint(failed)
            finally:
                metrics_log.close()
                loggers.close()
                for s, handler in previous.items():
                    signal.signal(s, handler)
                shutil.rmtree(self.weights_dir, ignore_errors=True)
        if self._stop_signal is not None:
            print(f"[train_local] stopped by signal {self._stop_signal} after step {self.global_step}; "
                  f"checkpoint in {self.checkpoint_dir}; rerun with --ckpt.load_enable to continue")
        return last

    def budget_reached(self) -> bool:
        budget = self.config.max_generated_tokens
        return budget > 0 and self.generated_tokens_total >= budget

    def should_evaluate(self) -> bool:
        """After the step just completed: every --eval.steps-th step, a step that crossed a multiple of
        --local.eval_tokens, the step that first reached --local.eval_at_tokens, and the run's last step."""
        every = self.args.eval.steps
        if every > 0 and self.global_step % every == 0:
            return True
        period = self.config.eval_tokens
        if period > 0 and self._tokens_before_step // period < self.generated_tokens_total // period:
            return True
        at = self.config.eval_at_tokens
        if at > 0 and self._tokens_before_step < at <= self.generated_tokens_total:
            return True
        return self._stop_signal is None and (self.global_step >= self.config.max_steps or self.budget_reached())

    @torch.no_grad()
    def evaluate(self) -> Dict[str, float]:
        """Held-out evaluation of the current policy (the engine holds its weights): upstream's eval generation
        over the whole eval set (--eval.temperature, --eval.n_samples_per_prompt), then with --eval.avg_k a second
        pass of k samples per problem for avg@k; metrics of openrlhf_ada.trainer.heldout."""
        ev = self.args.eval
        t0 = time.time()
        # the transformers engine (and vLLM's with --local.request_seeds) seeds samples by (seed, epoch, prompt, k):
        # every evaluation draws with the same epoch (common random numbers across evaluations); the next step
        # reseeds with its own number
        ray.get(self.engine.reseed.remote(-1))
        samples = self._eval_samples(ev.temperature, ev.n_samples_per_prompt)
        metrics = heldout_metrics(samples, ev.n_samples_per_prompt, self.args.ada.positive_threshold,
                                  self.eval_loader, temperature=ev.temperature,
                                  failures=getattr(self.generator, "last_eval_failures", None))
        avg = self.eval_config
        if avg.avg_k:
            t1 = time.time()
            ray.get(self.engine.reseed.remote(-1, avg.avg_seed))  # the same draws whatever --train.seed (hf)
            samples = self._eval_samples(avg.avg_temperature, avg.avg_k)
            metrics.update(avg_at_k_metrics(samples, avg.avg_k, self.args.ada.positive_threshold,
                                            temperature=avg.avg_temperature,
                                            failures=getattr(self.generator, "last_eval_failures", None)))
            metrics["timing/eval_avg"] = time.time() - t1
        metrics["timing/eval"] = time.time() - t0
        tqdm.write(f"[train_local] step {self.global_step}: {describe(metrics)}, {metrics['timing/eval']:.0f} s")
        return metrics

    def _eval_samples(self, temperature: float, n: int) -> List[Experience]:
        """Every eval prompt's n samples at `temperature` (0: greedy), through upstream's eval generation."""
        kwargs = dict(self.generate_kwargs, do_sample=temperature > 0, temperature=temperature,
                      n_samples_per_prompt=n)
        rollout = self.args.rollout
        chunk = rollout.batch_size  # upstream dispatches --rollout.batch_size eval prompts at a time; one engine
        rollout.batch_size = max(chunk, len(self.eval_loader))  # batches better with all of them in flight
        try:
            return self.generator.generate_eval_samples(**kwargs)
        finally:
            rollout.batch_size = chunk

    def _on_signal(self, signum, frame):
        if self._stop_signal is not None:  # second signal: stop now (the last good checkpoint is kept, see module doc)
            raise KeyboardInterrupt
        self._stop_signal = signum
        print(f"\n[train_local] signal {signum}: finishing step {self.global_step + 1}, then checkpointing")

    def _final_checkpoint(self, failed: bool) -> None:
        """At the end, after a signal or a failure: save the last completed step unless the model has moved past it
        (a failure in the middle of an update); then the previous checkpoint stays exactly as it was."""
        if self._model_touched:
            kept = f"the checkpoint of step {self._saved_step} in {self.checkpoint_dir}" if self._saved_step else \
                "no checkpoint (none was written yet)"
            print(f"[train_local] step {self._completed.global_step + 1} failed after it had started to change the "
                  f"model; {kept} is kept as it was; rerun with --ckpt.load_enable to continue from it",
                  file=sys.stderr, flush=True)
            return
        written = self.save_checkpoint()
        if failed and self._completed.global_step:
            what = "written" if written else "kept"
            print(f"[train_local] step {self._completed.global_step + 1} failed; checkpoint of the last completed "
                  f"step {self._completed.global_step} {what} in {self.checkpoint_dir}; rerun with --ckpt.load_enable "
                  "to continue from it", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------------------------------
    def step(self) -> Optional[Dict[str, float]]:
        n = self.args.rollout.n_samples_per_prompt
        step = self.global_step + 1
        self._tokens_before_step = self.generated_tokens_total
        t0 = time.time()
        ray.get(self.engine.reseed.remote(step))
        samples, _, _, exhausted = self.generator.generate_samples(**self.generate_kwargs)
        if not samples:
            samples, _, _, exhausted = self.generator.generate_samples(**self.generate_kwargs)  # next episode
            if not samples:
                return None
        t_gen = time.time() - t0

        experiences = self.maker.split_rollout_samples(samples)
        self.score(experiences)
        self.maker.global_step = step
        experiences = self.maker.compute_advantages_and_returns(experiences)
        if self.config.advantage_sign != 1.0:
            for e in experiences:
                e.advantages = e.advantages * self.config.advantage_sign
        t1 = time.time()
        self._model_touched = True  # from here on, the model no longer matches self._completed until the step ends
        train_stats = self.update(experiences)
        t_train = time.time() - t1
        self.sync_weights()
        metrics = self.metrics_log_row(samples, experiences, n, train_stats, t_gen, t_train)
        metrics["timing/step"] = time.time() - t0  # generation, scoring, update and weight sync
        metrics.update(self.watch_signal(step, samples))
        self.global_step = step
        self._completed = self.capture_state()
        self._model_touched = False
        return metrics

    def watch_signal(self, step: int, samples: List[Experience]) -> Dict[str, float]:
        """The reward file's own extra_logs (means, ``reward_file/*``) and the signal checks of
        openrlhf_ada.trainer.signal_watch; their warnings go to the driver's stderr."""
        infos = [s.info for s in samples]
        self.signal_state, metrics, warnings = observe(
            self.signal_state, step=step, rewards=rewards_of(samples), infos=infos,
            labels=[s.labels[0] for s in samples])
        for warning in warnings:
            tqdm.write(f"[train_local] {warning}", file=sys.stderr)
        metrics.update(reward_file_logs(infos))
        return metrics

    @torch.no_grad()
    def score(self, experiences: List[Experience]) -> None:
        """Old log-probs under the current policy, reference log-probs and KL, as upstream's make_experience."""
        args = self.args
        self.policy.eval()
        for e in experiences:
            e.action_log_probs = sequence_log_probs(self.policy, e)
            if self.reference is not None:
                base = sequence_log_probs(self.reference, e)
                e.kl = compute_approx_kl(e.action_log_probs, base, kl_estimator=args.algo.kl.estimator)
                e.base_action_log_probs = base if args.algo.kl.use_loss else None
            else:
                e.kl = torch.zeros_like(e.action_log_probs)
            e.info["kl"] = masked_mean(e.kl, e.action_mask, dim=-1)
            if args.algo.kl.use_loss:  # the KL goes into the loss, not into the reward
                e.kl = torch.zeros_like(e.kl)

    def update(self, experiences: List[Experience]) -> Dict[str, float]:
        """PPO epochs over the rollout: one optimizer step per --train.batch_size samples, micro-batches of
        --rollout.micro_batch_size accumulated, token-mean over each optimizer window, gradient clipping. The samples
        each epoch trained are counted and checked against those handed in (openrlhf_ada.trainer.ledger)."""
        from openrlhf_ada.trainer import ledger

        args = self.args
        self.policy.train()
        per_step = optimizer_window(args)
        windows = [experiences[i : i + per_step] for i in range(0, len(experiences), per_step)]
        stats = {"policy_loss": [], "clip_ratio": [], "grad_norm": [], "kl_loss": []}
        epoch_counts = []
        for _ in range(args.train.max_epochs):
            epoch_counts.append(0)
            for window in windows:
                tokens = sum(e.action_mask.sum() for e in window).float()
                samples = float(sum(len(e.sequences) for e in window))
                self.optimizer.zero_grad(set_to_none=True)
                for e in window:
                    log_probs = sequence_log_probs(self.policy, e)
                    loss, clip_ratio, *_ = self.loss_fn(log_probs, e.action_log_probs, e.advantages,
                                                        action_mask=e.action_mask, batch_num_tokens=tokens,
                                                        global_batch_size=samples)
                    if args.algo.kl.use_loss and e.base_action_log_probs is not None:
                        kl = compute_approx_kl(log_probs, e.base_action_log_probs, kl_estimator=args.algo.kl.estimator)
                        kl_loss = (kl * e.action_mask).sum() / tokens
                        loss = loss + args.algo.kl.init_coef * kl_loss
                        stats["kl_loss"].append(kl_loss.item())
                    loss.backward()
                    epoch_counts[-1] += len(e.sequences)
                    stats["policy_loss"].append(loss.item())
                    stats["clip_ratio"].append(float(clip_ratio))
                norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), args.actor.max_norm)
                stats["grad_norm"].append(float(norm))
                self.optimizer.step()
                if self.scheduler.last_epoch < self.lr_steps:  # at its end the rate stays (cosine would rise again)
                    self.scheduler.step()
        out = {k: float(np.mean(v)) for k, v in stats.items() if v}
        out["actor_lr"] = self.scheduler.get_last_lr()[0]  # as upstream logs it: the rate after the step's updates
        trained = ledger.rank_term(epoch_counts)  # one process: its one rank's count is the sum over ranks
        out.update(ledger.check_samples(self.global_step + 1, ledger.count_samples(experiences), trained, [trained]))
        return out

    def sync_weights(self) -> None:
        path = os.path.join(self.weights_dir, "policy.safetensors")
        save_file({k: v.detach().contiguous().clone() for k, v in self.policy.state_dict().items()}, path)
        try:
            ray.get(self.engine.load_weights_from_file.remote(path))
        finally:  # the engine holds the weights now; a copy left in /dev/shm would hold RAM after a crash or kill
            os.remove(path)

    # ------------------------------------------------------------------------------------------------------------
    def metrics_log_row(self, samples, experiences, n, train_stats, t_gen, t_train) -> Dict[str, float]:
        """The standard keys of openrlhf_ada.trainer.metrics_log for every run, plus the algorithms' own metrics."""
        threshold = self.args.ada.positive_threshold
        rewards = torch.tensor(rewards_of(samples))
        scores = torch.tensor([sample_score(s) for s in samples])
        lengths = torch.tensor([float(s.response_length.reshape(-1)[0]) for s in samples])
        sizes = trained_group_sizes(samples)  # from the group id of each sample, whatever the strategy
        signal_groups = group_signal(samples, sizes)
        gen = self.generator.last_metrics if self.generator.pool_config is not None else {}  # n = 1: upstream's path
        generated = gen.get("ada/tokens_generated", lengths.sum().item())
        per_prompt = gen.get("ada/samples_per_prompt_mean", float(n))
        if "ada/eta" in gen:
            eta = gen["ada/eta"]
        else:
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            useful = sum(lengths[a : a + size].sum().item() for a, size, s in zip(starts, sizes, signal_groups) if s)
            eta = useful / generated if generated else 0.0
        self.generated_tokens_total += generated
        metrics = {
            "reward_mean": gen.get("ada/reward_mean_generated", rewards.mean().item()),
            "pass_rate": gen.get("ada/pass_rate_generated", (scores > threshold).float().mean().item()),
            "trained_reward_mean": rewards.mean().item(),
            "generated_tokens": generated,
            "generated_tokens_total": self.generated_tokens_total,
            "samples_per_prompt": per_prompt,
            "zero_adv_group_share": 1.0 - float(np.mean(signal_groups)),
            "eta": eta,
            "response_length_mean": lengths.mean().item(),
            "prompts": float(len(signal_groups)),
            "timing/generation": t_gen,
            "timing/train": t_train,
        }
        metrics.update(getattr(samples, "ledger", {}))  # the generator's step ledger (checked where it was counted)
        metrics.update(train_stats)
        metrics.update(gen)
        adora_keys = [k for k in experiences[0].info if k.startswith("adora_")]
        for key in adora_keys:
            metrics[key.replace("adora_", "adora/", 1)] = torch.cat([e.info[key] for e in experiences]).mean().item()
        if "ada_prompt_weight" in experiences[0].info:  # --ada.prompt_weight: the step's mean weight
            metrics["ada/prompt_weight"] = torch.cat([e.info["ada_prompt_weight"] for e in experiences]).mean().item()
        if "ada/resolved_share" in gen:
            metrics["resolved_share"] = gen["ada/resolved_share"]
        return metrics

    # ------------------------------------------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.args.ckpt.path, "latest")

    def capture_state(self) -> StepState:
        return StepState(global_step=self.global_step, generated_tokens_total=self.generated_tokens_total,
                         loader=dict(self.loader.state_dict()), generator=self.generator.state_dict(),
                         torch_rng=torch.get_rng_state().tolist(), signal=asdict(self.signal_state))

    def save_checkpoint(self) -> bool:
        """Write the last completed step (model, optimizer, `StepState`) unless it is already on disk; the previous
        checkpoint is replaced only once the new one is complete. Returns whether one was written."""
        state = self._completed
        if self._model_touched:
            raise RuntimeError("save_checkpoint in the middle of a step: the model no longer matches its state")
        if state.global_step == 0 or state.global_step == self._saved_step:
            return False

        def fill(folder: str) -> None:
            self.policy.save_pretrained(os.path.join(folder, "model"), safe_serialization=True)
            self.tokenizer.save_pretrained(os.path.join(folder, "model"))
            torch.save(self.optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
            torch.save(self.scheduler.state_dict(), os.path.join(folder, "scheduler.pt"))
            with open(os.path.join(folder, "trainer_state.json"), "w") as f:  # last: it marks the folder complete
                json.dump(asdict(state), f)

        write_checkpoint(self.args.ckpt.path, fill)
        self._saved_step = state.global_step
        return True

    def load_scheduler(self, path: str, global_step: int) -> None:
        """The schedule's position from the checkpoint; one written before the schedule existed (no scheduler.pt,
        a constant rate) continues at the position its steps reached when full."""
        saved = os.path.join(path, "scheduler.pt")
        if os.path.exists(saved):
            self.scheduler.load_state_dict(torch.load(saved, weights_only=False))
            return
        steps = min(global_step * optimizer_steps_per_step(self.args), self.lr_steps)
        print(f"[train_local] {path} holds no learning-rate schedule (written before train_local had one): it "
              f"continues at optimizer step {steps} of --actor.lr_scheduler {self.args.actor.lr_scheduler}")
        with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": on purpose here
            warnings.simplefilter("ignore")
            for _ in range(steps):
                self.scheduler.step()

    def maybe_resume(self) -> bool:
        if not self.args.ckpt.load_enable:
            return False
        path = find_checkpoint(self.args.ckpt.path)
        if path is None:
            print(f"[train_local] --ckpt.load_enable: no checkpoint found in {self.args.ckpt.path}, starting fresh")
            return False
        from safetensors.torch import load_file

        with open(os.path.join(path, "trainer_state.json")) as f:
            state = json.load(f)
        weights = load_file(os.path.join(path, "model", "model.safetensors"))
        missing, unexpected = self.policy.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"} if getattr(self.policy.config, "tie_word_embeddings", False) else set()
        if unexpected or set(missing) - tied:  # save_pretrained stores tied weights once; nothing else may differ
            raise RuntimeError(f"checkpoint {path} does not match the model: missing {sorted(set(missing) - tied)}, "
                               f"unexpected {sorted(unexpected)}; was it written for another --actor.model_name_or_path?")
        self.optimizer.load_state_dict(torch.load(os.path.join(path, "optimizer.pt"), weights_only=False))
        self.load_scheduler(path, state["global_step"])
        self.global_step = state["global_step"]
        self.generated_tokens_total = state["generated_tokens_total"]
        self.loader.load_state_dict(state["loader"])
        self.generator.load_state_dict(state["generator"] if "generator" in state
                                       else {"step": state["generator_step"]})  # checkpoints before the field
        self.signal_state = SignalState(**state.get("signal", {}))
        torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
        self._completed = self.capture_state()
        self._saved_step = self.global_step
        print(f"[train_local] resumed from {path} at step {self.global_step}")
        return True


def _shm_or_tmp() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class _Trackers:
    """tensorboard (--logger.tensorboard_dir) and wandb (--logger.wandb.key or WANDB_MODE=offline), optional."""

    def __init__(self, args, output_dir: str):
        self.tb = self.wandb = None
        if args.logger.tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(os.path.join(args.logger.tensorboard_dir, os.path.basename(output_dir)))
        wandb_key = getattr(args.logger.wandb, "key", None)
        if wandb_key or os.environ.get("WANDB_MODE") == "offline":
            import wandb

            if wandb_key and wandb_key != "offline":
                wandb.login(key=wandb_key)
            self.wandb = wandb.init(project=args.logger.wandb.project, name=args.logger.wandb.run_name,
                                    dir=output_dir, config=_flat(args), reinit=True)

    def log(self, step: int, metrics: Dict[str, float]) -> None:
        """Training metrics under train/, the held-out evaluation's under its own eval/ names."""
        named = {(k if k.startswith("eval/") else f"train/{k}"): v for k, v in metrics.items()}
        if self.tb is not None:
            for key, value in named.items():
                self.tb.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(named, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _flat(ns, prefix="") -> dict:
    out = {}
    for key, value in vars(ns).items():
        if hasattr(value, "__dict__"):
            out.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[f"{prefix}{key}"] = value
    return out
