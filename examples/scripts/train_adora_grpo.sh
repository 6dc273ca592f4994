#!/usr/bin/env bash
# GRPO + ADORA on Knights-and-Knaves logic puzzles (the task of ADORA's text experiments), OpenRLHF 0.11.2.
#
# What it trains
#   MODEL (default Qwen/Qwen2.5-7B-Instruct-1M, the model of ADORA's text runs) with GRPO:
#   --algo.advantage.estimator group_norm (group mean/std baseline), 8 samples per prompt, 64 prompts per step,
#   one optimizer step per rollout (train batch = 64 x 8), KL to the reference model as a k3 loss with
#   coefficient 1e-3 (nothing in the reward), lr 4e-7, up to 4096 generated tokens.
#   ADORA on top: every prompt group's final advantages are multiplied by its weight: 1.0 (boost) when its
#   longest correct answer is longer than its average non-truncated wrong answer, else 0.1 (lam); variant llm
#   (no correct answer -> lam); a sample is correct when the verifier's score is > 0.5.
# Where, reward, data
#   common.sh: one node of NUM_GPUS GPUs shared by actor, reference and vLLM, ZeRO-3; the Knights-and-Knaves
#   DATA and REWARD_FILE; MODEL, DATA, REWARD_FILE, NUM_GPUS, NUM_NODES, SAVE_PATH, ... from the environment.
#
# Usage: start Ray first (`ray start --head --num-gpus 8`), then
#   bash examples/scripts/train_adora_grpo.sh [extra launcher flags, e.g. --adora.lam 0.2]
set -euo pipefail

RUN_NAME="${RUN_NAME:-adora_grpo_kk}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cluster_args --ds.packing_samples
data_args 4608
#         prompts  samples  rollout micro-batch  train batch  episodes
step_args 64       8        16                   512          3
grpo_k3_args 4e-7
adora_args llm
output_args 20
submit "$@"
