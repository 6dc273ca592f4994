"""The algorithms layer is pure torch/python: importing it pulls in neither Ray nor vLLM nor OpenRLHF."""

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
