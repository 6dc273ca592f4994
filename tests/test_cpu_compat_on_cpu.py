"""openrlhf_ada.cpu.patches: every openrlhf module we build on imports on CPU, in the driver and in Ray workers.

The python-only flash-attn install cannot import its CUDA extension ``flash_attn_2_cuda``; the placeholder fixes the
imports and turns any accidental call into a clear error. Checks run in fresh interpreters / Ray workers, since
this pytest process already imported openrlhf_ada (conftest).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
import types

import pytest

from openrlhf_ada.cpu import patches as cpu_compat

MODULES = [
    "openrlhf.models",
    "openrlhf.trainer.ppo_trainer",
    "openrlhf.trainer.ppo_utils.experience_maker",
    "openrlhf.trainer.ppo_utils.samples_generator",
    "openrlhf.trainer.ray.vllm_engine",
]

FRESH_IMPORT_SCRIPT = """
import importlib, json, sys

# 1. Without openrlhf_ada, the python-only flash-attn breaks `import openrlhf.models`.
try:
    import openrlhf.models  # noqa: F401
    before = "imported"
except ModuleNotFoundError as e:
    before = e.name

# 2. After `import openrlhf_ada`, everything imports, in the same interpreter.
import openrlhf_ada  # noqa: F401
from openrlhf_ada.cpu.patches import is_placeholder_installed

modules = sys.argv[1:]
for name in modules:
    importlib.import_module(name)
print("RESULT " + json.dumps({"before": before, "placeholder": is_placeholder_installed(),
                              "imported": [m for m in modules if m in sys.modules]}))
"""

RAY_WITHOUT_HOOK_SCRIPT = """
import json
import ray

if __name__ == "__main__":
    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False)  # no worker_process_setup_hook

    @ray.remote
    def try_import():
        try:
            import openrlhf.models  # noqa: F401
            return "imported"
        except ModuleNotFoundError as e:
            return e.name

    print("RESULT " + json.dumps({"no_hook": ray.get(try_import.remote(), timeout=120)}))
    ray.shutdown()
"""


def _write(tmp_path, name: str, code: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def test_fresh_interpreter_imports_openrlhf_after_openrlhf_ada(tmp_path, run_python):
    result = run_python(_write(tmp_path, "fresh_import.py", FRESH_IMPORT_SCRIPT), *MODULES, timeout=120)
    assert result["before"] == cpu_compat.EXT_NAME, "without the placeholder openrlhf.models should fail on CPU"
    assert result["placeholder"] is True
    assert result["imported"] == MODULES


def test_placeholder_raises_clear_error_and_stays_introspectable():
    assert cpu_compat.install() is True  # idempotent: conftest already installed it
    ext = importlib.import_module(cpu_compat.EXT_NAME)
    assert cpu_compat.install() is True and sys.modules[cpu_compat.EXT_NAME] is ext
    assert cpu_compat.is_placeholder_installed()

    with pytest.raises(RuntimeError, match=r"flash_attn_2_cuda\.varlen_fwd needs a CUDA GPU"):
        ext.varlen_fwd(1, 2, softmax_scale=0.1)
    # flash-attn's own module got the placeholder too: its calls fail with the same message.
    from flash_attn import flash_attn_interface

    with pytest.raises(RuntimeError, match=r"flash_attn_2_cuda\.fwd needs a CUDA GPU"):
        flash_attn_interface.flash_attn_gpu.fwd()

    for name in ("__file__", "__path__", "__wrapped__", "_private"):
        assert not hasattr(ext, name), name
    assert importlib.util.find_spec(cpu_compat.EXT_NAME) is ext.__spec__  # no "__spec__ is None" ValueError


def test_install_keeps_a_real_extension(monkeypatch):
    real = types.ModuleType(cpu_compat.EXT_NAME)
    monkeypatch.setitem(sys.modules, cpu_compat.EXT_NAME, real)
    assert cpu_compat.install() is False
    assert sys.modules[cpu_compat.EXT_NAME] is real

    monkeypatch.delitem(sys.modules, cpu_compat.EXT_NAME)
    assert cpu_compat.install() is True  # the real one is not importable here: placeholder comes back
    assert cpu_compat.is_placeholder_installed()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ray_worker_imports_openrlhf_thanks_to_setup_hook(ray_local):
    ray = ray_local

    @ray.remote(num_cpus=1)
    def import_in_worker(modules):
        import importlib
        import os
        import sys

        torch_at_start = "torch" in sys.modules  # the hook waits for torch: a worker that never imports it stays light
        import torch  # noqa: F401  (flash-attn imports torch before its extension: the placeholder comes with it)

        hooked = getattr(sys.modules.get("flash_attn_2_cuda"), "is_openrlhf_ada_placeholder", False)
        for name in modules:
            importlib.import_module(name)
        return {
            "pid": os.getpid(),
            "torch_at_start": torch_at_start,
            "placeholder_before_imports": hooked,
            "imported": [m for m in modules if m in sys.modules],
        }

    result = ray.get(import_in_worker.remote(MODULES), timeout=150)
    assert result["pid"] != os.getpid()
    assert result["torch_at_start"] is False, "the setup hook imported torch in a worker that had not asked for it"
    assert result["placeholder_before_imports"] is True, "the setup hook should have installed the placeholder"
    assert result["imported"] == MODULES


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ray_worker_without_setup_hook_cannot_import_openrlhf(tmp_path, run_python):
    result = run_python(_write(tmp_path, "ray_no_hook.py", RAY_WITHOUT_HOOK_SCRIPT), timeout=150)
    assert result["no_hook"] == cpu_compat.EXT_NAME


# -- the placeholder never stands in for an extension that is there ---------------------------------------------------

EXTENSION_SOURCE = """
#include <torch/extension.h>
std::string fwd() { return "the real extension, linked against libtorch"; }
"""

REAL_EXTENSION_SCRIPT = """
import importlib, json, sys

# 1. Like a real flash-attn build, this extension cannot load before torch has loaded libtorch.
try:
    import flash_attn_2_cuda  # noqa: F401
    before_torch = "imported"
except ImportError as e:
    before_torch = str(e)
sys.modules.pop("flash_attn_2_cuda", None)

# 2. openrlhf_ada in the CPU mode, then flash-attn's own import (torch first, then the extension).
import openrlhf_ada  # noqa: F401
from openrlhf_ada.cpu.patches import is_placeholder_installed

placeholder = is_placeholder_installed()
from flash_attn import flash_attn_interface

print("RESULT " + json.dumps({"before_torch": before_torch, "placeholder": placeholder,
                              "fwd": flash_attn_interface.flash_attn_gpu.fwd()}))
"""

BROKEN_EXTENSION_SCRIPT = """
import json

import openrlhf_ada  # noqa: F401
from openrlhf_ada.cpu.patches import is_placeholder_installed

try:
    import flash_attn  # noqa: F401
    error = None
except ImportError as e:
    error = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps({"placeholder": is_placeholder_installed(), "error": error}))
"""

NO_CPU_MODE_SCRIPT = """
import json, sys

import openrlhf_ada  # noqa: F401

print("RESULT " + json.dumps({"torch_imported": "torch" in sys.modules,
                              "flash_attn_2_cuda": "flash_attn_2_cuda" in sys.modules}))
"""


@pytest.fixture(scope="module")
def real_extension_dir(tmp_path_factory):
    """A real compiled torch extension named flash_attn_2_cuda (built once, about a minute on 2 cores): like the
    CUDA build of flash-attn, it links against libtorch without an rpath, so it loads only after torch."""
    from torch.utils.cpp_extension import load_inline

    folder = tmp_path_factory.mktemp("flash_attn_2_cuda_build")
    load_inline(name=cpu_compat.EXT_NAME, cpp_sources=EXTENSION_SOURCE, functions=["fwd"],
                build_directory=str(folder), verbose=False)
    assert (folder / f"{cpu_compat.EXT_NAME}.so").exists()
    return folder


def _with_path(folder) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1", cpu_compat.CPU_ENV: "1"}


def _run(tmp_path, name, code, env) -> dict:
    import json
    import subprocess

    proc = subprocess.run([sys.executable, str(_write(tmp_path, name, code))], capture_output=True, text=True,
                          timeout=150, env=env)
    lines = [line[len("RESULT "):] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_real_extension_that_needs_torch_first_is_never_shadowed(tmp_path, real_extension_dir):
    result = _run(tmp_path, "real_extension.py", REAL_EXTENSION_SCRIPT, _with_path(real_extension_dir))
    assert result["before_torch"] != "imported" and "lib" in result["before_torch"]  # it needs libtorch
    assert result["placeholder"] is False
    assert result["fwd"] == "the real extension, linked against libtorch"


def test_an_extension_that_cannot_load_fails_as_itself(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / f"{cpu_compat.EXT_NAME}.so").write_bytes(b"\x7fELF not really a shared object")
    result = _run(tmp_path, "broken_extension.py", BROKEN_EXTENSION_SCRIPT, _with_path(folder))
    assert result["placeholder"] is False
    assert result["error"] and "ImportError" in result["error"] and cpu_compat.EXT_NAME in result["error"]


def test_without_the_cpu_mode_importing_the_package_changes_nothing(tmp_path):
    env = {**os.environ, cpu_compat.CPU_ENV: "0"}  # unset means on in this venv (the CPU stack's), see below
    result = _run(tmp_path, "no_cpu_mode.py", NO_CPU_MODE_SCRIPT, env)
    assert result == {"torch_imported": False, "flash_attn_2_cuda": False}


STACK_DEFAULT_SCRIPT = """
import json, sys

if MACHINE == "cuda":  # what a GPU node looks like to the check
    import torch
    torch.cuda.is_available = lambda: True
import openrlhf_ada  # noqa: F401
from openrlhf_ada.cpu import patches as cpu_compat

try:  # on the simulated GPU node only flash-attn: the rest of upstream would try real CUDA calls (bitsandbytes)
    if MACHINE == "cuda":
        import flash_attn  # noqa: F401
    else:
        from openrlhf.trainer.ppo_utils.experience_maker import Experience  # noqa: F401
    upstream = "imported"
except ModuleNotFoundError as e:
    upstream = e.name
extension = sys.modules.get("flash_attn_2_cuda")
print("RESULT " + json.dumps({"upstream": upstream, "placeholder": cpu_compat.is_placeholder_installed(),
                              "real_extension": extension is not None and "REAL" in vars(extension)}))
"""


@pytest.mark.slow  # three fresh interpreters that import openrlhf
def test_the_cpu_stack_environment_runs_in_the_cpu_mode_without_the_variable(tmp_path):
    """This venv is the CPU stack (scripts/setup_env.sh stamped it): with OPENRLHF_ADA_CPU unset, `import openrlhf_ada`
    makes upstream's modules importable. It never shadows an extension on disk, and where torch sees CUDA it does
    nothing: upstream fails as it does without the package."""
    assert cpu_compat.in_cpu_stack_environment(), "the tests run in the venv scripts/setup_env.sh builds"
    env = {k: v for k, v in os.environ.items() if k != cpu_compat.CPU_ENV}
    plain = _run(tmp_path, "stack_cpu.py", "MACHINE = 'cpu'\n" + STACK_DEFAULT_SCRIPT, env)
    assert plain == {"upstream": "imported", "placeholder": True, "real_extension": False}

    folder = tmp_path / "real"
    folder.mkdir()
    (folder / f"{cpu_compat.EXT_NAME}.py").write_text("REAL = True\n")
    with_real = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))}
    real = _run(tmp_path, "stack_real.py", "MACHINE = 'cpu'\n" + STACK_DEFAULT_SCRIPT, with_real)
    assert real == {"upstream": "imported", "placeholder": False, "real_extension": True}

    gpu = _run(tmp_path, "stack_cuda.py", "MACHINE = 'cuda'\n" + STACK_DEFAULT_SCRIPT, env)
    assert gpu == {"upstream": cpu_compat.EXT_NAME, "placeholder": False, "real_extension": False}
