#!/usr/bin/env bash
# The GPU stack without Docker, into the active Python environment (a venv or conda env on a machine with CUDA), in
# the Docker image's order (dockerfile/Dockerfile). One `pip install -e '.[gpu]'` cannot do it: flash-attn 2.8.3 is
# an sdist whose setup.py imports torch (it has no pyproject.toml declaring build requirements), and pip builds it in
# an isolated environment that has no torch ("No module named 'torch'"). So, in three steps:
#   1. vLLM 0.29.0, which brings the torch build that flash-attn is compiled against;
#   2. flash-attn 2.8.3, built against that torch without build isolation (its setup.py's own imports first);
#   3. this package (editable) with the `gpu` extra, setup.py's GPU_PINS: flash-attn and vLLM are already satisfied;
#   4. the reward verifiers that the shipped scripts' reward files import (setup.py's `rewards` extra: math-verify,
#      reasoning-gym), at the Dockerfile's versions.
# The compile takes minutes to tens of minutes and about 9 GB RAM per job: MAX_JOBS (default 4) sets the jobs.
# Activate the environment first (this runs its `python`). `python scripts/check_docker_pins.py --install-script
# scripts/install_gpu.sh` resolves these steps' pins together (a pip dry run) and checks their order.
set -euo pipefail
cd "$(dirname "$0")/.."
export MAX_JOBS=${MAX_JOBS:-4}
python -m pip install vllm==0.29.0
python -m pip install setuptools wheel packaging psutil ninja
python -m pip install --no-build-isolation flash-attn==2.8.3
python -m pip install -e '.[gpu]'
python -m pip install math-verify==0.9.0 reasoning-gym==0.1.25
python -c "import openrlhf_ada, flash_attn, vllm, math_verify, reasoning_gym; print('openrlhf-ada ready: vllm', vllm.__version__, 'flash-attn', flash_attn.__version__)"
