"""Which upstream features cannot combine with which of the project's settings: one table, checked at start-up.

docs/compatibility.md is the matrix of what an OpenRLHF 0.11.2 user can switch on that changes the data path (rows)
against the project's settings (columns: features off, ADORA, Reinforce-Ada Seq, Est, Seq + cancel). Each cell is
tested, or refused here: a `Refusal` pairs a predicate on the parsed arguments for the upstream feature with one for
the project setting, and says why the pair cannot work or cannot mean anything. A few upstream flag pairs fail
under every setting (a 4-bit actor with vLLM engines, a learning-rate schedule DeepSpeed's actor cannot step, a
reward model next to a reward function or an agent): their `setting` is the other flag, or the trainers. `check(args)` runs first thing in
`openrlhf_ada.args.validate`, which both the cluster launcher and train_local call right after parsing, so a refused
pair stops before Ray or any model starts, with one message naming both flags. tests/test_compatibility.py keeps
the table, the document and the launcher's parser in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Tuple

from openrlhf_ada.algorithms.baselines import GROUP_BASELINE_ESTIMATORS
from openrlhf_ada.rewards.checks import scored_by_reward_model


def flag_value(args, dotted: str, default=None):
    """A parsed flag by its dotted name (`ada.strategy`), `default` where the namespace lacks it."""
    try:
        return attrgetter(dotted)(args)
    except AttributeError:
        return default


def _n(args) -> int:
    return flag_value(args, "rollout.n_samples_per_prompt", 1)


def _estimator(args) -> str:
    return flag_value(args, "algo.advantage.estimator", "gae")


def _est(args) -> bool:
    return bool(flag_value(args, "ada.enable", False)) and flag_value(args, "ada.strategy", "seq") == "est"


def _engines(args) -> int:
    return flag_value(args, "vllm.num_engines", 0) or 0


#: --actor.lr_scheduler / --critic.lr_scheduler values the project's trainers can use. Both build the schedule with
#: transformers' `get_scheduler(name, optimizer, num_warmup_steps, num_training_steps)` (upstream's DeepSpeed
#: strategy for the cluster launcher's actor and critic, openrlhf_ada.trainer.local_trainer.lr_scheduler for
#: train_local) and step it once per optimizer step without a metric. transformers' other names cannot be used that
#: way: warmup_stable_decay needs a decay-steps count that upstream does not pass (the build raises), and
#: reduce_lr_on_plateau and greedy need a metric at each step (train_local's step raises; DeepSpeed's engine catches
#: that TypeError and passes the train batch size as the metric, a schedule that means nothing).
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial",
                 "inverse_sqrt", "cosine_with_min_lr", "cosine_warmup_with_min_lr")


def _bad_schedule(args, role: str) -> bool:
    return flag_value(args, f"{role}.lr_scheduler", "cosine_with_min_lr") not in LR_SCHEDULERS


def _schedule_reason(role: str) -> str:
    """Why --{role}.lr_scheduler's value cannot be used (LR_SCHEDULERS' comment), for `Refusal.message`."""
    return ("the schedule is built with transformers' get_scheduler(name, optimizer, warmup steps, training steps) "
            "and stepped once per optimizer step without a metric, and {" + role + "_lr_scheduler!r} is not such a "
            "schedule (warmup_stable_decay needs a decay-steps count; reduce_lr_on_plateau and greedy need a metric "
            "each step, for which DeepSpeed's engine would pass the train batch size; any other name is unknown to "
            "transformers and fails only once the model is loaded). Use one of " + ", ".join(LR_SCHEDULERS))


@dataclass(frozen=True)
class Refusal:
    """An upstream feature (`feature`: its flag as the user writes it, formatted with {n} and {estimator}; `applies`:
    is it on) that does not combine with a project setting (`setting`, `active`), and `reason`, why."""

    key: str
    feature: str
    applies: Callable[[object], bool]
    setting: str
    active: Callable[[object], bool]
    reason: str

    def refuses(self, args) -> bool:
        return bool(self.applies(args)) and bool(self.active(args))

    def message(self, args) -> str:
        values = dict(n=_n(args), estimator=_estimator(args), engines=_engines(args),
                      actor_lr_scheduler=flag_value(args, "actor.lr_scheduler"),
                      critic_lr_scheduler=flag_value(args, "critic.lr_scheduler"))
        feature, setting = self.feature.format(**values), self.setting.format(**values)
        return f"{feature} with {setting}: {self.reason.format(**values)}"


REFUSALS: Tuple[Refusal, ...] = (
    Refusal(
        "one-sample-adora", "--rollout.n_samples_per_prompt {n}", lambda a: _n(a) < 2,
        "--adora.enable", lambda a: bool(flag_value(a, "adora.enable", False)),
        "ADORA weighs each prompt's group of samples by what the group shows (its share of correct samples, their "
        "lengths); one sample per prompt makes no group to weigh. Use --rollout.n_samples_per_prompt >= 2 with a "
        "group estimator, or drop --adora.enable",
    ),
    Refusal(
        "one-sample-ada", "--rollout.n_samples_per_prompt {n}", lambda a: _n(a) < 2,
        "--ada.enable", lambda a: bool(flag_value(a, "ada.enable", False)),
        "Reinforce-Ada samples a prompt until its samples show both outcomes and trains a group of them against the "
        "group's baseline (Est: every sample, in groups of varying size); it needs --rollout.n_samples_per_prompt "
        ">= 2 (one sample per prompt is no group). Use n >= 2, or drop --ada.enable",
    ),
    Refusal(
        "no-group-baseline-est", "--algo.advantage.estimator {estimator}",
        lambda a: _estimator(a) not in GROUP_BASELINE_ESTIMATORS,
        "--ada.strategy est", _est,
        "Reinforce-Ada-Est allocates each prompt's samples from its pass rate and trains every sample against its "
        "prompt's own group baseline (groups of varying size), weighed by that pass rate; {estimator} has no group "
        "baseline (a critic's values, or none), so the allocation would not reach the advantages. Use one of "
        + ", ".join(GROUP_BASELINE_ESTIMATORS) + ", or --ada.strategy seq",
    ),
    Refusal(
        "reward-model-ada", "--reward.model_name_or_path", scored_by_reward_model,
        "--ada.enable", lambda a: bool(flag_value(a, "ada.enable", False)),
        "Reinforce-Ada (Seq, Est, --ada.cancel) decides on each sample's reward while it samples (when a prompt is "
        "resolved, how many samples it gets, when to cancel), but a reward model scores the samples only after "
        "generation, in the experience maker. Score with a reward function (--reward.remote_url path/to/reward.py "
        "or an HTTP reward server), or drop --ada.enable: the project's features off and --adora.enable work with a "
        "reward model",
    ),
    Refusal(
        "reward-url-and-model", "--reward.remote_url", lambda a: bool(flag_value(a, "reward.remote_url")),
        "--reward.model_name_or_path", lambda a: bool(flag_value(a, "reward.model_name_or_path")),
        "with a reward function upstream builds no reward model: the rewards come from --reward.remote_url alone and "
        "the model is never loaded (nor does it seed a critic: with --reward.remote_url, gae's critic starts from the "
        "actor's model unless --critic.model_name_or_path names one). Drop one of the two flags",
    ),
    Refusal(
        "agent-and-reward-model", "--train.agent_func_path", lambda a: bool(flag_value(a, "train.agent_func_path")),
        "--reward.model_name_or_path", lambda a: bool(flag_value(a, "reward.model_name_or_path")),
        "the agent's environment gives every sample its reward (the `rewards` of its last step), and with an agent "
        "upstream builds no reward model: it sets --reward.remote_url to \"agent\" after parsing and starts a "
        "reward-model actor only without a remote URL, so the model would never be loaded (nor seed gae's critic, "
        "which starts from the actor's model unless --critic.model_name_or_path names one). Drop "
        "--reward.model_name_or_path (score inside the agent's step), or drop --train.agent_func_path",
    ),
    Refusal(
        "load-in-4bit-vllm", "--ds.load_in_4bit", lambda a: bool(flag_value(a, "ds.load_in_4bit", False)),
        "--vllm.num_engines {engines}", lambda a: _engines(a) > 0,
        "the weight sync after each step sends the actor's parameters as they are, and a 4-bit actor's linear "
        "weights are bitsandbytes' packed uint8 (two NF4 values a byte, their scales kept apart), which the engines "
        "refuse (not their dtype, not their shape) after the first step has trained; with --ds.lora.rank the merged "
        "LoRA sync cannot add the adapters to a quantized base either. Drop --ds.load_in_4bit (a LoRA actor, "
        "--ds.lora.rank, keeps the trained weights small)",
    ),
    Refusal(
        "actor-lr-scheduler", "--actor.lr_scheduler {actor_lr_scheduler!r}", lambda a: _bad_schedule(a, "actor"),
        "the project's trainers (the cluster launcher's DeepSpeed actor, train_local)", lambda a: True,
        _schedule_reason("actor"),
    ),
    Refusal(
        "critic-lr-scheduler", "--critic.lr_scheduler {critic_lr_scheduler!r}", lambda a: _bad_schedule(a, "critic"),
        "--algo.advantage.estimator gae", lambda a: _estimator(a) == "gae",
        "a critic trains (DeepSpeed), and " + _schedule_reason("critic"),
    ),
)

BY_KEY = {refusal.key: refusal for refusal in REFUSALS}


def check(args) -> None:
    """Raise ValueError naming both flags and why, for the first refused pair that `args` switches on."""
    for refusal in REFUSALS:
        if refusal.refuses(args):
            raise ValueError(refusal.message(args))
