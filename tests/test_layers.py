"""The layers: the algorithms layer is pure torch/python (importing it pulls in neither Ray nor vLLM nor OpenRLHF);
the package's imports form no circle; the import paths from before the rooms still import, with a DeprecationWarning."""

import ast
import pathlib
import subprocess
import sys

ALGORITHMS = pathlib.Path(__file__).resolve().parents[1] / "openrlhf_ada" / "algorithms"
ALLOWED = {"torch", "openrlhf_ada", "__future__", "dataclasses", "importlib", "logging", "math", "os", "random", "sys",
           "typing", "collections", "functools", "itertools", "statistics", "hashlib", "inspect"}


def test_algorithm_modules_import_only_torch_and_the_standard_library():
    for path in sorted(ALGORITHMS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                top = name.split(".")[0]
                assert top in ALLOWED, f"{path.name} imports {name}"
                if top == "openrlhf_ada":
                    assert name.startswith("openrlhf_ada.algorithms"), f"{path.name} imports {name}"


def test_importing_algorithms_loads_no_ray_vllm_or_openrlhf():
    code = ("import sys, openrlhf_ada.algorithms as a; a.simulate([[1, 0, 1, 0]], n=2, round_size=2, max_rounds=2, "
            "mode='balance'); bad = [m for m in ('ray', 'vllm', 'openrlhf') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


PACKAGE = ALGORITHMS.parent


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules) -> set:
    """The package's modules that `path` imports anywhere (in a function too): `from a.b import c` is the module
    a.b.c when that is a module, else a.b."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {m for m in found if m in modules and m != name}


def test_the_package_imports_form_no_circle():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    graph = {name: sorted(_imports(path, modules)) for name, path in modules.items()}
    done, path = set(), []

    def visit(name):
        if name in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for imported in graph[name]:
            visit(imported)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
    assert {"openrlhf_ada.cpu.patches", "openrlhf_ada.analysis.compare"} <= set(graph)  # the walk saw the package


# The import paths from before the package had one room per concern, kept for one release.
OLD_PATHS = {
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
OLD_NAMES = {"openrlhf_ada.cli.compare": ("openrlhf_ada.analysis.compare", ("load_runs", "summarize", "Run")),
             "openrlhf_ada.cli.prepare_data": ("openrlhf_ada.data.prepare", ("generate_kk", "write_jsonl"))}

_OLD_PATHS_PROBE = r"""
import importlib, importlib.metadata, json, sys, warnings

old_paths, old_names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # first what vLLM does in its processes: an install made before the move names the old plugin module
    plugin = importlib.metadata.EntryPoint(name="openrlhf_ada", value="openrlhf_ada.vllm_plugin:load",
                                           group="vllm.general_plugins").load()
    out["plugin"] = f"{plugin.__module__}.{plugin.__name__}"
    for old, new in old_paths.items():
        caught.clear()
        module = importlib.import_module(old)
        out[old] = [module is importlib.import_module(new), module.__spec__.name,
                    [str(w.message) for w in caught if w.category is DeprecationWarning]]
    for old, (new, names) in old_names.items():
        for name in names:
            caught.clear()
            value = getattr(importlib.import_module(old), name)
            out[f"{old}.{name}"] = [value is getattr(importlib.import_module(new), name), new,
                                    [str(w.message) for w in caught if w.category is DeprecationWarning]]
    from openrlhf_ada.utils import kv_cache
    out["from openrlhf_ada.utils import kv_cache"] = kv_cache.__name__
print(json.dumps(out))
"""


def test_old_import_paths_still_import_with_a_deprecation_warning(tmp_path):
    import json

    old_names = {old: [new, list(names)] for old, (new, names) in OLD_NAMES.items()}
    proc = subprocess.run([sys.executable, "-c", _OLD_PATHS_PROBE, json.dumps(OLD_PATHS), json.dumps(old_names)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.pop("plugin") == "openrlhf_ada.cpu.vllm_plugin.load"
    assert out.pop("from openrlhf_ada.utils import kv_cache") == "openrlhf_ada.cpu.kv_cache"
    for old, (same, new_name, warned) in out.items():
        new = OLD_PATHS.get(old, new_name)
        assert same, f"{old} is not the object of its new path {new}"
        assert new_name == new, f"{old} has the spec of {new_name}, not of {new}"
        if old != "openrlhf_ada.vllm_plugin":  # imported first by the entry point, above; warned there
            assert any(new in message and old in message for message in warned), f"{old}: no warning naming {new}"
    # `python -m` of an old path runs the new module
    proc = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m", "openrlhf_ada.utils.demo_task",
                           "--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "--size" in proc.stdout, proc.stderr[-3000:]
    assert "moved to openrlhf_ada.data.demo_task" in proc.stderr
