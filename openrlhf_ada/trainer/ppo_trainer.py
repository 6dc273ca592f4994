"""`AdaPPOTrainer`: upstream's PPOTrainer Ray actor, using AdaSamplesGenerator and AdaExperienceMaker.

A `@ray.remote` class cannot be subclassed, so the plain class is taken from `PPOTrainer.__ray_actor_class__`,
subclassed, and wrapped with `ray.remote` again. The launcher puts the result where upstream's `train()` looks for
it (`openrlhf.trainer.ppo_trainer.PPOTrainer`). Ray pickles the class by reference to this module, so the actor
process imports openrlhf_ada and runs these subclasses wherever it is scheduled.
"""

import os

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer

from openrlhf_ada.trainer.ppo_utils.experience_maker import AdaExperienceMaker
from openrlhf_ada.trainer.ppo_utils.samples_generator import AdaSamplesGenerator
from openrlhf_ada.utils.metrics_log import MetricsWriter, standardize


class AdaTrainerMixin:
    """For classes built on BasePPOTrainer: swap in AdaExperienceMaker and tell it which step it is computing."""

    def _install_ada_experience_maker(self) -> None:
        upstream = self.experience_maker
        self.experience_maker = AdaExperienceMaker(
            upstream.actor_model_group,
            upstream.critic_model_group,
            upstream.reward_model_group,
            upstream.initial_model_group,
            upstream.kl_ctl,
            upstream.strategy,
            upstream.tokenizer,
        )

    def train_step(self, rollout_samples, global_step: int):
        self.experience_maker.global_step = global_step + 1  # the step this update will be logged as
        return super().train_step(rollout_samples, global_step)

    def save_logs_and_checkpoints(self, global_step: int, logs_dict=None, client_states=None) -> None:
        """Upstream's logging and checkpoints, plus one JSON line per step in <--ckpt.path>/metrics.jsonl (the
        format openrlhf_ada.cli.compare reads), whatever wandb/tensorboard are set to."""
        super().save_logs_and_checkpoints(global_step, logs_dict, client_states)
        if logs_dict:
            if getattr(self, "_metrics_writer", None) is None:
                path = os.path.join(self.args.ckpt.path, "metrics.jsonl")
                self._metrics_writer = MetricsWriter(path, append=True)
                self._generated_tokens_total = 0.0
            row = standard_metrics(logs_dict, self.args.rollout.n_samples_per_prompt)
            self._generated_tokens_total += row.get("generated_tokens", 0.0)
            row["generated_tokens_total"] = self._generated_tokens_total
            self._metrics_writer.write(global_step, row)


def standard_metrics(status: dict, n: int) -> dict:
    """A step's upstream status dict (numbers kept) plus the standard keys of openrlhf_ada.utils.metrics_log,
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


class _AdaPPOTrainer(AdaTrainerMixin, PPOTrainer.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.samples_generator = AdaSamplesGenerator.from_upstream(self.samples_generator)
        self._install_ada_experience_maker()


AdaPPOTrainer = ray.remote(_AdaPPOTrainer)
