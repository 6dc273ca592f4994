"""A regression record: the batch each sampling strategy trains, held bit-identical on fixed seeds.

The expected digests below are a record that a restructuring changes nothing, not a proof that the batches are right
(the algorithm tests, with their hand-worked values and properties, prove that). A change that is meant to change the
trained batch updates them, saying why in its commit.

Each case runs the single-machine trainer's own path for four steps (two passes over 8 prompts, so that the
history-based rules see an earlier epoch): `RoundsSamplesGenerator.generate_samples` -> the experience maker's
`split_rollout_samples` -> `LocalTrainer.score` (old log-probs under a tiny Llama policy, reference log-probs and KL
under another) -> `AdoraPoolExperienceMaker.compute_advantages_and_returns`. What is recorded is every trained
micro-batch as the update reads it: tokens, attention and action masks, rewards, scores, advantages, returns,
log-probs, reference log-probs, and every `info` value but those of `STEP_METRIC_KEYS`, the step's Reinforce-Ada and
fault metrics (one value per generation step, the same for every sample of it), which once rode in every kept
sample's `info` and now travel beside the samples (`StepSamples.metrics`): the test also holds that none of them is
in a trained sample's `info` any more. The digests (`TRAINED`) were taken from the code as it was while the step's
metrics still rode in `info`, leaving them out: moving them changed nothing else that is trained.

No Ray and no vLLM: `ray` in the round loop and in upstream's dispatch is the `FakeRay` of
tests/test_trainer_side_costs.py (references ready at once), and the engine answers the j-th request ever made for a
prompt with a fixed response: its tokens, length, truncation and reward depend only on (prompt, j), so the outcome does
not depend on the order in which rounds are dispatched or collected. An engine's rounds are the project's own engine actor's
`generate_rounds` on such answers, and a stream (--ada.cancel) its `generate_stream`: both hand them back compact
(token ids and log-probs as arrays, trainer/ray/responses.py), as the real engines do. The log-probs and KL of the tiny
models are rounded to 1/1024 before the advantages are computed: a forward pass's last bits depend on the CPU's vector
unit, the rounded values (and every sum of them here) do not, so the record holds on any machine.

The cases form a table, so that another schedule or option that must train the same batch (sync and async
rounds, cancel on and off where the samples all finish together) is one more row.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import openrlhf.trainer.ppo_utils.samples_generator as upstream_generator
import pytest
import torch
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
from siblings import load
from transformers import AutoModelForCausalLM, AutoTokenizer

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.local_trainer import LocalTrainer
from openrlhf_ada.trainer.ppo_utils import round_loop
from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

costs = load("test_trainer_side_costs.py")

PROMPTS, BATCH, N, STEPS = 8, 4, 4, 4
GEN = dict(do_sample=True, max_len=64, max_new_tokens=8, temperature=1.0, top_p=1.0)
#: per prompt (i % 5): how many of every 8 consecutive answers are right (0: never, 8: always)
RIGHT_OF_8 = (0, 1, 4, 7, 8)


def answer(prompt: str, label: str, j: int) -> dict:
    """The engine's fixed answer to the j-th request ever made for `prompt` ("prompt i")."""
    i = int(prompt.split()[1])
    length = 2 + (3 * i + 5 * j) % 7  # 2..8 tokens; 8 is the --rollout.max_new_tokens cap: truncated
    reward = 1.0 if (5 * j + 3 * i) % 8 < RIGHT_OF_8[i % 5] else 0.0
    prompt_tokens = [10 + i, 20 + i % 3, 30]
    response = [(40 + 7 * i + 11 * j + 13 * t) % 250 + 3 for t in range(length)]
    return {"prompt": prompt, "label": label, "observation_tokens": prompt_tokens + response,
            "action_ranges": [(len(prompt_tokens), len(prompt_tokens) + length)], "reward": reward,
            "scores": reward, "rollout_log_probs": None, "truncated": length == 8, "extra_logs": {}}


class Engine:
    """generate_responses / generate_rounds / generate_stream / cancel_stream / get_num_unfinished_requests, answering
    at once."""

    def __init__(self):
        self.made = {}  # prompt -> requests made so far

    def _next(self, prompt: str, count: int) -> int:
        first = self.made.get(prompt, 0)
        self.made[prompt] = first + count
        return first

    def _responses(self, *, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None):
        first = self._next(prompt, num_samples)
        return costs.Ref(costs.engine_responses(prompt, label, sampling_params, max_length, hf_tokenizer,
                                                num_samples, images,
                                                respond=lambda p, lab, k: answer(p, lab, first + k)))

    def _stream(self, group, prompt, label, sampling_params, max_length, hf_tokenizer, indices, images=None):
        first = self._next(prompt, len(indices))
        return costs.Stream(costs.engine_messages(
            group, prompt, label, sampling_params, max_length, hf_tokenizer, indices, images,
            respond=lambda p, lab, k: answer(p, lab, first + k)))

    def _rounds(self, rounds, sampling_params, max_length, hf_tokenizer):
        first = {prompt: self._next(prompt, count) for _, prompt, _, count, _ in rounds}
        return costs.Stream(costs.engine_rounds(rounds, sampling_params, max_length, hf_tokenizer,
                                                respond=lambda p, lab, k: answer(p, lab, first[p] + k)))

    def __getattr__(self, name):
        method = {"generate_responses": self._responses, "generate_rounds": self._rounds,
                  "generate_stream": self._stream,
                  "cancel_stream": lambda group: costs.Ref(0),
                  "get_num_unfinished_requests": lambda: costs.Ref(0)}.get(name)
        if method is None:
            raise AttributeError(name)
        return SimpleNamespace(remote=method)


@pytest.fixture
def fake_ray(monkeypatch):
    fake = costs.FakeRay()
    monkeypatch.setattr(round_loop, "ray", fake)
    monkeypatch.setattr(upstream_generator, "ray", fake)
    return fake


@pytest.fixture(scope="module")
def models(tiny_llama_path, tmp_path_factory):
    from openrlhf_ada.models.tiny_llama import build_tiny_llama

    reference_path = build_tiny_llama(tmp_path_factory.mktemp("tiny_llama_reference"), seed=1)
    load_model = lambda path: AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()  # noqa: E731
    return load_model(tiny_llama_path), load_model(reference_path), AutoTokenizer.from_pretrained(tiny_llama_path)


SEQ = ["--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "3"]
EST = ["--ada.enable", "--ada.strategy", "est"]
ADORA = ["--adora.enable"]

#: case -> flags (its record: `TRAINED`)
CASES = {
    "grpo": ["--algo.advantage.estimator", "group_norm"],
    "grpo_adora": ["--algo.advantage.estimator", "group_norm", *ADORA],
    "seq_balance": [*SEQ, "--ada.mode", "balance", "--algo.advantage.estimator", "group_norm"],
    "seq_balance_adora": [*SEQ, "--ada.mode", "balance", "--algo.advantage.estimator", "group_norm", *ADORA],
    "seq_balance_sync": [*SEQ, "--ada.mode", "balance", "--ada.schedule", "sync",
                         "--algo.advantage.estimator", "group_norm"],
    "seq_balance_random_drop": [*SEQ, "--ada.mode", "balance", "--ada.selection", "random", "--ada.unresolved",
                                "drop", "--algo.advantage.estimator", "dr_grpo"],
    "seq_balance_cancel": [*SEQ, "--ada.mode", "balance", "--ada.cancel", "--algo.advantage.estimator", "group_norm"],
    "seq_balance_sync_cancel": [*SEQ, "--ada.mode", "balance", "--ada.schedule", "sync", "--ada.cancel",
                                "--algo.advantage.estimator", "group_norm"],
    "seq_pos": [*SEQ, "--ada.mode", "pos", "--algo.advantage.estimator", "dr_grpo"],
    "seq_pos_sync": [*SEQ, "--ada.mode", "pos", "--ada.schedule", "sync", "--algo.advantage.estimator", "dr_grpo"],
    "seq_pos_adora": [*SEQ, "--ada.mode", "pos", "--algo.advantage.estimator", "dr_grpo", *ADORA],
    "seq_pos_cancel": [*SEQ, "--ada.mode", "pos", "--ada.cancel", "--algo.advantage.estimator", "dr_grpo"],
    "seq_pos_sync_cancel": [*SEQ, "--ada.mode", "pos", "--ada.schedule", "sync", "--ada.cancel",
                            "--algo.advantage.estimator", "dr_grpo"],
    "seq_pos_history": [*SEQ, "--ada.mode", "pos", "--ada.history", "--algo.advantage.estimator", "rloo"],
    "est_paper": [*EST, "--ada.est_preset", "paper", "--algo.advantage.estimator", "dr_grpo"],
    "est_paper_adora": [*EST, "--ada.est_preset", "paper", "--algo.advantage.estimator", "dr_grpo", *ADORA],
    "est_authors": [*EST, "--ada.est_preset", "authors", "--algo.advantage.estimator", "group_norm"],
    "est_authors_adora": [*EST, "--ada.est_preset", "authors", "--algo.advantage.estimator", "group_norm",
                          *ADORA],
}

#: The step's metrics as they appeared in the trained samples' `info` in these cases ("/" written "_"): left out of
#: the record (none is there any more). Listed by name, so that a key not listed here still counts.
STEP_METRIC_KEYS = frozenset({
    "ada_alloc_cov_n_r", "ada_alloc_max", "ada_alloc_median", "ada_alloc_min", "ada_cancelled_requests",
    "ada_cancelled_tokens", "ada_discarded_samples", "ada_dynamic_filtered", "ada_epoch", "ada_est_p_hat_mean",
    "ada_est_seen_share", "ada_eta", "ada_failed_prompts", "ada_failed_samples", "ada_first_round_signal_share",
    "ada_generation_seconds", "ada_nonzero_adv_group_share", "ada_pass_rate_generated", "ada_prompts",
    "ada_prompts_consumed", "ada_resolved_at_round_1", "ada_resolved_at_round_2", "ada_resolved_at_round_3",
    "ada_resolved_share", "ada_reward_mean_generated", "ada_rounds_mean", "ada_samples_generated",
    "ada_samples_per_prompt_max", "ada_samples_per_prompt_mean", "ada_skipped_prompts", "ada_skipped_share",
    "ada_tokens_generated", "ada_unresolved_dropped", "ada_unresolved_kept", "fault_engine_failures",
    "fault_failed_no_rewards", "fault_failed_not_a_dict", "fault_failed_not_a_number", "fault_failed_not_finite",
    "fault_failed_raised", "fault_failed_share", "fault_failed_timeout", "fault_failed_wrong_shape",
})

#: case -> the sha256 of the four steps' trained micro-batches without `STEP_METRIC_KEYS`, taken
#: from the code as it was while every kept sample carried the step's metrics in its `info`.
TRAINED = {
    "grpo": "cd89c6a42746ea79",
    "grpo_adora": "74b9ee391195b2ef",
    "seq_balance": "b4f5f10d3c393035",
    "seq_balance_adora": "26a5188dd213f4a2",
    "seq_balance_sync": "b4f5f10d3c393035",
    "seq_balance_random_drop": "10f8d7c9fdf858fd",
    "seq_balance_cancel": "dad8384a3f664a52",
    "seq_balance_sync_cancel": "dad8384a3f664a52",
    "seq_pos": "e3261c4d02fdd6d1",
    "seq_pos_sync": "e3261c4d02fdd6d1",
    "seq_pos_adora": "c3b22894a4683676",
    "seq_pos_cancel": "1cab81e0340494b2",
    "seq_pos_sync_cancel": "1cab81e0340494b2",
    "seq_pos_history": "69426bc3da15eb1f",
    "est_paper": "8ae0027ff6b69339",
    "est_paper_adora": "a38204a86870019f",
    "est_authors": "bdd150604d293eae",
    "est_authors_adora": "f268d8a6541b4a7f",
}

FIELDS = ("sequences", "attention_mask", "action_mask", "rewards", "scores", "advantages", "returns",
          "action_log_probs", "base_action_log_probs")


def rounded(t: torch.Tensor) -> torch.Tensor:
    return torch.round(t * 1024) / 1024


def digest_of(batch, h, leave_out=STEP_METRIC_KEYS) -> None:
    for name in FIELDS:
        value = getattr(batch, name)
        h.update(name.encode())
        if value is not None:
            h.update(f"{value.dtype}{tuple(value.shape)}".encode())
            h.update(value.detach().contiguous().cpu().numpy().tobytes())
    h.update(repr(list(batch.index)).encode())
    for key in sorted(batch.info):
        if key not in leave_out:
            value = batch.info[key]
            h.update(key.encode() + f"{value.dtype}{tuple(value.shape)}".encode())
            h.update(value.detach().contiguous().cpu().numpy().tobytes())


def trained_batches(flags, models) -> tuple:
    """(sha256 of the four steps' trained micro-batches, samples per step, the most rounds a prompt took, the group
    sizes trained, the step-metric keys found in a trained micro-batch's `info`)."""
    policy, reference, tokenizer = models
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--rollout.n_samples_per_prompt", str(N), "--rollout.batch_size", str(BATCH),
        "--rollout.micro_batch_size", "2", "--rollout.max_new_tokens", "8", "--actor.num_gpus_per_node", "1",
        "--algo.kl.init_coef", "0.05", "--train.seed", "7", *flags,
    ])
    strategy = SimpleNamespace(args=args)
    loader = [([i], [f"prompt {i}"], [f"label {i}"], [None]) for i in range(PROMPTS)]
    gen = RoundsSamplesGenerator(strategy=strategy, prompts_dataloader=loader, eval_dataloader=None,
                                 tokenizer=tokenizer, vllm_engines=[Engine()])
    maker = AdoraPoolExperienceMaker(None, None, None, None, FixedKLController(args.algo.kl.init_coef), strategy,
                                     tokenizer)
    trainer = SimpleNamespace(args=args, policy=policy, reference=reference)
    h, sizes, rounds, groups, in_info = hashlib.sha256(), [], 0, set(), set()
    for step in range(1, STEPS + 1):
        samples, *_ = gen.generate_samples(**GEN)
        if not samples:  # the data ran out: the next pass (as LocalTrainer.step does)
            samples, *_ = gen.generate_samples(**GEN)
        sizes.append(len(samples))
        rounds = max([rounds] + [pool.rounds for pool in gen.last_pools])
        groups.update(gen.last_group_sizes)
        experiences = maker.split_rollout_samples(samples)
        LocalTrainer.score(trainer, experiences)
        for e in experiences:
            e.action_log_probs = rounded(e.action_log_probs)
            e.kl = rounded(e.kl)
            if e.base_action_log_probs is not None:
                e.base_action_log_probs = rounded(e.base_action_log_probs)
            e.info["kl"] = rounded(e.info["kl"])
        maker.global_step = step
        for e in maker.compute_advantages_and_returns(experiences):
            digest_of(e, h)
            in_info.update(STEP_METRIC_KEYS & set(e.info))
    return h.hexdigest(), sizes, rounds, groups, in_info


@pytest.mark.parametrize("case", list(CASES))
def test_the_trained_batch_is_unchanged(case, models, fake_ray):
    flags, expected = CASES[case], TRAINED[case]
    torch.manual_seed(0)
    digest, sizes, rounds, groups, in_info = trained_batches(flags, models)
    assert all(size > 0 for size in sizes), sizes
    # each case exercises what it names: Seq's later rounds, Est's groups of varying size
    assert (rounds > 1) == case.startswith("seq"), rounds
    assert (len(groups) > 1) == case.startswith("est"), groups
    assert digest[:16] == expected, f"{case}: the trained batches changed (digest {digest}, samples per step {sizes})"
    assert not in_info, f"{case}: the step's metrics {sorted(in_info)} are in the trained samples' info"
