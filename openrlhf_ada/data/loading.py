"""Prompt datasets as the single-machine trainer loads them: OpenRLHF's PromptDataset after the project's checks
(openrlhf_ada.data.checks), prompts over the prompt budget skipped; whether held-out prompts also train; the
held-out problems' digest (two runs with the same digest were evaluated on the same problems).
"""

from __future__ import annotations

import json
import os
from typing import Optional


def load_prompts(args, strategy, tokenizer, *, evaluation: bool = False):
    """OpenRLHF's PromptDataset, after the checks of openrlhf_ada.data.checks (reported before training starts);
    prompts longer than the prompt budget are skipped. `evaluation`: the --eval.dataset (upstream's eval loading:
    --eval.split, no sampling probabilities, at most --data.max_samples rows)."""
    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets

    from openrlhf_ada.data.checks import DataCheckError, check_prompt_file, too_long_prompts

    flag = "--eval.dataset" if evaluation else "--data.prompt_dataset"
    files = args.eval.dataset if evaluation else args.data.prompt_dataset
    reports = [check_prompt_file(path, args.data.input_key, args.data.label_key,
                                 chat_template=bool(args.data.apply_chat_template))
               for path in files.split(",")
               if os.path.isfile(path) and path.endswith((".json", ".jsonl"))]
    if evaluation:
        data = blending_datasets(files, None, strategy, dataset_split=args.eval.split)
    else:
        data = blending_datasets(files, args.data.prompt_probs, strategy, args.train.seed,
                                 max_count=args.data.max_samples, dataset_split=args.data.prompt_split)
    data = data.select(range(min(args.data.max_samples, len(data))))
    if len(data) == 0:
        raise DataCheckError(f"{flag} {files!r} holds no rows")
    dataset = PromptDataset(data, tokenizer, strategy, input_template=args.data.input_template)
    budget = args.data.max_len - args.rollout.max_new_tokens
    skipped = set(too_long_prompts(dataset.prompts, getattr(tokenizer, "tokenizer", tokenizer), budget))
    if skipped:
        for name in ("prompts", "labels", "images", "datasources"):
            setattr(dataset, name, [x for i, x in enumerate(getattr(dataset, name)) if i not in skipped])
    for report in reports:
        print(f"[train_local] data check{' (eval)' if evaluation else ''}: {report.summary()}")
    print(f"[train_local] {len(dataset)} {'eval ' if evaluation else ''}prompts; {len(skipped)} skipped as longer "
          f"than {budget} tokens (--data.max_len {args.data.max_len} - --rollout.max_new_tokens "
          f"{args.rollout.max_new_tokens})")
    if len(dataset) == 0:
        raise DataCheckError(f"every prompt of {flag} is longer than {budget} tokens (--data.max_len "
                             f"{args.data.max_len} - --rollout.max_new_tokens {args.rollout.max_new_tokens}): raise "
                             "--data.max_len")
    return dataset


def overlap_warning(train, evaluation) -> Optional[str]:
    """A warning when held-out prompts also occur in the training data (compared after templating)."""
    shared = set(train.prompts) & set(evaluation.prompts)
    if not shared:
        return None
    count = sum(p in shared for p in evaluation.prompts)
    return (f"{count} of the {len(evaluation.prompts)} eval prompts (--eval.dataset) are also training prompts: "
            "the evaluation is not held out for them")


def problems_digest(dataset) -> str:
    """sha256 over the held-out problems as evaluated (prompts after templating, labels, in order): two runs with
    the same digest were evaluated on the same problems."""
    import hashlib

    return hashlib.sha256(json.dumps([list(dataset.prompts), list(dataset.labels)], default=str).encode()).hexdigest()
