"""Make every ``openrlhf`` module importable on a machine without CUDA.

Why: ``openrlhf.models`` imports ``flash_attn`` at module level, and the ``flash_attn`` package imports its compiled
CUDA extension ``flash_attn_2_cuda`` at import time. On the CPU stack (see the project spec, "The CPU stack")
flash-attn is installed python-only, so that import fails and with it ``openrlhf.models``, the trainers and the
vLLM engine module. :func:`install` registers a placeholder module under that name, only when the real extension
cannot be imported. Nothing on the CPU path calls into it; if something does, it gets a clear error instead of a
mysterious ``ModuleNotFoundError``.

Ray workers import modules fresh, so patches made in the driver do not reach them: start Ray with
``runtime_env={"worker_process_setup_hook": "openrlhf_ada.cpu_compat.worker_setup_hook"}`` (see :data:`RAY_RUNTIME_ENV`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types

EXT_NAME = "flash_attn_2_cuda"
#: Ray ``runtime_env`` that installs the placeholder in every worker process.
RAY_RUNTIME_ENV = {"worker_process_setup_hook": "openrlhf_ada.cpu_compat.worker_setup_hook"}


class _MissingCudaExtension(types.ModuleType):
    """Stand-in for ``flash_attn_2_cuda``: every public attribute is a function that raises a clear error.

    Dunder and private lookups (``__file__``, ``__wrapped__``, ``_fields``, ...) raise ``AttributeError`` as for a
    normal module, so that ``inspect``, ``pickle``, ``importlib`` and friends keep working. The extension's real entry
    points (``fwd``, ``bwd``, ``varlen_fwd``, ...) are all public names.
    """

    is_openrlhf_ada_placeholder = True

    def __init__(self, name: str):
        super().__init__(name, f"Placeholder for the CUDA extension {name!r} (see openrlhf_ada.cpu_compat).")
        # A real spec keeps importlib.util.find_spec(name) from raising "__spec__ is None".
        self.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, origin="openrlhf_ada.cpu_compat placeholder")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module_name = self.__name__

        def _needs_cuda(*args, **kwargs):
            raise RuntimeError(
                f"{module_name}.{name} needs a CUDA GPU with the compiled flash-attn extension; this machine has "
                f"only a python-only flash-attn install, and openrlhf_ada.cpu_compat put a placeholder under "
                f"'{module_name}' so that openrlhf imports on CPU."
            )

        _needs_cuda.__name__ = _needs_cuda.__qualname__ = name
        return _needs_cuda


def _real_extension_importable() -> bool:
    """True if the compiled ``flash_attn_2_cuda`` (or an already registered stand-in) can be imported."""
    if sys.modules.get(EXT_NAME) is not None:
        return True
    try:
        importlib.import_module(EXT_NAME)
    except ImportError:  # ModuleNotFoundError, or a CUDA extension that cannot load (missing libcudart, ...)
        sys.modules.pop(EXT_NAME, None)
        return False
    return True


def is_placeholder_installed() -> bool:
    """True if ``flash_attn_2_cuda`` in ``sys.modules`` is this module's placeholder."""
    return getattr(sys.modules.get(EXT_NAME), "is_openrlhf_ada_placeholder", False) is True


def install() -> bool:
    """Register the ``flash_attn_2_cuda`` placeholder unless the real extension imports. Idempotent.

    Returns True if the placeholder is (now or already) in place, False if the real extension is used.
    """
    if _real_extension_importable():
        return is_placeholder_installed()
    sys.modules[EXT_NAME] = _MissingCudaExtension(EXT_NAME)
    return True


def worker_setup_hook() -> None:
    """Ray ``worker_process_setup_hook``: runs :func:`install` in each Ray worker before it runs tasks."""
    install()
