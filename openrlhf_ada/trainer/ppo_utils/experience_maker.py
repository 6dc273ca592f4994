"""`AdoraPoolExperienceMaker`: upstream's RemoteExperienceMaker with ADORA weights and the Reinforce-Ada pool baseline.

Only `compute_advantages_and_returns` changes (and upstream's per-token return loop, where a faster sum is exact):
- neither feature active at this step: upstream's method (bit-for-bit). At gamma = 1 its return loop over the
  response positions (one small tensor operation per token: seconds per step at 4k-token answers) becomes one
  reverse cumulative sum where that gives the very same values, i.e. when every row holds at most one nonzero token
  reward (outcome rewards without a KL term in the reward; algorithms/returns.py); otherwise the loop runs;
- `--ada.enable --ada.baseline pool` with rloo / reinforce_baseline / dr_grpo / group_norm: the group baseline uses
  the per-prompt pool statistics that RoundsSamplesGenerator put into each sample's `info` (ada_pool_count / _mean /
  _std) instead of the kept group's; everything around it (length penalties, KL reward, clipping, returns, global
  whitening for reinforce_baseline) follows upstream's order, built from upstream's own helpers, except the returns:
  one reverse cumulative sum (algorithms/returns.py) instead of upstream's loop over positions;
- `--adora.enable` inside [start_step, end_step): the FINAL advantages of every token of every sample are multiplied
  by its group's weight, after baseline, normalisation and whitening, for every estimator (critic returns are not
  weighted). Weights and ADORA metrics go into `info`, so upstream's logging carries them to wandb/tensorboard.

- `--ada.prompt_weight` (not none) with the pool baseline: each group's baseline-subtracted rewards are multiplied by
  its weight from the pool's pass rate (`ada_pool_pass_rate`), before the KL term (estimate.prompt_weights);
- `--ada.strategy est`: every sample of a prompt is trained, so groups have different sizes. They are found in rollout
  order (a group starts at pool index 0, its size is its pool count), each group-baseline estimator's formula is
  applied to them (estimate.ragged_baseline; with the `authors` preset their GRPO advantage, estimate.authors_baseline),
  then the prompt weight from the group's pass rate (unless `--ada.prompt_weight none`: then the pass rate is not
  read), then the same KL, returns and whitening as the pool baseline, and with `--adora.enable` each group's ADORA
  weight from its own samples (adora.ragged_sample_weights).

Groups are defined as upstream defines them: restore rollout order from `experience.index`, sample i belongs to
prompt i // n (Est: the groups found as above).
"""

from __future__ import annotations

import itertools
from typing import Callable, List

import torch
from openrlhf.models.utils import compute_reward
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from openrlhf_ada.algorithms.adora import (
    adora_metrics,
    group_stats,
    in_schedule,
    load_weight_func,
    ragged_group_stats,
    ragged_sample_weights,
    sample_weights,
)
from openrlhf_ada.algorithms.baselines import GROUP_BASELINE_ESTIMATORS, pool_baseline
from openrlhf_ada.algorithms.estimate import (
    authors_baseline,
    group_index,
    group_sums,
    prompt_weights,
    ragged_baseline,
)
from openrlhf_ada.algorithms.returns import exact_undiscounted_returns, undiscounted_returns
from openrlhf_ada.args import ada_config, adora_config

POOL_KEYS = ("ada_pool_count", "ada_pool_mean", "ada_pool_std")
#: Per-prompt values the samples generator puts in `info` for this class; removed once used: upstream logs every info
#: key as a batch average, which for these means nothing.
PER_PROMPT_KEYS = POOL_KEYS + ("ada_pool_index", "ada_samples", "ada_pool_pass_rate")


class RolloutOrder:
    """Maps the experiences' per-sample tensors to the [P, n] prompt-group layout and back."""

    def __init__(self, experiences: List[Experience], n: int):
        self.n = n
        self.lengths = [len(e.index) for e in experiences]
        self.indices = torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))

    def flat(self, per_sample: List[torch.Tensor]) -> torch.Tensor:
        """One value per sample, in rollout order."""
        flat = torch.cat([t.reshape(-1) for t in per_sample])
        out = torch.empty_like(flat)
        out[self.indices] = flat
        return out

    def group(self, per_sample: List[torch.Tensor]) -> torch.Tensor:
        return self.flat(per_sample).reshape(-1, self.n)

    def split(self, grouped: torch.Tensor) -> List[torch.Tensor]:
        return list(grouped.reshape(-1)[self.indices].split(self.lengths))


class AdoraPoolExperienceMaker(RemoteExperienceMaker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.adora = adora_config(self.args)
        self.ada = ada_config(self.args) if self.args.ada.enable else None
        self.weight_func: Callable = load_weight_func(self.adora.weight_func) if self.adora.weight_func else None
        self.global_step = 1  # the step being trained, as logged; the trainer sets it before each batch

    @property
    def est(self) -> bool:
        return self.ada is not None and self.ada.strategy == "est"

    @property
    def uses_pool_baseline(self) -> bool:
        return (
            self.ada is not None
            and self.ada.baseline == "pool"
            and self.args.algo.advantage.estimator in GROUP_BASELINE_ESTIMATORS
        )

    @property
    def adora_active(self) -> bool:
        return self.adora.enable and in_schedule(self.global_step, self.adora.start_step, self.adora.end_step)

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences: List[Experience]) -> List[Experience]:
        experiences = self._advantages(experiences)
        for e in experiences:
            for key in PER_PROMPT_KEYS:
                e.info.pop(key, None)
        return experiences

    def get_cumulative_returns(self, rewards: torch.Tensor, action_mask: torch.Tensor, gamma: float):
        """Upstream's returns; at gamma = 1 with one nonzero reward per row, by one cumulative sum (the same values)."""
        if gamma == 1.0:
            returns = exact_undiscounted_returns(rewards, action_mask)
            if returns is not None:
                return returns
        return super().get_cumulative_returns(rewards, action_mask, gamma)

    def _advantages(self, experiences: List[Experience]) -> List[Experience]:
        if self.est:
            return self._advantages_est(experiences)
        if not self.uses_pool_baseline and not self.adora_active:
            return super().compute_advantages_and_returns(experiences)
        order = RolloutOrder(experiences, self.args.rollout.n_samples_per_prompt)
        # ADORA reads the outcome before length penalties touch the rewards.
        outcome = self._grouped_outcome(experiences, order) if self.adora_active else None
        if self.uses_pool_baseline:
            experiences = self._advantages_with_pool_baseline(experiences, order)
        else:
            experiences = super().compute_advantages_and_returns(experiences)
        if outcome is not None:
            self._apply_adora(experiences, order, outcome)
        return experiences

    # -- ADORA -------------------------------------------------------------------------------------------------
    def _grouped_outcome(self, experiences, order: RolloutOrder) -> dict:
        return self._outcome(experiences, order.group)

    def _apply_adora(self, experiences, order: RolloutOrder, outcome: dict) -> None:
        stats = group_stats(outcome["scores"], outcome["lengths"], outcome["truncated"],
                            positive_threshold=self.adora.positive_threshold)
        weights = sample_weights(self.adora, step=self.global_step, weight_func=self.weight_func, stats=stats,
                                 **outcome)
        self._weight_advantages(experiences, order, weights, adora_metrics(stats, weights, boost=self.adora.boost))

    def _weight_advantages(self, experiences, order: RolloutOrder, weights: torch.Tensor, metrics: dict) -> None:
        """Multiply every sample's final advantages by its ADORA weight (in rollout order, [P, n] or [S]); the
        weights and the step's ADORA metrics go into `info`."""
        for experience, w in zip(experiences, order.split(weights)):
            experience.advantages = experience.advantages * w.to(experience.advantages.dtype).unsqueeze(-1)
            experience.info["adora_weight"] = w.float()
            for key, value in metrics.items():
                experience.info[key.replace("/", "_")] = torch.full_like(w, value, dtype=torch.float32)

    # -- pool baseline -----------------------------------------------------------------------------------------
    def _advantages_with_pool_baseline(self, experiences, order: RolloutOrder) -> List[Experience]:
        args = self.args
        missing = [k for k in POOL_KEYS if any(k not in e.info for e in experiences)]
        if missing:
            raise RuntimeError(
                f"--ada.baseline pool needs {missing} in every sample's info (set by RoundsSamplesGenerator); "
                "these experiences were not produced by it"
            )
        for e in experiences:
            e.rewards = e.rewards.to(torch.promote_types(e.rewards.dtype, torch.float32))
        apply_length_penalties(experiences, args)

        rewards = order.group([e.rewards for e in experiences])
        for e, std in zip(experiences, order.split(rewards.std(-1, keepdim=True).expand_as(rewards))):
            e.info["group_reward_std"] = std
        pool = {k: order.group([e.info[k].float() for e in experiences])[:, 0] for k in POOL_KEYS}
        shaped = pool_baseline(rewards, args.algo.advantage.estimator, pool_count=pool["ada_pool_count"],
                               pool_mean=pool["ada_pool_mean"], pool_std=pool["ada_pool_std"]).to(rewards.dtype)
        if self.ada.weight_kind != "none":
            pass_rate = order.group([e.info["ada_pool_pass_rate"].float() for e in experiences])[:, 0]
            w = prompt_weights(pass_rate, self.ada.weight_kind, eps=self.ada.prompt_weight_eps,
                               cap=self.ada.prompt_weight_cap)
            shaped = (shaped.double() * w.unsqueeze(-1)).to(rewards.dtype)
            for e, wi in zip(experiences, order.split(w.unsqueeze(-1).expand_as(rewards))):
                e.info["ada_prompt_weight"] = wi.float()
        self._finish_group_advantages(experiences, order.split(shaped))
        return experiences

    def _advantages_est(self, experiences) -> List[Experience]:
        """--ada.strategy est: groups of varying size (module docstring)."""
        args = self.args
        weighted = self.ada.weight_kind != "none"
        keys = POOL_KEYS + ("ada_pool_index",) + (("ada_pool_pass_rate",) if weighted else ())
        missing = [k for k in keys if any(k not in e.info for e in experiences)]
        if missing:
            raise RuntimeError(f"--ada.strategy est needs {missing} in every sample's info (set by "
                               "RoundsSamplesGenerator); these experiences were not produced by it")
        for e in experiences:
            e.rewards = e.rewards.to(torch.promote_types(e.rewards.dtype, torch.float32))
        order = RolloutOrder(experiences, 1)
        # the outcome before length penalties touch the rewards: what ADORA and the authors' counts read
        outcome = self._outcome(experiences, order.flat)
        apply_length_penalties(experiences, args)
        rewards = order.flat([e.rewards for e in experiences])
        index = order.flat([e.info["ada_pool_index"].float() for e in experiences])
        count = order.flat([e.info["ada_pool_count"].float() for e in experiences])
        starts = (index == 0).nonzero().reshape(-1)
        sizes = torch.diff(starts, append=torch.tensor([index.numel()]))
        if starts.numel() == 0 or starts[0] != 0 or not torch.equal(sizes.double(), count[starts].double()):
            raise RuntimeError("--ada.strategy est: the samples are not whole groups in rollout order (each group's "
                               "pool indices 0..size-1, contiguous)")
        if self.ada.est_config.baseline == "authors":  # their GRPO: dr_grpo r - share correct, group_norm / std
            positive = outcome["scores"] > self.ada.positive_threshold
            shaped = authors_baseline(rewards, sizes, positive,
                                      norm_by_std=args.algo.advantage.estimator == "group_norm").to(rewards.dtype)
        else:
            shaped = ragged_baseline(rewards, sizes, args.algo.advantage.estimator)
        g = group_index(sizes)
        if weighted:
            pass_rate = order.flat([e.info["ada_pool_pass_rate"].float() for e in experiences])[starts]
            w = prompt_weights(pass_rate, self.ada.weight_kind, eps=self.ada.prompt_weight_eps,
                               cap=self.ada.prompt_weight_cap)[g]
            shaped = (shaped.double() * w).to(rewards.dtype)
            for e, wi in zip(experiences, order.split(w.float())):
                e.info["ada_prompt_weight"] = wi
        mean = group_sums(rewards, sizes) / sizes
        var = group_sums((rewards.double() - mean[g]) ** 2, sizes)
        std = (var / (sizes - 1).clamp(min=1)).sqrt()[g].float()
        for e, s in zip(experiences, order.split(std)):
            e.info["group_reward_std"] = s
        self._finish_group_advantages(experiences, order.split(shaped))
        if self.adora_active:  # each group's ADORA weight from its own samples, whatever its size
            stats = ragged_group_stats(outcome["scores"], outcome["lengths"], outcome["truncated"], sizes,
                                       positive_threshold=self.adora.positive_threshold)
            weights = ragged_sample_weights(self.adora, step=self.global_step, weight_func=self.weight_func,
                                            stats=stats, sizes=sizes, **outcome)
            per_group = group_sums(weights, sizes) / sizes
            self._weight_advantages(experiences, order, weights,
                                    adora_metrics(stats, per_group, boost=self.adora.boost))
        return experiences

    @staticmethod
    def _outcome(experiences, arrange: Callable) -> dict:
        """Scores (rewards where the reward file gives none), rewards, lengths and truncation of every sample,
        each arranged by `arrange` (RolloutOrder.group or .flat)."""
        rewards = arrange([e.rewards.float() for e in experiences])
        has_scores = all(e.scores is not None for e in experiences)
        return dict(
            scores=arrange([e.scores.float() for e in experiences]) if has_scores else rewards.clone(),
            rewards=rewards,
            lengths=arrange([e.response_length.float() for e in experiences]),
            truncated=arrange([e.truncated.bool() for e in experiences]),
        )

    def _finish_group_advantages(self, experiences, shaped: List[torch.Tensor]) -> None:
        """Baseline-subtracted rewards per experience -> KL reward, returns, advantages (and upstream's batch
        whitening for reinforce_baseline)."""
        args = self.args
        for e, r in zip(experiences, shaped):
            token_reward = compute_reward(r, self.kl_ctl.value, e.kl, action_mask=e.action_mask,
                                          reward_clip_range=args.reward.clip_range)
            e.returns = undiscounted_returns(token_reward, e.action_mask)  # gamma is 1 for these estimators
            e.advantages = e.returns.clone()
            e.info["return"] = token_reward.sum(dim=-1)
            e.kl = None
        if args.algo.advantage.estimator == "reinforce_baseline":  # upstream whitens this one over the batch
            whiten_advantages(experiences, use_std=not args.algo.advantage.no_std_norm)


def whiten_advantages(experiences: List[Experience], use_std: bool = True) -> None:
    """Global advantage whitening over all action tokens of the batch (as upstream does for gae, reinforce and
    reinforce_baseline)."""
    adv = torch.cat([e.advantages.flatten() for e in experiences]).float()
    mask = torch.cat([e.action_mask.flatten() for e in experiences])
    count = mask.sum()
    mean = (adv * mask).sum() / count
    rstd = (((adv - mean).pow(2) * mask).sum() / count).clamp(min=1e-8).rsqrt() if use_std else 1
    for e in experiences:
        e.advantages = (e.advantages - mean) * rstd
