"""The demo's figure (`make demo`'s demo.png), read from the metrics.jsonl its run wrote."""

from __future__ import annotations


def plot_demo(metrics_path: str, png: str, title: str) -> None:
    """The demo's figure from its metrics.jsonl, four panels: held-out accuracy (hidden without evaluations), then
    per training step the mean reward and the pass rate of the generated samples and the sampling efficiency eta
    (with Reinforce-Ada's first-round signal share and the share of trained groups with signal beside it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from openrlhf_ada.trainer.heldout import plot_heldout
    from openrlhf_ada.trainer.metrics_log import read_metrics

    rows = read_metrics(metrics_path)
    trained = [r for r in rows if r.get("reward_mean") is not None]  # the step-0 row holds only the evaluation
    steps = [r["step"] for r in trained]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    if not plot_heldout(axes[0], rows, label="greedy accuracy on held-out problems"):
        axes[0].set_visible(False)
    for ax, key, label in zip(axes[1:], ("reward_mean", "pass_rate", "eta"),
                              ("mean reward of generated samples", "pass rate of generated samples",
                               "sampling efficiency eta")):
        ax.plot(steps, [r.get(key) for r in trained], marker="o", markersize=3, label=label)
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.set_title(label)
        ax.grid(alpha=0.3)
    if trained and "ada/first_round_signal_share" in trained[0]:
        axes[3].plot(steps, [r.get("ada/first_round_signal_share") for r in trained], linestyle="--",
                     label="share of prompts whose first round had signal (plain GRPO)")
        axes[3].plot(steps, [1 - r.get("zero_adv_group_share") for r in trained], linestyle=":",
                     label="share of trained groups with signal")
        axes[3].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
