"""AdoraPoolExperienceMaker on real OpenRLHF `Experience` objects: bit-for-bit upstream with the features off, ADORA on
every estimator upstream offers, the pool baseline against hand-derived values."""

import itertools

import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker

ESTIMATORS = ["gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce"]
N = 4
# two prompts x four samples, in rollout order
REWARDS = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
LENGTHS = [10, 2, 3, 4, 2, 5, 8, 3]  # response tokens
# prompt 0: maxPos 10 > meanNeg 3 -> boost 1.0; prompt 1: maxPos 5 < meanNeg 8 -> lam 0.1
WEIGHTS = [1.0] * 4 + [0.1] * 4
T = 12  # action positions per sample


def make_args(estimator, *extra):
    argv = ["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward", "--rollout.n_samples_per_prompt",
            str(N), "--algo.advantage.estimator", estimator, "--rollout.micro_batch_size", "4", *extra]
    return parse_args(argv)


def make_experiences(pool=None, kl_scale=0.0, seed=0):
    """Two micro-batches whose samples are out of rollout order (as after upstream's split), with real masks."""
    g = torch.Generator().manual_seed(seed)
    order = [5, 0, 3, 6, 1, 7, 2, 4]
    batches = []
    for part in (order[:4], order[4:]):
        mask = torch.zeros(len(part), T, dtype=torch.bool)
        for row, i in enumerate(part):
            mask[row, : LENGTHS[i]] = True
        info = {"ada_group": torch.tensor([i // N for i in part])}  # as the samples generator stamps it
        if pool is not None:
            for key, values in pool.items():
                info[key] = torch.tensor([values[i // N] for i in part], dtype=torch.float32)
        batches.append(Experience(
            action_mask=mask,
            rewards=torch.tensor([REWARDS[i] for i in part]),
            scores=torch.tensor([REWARDS[i] for i in part]),
            response_length=torch.tensor([float(LENGTHS[i]) for i in part]),
            truncated=torch.zeros(len(part), dtype=torch.bool),
            kl=kl_scale * torch.rand(len(part), T, generator=g) * mask,
            values=torch.rand(len(part), T, generator=g) * mask,
            index=list(part),
            info=info,
        ))
    return batches


def run(cls, args, experiences, step=1):
    maker = cls(None, None, None, None, FixedKLController(0.01), type("S", (), {"args": args})(), None)
    if isinstance(maker, AdoraPoolExperienceMaker):
        maker.global_step = step
    return maker.compute_advantages_and_returns(experiences)


def per_sample_advantage(experiences):
    """The advantage of each sample in rollout order (its first action token; constant along the sequence for the
    outcome-reward estimators with zero KL)."""
    out = {}
    for e in experiences:
        for row, i in enumerate(e.index):
            out[i] = e.advantages[row, 0].item()
    return [out[i] for i in range(len(out))]


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_bit_for_bit_upstream_with_features_off(estimator):
    args = make_args(estimator)
    ours = run(AdoraPoolExperienceMaker, args, make_experiences(kl_scale=0.1))
    theirs = run(RemoteExperienceMaker, make_args(estimator), make_experiences(kl_scale=0.1))
    for a, b in zip(ours, theirs):
        assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)
        assert a.info.keys() == b.info.keys() - {"ada_group"}  # the group id leaves info once used


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_adora_multiplies_final_advantages_of_every_estimator(estimator):
    """ADORA = upstream's final advantages (after baseline, normalisation and whitening) x the hand-derived weight,
    token by token; critic returns are untouched."""
    theirs = run(RemoteExperienceMaker, make_args(estimator), make_experiences(kl_scale=0.1))
    ours = run(AdoraPoolExperienceMaker, make_args(estimator, "--adora.enable"), make_experiences(kl_scale=0.1))
    for a, b in zip(ours, theirs):
        w = torch.tensor([WEIGHTS[i] for i in a.index]).unsqueeze(-1)
        assert torch.allclose(a.advantages, b.advantages * w, atol=1e-7)
        assert torch.equal(a.returns, b.returns)
        assert a.info["adora_weight"].tolist() == pytest.approx([WEIGHTS[i] for i in a.index])
        assert a.info["adora_weight_mean"].tolist() == pytest.approx([(4 * 1.0 + 4 * 0.1) / 8] * 4)
        assert a.info["adora_attenuated_share"].tolist() == pytest.approx([0.5] * 4)


def test_adora_by_hand_dr_grpo():
    # dr_grpo: r - group mean; prompt 0 mean 0.25, prompt 1 mean 0.75; then x [1, 0.1]
    out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", "--adora.enable"), make_experiences())
    expected = [0.75, -0.25, -0.25, -0.25, 0.025, 0.025, -0.075, 0.025]
    assert per_sample_advantage(out) == pytest.approx(expected, abs=1e-6)


def test_adora_only_inside_its_steps():
    args = make_args("dr_grpo", "--adora.enable", "--adora.start_step", "3", "--adora.end_step", "5")
    plain = per_sample_advantage(run(AdoraPoolExperienceMaker, make_args("dr_grpo"), make_experiences()))
    assert per_sample_advantage(run(AdoraPoolExperienceMaker, args, make_experiences(), step=2)) == pytest.approx(plain)
    weighted = per_sample_advantage(run(AdoraPoolExperienceMaker, args, make_experiences(), step=3))
    assert weighted == pytest.approx([a * w for a, w in zip(plain, WEIGHTS)], abs=1e-6)
    assert per_sample_advantage(run(AdoraPoolExperienceMaker, args, make_experiences(), step=5)) == pytest.approx(plain)


def test_adora_with_a_custom_weight_function(tmp_path):
    path = tmp_path / "w.py"
    path.write_text("def weight(scores, rewards, lengths, truncated, step):\n    return lengths / 10\n")
    out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", "--adora.enable", "--adora.weight_func", f"{path}:weight"),
              make_experiences())
    base = [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25]
    assert per_sample_advantage(out) == pytest.approx([a * L / 10 for a, L in zip(base, LENGTHS)], abs=1e-6)


# pool: prompt 0 drew 8 samples with 1 positive (mean 1/8); prompt 1 drew 4 (its kept group, mean 3/4)
POOL = {"ada_pool_count": [8, 4], "ada_pool_mean": [1 / 8, 3 / 4],
        "ada_pool_std": [((1 - 1 / 8) / 7) ** 0.5, ((3 - 9 / 4) / 3) ** 0.5]}
ADA = ["--ada.enable", "--ada.baseline", "pool"]


@pytest.mark.parametrize(
    "estimator,expected",
    [
        # r - pool_mean
        ("dr_grpo", [7 / 8, -1 / 8, -1 / 8, -1 / 8, 0.25, 0.25, -0.75, 0.25]),
        # r - (pool_sum - r) / (pool_count - 1): prompt 0 sum 1, count 8; prompt 1 sum 3, count 4
        ("rloo", [1 - 0 / 7, -1 / 7, -1 / 7, -1 / 7, 1 - 2 / 3, 1 - 2 / 3, -1.0, 1 - 2 / 3]),
        # (r - pool_mean) / (pool_std + 1e-9)
        ("group_norm", [(7 / 8) / POOL["ada_pool_std"][0]] + [(-1 / 8) / POOL["ada_pool_std"][0]] * 3
         + [0.25 / POOL["ada_pool_std"][1]] * 2 + [-0.75 / POOL["ada_pool_std"][1], 0.25 / POOL["ada_pool_std"][1]]),
    ],
)
def test_pool_baseline_by_hand(estimator, expected):
    out = run(AdoraPoolExperienceMaker, make_args(estimator, *ADA), make_experiences(pool=POOL))
    assert per_sample_advantage(out) == pytest.approx(expected, rel=1e-5)


def test_pool_baseline_reinforce_baseline_is_whitened_like_upstream():
    out = run(AdoraPoolExperienceMaker, make_args("reinforce_baseline", *ADA), make_experiences(pool=POOL))
    raw = torch.tensor([7 / 8, -1 / 8, -1 / 8, -1 / 8, 0.25, 0.25, -0.75, 0.25])
    tokens = torch.cat([raw[i].repeat(LENGTHS[i]) for i in range(8)])  # whitening is over action tokens
    expected = (raw - tokens.mean()) / tokens.var(unbiased=False).sqrt()
    assert per_sample_advantage(out) == pytest.approx(expected.tolist(), rel=1e-5)


@pytest.mark.parametrize("estimator", ["rloo", "reinforce_baseline", "group_norm", "dr_grpo"])
def test_pool_equal_to_kept_group_reproduces_upstream(estimator):
    """With pool statistics equal to the kept group's, the project's pool path (length penalties, KL reward,
    returns, whitening) must give upstream's numbers: it is the same computation with another baseline."""
    r = torch.tensor(REWARDS).reshape(2, N)
    kept = {"ada_pool_count": [N, N], "ada_pool_mean": r.mean(-1).tolist(), "ada_pool_std": r.std(-1).tolist()}
    ours = run(AdoraPoolExperienceMaker, make_args(estimator, *ADA), make_experiences(pool=kept, kl_scale=0.1))
    theirs = run(RemoteExperienceMaker, make_args(estimator), make_experiences(kl_scale=0.1))
    for a, b in zip(ours, theirs):
        assert torch.allclose(a.advantages, b.advantages, atol=1e-5)
        assert torch.allclose(a.returns, b.returns, atol=1e-5)
        assert torch.allclose(a.info["return"], b.info["return"], atol=1e-6)


def test_pool_baseline_with_adora_and_missing_pool_stats():
    out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", *ADA, "--adora.enable"), make_experiences(pool=POOL))
    pool_only = [7 / 8, -1 / 8, -1 / 8, -1 / 8, 0.25, 0.25, -0.75, 0.25]
    assert per_sample_advantage(out) == pytest.approx([a * w for a, w in zip(pool_only, WEIGHTS)], rel=1e-5)
    with pytest.raises(RuntimeError, match="ada_pool_count"):
        run(AdoraPoolExperienceMaker, make_args("dr_grpo", *ADA), make_experiences())


def test_every_sample_keeps_its_index_mapping():
    """Scrambled micro-batches: each sample's advantage follows its own index, not its position."""
    out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", "--adora.enable"), make_experiences())
    got = {i: e.advantages[row, 0].item() for e in out for row, i in enumerate(e.index)}
    assert sorted(got) == list(range(8))
    assert list(itertools.chain.from_iterable(e.index for e in out)) == [5, 0, 3, 6, 1, 7, 2, 4]
    assert got[0] == pytest.approx(0.75)


@pytest.mark.parametrize("estimator,expected", [("dr_grpo", [0.75, 0.75, -0.75, -0.75]),
                                                ("group_norm", [0.866025, 0.866025, -0.866025, -0.866025]),
                                                ("rloo", [1.0, 1.0, -1.0, -1.0])])
def test_pool_statistics_include_length_penalties(estimator, expected):
    """Rewards 1, 1, 0, 0, the two wrong answers truncated, --reward.stop_properly_penalty_coef
    -0.5 (truncated -> -0.5), pool = the kept group. Upstream's group statistics are taken after the penalty; the
    pool statistics the samples generator keeps must be too. Expected values by hand: penalised rewards
    1, 1, -0.5, -0.5 (mean 0.25, unbiased std 0.866)."""
    from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq
    from openrlhf_ada.trainer.ppo_utils.sample_record import penalised_rewards

    args = make_args(estimator, *ADA, "--reward.stop_properly_penalty_coef", "-0.5")
    rewards, truncated = [1.0, 1.0, 0.0, 0.0], [False, False, True, True]

    def samples():
        return [Experience(action_mask=torch.ones(1, T, dtype=torch.bool), rewards=torch.tensor([r]),
                           scores=torch.tensor([r]), response_length=torch.tensor([float(T)]),
                           truncated=torch.tensor([t]), kl=torch.zeros(1, T), index=[i], info={})
                for i, (r, t) in enumerate(zip(rewards, truncated))]

    pool = PromptPool(Seq(n=N, round_size=N, max_rounds=1, baseline="pool"))
    generated = samples()
    pool.add_round(scores=rewards, rewards=penalised_rewards(rewards, [T] * len(rewards), truncated, args),
                   items=generated)
    assert [e.rewards.item() for e in generated] == rewards  # the samples themselves keep their raw rewards
    kept = samples()
    for e in kept:
        e.info.update(ada_group=torch.tensor([0]), ada_pool_count=torch.tensor([float(pool.count)]),
                      ada_pool_mean=torch.tensor([pool.mean]),
                      ada_pool_std=torch.tensor([pool.std]))
    batch = [Experience.concat_experiences(kept, 0)]
    ours = run(AdoraPoolExperienceMaker, args, batch)
    assert per_sample_advantage(ours) == pytest.approx(expected, abs=1e-5)
    upstream = run(RemoteExperienceMaker, make_args(estimator, "--reward.stop_properly_penalty_coef", "-0.5"),
                   [Experience.concat_experiences(samples(), 0)])
    assert per_sample_advantage(upstream) == pytest.approx(expected, abs=1e-5)


def test_per_prompt_values_leave_info_once_used():
    """Upstream logs every info key as a batch average; the pool statistics and pool indices
    mean nothing averaged, so they are gone once the advantages are computed (features on or off)."""
    extra = dict(POOL, ada_pool_index=[0, 1], ada_samples=[8, 4])
    for flags in (ADA, ()):
        out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", *flags), make_experiences(pool=extra))
        assert not [k for e in out for k in e.info if k.startswith(("ada_pool", "ada_samples"))]


# -- --ada.strategy est: every sample trained, groups of varying size ----------------------------------------------
EST = ["--ada.enable", "--ada.strategy", "est"]
# rollout order: a group of 3 (pool indices 0, 1, 2), then one of 5 (0..4); REWARDS = [1, 0, 0 | 0, 1, 1, 0, 1]
EST_INDEX = [0, 1, 2, 0, 1, 2, 3, 4]
EST_GROUP = [10, 10, 10, 11, 11, 11, 11, 11]  # group ids: any value, the same for a group's samples
EST_COUNT = [3, 3, 3, 5, 5, 5, 5, 5]
EST_PASS = [1 / 3] * 3 + [3 / 5] * 5


def est_experiences(kl_scale=0.0):
    experiences = make_experiences(kl_scale=kl_scale)
    for e in experiences:
        e.info = {"ada_group": torch.tensor([EST_GROUP[i] for i in e.index]),
                  "ada_pool_index": torch.tensor([float(EST_INDEX[i]) for i in e.index]),
                  "ada_pool_count": torch.tensor([float(EST_COUNT[i]) for i in e.index]),
                  "ada_pool_mean": torch.zeros(len(e.index)), "ada_pool_std": torch.ones(len(e.index)),
                  "ada_pool_pass_rate": torch.tensor([EST_PASS[i] for i in e.index])}
    return experiences


def test_est_advantage_by_hand_dr_grpo():
    """Group [1, 0, 0]: mean 1/3, weight 1/sqrt(1/3) + 0.01 = 1.74205; group [0, 1, 1, 0, 1]: mean 3/5, weight
    1/sqrt(0.6) + 0.01 = 1.30098. Advantage (r - mean) x weight, on every sample."""
    out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", *EST), est_experiences())
    w0, w1 = 1 / (1 / 3) ** 0.5 + 0.01, 1 / 0.6 ** 0.5 + 0.01
    expected = [(2 / 3) * w0, (-1 / 3) * w0, (-1 / 3) * w0] + [x * w1 for x in (-0.6, 0.4, 0.4, -0.6, 0.4)]
    assert per_sample_advantage(out) == pytest.approx(expected, rel=1e-5)
    for e in out:  # the per-prompt values leave info once used
        assert not any(k.startswith("ada_pool") for k in e.info)


def test_est_rloo_without_weight_and_kl_outside_the_weight():
    """--ada.prompt_weight none: plain leave-one-out baselines per group of its own size: group 0: 1 - 0, 0 - 1/2,
    0 - 1/2; group 1: 0 - 3/4, 1 - 2/4 (x3 pattern)."""
    out = run(AdoraPoolExperienceMaker, make_args("rloo", *EST, "--ada.prompt_weight", "none"), est_experiences())
    expected = [1.0, -0.5, -0.5, -0.75, 0.5, 0.5, -0.75, 0.5]
    assert per_sample_advantage(out) == pytest.approx(expected, rel=1e-5)


def test_est_rejects_samples_that_are_not_whole_groups():
    """Group ids 10, 11, 10 in rollout order: group 10's samples are not contiguous."""
    experiences = est_experiences()
    for e in experiences:
        e.info["ada_group"] = torch.tensor([10 if i in (0, 1, 7) else 11 for i in e.index])
    with pytest.raises(RuntimeError, match="whole groups"):
        run(AdoraPoolExperienceMaker, make_args("dr_grpo", *EST), experiences)


@pytest.mark.parametrize("flags", [("--adora.enable",), (*ADA, "--adora.enable"),
                                   (*EST, "--ada.prompt_weight", "none", "--adora.enable")])
def test_every_path_reads_the_groups_from_their_ids(flags):
    """The same eight samples under fixed n, Seq and Est, with group ids [3, 3, 3 | 8, 8, 8, 8, 8]: the groups are what
    the ids say, not i // n. ADORA (scores are the rewards, threshold 0.5): group [1, 0, 0] (lengths 10, 2, 3) has
    maxPos 10 > meanNeg 2.5 -> 1.0; group [0, 1, 1, 0, 1] (lengths 4, 2, 5, 8, 3) has maxPos 5 < meanNeg 6 -> lam 0.1.
    Read as groups of four, sample 3 would get 1.0."""
    pool = {"ada_pool_count": [8, 8], "ada_pool_mean": [0.5, 0.5], "ada_pool_std": [1.0, 1.0]}
    experiences = make_experiences(pool=pool if "pool" in flags else None)
    for e in experiences:
        e.info["ada_group"] = torch.tensor([3 if i < 3 else 8 for i in e.index])
    out = run(AdoraPoolExperienceMaker, make_args("dr_grpo", *flags), experiences)
    weights = {i: float(e.info["adora_weight"][row]) for e in out for row, i in enumerate(e.index)}
    assert [weights[i] for i in range(8)] == pytest.approx([1.0] * 3 + [0.1] * 5)
    assert not [k for e in out for k in e.info if k == "ada_group"]


def test_the_project_paths_refuse_samples_without_group_ids():
    experiences = make_experiences()
    for e in experiences:
        del e.info["ada_group"]
    with pytest.raises(RuntimeError, match="group id"):
        run(AdoraPoolExperienceMaker, make_args("dr_grpo", "--adora.enable"), experiences)


def test_seq_prompt_weight_inv_pass_rate_by_hand():
    """Seq with the pool baseline and --ada.prompt_weight inv_pass_rate: pool of prompt 0: mean 1/8 over 8 samples,
    pass rate 1/8 -> weight min(10, 8 + 0.01) = 8.01; prompt 1: pass rate 0.75 -> 1/0.75 + 0.01 = 1.34333."""
    pool = {"ada_pool_count": [8, 4], "ada_pool_mean": [1 / 8, 0.75], "ada_pool_std": [1.0, 1.0],
            "ada_pool_pass_rate": [1 / 8, 0.75]}
    args = make_args("dr_grpo", "--ada.enable", "--ada.prompt_weight", "inv_pass_rate")
    out = run(AdoraPoolExperienceMaker, args, make_experiences(pool=pool))
    w0, w1 = 8.01, 1 / 0.75 + 0.01
    expected = [x * w0 for x in (7 / 8, -1 / 8, -1 / 8, -1 / 8)] + [x * w1 for x in (0.25, 0.25, -0.75, 0.25)]
    assert per_sample_advantage(out) == pytest.approx(expected, rel=1e-5)
