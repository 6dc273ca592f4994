"""Reward models (OpenRLHF's classic RLHF: `--reward.model_name_or_path`, no `--reward.remote_url`) with the project's
classes in.

The engines then return reward=None and upstream scores the samples afterwards with the reward model, in its
experience maker. With the project's features off, and with ADORA (which needs only the final rewards), the run must
train on upstream's samples; Reinforce-Ada, which decides on each sample's reward while it samples, is refused at
start-up by both trainers, naming the flag pair.

The reward model is the tiny random Llama of tests/conftest.py with the fresh value head upstream adds when it loads
a causal-LM checkpoint for sequence regression: its rewards are arbitrary but real numbers, different per sample.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import siblings
import torch
from openrlhf.trainer.ppo_utils.experience import Experience

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

RM_BASE = ["--actor.model_name_or_path", "m", "--reward.model_name_or_path", "rm", "--algo.advantage.estimator",
           "group_norm", "--rollout.n_samples_per_prompt", "4", "--actor.num_gpus_per_node", "1"]


# -- start-up: which pairs are accepted, which refused ---------------------------------------------------------------


@pytest.mark.parametrize("extra", [
    ["--ada.enable"],
    ["--ada.enable", "--ada.strategy", "est"],
    ["--ada.enable", "--ada.cancel"],
])
def test_the_launcher_refuses_reinforce_ada_with_a_reward_model(extra, refused):
    refused(parse_args, RM_BASE + extra, ["--ada.enable", "--reward.model_name_or_path", "while it samples",
                                          "--reward.remote_url"])


@pytest.mark.parametrize("extra", [[], ["--adora.enable"]])
def test_the_launcher_accepts_a_reward_model_with_features_off_and_with_adora(extra):
    args = parse_args(RM_BASE + extra)
    assert args.reward.model_name_or_path == "rm" and not args.reward.remote_url


@pytest.mark.parametrize("parse", [parse_args, parse_local_args], ids=["launcher", "train_local"])
@pytest.mark.parametrize("extra", [[], ["--ada.enable"]])
def test_a_reward_function_next_to_a_reward_model_is_refused_naming_both(tmp_path, refused, parse, extra):
    """With --reward.remote_url upstream builds no reward model (it scores with the file) and never loads the one
    named: the pair is refused (openrlhf_ada.compatibility's reward-url-and-model), not Reinforce-Ada with it."""
    reward = tmp_path / "reward.py"
    reward.write_text("def reward_func(queries, prompts, labels):\n    return {}\n")
    err = refused(parse, RM_BASE + ["--reward.remote_url", str(reward)] + extra,
                  ["--reward.remote_url with --reward.model_name_or_path", "never loaded"])
    assert "while it samples" not in err


def local_argv(tmp_path, *extra):
    data = tmp_path / "data.jsonl"
    data.write_text('{"input": "1+1", "label": "2"}\n')
    return ["--actor.model_name_or_path", str(tmp_path), "--data.prompt_dataset", str(data),
            "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "4",
            "--reward.model_name_or_path", str(tmp_path), "--local.output_dir", str(tmp_path / "run"), *extra]


@pytest.mark.parametrize("extra", [
    ["--ada.enable"],
    ["--ada.enable", "--ada.strategy", "est"],
    ["--ada.enable", "--ada.cancel"],
])
def test_train_local_refuses_reinforce_ada_with_a_reward_model_naming_the_pair(tmp_path, refused, extra):
    refused(parse_local_args, local_argv(tmp_path, *extra),
            ["--ada.enable", "--reward.model_name_or_path", "while it samples"])


@pytest.mark.parametrize("extra", [[], ["--adora.enable"]])
def test_train_local_refuses_a_reward_model_it_cannot_use(tmp_path, refused, extra):
    refused(parse_local_args, local_argv(tmp_path, *extra),
            ["--reward.model_name_or_path", "train_local", "openrlhf_ada.cli.train_ppo_ray"])


# -- the generator: upstream's path when a reward model scores later -------------------------------------------------


def test_the_generator_takes_upstreams_path_when_a_reward_model_scores():
    """Rewards come later: the round loop (which judges each sample's reward as it comes back) is not used, so the
    generator is upstream's (as for n = 1); with a reward file it is the round loop, as before."""
    def generator(argv):
        return RoundsSamplesGenerator(strategy=SimpleNamespace(args=parse_args(argv)), prompts_dataloader=[],
                                      eval_dataloader=None, tokenizer=None, vllm_engines=[])

    assert generator(RM_BASE).pool_config is None
    assert generator(RM_BASE + ["--adora.enable"]).pool_config is None
    reward_function = ["--reward.remote_url", "http://localhost:5000/get_reward"]
    i = RM_BASE.index("--reward.model_name_or_path")
    assert generator(RM_BASE[:i] + RM_BASE[i + 2:] + reward_function).pool_config is not None


def test_reward_none_samples_pass_through_the_generator_as_upstream_returns_them(monkeypatch):
    """A step of samples without rewards (what the engines return when a reward model scores later): every one
    reaches the trainer, in upstream's order, with reward None, where the round loop counted each as failed and
    stopped the step ("got no usable reward")."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    args = parse_args(RM_BASE + ["--rollout.batch_size", "2"])
    made = [Experience(sequences=torch.tensor([[i]]), rewards=None, scores=None, info={"response_clip_ratio":
                                                                                        torch.zeros(1)})
            for i in range(8)]

    def upstream_generate(self, dataloader_iter, num_prompts, dynamic_filtering, **kwargs):
        return list(made), num_prompts, True

    monkeypatch.setattr(SamplesGenerator, "_generate_vllm", upstream_generate)
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=[([0], ["p"], ["l"], [None])],
                                 eval_dataloader=None, tokenizer=None, vllm_engines=[])
    samples, _, consumed, exhausted = gen.generate_samples()
    assert samples == made and all(s.rewards is None for s in samples) and (consumed, exhausted) == (2, True)


# -- the experience maker: ADORA from the reward model's rewards ----------------------------------------------------

N = 4
LENGTHS = [10, 2, 3, 4, 2, 5, 8, 3]  # response tokens of the 8 samples (2 prompts x 4), in rollout order
RM_REWARDS = [0.9, -0.3, 0.2, -1.1, 0.7, 0.8, -0.4, 0.6]  # what the reward model gives each sample
# threshold 0.5: prompt 0 has one positive (10 tokens) against negatives of mean (2 + 3 + 4) / 3 = 3 tokens -> boost
# 1.0; prompt 1's longest positive (5 tokens) is shorter than its negative (8 tokens) -> lam 0.1. Read in any other
# order, or from rewards of 0, the groups would differ.
ADORA_WEIGHTS = [1.0] * 4 + [0.1] * 4
PROMPT_TOKENS = 3


def engine_samples():
    """What the engines return when a reward model scores later: one Experience per sample, reward and score None.
    Sample i's prompt starts with token 100 + i (the fake reward model reads it back)."""
    out = []
    for i, length in enumerate(LENGTHS):
        total = PROMPT_TOKENS + length
        action_mask = torch.zeros(1, total - 1, dtype=torch.long)
        action_mask[0, PROMPT_TOKENS - 1 :] = 1
        out.append(Experience(
            sequences=torch.tensor([[100 + i, 5, 6] + [7] * length]), attention_mask=torch.ones(1, total,
                                                                                                 dtype=torch.long),
            action_mask=action_mask, prompts=[f"p{i // N}"], labels=[""], rewards=None, scores=None,
            response_length=torch.tensor([float(length)]), truncated=torch.tensor([False]),
            total_length=torch.tensor([float(total)]),
            info={"response_clip_ratio": torch.zeros(1), "ada_group": torch.tensor([i // N])},  # RoundsSamplesGenerator stamps it
        ))
    return out


class FakeGroup:
    """A Ray actor group of one rank whose `forward` is `fn(sequences)` per micro-batch (the module's `ray` is the
    identity here)."""

    def __init__(self, fn):
        self.fn = fn

    def async_run_method_batch(self, method_name, sequences, **kwargs):
        return [[self.fn(s) for s in sequences]]


def reward_model(sequences):
    """One reward per row from the id token the row starts with (padding is on the right)."""
    return torch.tensor([RM_REWARDS[int(row[0]) - 100] for row in sequences])


def make_with_reward_model(cls, monkeypatch, *extra):
    import openrlhf.trainer.ppo_utils.experience_maker as upstream
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    monkeypatch.setattr(upstream, "ray", SimpleNamespace(put=lambda x: x, get=lambda x: x))
    args = parse_args(RM_BASE + ["--rollout.micro_batch_size", "3", *extra])
    actor = FakeGroup(lambda s: torch.zeros(s.shape[0], s.shape[1] - 1))
    tokenizer = SimpleNamespace(pad_token_id=0)
    maker = cls(actor, None, FakeGroup(reward_model), None, FixedKLController(0.0), SimpleNamespace(args=args),
                tokenizer)
    maker.global_step = 1
    return maker.make_experience_batch(engine_samples())


def by_sample(experiences, tensor_of):
    out = {}
    for e in experiences:
        for row, i in enumerate(e.index):
            out[i] = float(tensor_of(e)[row])
    return [out[i] for i in range(len(out))]


def first_action_advantage(e):
    """Each row's advantage at its first action token (constant along the response without a KL term)."""
    first = e.action_mask.long().argmax(dim=1, keepdim=True)
    return e.advantages.gather(1, first).squeeze(1)


def test_adora_weights_come_from_the_reward_models_rewards(monkeypatch):
    """Upstream's make_experience_batch with a reward model (micro-batches of 3 split the groups): it scores the
    samples, then AdoraPoolExperienceMaker computes ADORA's weights from those rewards, in rollout order, and
    multiplies upstream's advantages by them. Features off, the maker is upstream's."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker

    ours = make_with_reward_model(AdoraPoolExperienceMaker, monkeypatch, "--adora.enable")
    theirs = make_with_reward_model(RemoteExperienceMaker, monkeypatch)
    assert by_sample(ours, lambda e: e.info["reward"]) == pytest.approx(RM_REWARDS)
    assert by_sample(ours, lambda e: e.info["adora_weight"]) == pytest.approx(ADORA_WEIGHTS)
    ours_adv = by_sample(ours, first_action_advantage)
    theirs_adv = by_sample(theirs, first_action_advantage)
    assert any(a != 0 for a in theirs_adv)
    assert ours_adv == pytest.approx([a * w for a, w in zip(theirs_adv, ADORA_WEIGHTS)])

    off = make_with_reward_model(AdoraPoolExperienceMaker, monkeypatch)
    for a, b in zip(off, theirs):
        assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)


# -- the whole pipeline ----------------------------------------------------------------------------------------------


def pipeline_helpers():
    """tests/test_pipeline_on_cpu.py's run helpers (launch, flags, checks)."""
    return siblings.load("test_pipeline_on_cpu.py")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reward_model_grpo_with_adora_trains_through_the_launcher(tmp_path, tiny_llama_path):
    """GRPO scored by a reward model (the tiny Llama with a fresh value head), ZeRO-3, 2 actor ranks, 2 vLLM engines:
    16 prompts x 4 samples in batches of 8 -> 2 steps. Step 1 has every project feature off (ADORA starts at step
    2); step 2 has ADORA, which leaves generation alone (upstream's generator in both: see
    test_the_generator_takes_upstreams_path_when_a_reward_model_scores). Both steps train on the reward model's
    rewards (upstream's reward-model actor ran; they differ from sample to sample, which neither a constant nor a
    missing reward would); step 2's ADORA weights were computed from them; the engines got the weights."""
    pipeline = pipeline_helpers()
    assert_ok, jsonl_rows, launch = pipeline.assert_ok, pipeline.jsonl_rows, pipeline.launch

    data = pipeline.write_prompts(tmp_path / "prompts.jsonl", 16)
    flags = pipeline.common_flags(tiny_llama_path, data, tmp_path)
    at = flags.index("--reward.remote_url")
    del flags[at : at + 2]
    flags += [
        "--reward.model_name_or_path", tiny_llama_path, "--reward.num_gpus_per_node", "1",
        "--algo.advantage.estimator", "group_norm", "--algo.kl.init_coef", "0",
        "--actor.num_gpus_per_node", "2", "--vllm.num_engines", "2", "--algo.advantage.is_correction_level", "token",
        # the random value head scores around 0; step 1 without ADORA (every project feature off), step 2 with it
        "--adora.enable", "--adora.positive_threshold", "0", "--adora.start_step", "2",
    ]
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    assert "reward normalization status" in run.log  # upstream's RewardModelActor loaded the reward model
    assert "got no usable reward" not in run.log
    rows = jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["rollout/num_samples"] for r in rows] == [32, 32]
    for row in rows:
        assert row["rollout/reward_std"] > 0, row  # one reward per sample from the model, not one value for all
        assert row["actor_grad_norm"] > 0, row  # the optimizer step had a gradient
        assert not [k for k in row if k.startswith("ada_")], row  # no round loop ran
    features_off, adora = rows
    assert not [k for k in features_off if k.startswith("adora")], features_off
    assert 0.1 <= adora["adora_weight_mean"] <= 1.0, adora  # every group got lam (0.1) or boost (1.0)
    for key in ("adora_attenuated_share", "adora_no_pos_share", "adora_no_usable_neg_share"):
        assert 0.0 <= adora[key] <= 1.0, (key, adora)
    # ADORA classified the reward model's rewards: a mean above the threshold (0) means some sample is positive, so
    # not every group lacks one (missing rewards read as 0 would leave every group without a positive)
    assert adora["rollout/reward_mean"] <= 0 or adora["adora_no_pos_share"] < 1, adora
    assert pipeline.sync_is_real({r["step"]: r["vllm_kl"] for r in rows}), [r["vllm_kl"] for r in rows]
