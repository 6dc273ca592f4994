"""Group and pool baselines per estimator (the table in docs/algorithms.md), against values worked out by hand."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_ada.algorithms import baselines
from openrlhf_ada.algorithms.baselines import group_index


def group_baseline(rewards, estimator):
    """The one baseline on fixed groups: [P, n] rewards, each row a group, as a [P, n] result."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return baselines.group_baseline(r.reshape(-1), group_index([r.shape[1]] * r.shape[0]), estimator).reshape(r.shape)


def pool_baseline(rewards, estimator, **pool):
    """The same with each row's pool statistics ([P] each)."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    groups = group_index([r.shape[1]] * r.shape[0])
    return baselines.group_baseline(r.reshape(-1), groups, estimator, **pool).reshape(r.shape)

# kept group [1, 0, 1, 0] drawn from a pool of 8 samples with 2 positives: pool mean 0.25,
# unbiased pool std sqrt((2 - 4/8) / 7), pool sum 2.
KEPT = [[1.0, 0.0, 1.0, 0.0]]
POOL = dict(pool_count=[8], pool_mean=[0.25], pool_std=[(1.5 / 7) ** 0.5])
S = (1.5 / 7) ** 0.5


@pytest.mark.parametrize(
    "estimator,expected",
    [
        ("rloo", [1 - 1 / 7, 0 - 2 / 7, 1 - 1 / 7, 0 - 2 / 7]),  # r - (2 - r) / 7
        ("reinforce_baseline", [0.75, -0.25, 0.75, -0.25]),
        ("dr_grpo", [0.75, -0.25, 0.75, -0.25]),
        ("group_norm", [0.75 / S, -0.25 / S, 0.75 / S, -0.25 / S]),
    ],
)
def test_pool_baseline_by_hand(estimator, expected):
    assert pool_baseline(KEPT, estimator, **POOL)[0].tolist() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "estimator,expected",
    [
        ("rloo", [2 / 3, -2 / 3, 2 / 3, -2 / 3]),  # r - (2 - r) / 3
        ("reinforce_baseline", [0.5, -0.5, 0.5, -0.5]),
        ("dr_grpo", [0.5, -0.5, 0.5, -0.5]),
        # unbiased std of [1, 0, 1, 0] = sqrt(1/3)
        ("group_norm", [0.5 * 3**0.5, -0.5 * 3**0.5, 0.5 * 3**0.5, -0.5 * 3**0.5]),
    ],
)
def test_group_baseline_by_hand(estimator, expected):
    assert group_baseline(KEPT, estimator)[0].tolist() == pytest.approx(expected, rel=1e-6)


def test_pool_equal_to_kept_group_gives_the_group_baseline():
    r = torch.tensor([[0.3, 1.0, -0.5, 2.0], [1.0, 1.0, 0.0, 0.0]])
    stats = dict(pool_count=[4, 4], pool_mean=r.mean(-1), pool_std=r.std(-1))
    for est in ("rloo", "reinforce_baseline", "dr_grpo", "group_norm"):
        assert torch.allclose(pool_baseline(r, est, **stats), group_baseline(r, est), atol=1e-6)


@pytest.mark.parametrize("estimator", ["rloo", "reinforce_baseline", "dr_grpo", "group_norm"])
def test_all_equal_kept_group_has_zero_advantage(estimator):
    # shaped rewards: all kept are -0.5 but the pool (mean -0.2) held other values
    out = pool_baseline([[-0.5, -0.5, -0.5]], estimator, pool_count=[6], pool_mean=[-0.2], pool_std=[0.3])
    assert out.tolist() == [[0.0, 0.0, 0.0]]
    assert group_baseline([[-0.5, -0.5, -0.5]], estimator).tolist() == [[0.0, 0.0, 0.0]]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(2, 6), st.integers(0, 10), st.data())
def test_pool_baseline_matches_the_formula_on_random_pools(P, n, extra, data):
    """Build real pools (kept = first n of the pool) and compare with the spec's formulas in plain python."""
    pools = [[data.draw(st.sampled_from([0.0, 1.0, 0.5, -1.0])) for _ in range(n + extra)] for _ in range(P)]
    kept = torch.tensor([p[:n] for p in pools])
    count = [len(p) for p in pools]
    mean = [sum(p) / len(p) for p in pools]
    std = [(sum((x - m) ** 2 for x in p) / (len(p) - 1)) ** 0.5 for p, m in zip(pools, mean)]
    for est in ("rloo", "dr_grpo", "group_norm"):
        got = pool_baseline(kept, est, pool_count=count, pool_mean=mean, pool_std=std)
        for i, p in enumerate(pools):
            row = p[:n]
            if len(set(row)) == 1:
                want = [0.0] * n
            elif est == "rloo":
                want = [r - (sum(p) - r) / (len(p) - 1) for r in row]
            elif est == "dr_grpo":
                want = [r - mean[i] for r in row]
            else:
                want = [(r - mean[i]) / (std[i] + 1e-9) for r in row]
            assert got[i].tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: group_baseline([[1.0, 0.0]], "gae"), ["estimator", "'gae'", "'rloo'", "'group_norm'"]),
        (lambda: pool_baseline([[1.0, 0.0]], "grpo", pool_count=[2], pool_mean=[0.5], pool_std=[0.7]),
         ["estimator", "'grpo'", "'dr_grpo'"]),
        (lambda: pool_baseline([[1.0, 0.0]], "dr_grpo", pool_count=[2, 2], pool_mean=[0.5], pool_std=[0.7]),
         ["pool_count", "2 entries", "(1)"]),
        (lambda: pool_baseline([[1.0, 0.0]], "rloo", pool_count=[1], pool_mean=[0.5], pool_std=[0.7]),
         ["pool_count", "at least 2"]),
        (lambda: baselines.group_baseline([1.0, 0.0], [0, 0, 1], "rloo"), ["group", "3 entries", "2 samples"]),
        (lambda: baselines.group_baseline([1.0, 0.0], [0, 2], "rloo"), ["0..G-1"]),
        (lambda: baselines.group_baseline([1.0, 0.0], [0, 0], "rloo", pool_count=[2]), ["pool_mean", "together"]),
    ],
)
def test_bad_input(call, words):
    with pytest.raises(ValueError) as e:
        call()
    for word in words:
        assert word in str(e.value)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0, 0.5, -1.0]), min_size=1, max_size=5), min_size=1, max_size=5),
       st.sampled_from(["rloo", "reinforce_baseline", "dr_grpo", "group_norm"]), st.randoms(use_true_random=False))
def test_a_group_is_its_index_not_its_place(groups, estimator, rnd):
    """The samples of a group need not be contiguous (each sample names its group): shuffling the samples together
    with their group indices shuffles the advantages alike, and the per-group helpers agree by hand."""
    flat = [x for g in groups for x in g]
    index = [i for i, g in enumerate(groups) for _ in g]
    order = list(range(len(flat)))
    rnd.shuffle(order)
    contiguous = baselines.group_baseline(flat, index, estimator)
    shuffled = baselines.group_baseline([flat[i] for i in order], [index[i] for i in order], estimator)
    assert shuffled.tolist() == [contiguous[i].item() for i in order]
    shuffled_index = [index[i] for i in order]
    assert baselines.group_firsts(shuffled_index).tolist() == [shuffled_index.index(g) for g in range(len(groups))]
    sums = baselines.group_sums([flat[i] for i in order], shuffled_index).tolist()
    assert sums == pytest.approx([sum(g) for g in groups])
    stds = baselines.group_std(flat, index).tolist()
    for g, std in zip(groups, stds):
        m = sum(g) / len(g)
        assert std == pytest.approx((sum((x - m) ** 2 for x in g) / max(len(g) - 1, 1)) ** 0.5)
