"""The CPU mode's parts, one by one (openrlhf_ada.cpu.patches, layer 2): when it applies, what each patch changes,
which flags it switches or refuses, the Ray resources it declares. The whole pipeline runs in
tests/test_pipeline_on_cpu.py; these are the fast checks, in fresh interpreters where a patch touches a module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from openrlhf_ada.cpu import patches as cpu_compat
from openrlhf_ada.launcher import parse_args

BASE = ["--actor.model_name_or_path", "m", "--reward.remote_url", "openrlhf_ada/rewards/toy.py",
        "--rollout.n_samples_per_prompt", "4", "--algo.advantage.estimator", "group_norm"]

PROBE = textwrap.dedent("""
    import json, sys
    import torch
    if sys.argv[1] == "cuda":  # what a GPU node looks like to the check
        torch.cuda.is_available = lambda: True
    from openrlhf_ada.cpu import patches as cpu_compat
    applied = cpu_compat.apply_cpu_patches()
    import openrlhf.utils.distributed_util as du
    import openrlhf.trainer.ray.vllm_worker_wrap as ww
    out = {
        "applied": applied,
        "gloo_group": du.stateless_init_process_group is cpu_compat.gloo_init_process_group,
        "cpu_receive": ww.WorkerWrap.update_weight is cpu_compat.receive_weight_on_cpu,
        "device": f"cuda:{torch.cuda.current_device()}" if applied else None,
        "device_str": str(torch.cuda.current_device()) if applied else None,
        "triton_ce_hidden": "flash_attn.ops.triton.cross_entropy" in sys.modules
                            and sys.modules["flash_attn.ops.triton.cross_entropy"] is None,
    }
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture
def probe(tmp_path, run_python):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)

    def run(env_value, machine="cpu", skip=""):
        import os

        saved = {k: os.environ.get(k) for k in (cpu_compat.CPU_ENV, cpu_compat.SKIP_ENV)}
        os.environ.pop(cpu_compat.CPU_ENV, None)
        if env_value is not None:
            os.environ[cpu_compat.CPU_ENV] = env_value
        os.environ[cpu_compat.SKIP_ENV] = skip
        try:
            return run_python(script, machine)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    return run


@pytest.mark.slow  # five fresh interpreters that import openrlhf: about 30-50 s
def test_the_patches_apply_only_when_asked_for_on_a_machine_without_cuda(probe):
    off = probe("0")  # unset would mean on in this venv (the CPU stack's, see test_cpu_compat_on_cpu.py)
    assert off["applied"] == [] and not off["gloo_group"] and not off["cpu_receive"]
    on = probe("1")
    assert set(on["applied"]) == set(cpu_compat.patch_names()) and on["gloo_group"] and on["cpu_receive"]
    # replay_buffer.py L40 builds torch.device(f"cuda:{current_device()}"); anywhere else the device is the CPU
    assert on["device"] == "cuda:0" and on["device_str"] == "cpu" and on["triton_ce_hidden"]
    gpu_node = probe("1", machine="cuda")  # the variable set on a node that has CUDA: nothing changes
    assert gpu_node["applied"] == [] and not gpu_node["gloo_group"]
    skipped = probe("1", skip="weight_sync_group")
    assert "weight_sync_group" not in skipped["applied"] and not skipped["gloo_group"] and skipped["cpu_receive"]


def test_the_gloo_weight_sync_group_really_sends_the_tensor():
    """The stand-in for vLLM's NCCL communicator, between this process (rank 0) and a second one."""
    code = textwrap.dedent("""
        import sys, torch
        from openrlhf_ada.cpu.patches import GlooWeightSyncGroup
        group = GlooWeightSyncGroup("127.0.0.1", int(sys.argv[1]), 1, 2)
        t = torch.empty(3, dtype=torch.bfloat16)
        group.broadcast(t, src=0, stream=None)
        print("GOT", t.float().tolist())
    """)
    import socket

    import torch

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    peer = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE, text=True)
    group = cpu_compat.GlooWeightSyncGroup("127.0.0.1", port, 0, 2)
    group.broadcast(torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16), src=0)
    out, _ = peer.communicate(timeout=120)
    assert "GOT [1.5, -2.0, 3.25]" in out


@pytest.mark.parametrize("flags,switched", [
    ([], {"vllm.sync_backend": "gloo", "ds.attn_implementation": "eager"}),
    (["--vllm.num_engines", "1", "--vllm.gpu_memory_utilization", "0.1", "--ds.packing_samples"],
     {"vllm.enforce_eager": True, "ds.attn_implementation": "eager"}),
    (["--vllm.num_engines", "1", "--vllm.gpu_memory_utilization", "0.1", "--train.dynamic_batch_enable"],
     {"vllm.enforce_eager": True, "ds.attn_implementation": "eager"}),
])
def test_flags_that_cannot_run_on_cpu_are_switched_with_a_line_each(flags, switched, monkeypatch):
    """Packing and dynamic batching stay on (upstream turns dynamic batching's packing on and packing's attention
    into flash_attention_2): only the attention becomes eager, and the line says that packing stays."""
    monkeypatch.setenv(cpu_compat.CPU_ENV, "0")  # the flags as upstream parses them; then the CPU mode's switches
    args = parse_args(BASE + flags)
    packed = args.ds.packing_samples
    assert packed == ("--ds.packing_samples" in flags or "--train.dynamic_batch_enable" in flags)
    notes = cpu_compat.adjust_args_for_cpu(args)
    for flag, value in switched.items():
        group, name = flag.split(".")
        assert getattr(getattr(args, group), name) == value
        assert any(note.startswith(f"--{flag} ") for note in notes), (flag, notes)
    assert args.ds.packing_samples == packed
    assert args.train.dynamic_batch_enable == ("--train.dynamic_batch_enable" in flags)
    assert any("packing stays on" in note for note in notes) == packed, notes


@pytest.mark.parametrize("flags,words", [
    (["--ds.ring_attn_size", "2", "--vllm.num_engines", "1"], ["--ds.ring_attn_size", "flash-attn"]),
])
def test_flags_without_a_cpu_equivalent_are_refused_by_name(flags, words, monkeypatch):
    monkeypatch.setenv(cpu_compat.CPU_ENV, "0")  # the flags as upstream parses them; then the CPU mode's check
    args = parse_args(BASE + flags)
    with pytest.raises(ValueError) as e:
        cpu_compat.adjust_args_for_cpu(args)
    for word in words:
        assert word in str(e.value)


def test_engines_get_a_kv_cache_sized_from_the_run_not_from_the_ram(tiny_llama_path, monkeypatch):
    """--vllm.gpu_memory_utilization would be a fraction of the memory node's RAM on CPU: the engines get an explicit
    size instead, carried to them by the CPU mode's env vars (read by the vllm_kv_cache_size patch)."""
    from openrlhf_ada.cpu.kv_cache import KV_CACHE_ENV, kv_shape

    monkeypatch.setenv(KV_CACHE_ENV, "")  # restored (unset) after the test
    flags = ["--actor.model_name_or_path", tiny_llama_path, *BASE[2:], "--vllm.num_engines", "2",
             "--vllm.gpu_memory_utilization", "0.6", "--rollout.batch_size", "6", "--data.max_len", "300"]
    note = cpu_compat.plan_engine_kv_cache(parse_args(flags))
    assert "has no effect on CPU" in note and cpu_compat.KV_CACHE_FLAG in note
    # 6 prompts x 4 samples over 2 engines = 12 sequences each, 300 tokens = 3 blocks of 128: 36 blocks x 1.25 = 45
    expected = 45 * 128 * kv_shape(tiny_llama_path, "bfloat16").bytes_per_token
    assert int(os.environ[KV_CACHE_ENV]) == expected
    assert cpu_compat.cpu_env_vars()[KV_CACHE_ENV] == str(expected)
    cpu_compat.plan_engine_kv_cache(parse_args(flags + ["--cpu.kv_cache_gb", "0.5"]))
    assert int(os.environ[KV_CACHE_ENV]) == 512 * 1024 ** 2
    with pytest.raises(ValueError, match=r"--cpu.kv_cache_gb GIB"):
        cpu_compat.plan_engine_kv_cache(parse_args(flags + ["--cpu.kv_cache_gb", "100000"]))


def test_ray_gets_logical_gpus_for_upstreams_bundles():
    # 2 actor ranks + 2 reference ranks + 2 engines, nothing colocated: 6 bundles of {"GPU": 1, "CPU": 1}
    args = parse_args(BASE + ["--actor.num_gpus_per_node", "2", "--ref.num_gpus_per_node", "2",
                              "--vllm.num_engines", "2", "--algo.kl.init_coef", "0.01"])
    assert cpu_compat.gpu_bundles_needed(args) == 6
    colocated = parse_args(BASE + ["--actor.num_gpus_per_node", "2", "--ref.num_gpus_per_node", "2",
                                   "--vllm.num_engines", "2", "--algo.kl.init_coef", "0.01", "--train.colocate_all"])
    assert cpu_compat.gpu_bundles_needed(colocated) == 2  # one placement group shared by all three
    kwargs = cpu_compat.ray_init_kwargs_for_cpu(args, {"runtime_env": {"env_vars": {"A": "1"}}})
    assert kwargs["num_gpus"] == 6 and kwargs["num_cpus"] >= 6
    assert kwargs["runtime_env"]["env_vars"] == {"A": "1", cpu_compat.CPU_ENV: "1"}
    assert kwargs["include_dashboard"] is False  # a local Ray of the CPU mode: no dashboard unless asked for
    asked = parse_args(BASE + ["--actor.num_gpus_per_node", "2", "--cpu.ray_dashboard"])
    assert cpu_compat.ray_init_kwargs_for_cpu(asked, {})["include_dashboard"] is True
    joining = cpu_compat.ray_init_kwargs_for_cpu(args, {"address": "auto"})  # an existing cluster: its own resources
    assert "num_gpus" not in joining and "include_dashboard" not in joining


def test_a_ray_cluster_without_enough_gpus_is_an_error_not_a_wait(monkeypatch):
    import ray

    args = parse_args(BASE + ["--actor.num_gpus_per_node", "2", "--vllm.num_engines", "2", "--algo.kl.init_coef", "0"])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0, "GPU": 2.0})
    with pytest.raises(RuntimeError, match=r"offers 2 GPUs.*asks for 4 bundles.*ray start --head --num-gpus 4"):
        cpu_compat.check_ray_resources(args)


# -- torch's build lock of DeepSpeed's CPU ops ------------------------------------------------------------------------


def _lock(folder, age: float):
    """A torch build lock in `folder` (as torch's FileBaton makes it: an empty file), `age` seconds old."""
    import os
    import time

    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / "lock"
    lock.touch()
    os.utime(lock, (time.time() - age, time.time() - age))
    return lock


def test_a_build_lock_nobody_works_on_is_stale_once_old_and_removed(tmp_path):
    said = []
    assert cpu_compat.build_lock_state(str(tmp_path)) == ("none", 0.0)
    old = _lock(tmp_path / "op", cpu_compat.STALE_LOCK_AGE + 5)
    state, age = cpu_compat.build_lock_state(str(tmp_path / "op"))
    assert state == "stale" and age >= cpu_compat.STALE_LOCK_AGE + 5
    assert cpu_compat.release_stale_build_lock(str(tmp_path / "op"), wait=False, log=said.append)
    assert not old.exists()
    assert len(said) == 1 and f"removed {old}" in said[0] and "a killed process left" in said[0]


def test_a_young_lock_stays_for_the_worker_and_is_watched_until_stale_by_the_driver(tmp_path, monkeypatch):
    import time

    young = _lock(tmp_path / "op", 0)  # a load that has just taken it
    assert cpu_compat.build_lock_state(str(tmp_path / "op"))[0] == "young"
    assert not cpu_compat.release_stale_build_lock(str(tmp_path / "op"), wait=False, log=print)
    assert young.exists()
    monkeypatch.setattr(cpu_compat, "STALE_LOCK_AGE", 2.0)
    said, start = [], time.time()
    assert cpu_compat.release_stale_build_lock(str(tmp_path / "op"), wait=True, log=said.append)
    assert time.time() - start >= 1.0 and not young.exists()
    assert "its lock was just taken" in said[0] and "removed" in said[1]


def test_a_lock_of_a_build_in_progress_is_never_removed_and_is_waited_for(tmp_path):
    """A process working in the folder (as ninja and the compiler do) holds it, however old the lock: the worker
    leaves it, the driver waits until the build releases it (here: 2 s, then the 'build' removes its lock)."""
    import subprocess

    folder = tmp_path / "op"
    lock = _lock(folder, cpu_compat.STALE_LOCK_AGE + 600)
    build = subprocess.Popen(["sh", "-c", "sleep 2; rm lock"], cwd=folder)
    try:
        assert cpu_compat.build_lock_state(str(folder))[0] == "building"
        assert not cpu_compat.release_stale_build_lock(str(folder), wait=False, log=print) and lock.exists()
        said = []
        assert not cpu_compat.release_stale_build_lock(str(folder), wait=True, log=said.append)  # gone, not removed
        assert said == [f"[openrlhf_ada] CPU mode: waiting for {folder}: another process is building it"]
        assert build.wait(timeout=30) == 0  # the holder itself released it
    finally:
        build.kill()


def test_the_worker_hook_side_looks_only_at_deepspeeds_cpu_op_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    stale = [_lock(tmp_path / name, 3600) for name in cpu_compat.DEEPSPEED_CPU_OPS.values()]
    other = _lock(tmp_path / "someone_elses_op", 3600)
    removed = cpu_compat.release_stale_build_locks(log=lambda message: None)
    assert sorted(removed) == sorted(str(lock.parent) for lock in stale)
    assert not any(lock.exists() for lock in stale) and other.exists()


def test_the_op_names_are_deepspeeds_own():
    """The worker side names the folders without importing DeepSpeed: the names must be the builders' own."""
    from deepspeed.accelerator import get_accelerator

    for builder_name, name in cpu_compat.DEEPSPEED_CPU_OPS.items():
        assert get_accelerator().create_op_builder(builder_name).name == name



# -- what DeepSpeed's op builds ask py-cpuinfo ------------------------------------------------------------------------


def _fake_cpuinfo(calls: list):
    """A py-cpuinfo stand-in that counts its calls (the real one starts an interpreter for each: about 1 s of CPU)."""
    import types

    module = types.ModuleType("cpuinfo")

    def get_cpu_info():
        calls.append(1)
        return {"arch": "X86_64", "flags": ["avx2", "fma"], "hz_actual": [len(calls), 0]}

    module.get_cpu_info = get_cpu_info
    return module


def _patched_cpuinfo(calls: list, monkeypatch):
    """A fresh process's py-cpuinfo with the CPU mode's patch on it."""
    module = _fake_cpuinfo(calls)
    monkeypatch.setitem(sys.modules, "cpuinfo", module)
    cpu_compat._patch_deepspeed_cpu_info()
    return module


def test_py_cpuinfo_is_asked_once_per_machine_and_its_answer_kept_per_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    first = _patched_cpuinfo(calls, monkeypatch)
    answer = first.get_cpu_info()
    assert answer == {"arch": "X86_64", "flags": ["avx2", "fma"], "hz_actual": [1, 0]} and len(calls) == 1
    answer["flags"].append("changed by a caller")
    assert first.get_cpu_info() == {"arch": "X86_64", "flags": ["avx2", "fma"], "hz_actual": [1, 0]}
    assert len(calls) == 1  # the second ask in the process: answered from memory, a copy of its own each time
    kept = list(tmp_path.rglob("openrlhf_ada_cpu_info-*.json"))
    assert len(kept) == 1

    second = _patched_cpuinfo(calls, monkeypatch)  # another process on this machine: the kept answer
    assert second.get_cpu_info()["hz_actual"] == [1, 0] and len(calls) == 1

    monkeypatch.setattr(cpu_compat, "_cpu_identity", lambda: "0123456789abcdef")  # a machine with another CPU
    third = _patched_cpuinfo(calls, monkeypatch)
    assert third.get_cpu_info()["hz_actual"] == [2, 0] and len(calls) == 2  # asks for itself, keeps its own
    assert len(list(tmp_path.rglob("openrlhf_ada_cpu_info-*.json"))) == 2

    monkeypatch.setattr(cpu_compat, "_cpu_identity", lambda: None)  # no /proc/cpuinfo: nothing to name a file by
    fourth = _patched_cpuinfo(calls, monkeypatch)
    fourth.get_cpu_info()
    fourth.get_cpu_info()
    assert len(calls) == 3 and len(list(tmp_path.rglob("openrlhf_ada_cpu_info-*.json"))) == 2


def test_a_failed_py_cpuinfo_answer_is_passed_on_and_not_kept(tmp_path, monkeypatch):
    """py-cpuinfo answers {} when its child interpreter fails; DeepSpeed then falls back on lscpu. Kept, the {}
    would stand for the machine from then on."""
    import types

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    module = types.ModuleType("cpuinfo")
    module.get_cpu_info = lambda: {}
    monkeypatch.setitem(sys.modules, "cpuinfo", module)
    cpu_compat._patch_deepspeed_cpu_info()
    assert module.get_cpu_info() == {} and not list(tmp_path.rglob("openrlhf_ada_cpu_info-*.json"))


def test_deepspeed_gets_the_same_op_flags_from_the_kept_answer(tmp_path, monkeypatch):
    """The flags DeepSpeed builds FusedAdam with (-march, SIMD width) come out the same from the kept answer as from
    py-cpuinfo itself: the ops built before stay built."""
    import cpuinfo
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("FusedAdamBuilder")
    own = builder.cxx_args()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpuinfo, "get_cpu_info", cpuinfo.get_cpu_info)  # put back after the test
    cpu_compat._patch_deepspeed_cpu_info()
    assert builder.cxx_args() == own  # asked py-cpuinfo once, kept the answer

    def asked_again():
        raise AssertionError("py-cpuinfo asked again on the same machine")

    monkeypatch.setattr(cpuinfo, "get_cpu_info", asked_again)
    cpu_compat._patch_deepspeed_cpu_info()  # as in a new process
    assert builder.cxx_args() == own

# -- ZeRO-3's gathers on gloo -----------------------------------------------------------------------------------------

GATHER = textwrap.dedent("""
    import json, os, socket, sys

    def build(torch, seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(*[torch.nn.Linear(384, 384, bias=True) for _ in range(24)])

    def rank_main(rank, port, out):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                          WORLD_SIZE="2")
        from openrlhf_ada.cpu import patches as cpu_compat
        applied = cpu_compat.apply_cpu_patches()
        import torch, deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
        config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
        with deepspeed.zero.Init(config_dict_or_path=config, dtype=torch.bfloat16):
            model = build(torch, 0)
        # what a checkpoint holds, written in on rank 0 module by module, as transformers' ZeRO-3 loader does
        loaded = build(torch, 1).to(torch.bfloat16)
        for module, source in zip(model, loaded):
            with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=0):
                if rank == 0:
                    with torch.no_grad():
                        for p, q in zip(module.parameters(), source.parameters()):
                            p.copy_(q)
        wrong = []
        for i, (module, source) in enumerate(zip(model, loaded)):
            with deepspeed.zero.GatheredParameters(list(module.parameters())):
                if not all(torch.equal(p, q) for p, q in zip(module.parameters(), source.parameters())):
                    wrong.append(i)
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"applied": applied, "wrong": wrong}, f)

    if __name__ == "__main__":
        import torch.multiprocessing as mp
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(rank_main, args=(port, sys.argv[1]), nprocs=2, join=True)
        print("RESULT " + open(sys.argv[1]).read())
""")


@pytest.mark.slow  # two ranks that import DeepSpeed, three to five times: about 30-50 s
def test_zero3_loads_every_module_with_a_bias_whole_on_gloo(tmp_path, run_python, monkeypatch):
    """24 Linear modules with a bias, partitioned by ZeRO-3 over 2 gloo ranks, loaded module by module on rank 0 and
    gathered back: each must come back exactly as loaded. Without the CPU mode's sequential gather, DeepSpeed's
    coalesced gather waits only for its last all-gather; on gloo an earlier one may still be writing, and about a
    third of the modules came back wrong in every try (a different third each time)."""
    script = tmp_path / "gather.py"
    script.write_text(GATHER)
    monkeypatch.setenv(cpu_compat.CPU_ENV, "1")
    for attempt in range(2):
        monkeypatch.setenv(cpu_compat.SKIP_ENV, "")
        result = run_python(script, tmp_path / f"out{attempt}.json", timeout=240)
        assert "deepspeed_sequential_allgather" in result["applied"]
        assert result["wrong"] == [], f"modules gathered wrong on try {attempt + 1}: {result['wrong']}"

    # The check can fail: with DeepSpeed's own coalesced gather some module comes back wrong (a race, so up to 3 tries;
    # if none ever does, DeepSpeed may have fixed its gather and the patch may no longer be needed).
    monkeypatch.setenv(cpu_compat.SKIP_ENV, "deepspeed_sequential_allgather")
    unpatched = []
    for attempt in range(3):
        result = run_python(script, tmp_path / f"out_unpatched{attempt}.json", timeout=240)
        assert "deepspeed_sequential_allgather" not in result["applied"]
        unpatched.append(result["wrong"])
        if result["wrong"]:
            break
    assert any(unpatched), unpatched


# -- which ninja builds them ------------------------------------------------------------------------------------------

ENV_BIN = os.path.dirname(sys.executable)


def test_two_ninjas_rebuild_each_others_builds(tmp_path):
    """Why the CPU mode picks one ninja: this environment's (the `ninja` package) and the system's read each other's
    build log as out of date and build again: with DeepSpeed's two ops, about 90 s on 2 cores, silently."""
    env_ninja = os.path.join(ENV_BIN, "ninja")
    system = shutil.which("ninja", path=os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                                         if os.path.realpath(p) != os.path.realpath(ENV_BIN)))
    if system is None:
        pytest.skip("no system ninja on this machine: nothing to mix up")
    version = {n: subprocess.run([n, "--version"], capture_output=True, text=True).stdout.strip()
               for n in (system, env_ninja)}
    if version[system].split(".")[:2] == version[env_ninja].split(".")[:2]:
        pytest.skip(f"both ninjas are {version[system]}")
    (tmp_path / "build.ninja").write_text("rule cp\n  command = cp $in $out\nbuild out: cp in\n")
    (tmp_path / "in").write_text("x")

    def build(ninja: str) -> bool:
        """True if `ninja` ran the rule, False if it found the output up to date."""
        out = subprocess.run([ninja], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
        assert ("no work to do" in out) != ("cp in out" in out), out
        return "cp in out" in out

    assert build(system) and not build(system)  # the same ninja: built once, then up to date
    assert build(env_ninja) and not build(env_ninja)  # the other one builds it again
    assert build(system)  # and back


def test_the_environment_s_ninja_comes_first_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", ENV_BIN, "/bin"]))
    assert cpu_compat.use_environment_ninja() == os.path.join(ENV_BIN, "ninja")
    assert os.environ["PATH"].split(os.pathsep) == [ENV_BIN, "/usr/bin", "/bin"]
    assert shutil.which("ninja") == os.path.join(ENV_BIN, "ninja")
    cpu_compat.use_environment_ninja()  # a second call changes nothing
    assert os.environ["PATH"].split(os.pathsep) == [ENV_BIN, "/usr/bin", "/bin"]
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # an interpreter without a ninja beside it
    assert cpu_compat.use_environment_ninja() is None and os.environ["PATH"].split(os.pathsep)[0] == ENV_BIN


@pytest.mark.slow  # starts Ray
def test_every_ray_worker_in_the_cpu_mode_finds_the_environment_s_ninja():
    """The setup hook (every Ray worker) in a fresh interpreter whose PATH starts with the system folders: once the
    worker imports torch (which building or loading an op needs), its PATH finds the environment's ninja first."""
    code = ("import shutil; from openrlhf_ada.cpu import patches as cpu_compat; cpu_compat.worker_setup_hook(); import torch; "
            "print(shutil.which('ninja'))")
    env = {**os.environ, "OPENRLHF_ADA_CPU": "1", "PATH": os.pathsep.join(["/usr/bin", "/bin", ENV_BIN])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == os.path.join(ENV_BIN, "ninja")
