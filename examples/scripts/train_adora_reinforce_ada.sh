#!/usr/bin/env bash
# Reinforce-Ada (balance) + ADORA on Knights-and-Knaves logic puzzles, OpenRLHF 0.11.2.
#
# What it trains
#   MODEL (default Qwen/Qwen2.5-7B-Instruct-1M, same model and data as the two single-method scripts) with
#   both methods at once:
#   Reinforce-Ada, exactly as train_reinforce_ada.sh: --algo.advantage.estimator dr_grpo, --ada.baseline pool,
#   rounds of 8 samples (--ada.round_size 8), at most 4 rounds, exit when the pool holds >= 2 correct and >= 2
#   wrong answers (--ada.mode balance, correct = score > 0.5), 4 trained samples per prompt, no KL
#   (--algo.kl.init_coef 0), lr 1e-6, temperature 1.0, 128 prompts per step, up to 4096 generated tokens.
#   ADORA on the 4 kept samples of each prompt: the group's final (pool-baseline) advantages are multiplied by
#   1.0 when its longest correct answer is longer than its average non-truncated wrong answer, else by 0.1
#   (variant llm, lam 0.1, boost 1.0, threshold 0.5). Reinforce-Ada's balanced groups almost always hold
#   both classes, so ADORA's length test has something to compare in nearly every group.
# Where, reward, data
#   common.sh: one node of NUM_GPUS GPUs shared by actor and vLLM, ZeRO-3; the Knights-and-Knaves DATA and
#   REWARD_FILE; MODEL, DATA, REWARD_FILE, NUM_GPUS, NUM_NODES, SAVE_PATH, ... from the environment.
#
# Usage: start Ray first (`ray start --head --num-gpus 8`), then
#   bash examples/scripts/train_adora_reinforce_ada.sh [extra launcher flags]
set -euo pipefail

RUN_NAME="${RUN_NAME:-adora_reinforce_ada_kk}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cluster_args --ds.packing_samples
data_args 4608
reinforce_ada_balance_args
adora_args llm
output_args 20
submit "$@"
