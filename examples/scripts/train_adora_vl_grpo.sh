#!/usr/bin/env bash
# GRPO + ADORA on Geometry3K (the task of ADORA's vision-language experiments), OpenRLHF 0.11.2.
#
# What it trains
#   MODEL (default Qwen/Qwen2.5-VL-7B-Instruct, the model of ADORA's vision-language runs) with GRPO, in the
#   authors' settings (their ADORA_VL/examples/scripts/qwen25vl_7b_geo3k_adora.sh): --algo.advantage.estimator
#   group_norm, 8 samples per prompt, 128 prompts per step, train batch 128 (8 optimizer steps per rollout), KL to
#   the reference model as a k3 loss with coefficient 1e-3, lr 1e-6 without warm-up, weight decay 1e-2, Adam
#   offloaded, up to 4096 prompt and 4096 generated tokens, 15 episodes.
#   ADORA on top, variant vl: a group with no correct answer keeps weight 1.0 (boost), one with correct answers but
#   no usable wrong one gets 0.1 (lam), otherwise 1.0 when its longest correct answer is longer than its average
#   non-truncated wrong answer, else 0.1.
# Images
#   One image per prompt (--data.image_key images --data.max_images_per_prompt 1): each row's images are data URIs,
#   paths or URLs, and an <image> tag in the text marks where each goes (docs/vision_language.md). Samples are
#   padded, not packed (upstream refuses packing with images).
# Where
#   One node, NUM_GPUS GPUs shared by actor, reference and vLLM (--train.colocate_all, vLLM and DeepSpeed sleep
#   between phases), DeepSpeed ZeRO-3, bf16, one vLLM engine per VLLM_TP GPUs. (The authors ran 4 actor GPUs and
#   2 vLLM engines of 2 GPUs each, not colocated.)
# Reward
#   REWARD_FILE: openrlhf_ada/rewards/math.py (the answer in \boxed{} against the label); it runs inside every
#   vLLM engine.
# Data
#   DATA: python -m openrlhf_ada.cli.prepare_data hf --name hiyouga/geometry3k --out data/geo3k/train.jsonl writes
#   the fields input (the problem, then "Please reason step by step, and put your final answer within \boxed{}.",
#   the authors' system prompt), label and images.
#
# Usage: start Ray first (`ray start --head --num-gpus 8`), then
#   bash examples/scripts/train_adora_vl_grpo.sh [extra launcher flags, e.g. --adora.lam 0.2]
# Every variable below can be set from the environment (MODEL=... NUM_GPUS=4 bash ...).
# The flags are checked against the real 0.11.2 parser by tests/test_scripts_and_docker.py.
set -euo pipefail

REPO_DIR="${REPO_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
MODEL="${MODEL:-Qwen/Qwen2.5-VL-7B-Instruct}"
DATA="${DATA:-data/geo3k/train.jsonl}"
INPUT_KEY="${INPUT_KEY:-input}"
LABEL_KEY="${LABEL_KEY:-label}"
IMAGE_KEY="${IMAGE_KEY:-images}"
REWARD_FILE="${REWARD_FILE:-openrlhf_ada/rewards/math.py}"
NUM_NODES="${NUM_NODES:-1}"
NUM_GPUS="${NUM_GPUS:-8}"          # GPUs per node
VLLM_TP="${VLLM_TP:-1}"            # tensor parallel size of one vLLM engine
WANDB_TOKEN="${WANDB_TOKEN:-}"     # wandb logging only when set
WANDB_PROJECT="${WANDB_PROJECT:-openrlhf-ada}"
RUN_NAME="${RUN_NAME:-adora_vl_grpo_geo3k}"
SAVE_PATH="${SAVE_PATH:-${REPO_DIR}/runs/${RUN_NAME}}"   # on a shared file system for more than one node
RAY_ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"

# Colocated vLLM needs exactly one engine GPU per actor GPU (upstream's train() asserts it).
VLLM_ENGINES=$((NUM_NODES * NUM_GPUS / VLLM_TP))

CLUSTER_ARGS=(
  --actor.num_nodes "${NUM_NODES}"
  --actor.num_gpus_per_node "${NUM_GPUS}"
  --ref.num_nodes "${NUM_NODES}"
  --ref.num_gpus_per_node "${NUM_GPUS}"
  --vllm.num_engines "${VLLM_ENGINES}"
  --vllm.tensor_parallel_size "${VLLM_TP}"
  --vllm.gpu_memory_utilization 0.6
  --vllm.sync_backend nccl
  --vllm.enforce_eager
  --train.colocate_all
  --vllm.enable_sleep
  --ds.enable_sleep
  --ds.zero_stage 3
  --ds.param_dtype bf16
  --ds.adam_offload
  --actor.gradient_checkpointing_enable
)

DATA_ARGS=(
  --actor.model_name_or_path "${MODEL}"
  --data.prompt_dataset "${DATA}"
  --data.input_key "${INPUT_KEY}"
  --data.label_key "${LABEL_KEY}"
  --data.image_key "${IMAGE_KEY}"
  --data.max_images_per_prompt 1
  --data.apply_chat_template
  --data.max_len 8192
  --reward.remote_url "${REWARD_FILE}"
)

ROLLOUT_ARGS=(
  --rollout.batch_size 128
  --rollout.n_samples_per_prompt 8
  --rollout.micro_batch_size 8
  --rollout.max_new_tokens 4096
  --rollout.temperature 1.0
  --train.batch_size 128
  --train.micro_batch_size 4
  --train.max_epochs 1
  --train.num_episodes 15
  --train.seed 42
)

ALGO_ARGS=(
  --algo.advantage.estimator group_norm
  --algo.kl.use_loss
  --algo.kl.estimator k3
  --algo.kl.init_coef 1e-3
  --actor.adam.lr 1e-6
  --actor.lr_warmup_ratio 0
  --actor.adam.weight_decay 1e-2
)

ADORA_ARGS=(
  --adora.enable
  --adora.variant vl
  --adora.lam 0.1
  --adora.boost 1.0
  --adora.positive_threshold 0.5
)

OUTPUT_ARGS=(
  --ckpt.output_dir "${SAVE_PATH}"
  --ckpt.path "${SAVE_PATH}/ckpt"
  --ckpt.save_hf
  --ckpt.save_steps 50
  --ckpt.max_num 3
  --logger.logging_steps 1
)

ARGS=("${CLUSTER_ARGS[@]}" "${DATA_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${ALGO_ARGS[@]}" "${ADORA_ARGS[@]}"
      "${OUTPUT_ARGS[@]}")
if [[ -n "${WANDB_TOKEN}" ]]; then
  ARGS+=(--logger.wandb.key "${WANDB_TOKEN}" --logger.wandb.project "${WANDB_PROJECT}"
         --logger.wandb.run_name "${RUN_NAME}")
fi
ARGS+=("$@")

# Ray uploads REPO_DIR to every node (so `openrlhf_ada` and the reward file are importable there), minus the
# excluded paths. The launcher's ray.init sets env_vars NCCL_DEBUG, TOKENIZERS_PARALLELISM and
# RAY_ENABLE_ZERO_COPY_TORCH_TENSORS and a worker_process_setup_hook; Ray refuses to merge a job runtime_env
# that sets any of those keys too, unless RAY_OVERRIDE_JOB_RUNTIME_ENV=1 (set here, so adding e.g.
# "NCCL_DEBUG": "INFO" to env_vars works).
# OPENRLHF_ADA_CPU=1 (the CPU mode, for trying the cluster path on a machine without GPUs: see README) is passed
# on to the job.
JOB_ENV='"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"'
if [[ -n "${OPENRLHF_ADA_CPU:-}" ]]; then
  JOB_ENV+=", \"OPENRLHF_ADA_CPU\": \"${OPENRLHF_ADA_CPU}\""
fi
RUNTIME_ENV=$(printf '{"working_dir": "%s", "excludes": [".git", ".venv", "runs", "ckpt", "*.egg-info", ".pytest_cache", ".hypothesis"], "env_vars": {%s}}' "${REPO_DIR}" "${JOB_ENV}")

ray job submit --address="${RAY_ADDRESS}" \
  --runtime-env-json="${RUNTIME_ENV}" \
  -- python3 -m openrlhf_ada.cli.train_ppo_ray "${ARGS[@]}"
