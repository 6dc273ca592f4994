"""openrlhf-ada: ADORA and Reinforce-Ada on top of OpenRLHF 0.11.2 (pinned exactly)."""

from setuptools import find_packages, setup

# The cluster stack, exactly as openrlhf 0.11.2 expects it. dockerfile/Dockerfile installs the same pins
# (tests/test_scripts_and_docker.py checks that they agree).
GPU_PINS = [
    "openrlhf[vllm]==0.11.2",
    "vllm==0.29.0",
    "deepspeed==0.19.6",
    "flash-attn==2.8.3",
    "ray[default]==2.55.0",
    "transformers==5.15.0",
]

setup(
    name="openrlhf-ada",
    version="0.1.0",
    description="ADORA and Reinforce-Ada for OpenRLHF 0.11.2: adaptive advantages and adaptive sampling",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["openrlhf_ada", "openrlhf_ada.*"]),
    python_requires=">=3.10",
    # The CPU stack cannot be expressed as plain requirements (order, --no-deps, a python-only flash-attn):
    # scripts/setup_env.sh builds it. A GPU cluster installs the `gpu` extra, after vLLM and a flash-attn built
    # against its torch without build isolation (flash-attn's setup.py imports torch): scripts/install_gpu.sh.
    install_requires=["torch", "numpy"],
    extras_require={
        "gpu": GPU_PINS,
        "rewards": ["math-verify", "reasoning-gym"],
        "test": ["pytest", "pytest-timeout", "hypothesis", "ruff"],
    },
    package_data={"openrlhf_ada": ["py.typed"]},
    # vLLM loads this group in every process it starts (EngineCore, workers): the one way to reach them
    # (openrlhf_ada/cpu/vllm_plugin.py: start-up errors recorded for the engine actor; the CPU mode's vLLM patches, which
    # do nothing unless OPENRLHF_ADA_CPU=1 and there is no CUDA).
    entry_points={"vllm.general_plugins": ["openrlhf_ada = openrlhf_ada.cpu.vllm_plugin:load"]},
)
