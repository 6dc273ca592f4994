#!/usr/bin/env bash
# Build the openrlhf-ada GPU image (dockerfile/Dockerfile) and start a container with every GPU, this
# repository mounted at /workspace/openrlhf-ada (where the image installed it editable, so the live checkout
# is what runs) and the Hugging Face cache shared with the host.
#
# Usage:
#   examples/scripts/docker_run.sh build          # build the image only
#   examples/scripts/docker_run.sh run [CMD...]   # start a container (default CMD: bash)
#   examples/scripts/docker_run.sh [all] [CMD...] # build if the image is missing, then run (default)
# Inside the container, start Ray and submit a job, e.g.
#   ray start --head --num-gpus 8 && bash examples/scripts/train_adora_grpo.sh
#
# Settings (environment): IMAGE, GPUS (docker --gpus value), SHM_SIZE, HF_CACHE, NAME, EXTRA_DOCKER_ARGS.
# The container uses the host network so that Ray nodes on other machines and the dashboard (8265) can reach it.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
IMAGE="${IMAGE:-openrlhf-ada:0.11.2}"
GPUS="${GPUS:-all}"
SHM_SIZE="${SHM_SIZE:-32g}"
HF_CACHE="${HF_CACHE:-${HOME}/.cache/huggingface}"
NAME="${NAME:-openrlhf-ada}"
MOUNT=/workspace/openrlhf-ada   # = the Dockerfile's WORKDIR, where the package is installed editable

action="${1:-all}"
case "${action}" in
  build|run|all) shift || true ;;
  *) action=all ;;   # anything else is the command to run in the container
esac

build() {
  # BuildKit sends only what the Dockerfile COPYs (setup.py, pyproject.toml, openrlhf_ada/), not .venv/ or runs/.
  DOCKER_BUILDKIT=1 docker build -f "${REPO_DIR}/dockerfile/Dockerfile" -t "${IMAGE}" "${REPO_DIR}"
}

run() {
  local tty=(-i)
  if [[ -t 0 && -t 1 ]]; then tty+=(-t); fi
  local cmd=("$@")
  if [[ ${#cmd[@]} -eq 0 ]]; then cmd=(bash); fi
  mkdir -p "${HF_CACHE}"
  # shellcheck disable=SC2086  # EXTRA_DOCKER_ARGS is a list of words on purpose
  docker run "${tty[@]}" --rm --name "${NAME}" \
    --gpus "${GPUS}" \
    --shm-size="${SHM_SIZE}" \
    --ulimit memlock=-1 --ulimit stack=67108864 \
    --cap-add=SYS_ADMIN \
    --network=host \
    -v "${REPO_DIR}:${MOUNT}" \
    -v "${HF_CACHE}:/root/.cache/huggingface" \
    -e HF_TOKEN -e WANDB_TOKEN -e WANDB_API_KEY \
    -w "${MOUNT}" \
    ${EXTRA_DOCKER_ARGS:-} \
    "${IMAGE}" "${cmd[@]}"
}

case "${action}" in
  build) build ;;
  run) run "$@" ;;
  all)
    if ! docker image inspect "${IMAGE}" >/dev/null 2>&1; then build; fi
    run "$@"
    ;;
esac
