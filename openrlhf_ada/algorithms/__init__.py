"""The math of the project, pure torch/python (no Ray, no vLLM): ADORA weights, Reinforce-Ada's per-prompt pool,
exit rule and group selection (with stopping inside a round), the per-prompt history across epochs, and the
pool/group baselines, and the undiscounted returns. Every other layer calls these. The rules users change (exit rules, ADORA weight rules) are
registered functions (registry.py)."""

from openrlhf_ada.algorithms.adora import AdoraConfig, adora_weights, load_weight_func, register_adora_rule
from openrlhf_ada.algorithms.baselines import group_baseline, group_index
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory, prompt_key
from openrlhf_ada.algorithms.reinforce_ada import (
    Est,
    FixedN,
    PromptPool,
    Seq,
    exit_reached,
    register_exit_rule,
    select_group,
)
from openrlhf_ada.algorithms.returns import undiscounted_returns
from openrlhf_ada.algorithms.simulation import simulate

__all__ = [
    "AdoraConfig",
    "Est",
    "FixedN",
    "HistoryConfig",
    "PromptHistory",
    "PromptPool",
    "Seq",
    "adora_weights",
    "exit_reached",
    "group_baseline",
    "group_index",
    "load_weight_func",
    "prompt_key",
    "register_adora_rule",
    "register_exit_rule",
    "select_group",
    "simulate",
    "undiscounted_returns",
]
