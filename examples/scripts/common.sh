#!/usr/bin/env bash
# What the launch scripts train_*.sh share. Each sets RUN_NAME's default (and, for a task other than
# Knights-and-Knaves, its MODEL / DATA / *_KEY / REWARD_FILE defaults), then sources this file from its own folder:
#   source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# It is not run on its own.
#
# Environment
#   Every variable below can be set from the environment (MODEL=... NUM_GPUS=4 bash examples/scripts/train_...sh).
#   The defaults are the Knights-and-Knaves task of ADORA's text experiments:
#   DATA: a JSON/JSONL file or HF dataset with the puzzle under INPUT_KEY and its solution under LABEL_KEY
#   (the fields reasoning-gym's knights_knaves generator writes: question / answer).
#   REWARD_FILE: a Python file with reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"};
#   it runs inside every vLLM engine. Relative paths are resolved in the uploaded working_dir (this repository).
# Where
#   NUM_NODES nodes (default 1) of NUM_GPUS GPUs (default 8) shared by the actor, the reference model when there
#   is KL, and vLLM (--train.colocate_all, vLLM and DeepSpeed sleep between phases), DeepSpeed ZeRO-3, bf16, one
#   vLLM engine per VLLM_TP GPUs.
# Building the launcher's arguments
#   Each function appends its flags to ARGS. A script calls them in this order, with its algorithm flags between
#   step_args and output_args, and ends with `submit "$@"` (its own extra arguments go last, to the launcher):
#   cluster_args MEMORY_FLAG        placement, colocation, DeepSpeed; MEMORY_FLAG is --ds.packing_samples, or
#                                   --ds.adam_offload where samples cannot be packed
#   data_args MAX_LEN [FLAG...]     model, prompts, reward; MAX_LEN: prompt plus generated tokens; the FLAGs
#                                   (e.g. image flags) go after the label key
#   step_args PROMPTS SAMPLES ROLLOUT_MICRO_BATCH TRAIN_BATCH EPISODES
#   grpo_k3_args LR, dr_grpo_args LR, adora_args VARIANT   algorithm flags that more than one script uses
#   reinforce_ada_balance_args      step_args and the algorithm flags of the Reinforce-Ada balance runs
#   output_args SAVE_STEPS          checkpoints and logging
#   submit [EXTRA...]               wandb flags when WANDB_TOKEN is set, EXTRA, then `ray job submit`
# The flags are checked against the real 0.11.2 parser by tests/test_scripts_and_docker.py, and each script's
# whole `ray job submit` command against a record by tests/test_script_argv.py.

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "$0 is sourced by the train_*.sh scripts, not run" >&2
  exit 1
fi
: "${RUN_NAME:?a train_*.sh script sets RUN_NAME before sourcing common.sh}"

REPO_DIR="${REPO_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
MODEL="${MODEL:-Qwen/Qwen2.5-7B-Instruct-1M}"
DATA="${DATA:-data/kk/train.jsonl}"
INPUT_KEY="${INPUT_KEY:-question}"
LABEL_KEY="${LABEL_KEY:-answer}"
REWARD_FILE="${REWARD_FILE:-openrlhf_ada/rewards/kk.py}"
NUM_NODES="${NUM_NODES:-1}"
NUM_GPUS="${NUM_GPUS:-8}"          # GPUs per node
VLLM_TP="${VLLM_TP:-1}"            # tensor parallel size of one vLLM engine
WANDB_TOKEN="${WANDB_TOKEN:-}"     # wandb logging only when set
WANDB_PROJECT="${WANDB_PROJECT:-openrlhf-ada}"
SAVE_PATH="${SAVE_PATH:-${REPO_DIR}/runs/${RUN_NAME}}"   # on a shared file system for more than one node
RAY_ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"

# Colocated vLLM needs exactly one engine GPU per actor GPU (upstream's train() asserts it).
VLLM_ENGINES=$((NUM_NODES * NUM_GPUS / VLLM_TP))

ARGS=()

cluster_args() {  # MEMORY_FLAG
  ARGS+=(
    --actor.num_nodes "${NUM_NODES}"
    --actor.num_gpus_per_node "${NUM_GPUS}"
    --ref.num_nodes "${NUM_NODES}"              # used only with KL
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
    "${1:?cluster_args MEMORY_FLAG}"
    --actor.gradient_checkpointing_enable
  )
}

data_args() {  # MAX_LEN [FLAG...]
  ARGS+=(
    --actor.model_name_or_path "${MODEL}"
    --data.prompt_dataset "${DATA}"
    --data.input_key "${INPUT_KEY}"
    --data.label_key "${LABEL_KEY}"
    "${@:2}"
    --data.apply_chat_template
    --data.max_len "${1:?data_args MAX_LEN [FLAG...]}"
    --reward.remote_url "${REWARD_FILE}"
  )
}

step_args() {  # PROMPTS SAMPLES ROLLOUT_MICRO_BATCH TRAIN_BATCH EPISODES
  [[ $# -eq 5 ]] || { echo "step_args PROMPTS SAMPLES ROLLOUT_MICRO_BATCH TRAIN_BATCH EPISODES" >&2; return 1; }
  ARGS+=(
    --rollout.batch_size "$1"
    --rollout.n_samples_per_prompt "$2"
    --rollout.micro_batch_size "$3"
    --rollout.max_new_tokens 4096
    --rollout.temperature 1.0
    --train.batch_size "$4"
    --train.micro_batch_size 4
    --train.max_epochs 1
    --train.num_episodes "$5"
    --train.seed 42
  )
}

# GRPO with KL to the reference model as a k3 loss, coefficient 1e-3 (ADORA's runs).
grpo_k3_args() {  # LR
  ARGS+=(
    --algo.advantage.estimator group_norm
    --algo.kl.use_loss
    --algo.kl.estimator k3
    --algo.kl.init_coef 1e-3
    --actor.adam.lr "${1:?grpo_k3_args LR}"
  )
}

# The Reinforce-Ada authors' objective: dr_grpo (no std normalisation), no KL (no reference model is started).
dr_grpo_args() {  # LR
  ARGS+=(
    --algo.advantage.estimator dr_grpo
    --algo.kl.init_coef 0
    --actor.adam.lr "${1:?dr_grpo_args LR}"
  )
}

# Reinforce-Ada balance as the authors ran it: 128 prompts a step, 4 trained samples each (one optimizer step of
# 128 x 4), dr_grpo at lr 1e-6, pool baseline, rounds of 8, at most 4 rounds.
reinforce_ada_balance_args() {
  step_args 128 4 16 512 3
  dr_grpo_args 1e-6
  ARGS+=(
    --ada.enable
    --ada.mode balance
    --ada.baseline pool
    --ada.round_size 8
    --ada.max_rounds 4
    --ada.positive_threshold 0.7
    --ada.unresolved keep
    --ada.selection first
  )
}

adora_args() {  # VARIANT: llm or vl
  ARGS+=(
    --adora.enable
    --adora.variant "${1:?adora_args VARIANT}"
    --adora.lam 0.1
    --adora.boost 1.0
    --adora.positive_threshold 0.5
  )
}

output_args() {  # SAVE_STEPS
  ARGS+=(
    --ckpt.output_dir "${SAVE_PATH}"
    --ckpt.path "${SAVE_PATH}/ckpt"
    --ckpt.save_hf
    --ckpt.save_steps "${1:?output_args SAVE_STEPS}"
    --ckpt.max_num 3
    --logger.logging_steps 1
  )
}

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

submit() {  # [EXTRA...]: the script's own arguments, passed on to the launcher
  if [[ -n "${WANDB_TOKEN}" ]]; then
    ARGS+=(--logger.wandb.key "${WANDB_TOKEN}" --logger.wandb.project "${WANDB_PROJECT}"
           --logger.wandb.run_name "${RUN_NAME}")
  fi
  ARGS+=("$@")
  ray job submit --address="${RAY_ADDRESS}" \
    --runtime-env-json="${RUNTIME_ENV}" \
    -- python3 -m openrlhf_ada.cli.train_ppo_ray "${ARGS[@]}"
}
