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
# MODEL, DATA, REWARD_FILE and the keys below, NUM_GPUS, NUM_NODES, SAVE_PATH and the rest of common.sh's
# variables can be set from the environment (MODEL=... NUM_GPUS=4 bash ...).
set -euo pipefail

RUN_NAME="${RUN_NAME:-adora_vl_grpo_geo3k}"
MODEL="${MODEL:-Qwen/Qwen2.5-VL-7B-Instruct}"
DATA="${DATA:-data/geo3k/train.jsonl}"
INPUT_KEY="${INPUT_KEY:-input}"
LABEL_KEY="${LABEL_KEY:-label}"
IMAGE_KEY="${IMAGE_KEY:-images}"
REWARD_FILE="${REWARD_FILE:-openrlhf_ada/rewards/math.py}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cluster_args --ds.adam_offload  # not --ds.packing_samples: upstream refuses packing with images
data_args 8192 --data.image_key "${IMAGE_KEY}" --data.max_images_per_prompt 1
#         prompts  samples  rollout micro-batch  train batch  episodes
step_args 128      8        8                    128          15
grpo_k3_args 1e-6
ARGS+=(--actor.lr_warmup_ratio 0 --actor.adam.weight_decay 1e-2)
adora_args vl
output_args 50
submit "$@"
