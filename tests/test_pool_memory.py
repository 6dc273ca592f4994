"""What the pools hold of their unsettled samples, counted in bytes (deterministic, never timed), and that a settled
prompt's samples are released at once.

The bound, from first principles. A response held in a pool keeps its token ids as int32 (4 bytes a token) and its
log-probs as float32 (4 bytes a token): 8 bytes per held token (prompt and response tokens, as the engine sends
both). Besides, per sample: the response dict (11 entries, about 0.65 KB), its own copy of the prompt text (Ray
hands every response back as a new object), the label, the action range, two array headers (about 0.1 KB each) and
the record with its numbers: under 2 KB plus the prompt text. The responses here are of a realistic length, a
512-token prompt (1,000 characters of text) and 1,024 response tokens: 1,536 held tokens a sample, so the overhead
is at most (2,048 + 1,000) / 1,536 = 2 bytes a token, and a pool holds at most 10 bytes per held token.

The same responses as upstream's executor makes them (Python lists) hold at least 60 bytes per token: a token id is
an 8-byte list slot plus a 28-byte int object (the ids here are above 256, where Python shares none), and the
log-probs are 8-byte slots for every token plus a 24-byte float object for each response token (the prompt's are
one shared 0.0): 36 + 8 + 24 x 1,024 / 1,536 = 60.
"""

from __future__ import annotations

import gc
import pickle
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from siblings import load

from openrlhf_ada.algorithms.reinforce_ada import PromptPool, Seq
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils import round_loop
from openrlhf_ada.trainer.ppo_utils.sample_record import held_bytes, held_tokens, record_of
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ppo_utils.transport import RoundTransport

costs = load("test_trainer_side_costs.py")

PROMPT_TOKENS, RESPONSE_TOKENS, PROMPT_CHARS, SAMPLES = 512, 1024, 1000, 32
GEN = dict(max_len=PROMPT_TOKENS + RESPONSE_TOKENS, max_new_tokens=RESPONSE_TOKENS)
NO_PENALTY = SimpleNamespace(args=SimpleNamespace(reward=SimpleNamespace(overlong_buffer_len=None,
                                                                         stop_properly_penalty_coef=None)))


def executor_response(prompt: str, label: str, k: int) -> dict:
    """Upstream's single-turn executor's response dict for the k-th sample (lists, a 0.0 log-prob per prompt token
    as upstream writes them, then the response tokens' log-probs)."""
    rng = np.random.default_rng(k)
    prompt_ids = rng.integers(1000, 150_000, PROMPT_TOKENS).tolist()
    response_ids = rng.integers(1000, 150_000, RESPONSE_TOKENS).tolist()
    log_probs = [0.0] * PROMPT_TOKENS + (-rng.exponential(0.7, RESPONSE_TOKENS)).astype(np.float32).tolist()
    reward = float(k % 2)
    return {"prompt": prompt, "label": label, "images": None, "mm_train_inputs": None,
            "observation_tokens": prompt_ids + response_ids,
            "action_ranges": [(PROMPT_TOKENS, PROMPT_TOKENS + RESPONSE_TOKENS)], "rollout_log_probs": log_probs,
            "truncated": False, "reward": reward, "scores": reward, "extra_logs": {}}


def held_per_token(responses) -> float:
    """Bytes per held token once `responses` (as Ray hands them to the trainer: unpickled) are in a pool's records,
    fed as the round loop feeds a whole round (`RoundTransport.feed`)."""
    item = SimpleNamespace(uid=0, pool=PromptPool(Seq(n=SAMPLES, round_size=SAMPLES, max_rounds=1)))
    message = pickle.loads(pickle.dumps({"rounds": [(0, responses)]}, protocol=5))
    assert RoundTransport(NO_PENALTY).feed({0: item}, message, lambda rs: [record_of(r, GEN) for r in rs]) == [item]
    del message
    records = item.pool.items
    assert len(records) == SAMPLES and held_tokens(records) == SAMPLES * (PROMPT_TOKENS + RESPONSE_TOKENS)
    return held_bytes(records) / held_tokens(records)


def test_a_pool_holds_at_most_10_bytes_per_token_of_the_engine_actors_responses():
    prompt = "x" * PROMPT_CHARS
    (message,) = costs.engine_rounds([(0, prompt, "l", SAMPLES, None)], None, GEN["max_len"], None,
                                     respond=executor_response)  # the engine actor's own generate_rounds
    ((_, compact),) = message["rounds"]
    assert compact[0]["observation_tokens"].dtype == np.int32 and compact[0]["rollout_log_probs"].dtype == np.float32
    per_token = held_per_token(compact)
    assert 8 <= per_token <= 10, per_token
    # the measure itself: upstream's lists of the same responses hold what the module docstring derives
    lists = [executor_response(prompt, "l", k) for k in range(SAMPLES)]
    assert held_per_token(lists) >= 60


def test_held_bytes_by_hand():
    """Two records sharing nothing but their keys' strings and small numbers; an array counted with its buffer; a
    released sample (None) holds nothing."""
    tokens = np.arange(100, dtype=np.int32)
    response = {"observation_tokens": tokens, "action_ranges": [(1, 100)], "reward": 1.0, "scores": None}
    one = held_bytes([record_of(response, {})])
    assert one >= tokens.nbytes + 64  # the buffer (400 bytes) and at least the array's header
    view = dict(response, observation_tokens=np.arange(200, dtype=np.int32)[:100])  # a view: its 400 bytes counted
    assert held_bytes([record_of(view, {})]) >= 400
    assert held_bytes([None, None]) == 0
    assert held_bytes([record_of(response, {}), None]) == one


# -- a settled prompt's samples are released at once -----------------------------------------------------------------
PROMPTS = 4
LABEL = "1,1,1,0"  # rewards of each round: 3 right, 1 wrong; balance (n = 4) needs a second round, keeps 4 of 8


def respond(prompt: str, label: str, k: int) -> dict:
    reward = float(label.split(",")[k % 4])
    return {"prompt": prompt, "label": label, "observation_tokens": list(range(300, 312)),
            "action_ranges": [(4, 12)], "reward": reward, "scores": reward,
            "rollout_log_probs": [0.0] * 4 + [-0.5] * 8, "truncated": False, "extra_logs": {}}


class RayCopies(costs.FakeRay):
    """`ray.get` hands back a new copy of what the engine sent, as Ray deserialises each result: only the trainer's
    own references keep a response alive."""

    def get(self, x, timeout=None):
        return pickle.loads(pickle.dumps(super().get(x, timeout), protocol=5))


class Engine(costs.FakeEngine):
    def __init__(self):
        super().__init__()
        self.generate_responses.fn = lambda *, prompt, label, sampling_params, max_length, hf_tokenizer, \
            num_samples, images=None: costs.Ref(costs.engine_responses(
                prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images, respond=respond))
        self.generate_rounds.fn = lambda rounds, sampling_params, max_length, hf_tokenizer: costs.Stream(
            costs.engine_rounds(rounds, sampling_params, max_length, hf_tokenizer, respond=respond))
        self.generate_stream.fn = lambda group, prompt, label, sampling_params, max_length, hf_tokenizer, indices, \
            images=None: costs.Stream(costs.engine_messages(
                group, prompt, label, sampling_params, max_length, hf_tokenizer, indices, images, respond=respond))


ADA = ["--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "2"]


@pytest.mark.parametrize("flags", [ADA, ADA + ["--ada.schedule", "sync"], ADA + ["--ada.cancel"]],
                         ids=["async", "sync", "cancel"])
def test_a_settled_prompt_releases_its_samples_at_once(monkeypatch, flags):
    """Every array the trainer receives is watched (a weak reference, per prompt). When a prompt settles, each of its
    samples that entered the pool is still alive before the settle (the pool held it) and none is after it: the
    unkept ones are dropped, the kept ones built into tensors and dropped too."""
    fake = RayCopies()
    monkeypatch.setattr(round_loop, "ray", fake)
    monkeypatch.setattr(costs.upstream_generator, "ray", fake)
    watched: dict = {}  # prompt -> weak references to its samples' token arrays
    original_record_of = round_loop.record_of

    def watching_record_of(response, generate_kwargs):
        watched.setdefault(response["prompt"], []).append(weakref.ref(response["observation_tokens"]))
        return original_record_of(response, generate_kwargs)

    monkeypatch.setattr(round_loop, "record_of", watching_record_of)
    checks = []
    original_settle = round_loop.RoundStep.settle

    def checked_settle(step, item):
        gc.collect()
        before = sum(ref() is not None for ref in watched[item.prompt])
        held = sum(it is not None for it in item.pool.items)
        out = original_settle(step, item)
        gc.collect()
        after = sum(ref() is not None for ref in watched[item.prompt])
        others = {p: sum(ref() is not None for ref in refs) for p, refs in watched.items() if p != item.prompt}
        checks.append((item.prompt, len(watched[item.prompt]), held, before, after, len(item.pool.select()), others))
        return out

    monkeypatch.setattr(round_loop.RoundStep, "settle", checked_settle)
    args = parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
                       "--algo.advantage.estimator", "dr_grpo", "--rollout.n_samples_per_prompt", "4",
                       "--rollout.batch_size", str(PROMPTS), "--actor.num_gpus_per_node", "1", *flags])
    loader = [([i], [f"prompt {i}"], [LABEL], [None]) for i in range(PROMPTS)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader,
                                 eval_dataloader=None, tokenizer=costs.CountingTokenizer(), vllm_engines=[Engine()])
    samples, *_ = gen.generate_samples(max_len=64, max_new_tokens=8, min_new_tokens=8, temperature=1.0, top_p=1.0)
    assert len(samples) == PROMPTS * 4 and len(checks) == PROMPTS
    settled = set()
    for prompt, generated, held, before, after, kept, others in checks:
        assert generated == 8 and held == 8 and kept == 4  # two rounds of 4 in the pool, 4 kept: 4 unkept
        assert before == held and after == 0, (prompt, before, after)
        settled.add(prompt)
        assert all(others[other] == 0 for other in settled - {prompt})  # nor does any prompt settled earlier
