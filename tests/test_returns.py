"""`undiscounted_returns`: the pool baseline's per-token returns at gamma = 1 as one reverse cumulative sum, against
sums written out by hand and against upstream's own loop (`RemoteExperienceMaker.get_cumulative_returns`) on random
rewards and masks."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

from openrlhf_ada.algorithms.returns import undiscounted_returns


def upstream_returns(rewards, mask):
    # the method reads nothing of its instance
    return RemoteExperienceMaker.get_cumulative_returns(None, rewards, mask, 1.0)


def test_sums_by_hand():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    # row 0: the masked 4 is not a reward; 1+2+3, 2+3, 3, 0.  row 1: 0.5-1+0+2, -1+0+2, 0+2, 2
    expected = torch.tensor([[6.0, 5.0, 3.0, 0.0], [1.5, 1.0, 2.0, 2.0]])
    assert torch.equal(undiscounted_returns(rewards, mask), expected)
    assert torch.equal(undiscounted_returns(rewards), torch.tensor([[10.0, 9.0, 7.0, 4.0], [1.5, 1.0, 2.0, 2.0]]))


def test_a_reward_on_the_last_token_only_is_every_token_s_return():
    """The outcome reward of RL for reasoning: placed on the response's last token, it is the return of each of its
    tokens, and of none after it."""
    rewards = torch.zeros(3, 6)
    lengths = [6, 2, 4]
    mask = torch.zeros(3, 6, dtype=torch.bool)
    for i, n in enumerate(lengths):
        rewards[i, n - 1] = float(i + 1)
        mask[i, :n] = True
    out = undiscounted_returns(rewards, mask)
    for i, n in enumerate(lengths):
        assert out[i, :n].tolist() == [float(i + 1)] * n and out[i, n:].abs().sum() == 0


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 6), length=st.integers(1, 300), seed=st.integers(0, 2**31 - 1),
       prefix_masks=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_equal_to_upstreams_loop_within_rounding(batch, length, seed, prefix_masks, dtype):
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.randn(batch, length, generator=g) * 0.05).to(dtype)  # per-token KL terms
    rewards[:, -1] += torch.randn(batch, generator=g).to(dtype)
    if prefix_masks:  # responses of random lengths
        lengths = torch.randint(1, length + 1, (batch,), generator=g)
        mask = torch.arange(length)[None, :] < lengths[:, None]
    else:  # any pattern of action tokens (multi-turn: observation tokens inside the response)
        mask = torch.rand(batch, length, generator=g) < 0.7
    ours, theirs = undiscounted_returns(rewards, mask), upstream_returns(rewards, mask)
    assert ours.dtype == theirs.dtype == dtype
    scale = rewards.abs().sum(-1, keepdim=True).clamp(min=1.0)  # rounding grows with the summed magnitude
    assert ((ours - theirs).abs() <= 1e-6 * scale).all()
