"""Which upstream features cannot combine with which of the project's settings: one table, checked at start-up.

docs/compatibility.md is the matrix of what an OpenRLHF 0.11.2 user can switch on that changes the data path (rows)
against the project's settings (columns: features off, ADORA, Reinforce-Ada Seq, Est, Seq + cancel). Each cell is
tested, or refused here: a `Refusal` pairs a predicate on the parsed arguments for the upstream feature with one for
the project setting, and says why the pair cannot work or cannot mean anything. `check(args)` runs first thing in
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


def _get(args, dotted: str, default=None):
    """A parsed flag by its dotted name (`ada.strategy`), `default` where the namespace lacks it."""
    try:
        return attrgetter(dotted)(args)
    except AttributeError:
        return default


def _n(args) -> int:
    return _get(args, "rollout.n_samples_per_prompt", 1)


def _estimator(args) -> str:
    return _get(args, "algo.advantage.estimator", "gae")


def _est(args) -> bool:
    return bool(_get(args, "ada.enable", False)) and _get(args, "ada.strategy", "seq") == "est"


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
        values = dict(n=_n(args), estimator=_estimator(args))
        return f"{self.feature.format(**values)} with {self.setting}: {self.reason.format(**values)}"


REFUSALS: Tuple[Refusal, ...] = (
    Refusal(
        "one-sample-adora", "--rollout.n_samples_per_prompt {n}", lambda a: _n(a) < 2,
        "--adora.enable", lambda a: bool(_get(a, "adora.enable", False)),
        "ADORA weighs each prompt's group of samples by what the group shows (its share of correct samples, their "
        "lengths); one sample per prompt makes no group to weigh. Use --rollout.n_samples_per_prompt >= 2 with a "
        "group estimator, or drop --adora.enable",
    ),
    Refusal(
        "one-sample-ada", "--rollout.n_samples_per_prompt {n}", lambda a: _n(a) < 2,
        "--ada.enable", lambda a: bool(_get(a, "ada.enable", False)),
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
        "--ada.enable", lambda a: bool(_get(a, "ada.enable", False)),
        "Reinforce-Ada (Seq, Est, --ada.cancel) decides on each sample's reward while it samples (when a prompt is "
        "resolved, how many samples it gets, when to cancel), but a reward model scores the samples only after "
        "generation, in the experience maker. Score with a reward function (--reward.remote_url path/to/reward.py "
        "or an HTTP reward server), or drop --ada.enable: the project's features off and --adora.enable work with a "
        "reward model",
    ),
)

BY_KEY = {refusal.key: refusal for refusal in REFUSALS}


def check(args) -> None:
    """Raise ValueError naming both flags and why, for the first refused pair that `args` switches on."""
    for refusal in REFUSALS:
        if refusal.refuses(args):
            raise ValueError(refusal.message(args))
