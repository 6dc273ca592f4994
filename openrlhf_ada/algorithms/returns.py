"""Per-token returns without discount (gamma = 1), as one reverse cumulative sum.

Every estimator the project's pool baseline serves (rloo, reinforce_baseline, group_norm, dr_grpo) runs with
gamma = 1; upstream forces it for them. Upstream's `get_cumulative_returns` (trainer/ppo_utils/experience_maker.py)
computes the returns with a Python loop over the response positions, one small tensor operation per token: at 1,024
tokens it is most of the advantage step (docs/benchmarks.md). At gamma = 1 the return at position t is the sum of
the (masked) rewards from t to the end of the response, which one `cumsum` over the reversed positions gives.

The sum runs in another order than upstream's loop, so the two agree within float rounding, not bit for bit: the
project uses it only where its own code computes the returns (the pool baseline), and upstream's path is untouched.
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
