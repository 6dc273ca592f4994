"""The layers: the algorithms layer is pure torch/python (importing it pulls in neither Ray nor vLLM nor OpenRLHF);
the package's imports form no circle."""

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


def test_the_layers_point_one_way():
    """`args.py` (the flags and their frozen configs) imports no trainer module, and no module of the package outside
    `cli/` imports an entry point."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    args_imports = _imports(modules["openrlhf_ada.args"], modules)
    assert not [m for m in args_imports if m.startswith(("openrlhf_ada.trainer", "openrlhf_ada.cli"))], args_imports
    for name, path in modules.items():
        if not name.startswith("openrlhf_ada.cli"):
            up = [m for m in _imports(path, modules) if m.startswith("openrlhf_ada.cli")]
            assert not up, f"{name} imports {up}"


def test_the_benchmarks_use_the_library_not_the_entry_points():
    """A benchmark builds its arguments with `openrlhf_ada.launcher.parse_args` and its runs from the package; an entry
    point (`cli/`) it needs runs as its own process (`python -m openrlhf_ada.cli...`), never imported."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    benchmarks = sorted((PACKAGE.parent / "benchmarks").glob("*.py"))
    assert benchmarks
    for path in benchmarks:
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        up = [m for m in names if m.startswith("openrlhf_ada.cli")]
        assert not up, f"benchmarks/{path.name} imports {up}"
    assert "openrlhf_ada.launcher" in modules
