"""A toy reward for smoke runs with a tiny random model: ``--reward.remote_url openrlhf_ada/rewards/toy.py``.

Reward = score = 1 when a digit (0-9) appears among the first 4 characters of the response (the text after the
prompt), else 0. The label is ignored. A tiny random Llama (``openrlhf_ada.models.tiny_llama``, byte-level vocabulary)
gets it right about 1 time in 8 at first: prompt groups of 4 often hold both outcomes, so every estimator has a
signal to learn from, and a few steps with a large learning rate raise it. Used by ``make cluster-demo`` and the
pipeline tests; it says nothing about reasoning.
"""

import torch

WINDOW = 4


def reward_func(queries, prompts, labels):
    rewards = [1.0 if any(c.isdigit() for c in q[len(p):][:WINDOW]) else 0.0 for q, p in zip(queries, prompts)]
    t = torch.tensor(rewards)
    return {"rewards": t, "scores": t, "extra_logs": {"toy_digit_found": t.clone()}}
