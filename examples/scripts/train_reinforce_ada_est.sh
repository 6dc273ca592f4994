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
# Where, reward, data
#   common.sh: one node of NUM_GPUS GPUs shared by actor and vLLM, ZeRO-3; the Knights-and-Knaves DATA and
#   REWARD_FILE; MODEL, DATA, REWARD_FILE, NUM_GPUS, NUM_NODES, SAVE_PATH, ... from the environment.
#
# Usage: start Ray first (`ray start --head --num-gpus 8`), then
#   bash examples/scripts/train_reinforce_ada_est.sh [extra launcher flags, e.g. --ada.est_max 64]
set -euo pipefail

RUN_NAME="${RUN_NAME:-reinforce_ada_est_kk}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cluster_args --ds.packing_samples
data_args 4608
#         prompts  samples  rollout micro-batch  train batch  episodes
step_args 128      8        16                   1024         3
dr_grpo_args 1e-6
ARGS+=(
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
output_args 20
submit "$@"
