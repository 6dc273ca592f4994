"""`AdoraPoolPPOTrainer`: upstream's PPOTrainer Ray actor, using RoundsSamplesGenerator and AdoraPoolExperienceMaker.

A `@ray.remote` class cannot be subclassed, so the plain class is taken from `PPOTrainer.__ray_actor_class__`,
subclassed, and wrapped with `ray.remote` again. The launcher puts the result where upstream's `train()` looks for
it (`openrlhf.trainer.ppo_trainer.PPOTrainer`). Ray pickles the class by reference to this module, so the actor
process imports openrlhf_ada and runs these subclasses wherever it is scheduled.
"""

import os
import time

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer, compute_eval_metrics
from openrlhf.utils.logging_utils import init_logger

from openrlhf_ada.args import eval_config
from openrlhf_ada.trainer.heldout import EVAL_PREFIX, avg_at_k_metrics, describe, heldout_metrics
from openrlhf_ada.trainer.ledger import RANK_COUNTS, LedgerError, check_samples, count_samples
from openrlhf_ada.trainer.metrics_log import MetricsWriter, keep_rows_up_to, read_metrics, standardize
from openrlhf_ada.trainer.ppo_utils.batching import short_step_unit
from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker
from openrlhf_ada.trainer.ppo_utils.loader_state import LoaderWithSamplerState, seed_prompt_order
from openrlhf_ada.trainer.ppo_utils.sample_failures import rewards_of
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ray.engine_health import lost_engines_message, probe_engines
from openrlhf_ada.trainer.signal_watch import SignalState, observe

logger = init_logger(__name__)


class AdoraPoolTrainerMixin:
    """For classes built on BasePPOTrainer: swap in AdoraPoolExperienceMaker, tell it which step it is computing, stop on
    a lost rollout engine before the weight sync would wait for it, watch the training signal, check the step's
    sample ledger right after the update (openrlhf_ada.trainer.ledger), write <ckpt.path>/metrics.jsonl, and add the
    held-out accuracy, its standard error and avg@k (--eval.avg_k) to upstream's evaluation (`evaluate`, called by
    the synchronous trainer)."""

    def _install_experience_maker(self) -> None:
        upstream = self.experience_maker
        self.experience_maker = AdoraPoolExperienceMaker(
            upstream.actor_model_group,
            upstream.critic_model_group,
            upstream.reward_model_group,
            upstream.initial_model_group,
            upstream.kl_ctl,
            upstream.strategy,
            upstream.tokenizer,
        )
        # the engines the policy actor syncs weights to (the samples generator may prune its own list)
        self._sync_engines = list(self.vllm_engines or [])
        self._signal_state = SignalState()
        if self.args.ada.enable and (self.args.ada.unresolved == "drop" or self.args.algo.dynamic_filtering_enable):
            logger.warning(
                "the learning-rate schedule is built for upstream's step count (prompts x n / --train.batch_size x "
                "episodes); with --ada.unresolved drop or dynamic filtering each step draws more prompts than "
                "--rollout.batch_size, so the run ends before the schedule does and the last learning rate is above "
                "its final value (the log's actor_lr shows it; --actor.lr_scheduler constant_with_warmup avoids it)"
            )

    def _stop_on_lost_engines(self) -> None:
        """Every rollout engine must answer before a step trains: the weight sync after it addresses each of them,
        and a dead one makes it raise (CUDA IPC) or wait forever (an NCCL group has a fixed size)."""
        _, lost = probe_engines(self._sync_engines, timeout=60)
        if lost:
            raise RuntimeError(lost_engines_message(lost, ". The run stops before the weight sync would wait for it",
                                                    self.args))

    def broadcast_to_vllm(self) -> None:
        self._stop_on_lost_engines()  # an engine may also die while the step trains
        try:
            super().broadcast_to_vllm()
        except Exception as failure:  # an engine that died during the sync: say which, and where to resume
            for _ in range(5):  # its death may take a moment to show (the gloo peer closes first)
                _, lost = probe_engines(self._sync_engines, timeout=60)
                if lost:
                    raise RuntimeError(lost_engines_message(lost, " during the weight sync", self.args)) from failure
                time.sleep(2.0)
            raise

    def train_step(self, rollout_samples, global_step: int):
        self._stop_on_lost_engines()
        step = global_step + 1  # the step this update will be logged as
        self.experience_maker.global_step = step
        rewards = [r for r in rewards_of(rollout_samples) if r is not None]
        self._signal_state, signal_metrics, warnings = observe(
            self._signal_state, step=step, rewards=rewards, infos=[s.info for s in rollout_samples],
            labels=[s.labels[0] for s in rollout_samples])
        for warning in warnings:
            logger.warning(warning)
        self._ledger_step, self._ledger_samples_trained = step, count_samples(rollout_samples)
        status, global_step = super().train_step(rollout_samples, global_step)
        status.update(signal_metrics)
        # the generator's step ledger, checked where it was counted, and the step's metrics: beside the samples (not
        # in their `info`, a tensor per sample), here in the sync trainer's process and in the async training actor's
        status.update({k: v for k, v in beside_samples(rollout_samples).items() if k not in status})
        return status, global_step

    def ppo_train(self, global_steps: int) -> dict:
        """Upstream's update of the step's samples, then the sample ledger's check: the samples the generator handed
        to this step (`train_step`) against the samples the policy's ranks trained, which every rank of the
        project's policy actor returns (trainer/ray/ppo_actor.py). A difference stops the run here, before the
        weight sync, the checkpoint and the step's metrics."""
        status = super().ppo_train(global_steps)
        per_rank = status.pop(RANK_COUNTS, None)
        step = self._ledger_step
        if per_rank is None:
            if self.actor_model_group is not None and global_steps <= self.args.critic.freezing_steps:
                logger.warning(f"step {step}: the policy is frozen (--critic.freezing_steps "
                               f"{self.args.critic.freezing_steps}): only the critic trained, the sample ledger is "
                               "not checked")
                return status
            raise LedgerError(f"step {step}: the policy's ranks reported no count of the samples they trained: the "
                              "policy actor is not the project's (openrlhf_ada.trainer.ray.ppo_actor), so the sample "
                              "ledger cannot be checked")
        status.update(check_samples(step, self._ledger_samples_trained, sum(per_rank), per_rank))
        return status

    def save_logs_and_checkpoints(self, global_step: int, logs_dict=None, client_states=None) -> None:
        """Upstream's logging and checkpoints, plus one JSON line per step in <--ckpt.path>/metrics.jsonl (the
        format openrlhf_ada.cli.compare reads), whatever wandb/tensorboard are set to. A resumed run first drops
        the rows of the steps it redoes and continues the running token total."""
        super().save_logs_and_checkpoints(global_step, logs_dict, client_states)
        if logs_dict:
            if getattr(self, "_metrics_writer", None) is None:
                path = os.path.join(self.args.ckpt.path, "metrics.jsonl")
                keep_rows_up_to(path, global_step - 1, who="openrlhf_ada")
                earlier = read_metrics(path) if os.path.isfile(path) else []
                self._generated_tokens_total = float(earlier[-1].get("generated_tokens_total") or 0.0) if earlier \
                    else 0.0
                self._metrics_writer = MetricsWriter(path, append=True)
            row = standard_metrics(logs_dict, self.args.rollout.n_samples_per_prompt)
            self._generated_tokens_total += row.get("generated_tokens", 0.0)
            row["generated_tokens_total"] = self._generated_tokens_total
            self._metrics_writer.write(global_step, row)
            self._last_metrics_row = (global_step, row)

    def evaluate(self, global_step, **generate_kwargs):
        """Upstream's evaluation (its generation, `compute_eval_metrics`' keys, the best-checkpoint metric) plus the
        held-out keys of openrlhf_ada.trainer.heldout: accuracy and its standard error, and avg@k with
        --eval.avg_k. Logged to wandb/tensorboard as upstream logs its own (eval/<key>), and added to the step's
        row of metrics.jsonl under train_local's names (eval/accuracy, eval/avg_at_k, ...)."""
        t0 = time.time()
        logs, named = cluster_evaluation(self.samples_generator, self.eval_dataloader, self.args, generate_kwargs)
        named["timing/eval"] = time.time() - t0
        if self.wandb_logger:
            self.wandb_logger.log_eval(global_step, logs)
        if self.tensorboard_logger:
            self.tensorboard_logger.log_eval(global_step, logs)
        logger.info(f"evaluation at step {global_step} in {named['timing/eval']:.0f} s: {describe(named)}")
        step, row = getattr(self, "_last_metrics_row", (None, None))
        if step == global_step and getattr(self, "_metrics_writer", None) is not None:
            self._metrics_writer.write(global_step, {**row, **named})  # the step's row again, with its evaluation
        return logs


def beside_samples(rollout_samples) -> dict:
    """What the generator hands over beside a step's samples (`StepSamples`), as the cluster trainers log it with
    the step's status: the step ledger under its own names (`ledger/...`), and the step's Reinforce-Ada and fault
    metrics under the names they were logged by when they rode in every sample's `info` ("/" written "_":
    `ada_eta`, `fault_failed_share`; docs/metrics.md), which upstream's loggers and metrics.jsonl keep showing."""
    out = dict(getattr(rollout_samples, "ledger", {}))
    out.update({key.replace("/", "_"): value for key, value in getattr(rollout_samples, "metrics", {}).items()})
    return out


def standard_metrics(status: dict, n: int) -> dict:
    """A step's upstream status dict (numbers kept) plus the standard keys of openrlhf_ada.trainer.metrics_log,
    derived by the same mapping the compare tool applies (`standardize`)."""
    row = {k: float(v) for k, v in status.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    standard = standardize([{**row, "step": 0}], "trainer status")[0]
    standard.pop("step")
    standard.pop("generated_tokens_total", None)  # the trainer keeps the running total itself
    row.update(standard)
    if "rollout/reward_mean" in row:
        row["trained_reward_mean"] = row["rollout/reward_mean"]
    row.setdefault("samples_per_prompt", float(n))
    return row


def cluster_evaluation(samples_generator, eval_dataloader, args, generate_kwargs):
    """One held-out evaluation on the cluster engines: the --eval.temperature / --eval.n_samples_per_prompt pass
    (`generate_kwargs`, upstream's), then with --eval.avg_k a pass of k samples per problem at
    --eval.avg_temperature. Returns (upstream's eval keys plus the project's under their heldout names without
    `eval/`, for upstream's loggers and best-checkpoint metric; the heldout metrics as train_local names them)."""
    n = generate_kwargs["n_samples_per_prompt"]
    threshold = args.ada.positive_threshold
    samples = samples_generator.generate_eval_samples(**generate_kwargs)
    logs = compute_eval_metrics(eval_dataloader, samples, n)
    named = heldout_metrics(samples, n, threshold, eval_dataloader, temperature=generate_kwargs["temperature"],
                            failures=getattr(samples_generator, "last_eval_failures", None))
    avg = eval_config(args)
    if avg.avg_k:
        kwargs = dict(generate_kwargs, temperature=avg.avg_temperature, n_samples_per_prompt=avg.avg_k)
        named.update(avg_at_k_metrics(samples_generator.generate_eval_samples(**kwargs), avg.avg_k, threshold,
                                      temperature=avg.avg_temperature,
                                      failures=getattr(samples_generator, "last_eval_failures", None)))
    for key, value in named.items():  # upstream's own keys are in `logs` already, as upstream names them
        short = key[len(EVAL_PREFIX):]
        if "eval_" + short not in logs:
            logs[short] = value
    return logs, named


def install_cluster_samples_generator(owner) -> None:
    """Put the project's samples generator in place of the one upstream's constructor made on `owner` (PPOTrainer,
    or the async GenerateSamplesActor), set up for the cluster trainer: short steps cut to whole train batches that
    every data-parallel rank splits alike, a stop at once when an engine is lost, and the sampler's state checkpointed
    with the data position (the owner's `prompts_dataloader`, whose state_dict upstream saves with every
    checkpoint), and the prompt order seeded from --train.seed (upstream leaves it to an unseeded RNG)."""
    seed_prompt_order(owner.prompts_dataloader, owner.samples_generator.args.train.seed)
    generator = RoundsSamplesGenerator.from_upstream(owner.samples_generator,
                                                  batch_unit=short_step_unit(owner.samples_generator.args))
    generator.stop_on_engine_loss = True
    generator.last_pass = owner.samples_generator.args.train.num_episodes - 1  # upstream's episodes are passes
    generator.prompts_dataloader = owner.prompts_dataloader = LoaderWithSamplerState(owner.prompts_dataloader,
                                                                                      generator)
    owner.samples_generator = generator


class _AdoraPoolPPOTrainer(AdoraPoolTrainerMixin, PPOTrainer.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_cluster_samples_generator(self)
        self._install_experience_maker()


AdoraPoolPPOTrainer = ray.remote(_AdoraPoolPPOTrainer)
