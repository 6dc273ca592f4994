"""Held-out evaluation for the single-machine trainer: the eval prompt loader, the metrics and their plot.

Generation is upstream's (`SamplesGenerator.generate_eval_samples`, through `RoundsSamplesGenerator`, which leaves out
the prompts whose reward failed); the per-source metrics are upstream's `compute_eval_metrics` (pass1 = mean reward
per prompt, pass{n} = best reward per prompt, response length, truncation rate, per `datasource` of the eval file).
Added here, over all held-out problems, with a sample counted correct when its score (its reward when the reward file
returns no scores) is above the positive threshold (`--ada.positive_threshold`, the same rule as the training
metric `pass_rate`):

    eval/accuracy          share of held-out samples that are correct; with greedy decoding (`--eval.temperature 0`,
                           one sample per problem) the share of problems answered correctly
    eval/pass_at_{n}       (n > 1 samples per problem) share of problems with at least one correct sample
    eval/all_correct_share (n > 1) share of problems whose n samples are all correct; with the training's n and
                           temperature, 1 - pass_at_{n} and this are the shares of all-wrong and all-right groups
                           (no signal for a group baseline)
    eval/problems          problems scored (the eval file's rows minus those left out for a failed reward)
    eval/failed_prompts, eval/failed_samples   left out because a reward failed
    eval/temperature, eval/samples_per_problem  how the evaluation sampled
    timing/eval            seconds the evaluation took

and upstream's keys without their `eval_` prefix under `eval/`: `eval/<datasource>_pass1`, `eval/<datasource>_pass{n}`,
`eval/<datasource>_response_length_mean`, `eval/<datasource>_truncated_rate`, `eval/response_length_mean`,
`eval/truncated_rate`, `eval/num_samples` (upstream's cluster trainer logs the same values to wandb as
`eval/eval_<...>`).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

EVAL_PREFIX = "eval/"
ACCURACY = "eval/accuracy"


class EvalLoader:
    """The eval prompts in file order, one per batch, as upstream's eval dataloader yields them
    ((datasources, prompts, labels, images) of one item); iterable any number of times."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __iter__(self):
        for i in range(len(self.dataset)):
            yield self.dataset.collate_fn([self.dataset[i]])


def _first(value) -> Optional[float]:
    if value is None:
        return None
    return float(value.reshape(-1)[0]) if hasattr(value, "reshape") else float(value)


def heldout_metrics(samples: Sequence, n: int, threshold: float, eval_loader, *, temperature: float,
                    failures: Optional[Dict[str, float]] = None) -> Dict[str, float]:
    """The eval metrics of one evaluation (see the module docstring). `samples`: what generate_eval_samples
    returned, each problem's n samples together; `eval_loader`: the loader the samples came from (for the
    datasources)."""
    from openrlhf.trainer.ppo_trainer import compute_eval_metrics

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(samples) % n:
        raise ValueError(f"{len(samples)} eval samples are not whole groups of {n}")
    out: Dict[str, float] = {}
    if samples:
        for key, value in compute_eval_metrics(eval_loader, list(samples), n).items():
            out[EVAL_PREFIX + (key[len("eval_"):] if key.startswith("eval_") else key)] = float(value)
    correct = []
    for s in samples:
        score = _first(s.scores) if getattr(s, "scores", None) is not None else _first(s.rewards)
        correct.append(score is not None and score > threshold)
    problems = len(samples) // n
    out[ACCURACY] = sum(correct) / len(correct) if correct else math.nan
    if n > 1:
        solved = [any(correct[i * n : (i + 1) * n]) for i in range(problems)]
        out[f"eval/pass_at_{n}"] = sum(solved) / problems if problems else math.nan
        every = [all(correct[i * n : (i + 1) * n]) for i in range(problems)]
        out["eval/all_correct_share"] = sum(every) / problems if problems else math.nan
    out["eval/problems"] = float(problems)
    out["eval/temperature"] = float(temperature)
    out["eval/samples_per_problem"] = float(n)
    for key, value in (failures or {}).items():
        out[EVAL_PREFIX + (key[len("eval_"):] if key.startswith("eval_") else key)] = float(value)
    return out


def eval_rows(rows: Sequence[dict]) -> List[dict]:
    """The metrics rows that carry a held-out evaluation."""
    return [r for r in rows if r.get(ACCURACY) is not None]


def describe(metrics: Dict[str, float]) -> str:
    """One line: accuracy, problems, how sampled."""
    n = int(metrics.get("eval/samples_per_problem", 1))
    temperature = metrics.get("eval/temperature", math.nan)
    how = "greedy" if temperature == 0 else f"temperature {temperature:g}, {n} samples per problem"
    text = f"held-out accuracy {metrics[ACCURACY]:.3f} on {int(metrics.get('eval/problems', 0))} problems ({how})"
    if n > 1 and f"eval/pass_at_{n}" in metrics:
        text += f", pass@{n} {metrics[f'eval/pass_at_{n}']:.3f}"
    return text


def plot_heldout(ax, rows: Sequence[dict], label: Optional[str] = None) -> bool:
    """Held-out accuracy against training step on `ax` (nothing when no row has an evaluation); returns whether it
    drew."""
    points = eval_rows(rows)
    if not points:
        return False
    steps = [r["step"] for r in points]
    ax.plot(steps, [r[ACCURACY] for r in points], marker="o", label=label or "held-out accuracy")
    for s, r in zip(steps, points):
        ax.annotate(f"{r[ACCURACY]:.2f}", (s, r[ACCURACY]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7)
    n = int(points[-1].get("eval/samples_per_problem", 1))
    temperature = points[-1].get("eval/temperature", math.nan)
    how = "greedy" if temperature == 0 else f"T={temperature:g}, {n}/problem"
    ax.set_title(f"held-out accuracy ({int(points[-1].get('eval/problems', 0))} problems, {how})")
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return True


def write_plot(rows: Sequence[dict], png: str, title: str) -> bool:
    """A PNG of held-out accuracy against step; False (no file) when the rows hold no evaluation."""
    if not eval_rows(rows):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    plot_heldout(ax, rows)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True
