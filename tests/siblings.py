"""Another test file's helpers, loaded by path, once per test process.

pytest imports test files by path (--import-mode=importlib: the openrlhf wheel installs a top-level package named
`tests`, so this folder is no package), so a test file that uses tests/test_pipeline_on_cpu.py's pipeline harness
(launch, flags, checks) cannot import it by name; `load("test_pipeline_on_cpu.py")` gives that file's module, the
same object to every test file of the process.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def load(filename: str) -> ModuleType:
    name = f"_helpers_{Path(filename).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / filename)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # a dataclass looks its module up there while it is defined
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]
