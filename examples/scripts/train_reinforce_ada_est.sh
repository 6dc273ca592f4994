#!/usr/bin/env bash
# Reinforce-Ada-Est (the paper's v3, arXiv 2510.04996v3) on Knights-and-Knaves logic puzzles, OpenRLHF 0.11.2.
#
# What it trains
#   MODEL (default Qwen/Qwen2.5-7B-Instruct-1M, the model and data of the other scripts, so the runs compare)
#   with the paper's Est settings mapped onto OpenRLHF:
#   --algo.advantage.estimator dr_grpo with --ada.strategy est: each prompt's advantage is
#   (r - r_bar) x (1/sqrt(p) + 0.01), r_bar and p over ALL of the prompt's samples this step (capped at 10);
#   no KL at all (--algo.kl.init_coef 0: no reference model is started), lr 1e-6, temperature 1.0, up to 4096
#   generated tokens.
#   This is the paper's combination (--ada.est_preset paper: its Est advantage is dr_grpo's r - r_bar times
#   1/sqrt(p), so the estimator is dr_grpo, not group_norm, whose division by the group's std would compound the
#   weight). The authors' own code is --ada.est_preset authors (docs/algorithms.md).
#   Allocation: one generation pass per step. Each of the 128 prompts gets a sample count proportional to
#   1/sqrt(p_hat) + 0.01 within [2, 32], where p_hat is its pass rate estimated from its earlier epochs
#   (discounted counts, decay 0.9, Beta(1, 1) prior: the project's defaults; an unseen prompt gets 1/2); the
#   counts add up to exactly 8 per prompt on average (--rollout.n_samples_per_prompt 8, the paper's budget, "most
#   directly comparable to GRPO-n8"), and every sample is trained, in groups of varying size. The estimate is
#   saved in the checkpoints. Correct = score > 0.7 (the Reinforce-Ada authors' threshold).
#   One optimizer step per rollout (train batch = 128 x 8).
#   The paper trained on math prompts: for that, point DATA at a math prompt set and REWARD_FILE at a
#   math-verify reward file.
# Where
#   One node, NUM_GPUS GPUs shared by actor and vLLM (--train.colocate_all, vLLM and DeepSpeed sleep between
#   phases), DeepSpeed ZeRO-3, bf16, one vLLM engine per VLLM_TP GPUs.
# Reward
#   REWARD_FILE: a Python file with reward_func(queries, prompts, labels) -> {"rewards", "scores", "extra_logs"};
#   it runs inside every vLLM engine. Relative paths are resolved in the uploaded working_dir (this repository).
# Data
#   DATA: a JSON/JSONL file or HF dataset with the puzzle under INPUT_KEY and its solution under LABEL_KEY
#   (the fields reasoning-gym's knights_knaves generator writes: question / answer).
#
# Usage: start Ray first (`ray start --head --num-gpus 8`), then
#   bash examples/scripts/train_reinforce_ada_est.sh [extra launcher flags, e.g. --ada.est_max 64]
# Every variable below can be set from the environment (MODEL=... NUM_GPUS=4 bash ...).
# The flags are checked against the real 0.11.2 parser by tests/test_scripts_and_docker.py.
set -euo pipefail

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
RUN_NAME="${RUN_NAME:-reinforce_ada_est_kk}"
SAVE_PATH="${SAVE_PATH:-${REPO_DIR}/runs/${RUN_NAME}}"   # on a shared file system for more than one node
RAY_ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"

# Colocated vLLM needs exactly one engine GPU per actor GPU (upstream's train() asserts it).
VLLM_ENGINES=$((NUM_NODES * NUM_GPUS / VLLM_TP))

CLUSTER_ARGS=(
  --actor.num_nodes "${NUM_NODES}"
  --actor.num_gpus_per_node "${NUM_GPUS}"
  --ref.num_nodes "${NUM_NODES}"              # used only if KL is switched back on
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
  --ds.packing_samples
  --actor.gradient_checkpointing_enable
)

DATA_ARGS=(
  --actor.model_name_or_path "${MODEL}"
  --data.prompt_dataset "${DATA}"
  --data.input_key "${INPUT_KEY}"
  --data.label_key "${LABEL_KEY}"
  --data.apply_chat_template
  --data.max_len 4608
  --reward.remote_url "${REWARD_FILE}"
)

ROLLOUT_ARGS=(
  --rollout.batch_size 128
  --rollout.n_samples_per_prompt 8
  --rollout.micro_batch_size 16
  --rollout.max_new_tokens 4096
  --rollout.temperature 1.0
  --train.batch_size 1024
  --train.micro_batch_size 4
  --train.max_epochs 1
  --train.num_episodes 3
  --train.seed 42
)

ALGO_ARGS=(
  --algo.advantage.estimator dr_grpo
  --algo.kl.init_coef 0
  --actor.adam.lr 1e-6
)

ADA_ARGS=(
  --ada.enable
  --ada.strategy est
  --ada.est_preset paper
  --ada.est_allocation inv_sqrt
  --ada.est_min 2
  --ada.est_max 32
  --ada.est_decay 0.9
  --ada.est_alpha 1.0
  --ada.est_beta 1.0
  --ada.est_eps 0.01
  --ada.prompt_weight inv_sqrt_pass_rate
  --ada.positive_threshold 0.7
)

OUTPUT_ARGS=(
  --ckpt.output_dir "${SAVE_PATH}"
  --ckpt.path "${SAVE_PATH}/ckpt"
  --ckpt.save_hf
  --ckpt.save_steps 20
  --ckpt.max_num 3
  --logger.logging_steps 1
)

ARGS=("${CLUSTER_ARGS[@]}" "${DATA_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${ALGO_ARGS[@]}" "${ADA_ARGS[@]}"
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
