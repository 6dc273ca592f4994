"""Per-token returns without discount (gamma = 1), as one reverse cumulative sum.

Every estimator the project's pool baseline serves (rloo, reinforce_baseline, group_norm, dr_grpo) runs with
gamma = 1; upstream forces it for them. Upstream's `get_cumulative_returns` (trainer/ppo_utils/experience_maker.py)
computes the returns with a Python loop over the response positions, one small tensor operation per token: at 1,024
tokens it is most of the advantage step (docs/benchmarks.md). At gamma = 1 the return at position t is the sum of
the (masked) rewards from t to the end of the response, which one `cumsum` over the reversed positions gives.

The sum runs in another order than upstream's loop, so the two agree within float rounding, not bit for bit, in
general. They agree exactly where each row holds at most one nonzero masked reward (an outcome reward on the last
token and no KL term in the reward: `--algo.kl.use_loss`, or a KL coefficient of 0): every return is then that one
reward or zero, however the zeros are summed. `one_reward_per_row` says when; the project's experience maker takes
the cumulative sum for upstream's own estimators only then (`exact_undiscounted_returns`), and the pool baseline
always.
"""

from __future__ import annotations

from typing import Optional

import torch


def undiscounted_returns(rewards: torch.Tensor, action_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[B, T] per-token rewards (and an optional [B, T] action mask, 1 on the response's tokens) -> [B, T] returns,
    returns[:, t] = sum over s >= t of (mask * rewards)[:, s]; same dtype as `rewards`."""
    if action_mask is not None:
        rewards = action_mask * rewards
    return rewards.flip(-1).cumsum(-1).flip(-1)


def one_reward_per_row(rewards: torch.Tensor, action_mask: Optional[torch.Tensor] = None) -> bool:
    """Does every row hold at most one nonzero (masked) reward? Then `undiscounted_returns` equals upstream's loop
    exactly: each return is that reward (a sum with zeros only) or zero."""
    if action_mask is not None:
        rewards = action_mask * rewards
    return rewards.dim() == 2 and bool(((rewards != 0).sum(-1) <= 1).all())


def exact_undiscounted_returns(rewards: torch.Tensor, action_mask: Optional[torch.Tensor] = None):
    """`undiscounted_returns` where it gives exactly what upstream's loop gives (`one_reward_per_row`), else None."""
    return undiscounted_returns(rewards, action_mask) if one_reward_per_row(rewards, action_mask) else None
