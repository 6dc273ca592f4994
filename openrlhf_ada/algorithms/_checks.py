"""Input checks shared by the algorithm modules: one place that turns bad input into a ValueError that names the
parameter, the value given and what is accepted (the project's rule for bad input)."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import torch


def check_choice(name: str, value, choices: Iterable) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; accepted values: {', '.join(map(repr, choices))}")


def check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is invalid; accepted values: integers >= {minimum}")


def check_finite(name: str, value, minimum: Optional[float] = None) -> None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is invalid; accepted values: finite numbers") from None
    if x != x or x in (float("inf"), float("-inf")) or (minimum is not None and x < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name}={value!r} is invalid; accepted values: finite numbers{bound}")


def as_matrix(name: str, value, dtype: torch.dtype, shape: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Turn a tensor or nested list into a 2-D tensor [P, n] (P >= 1, n >= 1), checking `shape` when given."""
    try:
        t = torch.as_tensor(value).detach().cpu()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a [num_prompts, n] tensor or nested list; got {type(value).__name__}: {e}") from None
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"{name} must have shape [num_prompts, n] with both >= 1; got shape {list(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {list(t.shape)}; accepted: {list(shape)} (the shape of scores)")
    return t.to(dtype)
