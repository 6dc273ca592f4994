#!/usr/bin/env bash
# Reinforce-Ada (balance) on Knights-and-Knaves logic puzzles, OpenRLHF 0.11.2.
#
# What it trains
#   MODEL (default Qwen/Qwen2.5-7B-Instruct-1M, the same model and data as train_adora_grpo.sh, so the runs
#   compare) with the Reinforce-Ada authors' settings mapped onto OpenRLHF:
#   --algo.advantage.estimator dr_grpo with --ada.baseline pool (advantage = reward - mean reward of ALL samples
#   drawn for the prompt this step; no std normalisation), no KL at all (--algo.kl.init_coef 0: no reference
#   model is even started), lr 1e-6, temperature 1.0, up to 4096 generated tokens.
#   Adaptive sampling: each of the 128 prompts of a step is sampled in rounds of 8 (--ada.round_size 8), at most
#   4 rounds (--ada.max_rounds 4), until its pool holds >= 2 correct and >= 2 wrong answers (--ada.mode balance,
#   correct = score > 0.5); the 4 trained samples per prompt (--rollout.n_samples_per_prompt 4) are 2 correct +
#   2 wrong where possible, the earliest generated of each class (--ada.selection first); prompts still
#   unresolved after 4 rounds are kept (--ada.unresolved keep, as the authors' code does).
#   One optimizer step per rollout (train batch = 128 x 4).
#   The authors trained on math prompts: for that, point DATA at a math prompt set and REWARD_FILE at a
#   math-verify reward file.
# Where, reward, data
#   common.sh: one node of NUM_GPUS GPUs shared by actor and vLLM, ZeRO-3; the Knights-and-Knaves DATA and
#   REWARD_FILE; MODEL, DATA, REWARD_FILE, NUM_GPUS, NUM_NODES, SAVE_PATH, ... from the environment.
#
# Usage: start Ray first (`ray start --head --num-gpus 8`), then
#   bash examples/scripts/train_reinforce_ada.sh [extra launcher flags, e.g. --ada.max_rounds 6]
set -euo pipefail

RUN_NAME="${RUN_NAME:-reinforce_ada_kk}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cluster_args --ds.packing_samples
data_args 4608
reinforce_ada_balance_args
output_args 20
submit "$@"
