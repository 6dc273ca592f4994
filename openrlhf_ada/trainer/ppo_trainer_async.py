"""Async mode (`--train.async_enable`): upstream's PPOTrainerAsync actor creates a GenerateSamplesActor (owns the
samples generator) and a TrainingActor (owns the experience maker) by their module-level names. `AdoraPoolPPOTrainerAsync`
points those names at the project's subclasses inside its own actor process, then runs upstream's constructor.
"""

import openrlhf.trainer.ppo_trainer_async as upstream
import ray
from openrlhf.utils.logging_utils import init_logger

from openrlhf_ada.trainer.heldout import describe
from openrlhf_ada.trainer.ppo_trainer import (
    AdoraPoolTrainerMixin,
    cluster_evaluation,
    install_cluster_samples_generator,
)

logger = init_logger(__name__)


class _RoundsGenerateSamplesActor(upstream.GenerateSamplesActor.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_cluster_samples_generator(self)

    def _run_eval(self):
        """Upstream's evaluation keys plus the held-out accuracy, its standard error and avg@k (--eval.avg_k), as
        the synchronous trainer logs them (`cluster_evaluation`); upstream's trainer logs them to wandb/tensorboard."""
        kwargs = dict(self.generate_kwargs, temperature=self.args.eval.temperature,
                      n_samples_per_prompt=self.args.eval.n_samples_per_prompt)
        logs, named = cluster_evaluation(self.samples_generator, self.eval_dataloader, self.args, kwargs)
        logger.info(f"evaluation: {describe(named)}")
        return logs


_UpstreamTrainingActor = upstream.TrainingActor.__ray_actor_class__


class _AdoraPoolTrainingActor(AdoraPoolTrainerMixin, _UpstreamTrainingActor):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._install_experience_maker()

    def broadcast_to_vllm(self):
        """Upstream's, called explicitly. Ray ships an actor class with every inherited method copied into it, and
        cloudpickle copies an upstream method (whose module-level class name now resolves to a Ray ActorClass) by
        value together with a copy of its class: upstream's zero-arg `super().broadcast_to_vllm()` then names that
        copy, which is not in this class's MRO ("super(type, obj): obj must be an instance or subtype of type").
        This method ships by reference and calls the TrainingActor of the actor process's own import."""
        self._stop_on_lost_engines()  # as AdoraPoolTrainerMixin.broadcast_to_vllm, which this replaces
        return _UpstreamTrainingActor.broadcast_to_vllm(self)


RoundsGenerateSamplesActor = ray.remote(_RoundsGenerateSamplesActor)
AdoraPoolTrainingActor = ray.remote(_AdoraPoolTrainingActor)


class _AdoraPoolPPOTrainerAsync(upstream.PPOTrainerAsync.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        upstream.GenerateSamplesActor = RoundsGenerateSamplesActor
        upstream.TrainingActor = AdoraPoolTrainingActor
        super().__init__(*args, **kwargs)


AdoraPoolPPOTrainerAsync = ray.remote(_AdoraPoolPPOTrainerAsync)
