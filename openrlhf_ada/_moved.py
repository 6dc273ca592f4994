"""The package's old import paths, kept for one release (docs/layout.md, "Old import paths").

The modules moved into rooms by concern (`cpu/`, `models/`, `data/`, `trainer/`, `analysis/`, `rewards/`); a user's
reward file or script may still import them by their old names (`openrlhf_ada.utils.tiny_llama`,
`openrlhf_ada.cpu_compat`, ...), and an install made before the move still names `openrlhf_ada.vllm_plugin:load` as
vLLM's plugin entry point. Every old name resolves here, in one table: importing it gives the SAME module object as
its new name (one copy of the code, of its state and of its patches) with a DeprecationWarning that names the new
path; `python -m OLD` runs the new module. No file is left at an old path.

`install()` (called by openrlhf_ada/__init__.py, so in every process that imports the package: Ray's workers,
vLLM's engine processes through the entry point) puts the finder first on `sys.meta_path`: an editable install of
another checkout would otherwise find that checkout's file at the old path. The finder answers only the names in
`MOVED_MODULES` (and the old `openrlhf_ada.utils` package, now empty); every other import passes through.

`moved_names(module)` serves the names that left a module which is still there (`openrlhf_ada.cli.compare`'s
functions now in `openrlhf_ada.analysis.compare`), as that module's `__getattr__`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

#: old dotted module name -> new one
MOVED_MODULES = {
    "openrlhf_ada.cpu_compat": "openrlhf_ada.cpu.patches",
    "openrlhf_ada.vllm_plugin": "openrlhf_ada.cpu.vllm_plugin",
    "openrlhf_ada.utils.kv_cache": "openrlhf_ada.cpu.kv_cache",
    "openrlhf_ada.utils.local_ray": "openrlhf_ada.cpu.local_ray",
    "openrlhf_ada.utils.shm_leftovers": "openrlhf_ada.cpu.shm_leftovers",
    "openrlhf_ada.utils.engine_errors": "openrlhf_ada.trainer.ray.engine_errors",
    "openrlhf_ada.utils.heldout": "openrlhf_ada.trainer.heldout",
    "openrlhf_ada.utils.checkpoint_dir": "openrlhf_ada.trainer.checkpoint_dir",
    "openrlhf_ada.utils.signal_watch": "openrlhf_ada.trainer.signal_watch",
    "openrlhf_ada.utils.metrics_log": "openrlhf_ada.trainer.metrics_log",
    "openrlhf_ada.utils.tiny_llama": "openrlhf_ada.models.tiny_llama",
    "openrlhf_ada.utils.smollm2": "openrlhf_ada.models.smollm2",
    "openrlhf_ada.data_checks": "openrlhf_ada.data.checks",
    "openrlhf_ada.utils.demo_task": "openrlhf_ada.data.demo_task",
    "openrlhf_ada.reward_checks": "openrlhf_ada.rewards.checks",
    "openrlhf_ada.utils.seed_stats": "openrlhf_ada.analysis.seed_stats",
    "openrlhf_ada.cli.compare_settings": "openrlhf_ada.analysis.compare_settings",
}
#: old packages that are gone: importable (empty) so that their moved submodules are
GONE_PACKAGES = ("openrlhf_ada.utils",)
#: a module that is still there -> the module its other names moved to
MOVED_NAMES = {
    "openrlhf_ada.cli.compare": "openrlhf_ada.analysis.compare",
    "openrlhf_ada.cli.prepare_data": "openrlhf_ada.data.prepare",
}


def _stacklevel() -> int:
    """The warning's stack level that points at the importing line: past this module's frames and importlib's
    (`warnings.warn` itself skips the import system's bootstrap frames, so they are not counted)."""
    frame, level = sys._getframe(2), 2  # the caller of _warn (level 2; _warn, which calls warn, is level 1)
    while frame is not None and frame.f_code.co_filename in (__file__, importlib.__file__):
        frame = frame.f_back
        while frame is not None and _bootstrap(frame):
            frame = frame.f_back
        level += 1
    return level


def _bootstrap(frame) -> bool:
    name = frame.f_code.co_filename
    return "importlib" in name and "_bootstrap" in name


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}: import it from there ({old} goes away in the next release)",
                  DeprecationWarning, stacklevel=_stacklevel())


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module of its new name; runs the new module's code for `python -m OLD`."""

    def __init__(self, old: str, new: str | None):
        self.old, self.new = old, new

    def create_module(self, spec):
        if self.new is None:  # a gone package: a fresh empty one
            return None
        _warn(self.old, self.new)
        module = importlib.import_module(self.new)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        if self.new is None:
            module.__getattr__ = lambda name: _submodule(self.old, name)
            return
        module.__spec__ = self._own_spec  # the import system gave it the old name's spec; give it back its own

    def get_code(self, fullname):  # runpy (`python -m OLD`)
        if self.new is None:
            return None
        _warn(self.old, self.new)
        return importlib.util.find_spec(self.new).loader.get_code(self.new)

    def is_package(self, fullname) -> bool:
        return self.new is None


def _submodule(package: str, name: str):
    if f"{package}.{name}" in MOVED_MODULES:
        return importlib.import_module(f"{package}.{name}")
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            new = MOVED_MODULES[fullname]
            origin = getattr(importlib.util.find_spec(new), "origin", None)
            return importlib.util.spec_from_loader(fullname, _AliasLoader(fullname, new), origin=origin)
        if fullname in GONE_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(fullname, None), is_package=True)
        return None


def install() -> None:
    """Put the finder first on sys.meta_path, once per process."""
    if not any(type(finder).__name__ == _MovedFinder.__name__ for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())


def moved_names(module_name: str):
    """A module `__getattr__` for `module_name` that serves the names which moved to MOVED_NAMES[module_name]."""
    new = MOVED_NAMES[module_name]

    def __getattr__(name: str):
        target = importlib.import_module(new)
        if name.startswith("__") or not hasattr(target, name):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        _warn(f"{module_name}.{name}", f"{new}.{name}")
        return getattr(target, name)

    return __getattr__


def top_level(name: str) -> types.ModuleType:
    """`openrlhf_ada.<old name>` as an attribute (the package imported cpu_compat itself, so it was one)."""
    old = f"openrlhf_ada.{name}"
    if old in MOVED_MODULES or old in GONE_PACKAGES:
        return importlib.import_module(old)
    raise AttributeError(f"module 'openrlhf_ada' has no attribute {name!r}")
