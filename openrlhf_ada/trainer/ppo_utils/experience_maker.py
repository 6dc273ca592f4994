"""`AdoraPoolExperienceMaker`: upstream's RemoteExperienceMaker with ADORA weights and Reinforce-Ada's baselines.

Only `compute_advantages_and_returns` changes (and upstream's per-token return loop, where a faster sum is exact):
- neither feature active at this step: upstream's method (bit-for-bit). At gamma = 1 its return loop over the
  response positions (one small tensor operation per token: seconds per step at 4k-token answers) becomes one
  reverse cumulative sum where that gives the very same values, i.e. when every row holds at most one nonzero token
  reward (outcome rewards without a KL term in the reward; algorithms/returns.py); otherwise the loop runs;
- the project's baselines, one path (`_group_advantages`) for `--ada.enable --ada.baseline pool` (Seq, with rloo /
  reinforce_baseline / dr_grpo / group_norm) and `--ada.strategy est` (`baseline`, decided by the flags): each
  sample's group from its group id, then baselines.group_baseline on it (pool: with the per-prompt pool statistics
  RoundsSamplesGenerator put into each sample's `info`, ada_pool_count / _mean / _std; group: the group's own;
  authors: the authors' GRPO advantage, estimate.authors_baseline), then the `--ada.prompt_weight` from the pool's
  pass rate (`ada_pool_pass_rate`, estimate.prompt_weights; not read with `none`), before the KL term. Everything
  around it (length penalties, KL reward, clipping, returns, global whitening for reinforce_baseline) follows
  upstream's order, built from upstream's own helpers, except the returns: one reverse cumulative sum
  (algorithms/returns.py) instead of upstream's loop over positions;
- `--adora.enable` inside [start_step, end_step): the FINAL advantages of every token of every sample are multiplied
  by its group's weight, after baseline, normalisation and whitening, for every estimator (critic returns are not
  weighted); each group's weight from its own samples, whatever its size (adora.ragged_sample_weights). Weights and
  ADORA metrics go into `info`, so upstream's logging carries them to wandb/tensorboard.

Groups are values: rollout order is restored from `experience.index`, and each sample carries its group's id
(`info["ada_group"]`), which the samples generator stamps when it builds the step, on every training path (fixed n,
Seq, Est, and upstream's generation, where a prompt's n samples are its group). A group's samples are contiguous in
rollout order; nothing here asks which strategy sampled them.
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
    in_schedule,
    load_weight_func,
    ragged_group_stats,
    ragged_sample_weights,
)
from openrlhf_ada.algorithms.baselines import (
    group_baseline,
    group_firsts,
    group_index,
    group_sizes,
    group_std,
    group_sums,
)
from openrlhf_ada.algorithms.estimate import authors_baseline, prompt_weights
from openrlhf_ada.algorithms.returns import exact_undiscounted_returns, undiscounted_returns
from openrlhf_ada.args import adora_config, sampling_config

POOL_KEYS = ("ada_pool_count", "ada_pool_mean", "ada_pool_std")
#: Per-prompt values the samples generator puts in `info` for this class; removed once used: upstream logs every info
#: key as a batch average, which for these means nothing.
PER_PROMPT_KEYS = POOL_KEYS + ("ada_group", "ada_pool_index", "ada_samples", "ada_pool_pass_rate")


class RolloutOrder:
    """Maps the experiences' per-sample tensors to one vector in rollout order and back."""

    def __init__(self, experiences: List[Experience]):
        self.lengths = [len(e.index) for e in experiences]
        self.indices = torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))

    def flat(self, per_sample: List[torch.Tensor]) -> torch.Tensor:
        """One value per sample, in rollout order."""
        flat = torch.cat([t.reshape(-1) for t in per_sample])
        out = torch.empty_like(flat)
        out[self.indices] = flat
        return out

    def split(self, flat: torch.Tensor) -> List[torch.Tensor]:
        """A per-sample vector in rollout order back into the experiences' layout."""
        return list(flat.reshape(-1)[self.indices].split(self.lengths))


class AdoraPoolExperienceMaker(RemoteExperienceMaker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.adora = adora_config(self.args)
        self.sampling = sampling_config(self.args)  # the strategy's config: its baseline and prompt weight
        self.weight_func: Callable = load_weight_func(self.adora.weight_func) if self.adora.weight_func else None
        self.global_step = 1  # the step being trained, as logged; the trainer sets it before each batch

    @property
    def baseline(self):
        """The project's group baseline in force (the strategy config's `advantage_baseline`: Seq's "pool", Est's
        "group" or "authors"), or None: upstream's advantages."""
        if self.sampling is None:
            return None
        return self.sampling.advantage_baseline(self.args.algo.advantage.estimator)

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
        if self.baseline is not None:
            return self._group_advantages(experiences)
        if not self.adora_active:
            return super().compute_advantages_and_returns(experiences)
        # upstream's advantages, weighted by ADORA; ADORA reads the outcome before length penalties touch the rewards
        order = RolloutOrder(experiences)
        group = self._groups(experiences, order)
        outcome = self._outcome(experiences, order)
        experiences = super().compute_advantages_and_returns(experiences)
        self._apply_adora(experiences, order, group, outcome)
        return experiences

    @staticmethod
    def _groups(experiences: List[Experience], order: "RolloutOrder") -> torch.Tensor:
        """Each sample's group (0..G-1, contiguous in rollout order), from the group id the samples generator gave
        every sample it built (`ada_group`), whatever the strategy that sampled them."""
        if any("ada_group" not in e.info for e in experiences):
            raise RuntimeError("the project's advantages need each sample's group id (info['ada_group'], set by "
                               "RoundsSamplesGenerator); these experiences were not produced by it")
        ids = order.flat([e.info["ada_group"].long() for e in experiences])
        try:
            return group_index(group_sizes(ids))
        except ValueError as e:
            raise RuntimeError(f"the samples are not whole groups in rollout order: {e}") from e

    # -- the project's baselines: one path for Seq's pool baseline and Est's groups -------------------------------
    def _group_advantages(self, experiences: List[Experience]) -> List[Experience]:
        """Group index -> baseline (the pool's statistics for Seq) -> prompt weight -> KL, returns, advantages ->
        ADORA (module docstring)."""
        args, ada = self.args, self.sampling
        weighted = ada.weight_kind != "none"
        keys = (POOL_KEYS if self.baseline == "pool" else ()) + (("ada_pool_pass_rate",) if weighted else ())
        missing = [k for k in keys if any(k not in e.info for e in experiences)]
        if missing:
            raise RuntimeError(f"the {self.baseline} baseline needs {missing} in every sample's info (set by "
                               "RoundsSamplesGenerator); these experiences were not produced by it")
        for e in experiences:
            e.rewards = e.rewards.to(torch.promote_types(e.rewards.dtype, torch.float32))
        order = RolloutOrder(experiences)
        group = self._groups(experiences, order)
        # the outcome before length penalties touch the rewards: what ADORA and the authors' counts read
        outcome = self._outcome(experiences, order)
        apply_length_penalties(experiences, args)
        rewards = order.flat([e.rewards for e in experiences])
        per_sample = {k: order.flat([e.info[k].float() for e in experiences]) for k in keys}
        first = group_firsts(group)  # where each group's per-prompt values are read
        estimator = args.algo.advantage.estimator
        if self.baseline == "authors":  # their GRPO: dr_grpo r - share correct, group_norm / std
            positive = outcome["scores"] > ada.positive_threshold
            shaped = authors_baseline(rewards, group, positive, norm_by_std=estimator == "group_norm").to(rewards.dtype)
        elif self.baseline == "group":
            shaped = group_baseline(rewards, group, estimator)
        else:
            shaped = group_baseline(rewards, group, estimator, pool_count=per_sample["ada_pool_count"][first],
                                    pool_mean=per_sample["ada_pool_mean"][first],
                                    pool_std=per_sample["ada_pool_std"][first])
        if weighted:
            w = prompt_weights(per_sample["ada_pool_pass_rate"][first], ada.weight_kind, eps=ada.prompt_weight_eps,
                               cap=ada.prompt_weight_cap)[group]
            shaped = (shaped.double() * w).to(rewards.dtype)
            for e, wi in zip(experiences, order.split(w.float())):
                e.info["ada_prompt_weight"] = wi
        for e, std in zip(experiences, order.split(group_std(rewards, group)[group].float())):
            e.info["group_reward_std"] = std
        self._finish_group_advantages(experiences, order.split(shaped))
        if self.adora_active:
            self._apply_adora(experiences, order, group, outcome)
        return experiences

    # -- ADORA -------------------------------------------------------------------------------------------------
    def _apply_adora(self, experiences, order: RolloutOrder, group: torch.Tensor, outcome: dict) -> None:
        """Multiply every sample's final advantages by its group's ADORA weight (from the group's own samples,
        whatever its size); the weights and the step's ADORA metrics go into `info`."""
        sizes = torch.bincount(group)
        stats = ragged_group_stats(outcome["scores"], outcome["lengths"], outcome["truncated"], sizes,
                                   positive_threshold=self.adora.positive_threshold)
        weights = ragged_sample_weights(self.adora, step=self.global_step, weight_func=self.weight_func,
                                        stats=stats, sizes=sizes, **outcome)
        metrics = adora_metrics(stats, group_sums(weights, group) / sizes, boost=self.adora.boost)
        for experience, w in zip(experiences, order.split(weights)):
            experience.advantages = experience.advantages * w.to(experience.advantages.dtype).unsqueeze(-1)
            experience.info["adora_weight"] = w.float()
            for key, value in metrics.items():
                experience.info[key.replace("/", "_")] = torch.full_like(w, value, dtype=torch.float32)

    @staticmethod
    def _outcome(experiences, order: RolloutOrder) -> dict:
        """Scores (rewards where the reward file gives none), rewards, lengths and truncation of every sample, in
        rollout order."""
        rewards = order.flat([e.rewards.float() for e in experiences])
        has_scores = all(e.scores is not None for e in experiences)
        return dict(
            scores=order.flat([e.scores.float() for e in experiences]) if has_scores else rewards.clone(),
            rewards=rewards,
            lengths=order.flat([e.response_length.float() for e in experiences]),
            truncated=order.flat([e.truncated.bool() for e in experiences]),
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
