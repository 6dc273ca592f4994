"""Shared fixtures: offline environment, a tiny Llama and a tiny Qwen2.5-VL checkpoint, a local CPU Ray, and a subprocess runner.

pytest runs with ``--import-mode=importlib`` and there is no ``tests/__init__.py``: the openrlhf wheel installs its own
top-level ``tests`` package, so helpers live here as fixtures instead of an importable module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Nothing may reach a hub or send usage stats; set before transformers / vLLM / Ray are imported anywhere.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "DO_NOT_TRACK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
}
for _key, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_key, _value)

import pytest  # noqa: E402

from openrlhf_ada.cpu.patches import RAY_RUNTIME_ENV, use_cpu_mode_without_cuda  # noqa: E402

# The tests run on a machine without CUDA: the CPU mode (the flash_attn_2_cuda placeholder here, and OPENRLHF_ADA_CPU=1
# for every process the tests start, Ray workers and vLLM engines included).
use_cpu_mode_without_cuda()


# The files that take longest, longest first (measured on a fresh clone: docs/testing.md). `make test` runs the suite
# in two test processes (`pytest -n 2 --dist loadfile`): each file goes whole to the first free process, in this
# order, and each process is handed its next file while it still runs the current one.
_LONGEST_FILES = (
    "test_compatibility_on_cpu.py",
    "test_faults_on_cpu.py",
    "test_lora_on_cpu.py",
    "test_cancel_history_on_cpu.py",
    "test_learning_on_cpu.py",
    "test_benchmarks_smoke.py",
    "test_reward_model_on_cpu.py",
    "test_vision_language_cluster_on_cpu.py",
    "test_est_on_cpu.py",
    "test_vision_language_on_cpu.py",
    "test_short_step_on_cpu.py",
    "test_ledger_on_cpu.py",
    "test_heldout_eval.py",
    "test_local_recovery_on_cpu.py",
    "test_cpu_compat_on_cpu.py",
    "test_cpu_mode_on_cpu.py",
    "test_kv_cache_on_cpu.py",
    "test_compare.py",
)


def pytest_collection_modifyitems(config, items):
    """Order the files so that two test processes finish together: the pipeline file (a third of the suite) first,
    then the files without slow tests (the one the pipeline's process is handed next is short), then the slow ones
    longest first, so that what is left at the end is short. Tests keep their order within a file."""
    slow = {item.path.name for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.name
        if name == "test_pipeline_on_cpu.py":
            return (0, 0)
        if name not in slow:
            return (1, 0)
        return (2, _LONGEST_FILES.index(name)) if name in _LONGEST_FILES else (3, 0)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory) -> str:
    """A tiny random Llama checkpoint (float32, head_dim 64, byte-level BPE tokenizer, chat template), built once."""
    from openrlhf_ada.models.tiny_llama import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), seed=0)


@pytest.fixture(scope="session")
def tiny_vl_path(tmp_path_factory) -> str:
    """A tiny random Qwen2.5-VL checkpoint (float32, text head_dim 64, the tiny Llama's tokenizer with Qwen's special
    tokens, a PIL image processor: a 56x56 image is 4 image tokens), built once."""
    from openrlhf_ada.models.tiny_vl import build_tiny_vl

    return build_tiny_vl(tmp_path_factory.mktemp("tiny_vl"), seed=0)


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray (2 CPUs, no GPU) whose workers install the CPU compat placeholder via the setup hook."""
    import ray

    if ray.is_initialized():  # somebody else owns it; do not shut it down under them
        yield ray
        return
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, runtime_env=RAY_RUNTIME_ENV)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def run_python():
    """Run a Python script in a fresh interpreter of this venv; return the JSON it printed on a ``RESULT `` line.

    Fresh interpreters are needed for import checks (nothing pre-imported) and for vLLM, which spawns processes
    and therefore needs an ``if __name__ == "__main__":`` entry point. On a non-zero exit or a missing RESULT line
    the test fails with the tail of the script's output.
    """

    def run(script: str | os.PathLike, *args: str, timeout: float = 150) -> dict:
        proc = subprocess.run(
            [sys.executable, os.fspath(script), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        results = [line[len("RESULT ") :] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not results:
            pytest.fail(
                f"{script} exited with {proc.returncode}, RESULT lines: {len(results)}\n"
                f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
            )
        return json.loads(results[-1])

    return run


class ShmWatch:
    """`watch()`: the vLLM shared-memory segments (/dev/shm/psm_*) there now; `watch(since)`: those that appeared since
    and stay behind with no live process mapping them (waiting up to 15 s for killed engine processes to go).

    Only segments that a process under `roots()` (default: this test process) mapped count: with the suite in two
    test processes (`pytest -n 2`), the other one's engines create and leave segments meanwhile. A thread records
    the mappings of those process trees every second while the watch is open (`seen`); an engine lives far longer
    than that."""

    def __init__(self, roots=lambda: [os.getpid()]):
        import threading

        self.roots, self.seen, self._stop = roots, set(), threading.Event()
        self._thread = threading.Thread(target=self._watch, name="shm-watch", daemon=True)
        self._thread.start()

    def _record(self):
        from openrlhf_ada.cpu.shm_leftovers import mapped_segments

        roots = self.roots()
        if roots:
            self.seen.update(mapped_segments(roots))

    def _watch(self):
        while not self._stop.wait(1.0):
            self._record()

    def __call__(self, since=None, wait=15.0):
        from openrlhf_ada.cpu.shm_leftovers import orphans, segments

        if since is None:
            return segments()
        self._record()
        _wait_until_unmapped(since, wait)
        return [path for path in orphans(since) if path in self.seen]

    def close(self):
        self._stop.set()
        self._thread.join()
        self._record()


@pytest.fixture
def shm_segments_left():
    """`f()` / `f(since)` of a ShmWatch open for the test: the segments there now / those left behind since."""
    watch = ShmWatch()
    yield watch
    watch.close()


@pytest.fixture(scope="module")
def shm_watch_module():
    """A ShmWatch open for the whole module (for a resource that several tests share, e.g. one Ray cluster)."""
    watch = ShmWatch()
    yield watch
    watch.close()


@pytest.fixture
def generate_killing():
    """`f(gen, victim, **generate_kwargs)`: run `gen.generate_samples` in a thread, kill the engine `victim` with
    ray.kill as soon as it holds requests, and return what generate_samples returned (it must finish)."""
    import threading
    import time

    import ray

    def run(gen, victim, **generate_kwargs):
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("out", gen.generate_samples(**generate_kwargs)))
        thread.start()
        deadline = time.time() + 120
        while ray.get(victim.get_num_unfinished_requests.remote()) == 0 and time.time() < deadline:
            time.sleep(0.05)
        ray.kill(victim)
        thread.join(timeout=300)
        assert not thread.is_alive(), "generate_samples did not finish after the engine was killed"
        return result["out"]

    return run


@pytest.fixture
def refused(capsys):
    """`f(parse, argv, words)`: `parse(argv)` exits with argparse's usage error (2) and its message holds each of
    `words`; returns the message."""

    def check(parse, argv, words):
        with pytest.raises(SystemExit) as e:
            parse(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        missing = [word for word in words if word not in err]
        assert not missing, f"{missing} not in: {err}"
        return err

    return check


@pytest.fixture(scope="module", autouse=True)
def _shm_orphans_removed_per_module():
    """Tests kill engines with ray.kill, which leaves vLLM's shared memory (/dev/shm, ~0.2 GB each) behind: after
    each module, the segments it created that no live process maps are removed, so they do not add up to GBs of RAM
    over the suite (openrlhf_ada.cpu.shm_leftovers). With the suite in two test processes, the segments that the
    other one's processes mapped stay: that test process removes its own, and a test of its may check that its run
    removed them itself (taking them first once failed such a check)."""
    from openrlhf_ada.cpu.shm_leftovers import remove_orphans, segments

    since = segments()
    theirs = ShmWatch(roots=_other_test_process_roots)
    yield
    _wait_until_unmapped(since, 10.0)  # killed engines' processes may still be exiting
    theirs.close()
    remove_orphans(since | theirs.seen)


def _other_test_process_roots() -> list:
    """The other test processes of this run (`pytest -n 2`: this worker's siblings under the controller); none when
    the suite runs in one process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return []
    import psutil

    try:
        return [p.pid for p in psutil.Process(os.getppid()).children() if p.pid != os.getpid()]
    except psutil.Error:  # the controller is gone: the run is ending
        return []


def _other_test_processes() -> set:
    """The processes of the other test processes of this run, and everything under them."""
    from openrlhf_ada.cpu.shm_leftovers import process_tree

    return process_tree(_other_test_process_roots())


def _wait_until_unmapped(since, wait):
    """Wait (at most `wait` s) until no process maps a segment that appeared after `since`, leaving out the other
    test processes' own (their engines keep theirs mapped as long as they run). Killed engines' processes, which
    may still be exiting, belong to nobody's tree any more and are waited for."""
    import time

    from openrlhf_ada.cpu.shm_leftovers import mapped_segments, segments

    deadline = time.time() + wait
    while time.time() < deadline:
        others = _other_test_processes()
        held = {path: pids - others for path, pids in mapped_segments([1]).items()}
        if not any(held.get(path) for path in segments() - since):
            return
        time.sleep(0.5)
