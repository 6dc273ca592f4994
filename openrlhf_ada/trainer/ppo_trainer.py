"""`AdaPPOTrainer`: upstream's PPOTrainer Ray actor, using AdaSamplesGenerator and AdaExperienceMaker.

A `@ray.remote` class cannot be subclassed, so the plain class is taken from `PPOTrainer.__ray_actor_class__`,
subclassed, and wrapped with `ray.remote` again. The launcher puts the result where upstream's `train()` looks for
it (`openrlhf.trainer.ppo_trainer.PPOTrainer`). Ray pickles the class by reference to this module, so the actor
process imports openrlhf_ada and runs these subclasses wherever it is scheduled.
"""

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer

from openrlhf_ada.trainer.ppo_utils.experience_maker import AdaExperienceMaker
from openrlhf_ada.trainer.ppo_utils.samples_generator import AdaSamplesGenerator


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


class _AdaPPOTrainer(AdaTrainerMixin, PPOTrainer.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.samples_generator = AdaSamplesGenerator.from_upstream(self.samples_generator)
        self._install_ada_experience_maker()


AdaPPOTrainer = ray.remote(_AdaPPOTrainer)
