"""The CPU demo's task: short arithmetic from reasoning-gym, scored by ``openrlhf_ada/rewards/gym.py``.

Default: reasoning-gym's ``chain_sum`` with two terms of 1 or 2 digits (each item draws its digit count; ``+`` or
``-``), asked as ``"What is 43 - 76? Answer with just the number."``. Measured with SmolLM2-135M-Instruct (the fp32
checkpoint of :mod:`openrlhf_ada.models.smollm2`) on vLLM CPU, 32 prompts, max 64 new tokens, the last number of the
response scored by ``chain_sum``'s own scorer: 7.8 % of 256 samples at temperature 1.0 (19 of 32 prompts had no
correct sample out of 8), 25 % greedy. With ``max_digits=1`` (only 200 distinct problems): 19.5 % sampled, 53 %
greedy. Rambling answers often end in another number, so the reward rises as the model learns to answer briefly.

Rows are OpenRLHF 0.11.2 prompt-dataset jsonl (``load_dataset("json")``), the same fields as
:mod:`openrlhf_ada.cli.prepare_data`:

``input``
    the user message (a plain string; use ``--data.apply_chat_template`` so it becomes the user turn);
``label``
    a JSON object in a string: ``{"task": "reasoning_gym", "dataset": "chain_sum", "entry": {...}}`` where ``entry``
    is reasoning-gym's generated item (``question``, ``answer``, ``metadata``), what its ``score_answer`` needs;
``datasource``
    the reasoning-gym dataset name, or with ``datasource="difficulty"`` the dataset and the item's difficulty from
    its metadata (``chain_sum_3terms_2digits``: number of terms and digits per term), so that upstream's eval metrics
    (per ``datasource``) give the accuracy per difficulty.

Train with ``--data.prompt_dataset FILE --data.input_key input --data.label_key label --data.apply_chat_template
--reward.remote_url openrlhf_ada/rewards/gym.py``. The same arguments write a byte-identical file; rows are distinct
(by ``input``), and an eval file written in the same call shares no row with the training file.
``python -m openrlhf_ada.data.demo_task OUT --size N [--seed S] [--eval-out EVAL --eval-size M]`` does the same.
:func:`write_heldout_dataset` writes an eval file on its own (another seed) that excludes a given training file's
prompts and checks that none is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

INPUT_KEY, LABEL_KEY, DATASOURCE_KEY = "input", "label", "datasource"
LABEL_TASK = "reasoning_gym"
DEFAULT_DATASET = "chain_sum"
#: reasoning-gym config per dataset for the demo (overridable by keyword arguments).
DEFAULT_CONFIGS: dict[str, dict[str, Any]] = {
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
    "basic_arithmetic": {
        "min_terms": 2,
        "max_terms": 2,
        "min_digits": 1,
        "max_digits": 1,
        "allow_parentheses": False,
        "allow_negation": False,
    },
    "leg_counting": {"min_animals": 1, "max_animals": 1, "min_instances": 1, "max_instances": 10},
}
INSTRUCTION = "Answer with just the number."
#: Prompt per dataset; ``{question}`` is reasoning-gym's question, ``{expression}`` its ``metadata["expression"]``.
#: chain_sum's expressions use only ``+``/``-`` (basic_arithmetic's ``/`` means floor division, so it keeps its
#: own question text).
PROMPT_TEMPLATES: dict[str, str] = {"chain_sum": "What is {expression}? " + INSTRUCTION}
DEFAULT_TEMPLATE = "{question}\n" + INSTRUCTION


def _rg_seed(seed: int) -> int:
    """reasoning-gym seeds item ``i`` with ``seed + i``: spread the user's seeds so seeds 0 and 1 do not overlap."""
    return (int(seed) * 1_000_003 + 7_919) % (2**31)


def demo_prompt(entry: dict, dataset: str = DEFAULT_DATASET, template: str | None = None) -> str:
    """The user message for a reasoning-gym entry."""
    template = template or PROMPT_TEMPLATES.get(dataset, DEFAULT_TEMPLATE)
    metadata = entry.get("metadata") or {}
    return template.format(question=str(entry["question"]).strip(), expression=metadata.get("expression", ""))


def demo_label(entry: dict, dataset: str = DEFAULT_DATASET) -> str:
    """The label ``rewards/gym.py`` reads: the dataset name and the entry (question, answer, metadata) as JSON."""
    payload = {
        "task": LABEL_TASK,
        "dataset": dataset,
        "entry": {"question": entry["question"], "answer": str(entry["answer"]), "metadata": entry.get("metadata", {})},
    }
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


def difficulty_source(entry: dict, dataset: str = DEFAULT_DATASET) -> str:
    """``chain_sum_2terms_1digit``: the dataset and the item's difficulty (chain_sum / basic_arithmetic metadata:
    ``num_terms``, ``num_digits``); the dataset name alone when the metadata has neither."""
    metadata = entry.get("metadata") or {}
    parts = [dataset]
    for key, unit in (("num_terms", "term"), ("num_digits", "digit")):
        if key in metadata:
            value = int(metadata[key])
            parts.append(f"{value}{unit}{'s' if value != 1 else ''}")
    return "_".join(parts)


def demo_records(
    size: int,
    seed: int = 0,
    *,
    dataset: str = DEFAULT_DATASET,
    template: str | None = None,
    exclude: set[str] | frozenset[str] = frozenset(),
    datasource: str = "dataset",
    **config: Any,
) -> list[dict]:
    """``size`` distinct rows (by ``input``, none in ``exclude``) from reasoning-gym's ``dataset``.

    ``config`` overrides :data:`DEFAULT_CONFIGS` (e.g. ``max_digits=1``); ``datasource``: ``"dataset"`` (the
    dataset name) or ``"difficulty"`` (:func:`difficulty_source`). Raises ValueError when the task cannot produce
    that many distinct prompts.
    """
    import reasoning_gym

    if datasource not in ("dataset", "difficulty"):
        raise ValueError(f"datasource must be 'dataset' or 'difficulty', got {datasource!r}")
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    cfg = {**DEFAULT_CONFIGS.get(dataset, {}), **config}
    budget = 50 * size + 1_000  # draws before giving up (a small task may have fewer distinct items)
    source = reasoning_gym.create_dataset(dataset, size=budget, seed=_rg_seed(seed), **cfg)
    records: list[dict] = []
    seen = set(exclude)
    for idx in range(budget):
        if len(records) >= size:
            break
        entry = source[idx]
        prompt = demo_prompt(entry, dataset, template)
        if prompt in seen:
            continue
        seen.add(prompt)
        source_name = difficulty_source(entry, dataset) if datasource == "difficulty" else dataset
        records.append({INPUT_KEY: prompt, LABEL_KEY: demo_label(entry, dataset), DATASOURCE_KEY: source_name})
    if len(records) < size:
        raise ValueError(
            f"{dataset} with {cfg} gave only {len(records)} distinct prompts in {budget} draws, {size} requested"
        )
    return records


def _write_jsonl(records: list[dict], path: str | os.PathLike) -> None:
    path = Path(path)
    if path.parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")


def write_demo_dataset(
    path: str | os.PathLike,
    size: int,
    seed: int = 0,
    *,
    eval_path: str | os.PathLike | None = None,
    eval_size: int = 0,
    dataset: str = DEFAULT_DATASET,
    template: str | None = None,
    datasource: str = "dataset",
    **config: Any,
) -> str:
    """Write ``size`` training rows to ``path`` (jsonl) and, if ``eval_path`` is given, ``eval_size`` more distinct
    rows there. Returns ``str(path)``. See the module docstring for the fields and the default task."""
    train = demo_records(size, seed, dataset=dataset, template=template, datasource=datasource, **config)
    if eval_path is not None:
        taken = {r[INPUT_KEY] for r in train}
        evals = demo_records(eval_size, seed + 1, dataset=dataset, template=template, exclude=taken,
                             datasource=datasource, **config)
        _write_jsonl(evals, eval_path)
    _write_jsonl(train, path)
    return str(path)


def read_inputs(path: str | os.PathLike) -> list[str]:
    """The ``input`` of every row of a jsonl file written here."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)[INPUT_KEY] for line in f if line.strip()]


def write_heldout_dataset(
    path: str | os.PathLike,
    train_path: str | os.PathLike,
    size: int,
    seed: int,
    *,
    dataset: str = DEFAULT_DATASET,
    template: str | None = None,
    datasource: str = "dataset",
    **config: Any,
) -> str:
    """Write ``size`` held-out rows to ``path``: drawn with ``seed`` (use another seed than the training file's),
    none of them a prompt of the training file ``train_path``. The written file is read back and checked: distinct
    prompts, none shared with the training file (ValueError otherwise). Returns ``str(path)``."""
    train = set(read_inputs(train_path))
    records = demo_records(size, seed, dataset=dataset, template=template, exclude=train, datasource=datasource,
                           **config)
    _write_jsonl(records, path)
    heldout = read_inputs(path)
    shared = train.intersection(heldout)
    if shared or len(set(heldout)) != len(heldout) or len(heldout) != size:
        raise ValueError(f"{path}: {len(heldout)} rows, {len(set(heldout))} distinct, {len(shared)} shared with "
                         f"{train_path} (expected {size} distinct, none shared)")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m openrlhf_ada.data.demo_task", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="training jsonl to write")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-out", default=None)
    parser.add_argument("--eval-size", type=int, default=0)
    parser.add_argument("--dataset", default=DEFAULT_DATASET, help="reasoning-gym dataset (default: %(default)s)")
    parser.add_argument("--max-digits", type=int, default=None, help="chain_sum / basic_arithmetic: digits per term")
    args = parser.parse_args(argv)
    config = {} if args.max_digits is None else {"max_digits": args.max_digits}
    try:
        write_demo_dataset(args.out, args.size, args.seed, eval_path=args.eval_out, eval_size=args.eval_size,
                           dataset=args.dataset, **config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.size} rows to {args.out}" + (f" and {args.eval_size} to {args.eval_out}" if args.eval_out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
