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


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 6), length=st.integers(1, 300), seed=st.integers(0, 2**31 - 1),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_one_reward_per_row_is_bit_for_bit_upstreams_loop(batch, length, seed, dtype):
    """An outcome reward at one random position of each row (some rows none, some negative), random masks: every
    return is that reward or zero, so the cumulative sum equals upstream's loop exactly, not just within rounding."""
    from openrlhf_ada.algorithms.returns import exact_undiscounted_returns, one_reward_per_row

    g = torch.Generator().manual_seed(seed)
    rewards = torch.zeros(batch, length, dtype=dtype)
    positions = torch.randint(0, length, (batch,), generator=g)
    values = torch.randn(batch, generator=g, dtype=torch.float64).to(dtype) * 3
    values[torch.rand(batch, generator=g) < 0.2] = 0.0
    rewards[torch.arange(batch), positions] = values
    mask = torch.rand(batch, length, generator=g) < 0.8
    assert one_reward_per_row(rewards, mask)
    ours = exact_undiscounted_returns(rewards, mask)
    assert torch.equal(ours, upstream_returns(rewards, mask))
    if length >= 2:  # a second nonzero reward in a row: no longer exact, so not taken
        rewards[0, positions[0]] = 1.0
        rewards[0, (positions[0] + 1) % length] = 0.5
        mask[0] = True
        assert not one_reward_per_row(rewards, mask) and exact_undiscounted_returns(rewards, mask) is None


def test_the_experience_maker_skips_upstreams_loop_only_where_the_sum_is_exact(monkeypatch):
    """With the project's features off, the maker's returns are upstream's: by the cumulative sum for outcome rewards
    without KL (no call of upstream's loop), by the loop itself when the KL term makes every token's reward nonzero."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    from openrlhf_ada.launcher import parse_args
    from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker

    args = parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
                       "--rollout.n_samples_per_prompt", "4", "--algo.advantage.estimator", "group_norm"])
    maker = AdoraPoolExperienceMaker(None, None, None, None, FixedKLController(0.0), SimpleNamespace(args=args), None)
    loops = []
    original = RemoteExperienceMaker.get_cumulative_returns

    def counted(self, *a):
        loops.append(1)
        return original(self, *a)

    monkeypatch.setattr(RemoteExperienceMaker, "get_cumulative_returns", counted)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    outcome = torch.tensor([[0.0, 0.0, -0.5, 0.0], [0.0, 0.0, 0.0, 1.5]])
    assert torch.equal(maker.get_cumulative_returns(outcome, mask, 1.0),
                       torch.tensor([[-0.5, -0.5, -0.5, 0.0], [1.5, 1.5, 1.5, 1.5]]))
    assert loops == []
    with_kl = outcome - 0.01
    assert torch.equal(maker.get_cumulative_returns(with_kl, mask, 1.0), original(None, with_kl, mask, 1.0))
    assert loops == [1]
    maker.get_cumulative_returns(outcome, mask, 0.9)  # discounted (reinforce): upstream's loop
    assert loops == [1, 1]
