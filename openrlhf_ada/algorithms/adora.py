"""ADORA: per-prompt advantage weights from each group's own samples.

A prompt group is *advantageous* when its longest correct answer is longer than its typical wrong answer
(maxPos > meanNeg, strict; truncated wrong answers say nothing about length and are left out of meanNeg).
Advantageous groups get weight `boost`, the others `lam`; the weight multiplies the group's FINAL advantages.
Two variants differ only in the degenerate groups:

    case                                   variant "llm" (default)   variant "vl"
    no positive sample                     lam                       boost
    positives, no usable negative          boost                     lam
    otherwise                              boost if maxPos > meanNeg else lam

The paper (arXiv 2602.10019) states the rule with two criteria per group, Length Advantage (maxPos > meanNeg, as
above) and Difficulty Advantage (the group's success rate <= tau), and weights by model kind:

    paper_llm   amplify (2.0) when both criteria hold, else 1
    paper_vl    attenuate (0.1) when the length criterion fails, else 1

with tau, amplify and attenuate as flags (`PaperParams`).

Each variant is one registered weight rule (`@register_adora_rule(name, help)`, see registry.py), which turns the
per-group facts of `group_stats` into one weight per group (a rule with a keyword `paper` also gets the
`PaperParams`). A sample is positive when score > positive_threshold.
Everything here is pure torch: no Ray, no vLLM.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch

from openrlhf_ada.algorithms._checks import as_matrix, check_choice, check_finite, check_int
from openrlhf_ada.algorithms.baselines import group_index, pad_groups
from openrlhf_ada.algorithms.registry import Registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdoraConfig:
    """ADORA settings, built once from the parsed flags (--adora.*)."""

    enable: bool = False
    variant: str = "llm"
    lam: float = 0.1
    boost: float = 1.0
    positive_threshold: float = 0.5
    start_step: int = 0
    end_step: int = -1
    weight_func: Optional[str] = None  # "path.py:function"; replaces the built-in rule
    tau: float = 0.5  # paper rules: the Difficulty Advantage's success-rate threshold
    amplify: float = 2.0  # paper_llm: weight of groups with both advantages
    attenuate: float = 0.1  # paper_vl: weight of groups without the length advantage

    def __post_init__(self):
        check_choice("adora.variant", self.variant, ADORA_RULES.names())
        check_finite("adora.lam", self.lam, minimum=0.0)
        check_finite("adora.boost", self.boost, minimum=0.0)
        check_finite("adora.positive_threshold", self.positive_threshold)
        _ = self.paper  # checks adora.tau, adora.amplify, adora.attenuate
        check_int("adora.start_step", self.start_step, 0)
        check_int("adora.end_step", self.end_step, -1)
        if self.end_step != -1 and self.end_step <= self.start_step:
            raise ValueError(
                f"adora.end_step={self.end_step} must be -1 (forever) or > adora.start_step={self.start_step}"
            )


    @property
    def paper(self) -> "PaperParams":
        return PaperParams(tau=self.tau, amplify=self.amplify, attenuate=self.attenuate)


@dataclass(frozen=True)
class PaperParams:
    """The paper rules' settings (--adora.tau, --adora.amplify, --adora.attenuate), with the paper's values."""

    tau: float = 0.5
    amplify: float = 2.0
    attenuate: float = 0.1

    def __post_init__(self):
        check_finite("adora.tau", self.tau, minimum=0.0)
        if float(self.tau) > 1.0:
            raise ValueError(f"adora.tau={self.tau!r} is invalid; accepted values: numbers in [0, 1] (a success rate)")
        check_finite("adora.amplify", self.amplify, minimum=0.0)
        check_finite("adora.attenuate", self.attenuate, minimum=0.0)


@dataclass(frozen=True)
class GroupStats:
    """Per-group facts that decide the ADORA weight (all tensors of shape [P])."""

    has_pos: torch.Tensor  # bool: at least one positive sample
    has_usable_neg: torch.Tensor  # bool: at least one negative sample that was not truncated
    max_pos: torch.Tensor  # float: longest positive sample (-inf without positives)
    mean_neg: torch.Tensor  # float: mean length of usable negatives (nan without them)
    advantageous: torch.Tensor  # bool: max_pos > mean_neg (False where either side is missing)
    pass_rate: Optional[torch.Tensor] = None  # float: share of positive samples (the paper's success rate)


def group_stats(scores, lengths, truncated=None, *, positive_threshold: float = AdoraConfig.positive_threshold,
                max_length=None, mask=None) -> GroupStats:
    """Classify each group of a [P, n] batch. See the module docstring for the rule. `mask` (bool [P, n]): the
    real samples of groups of varying size padded to n (`ragged_group_stats`); the others count nowhere."""
    check_finite("positive_threshold", positive_threshold)
    s = as_matrix("scores", scores, torch.float64)
    lens = as_matrix("lengths", lengths, torch.float64, s.shape)
    if truncated is not None:
        trunc = as_matrix("truncated", truncated, torch.bool, s.shape)
    elif max_length is not None:
        check_finite("max_length", max_length, minimum=1)
        trunc = lens >= float(max_length)
    else:
        trunc = torch.zeros_like(s, dtype=torch.bool)

    real = torch.ones_like(s, dtype=torch.bool) if mask is None else as_matrix("mask", mask, torch.bool, s.shape)
    pos = (s > positive_threshold) & real
    usable_neg = ~pos & ~trunc & real
    n_neg = usable_neg.sum(-1)
    max_pos = torch.where(pos, lens, torch.full_like(lens, -math.inf)).amax(-1)
    mean_neg = torch.where(n_neg > 0, (lens * usable_neg).sum(-1) / n_neg.clamp(min=1), torch.full_like(max_pos, math.nan))
    has_pos = pos.any(-1)
    has_usable_neg = n_neg > 0
    return GroupStats(has_pos, has_usable_neg, max_pos, mean_neg, has_pos & has_usable_neg & (max_pos > mean_neg),
                      pos.double().sum(-1) / real.sum(-1).clamp(min=1))


#: ADORA weight rules by name (`--adora.variant`): fn(stats: GroupStats, lam, boost) -> float32 weights [P].
ADORA_RULES = Registry("ADORA rule")
register_adora_rule = ADORA_RULES.register


def table_weights(stats: GroupStats, *, advantageous: float, other: float, no_pos: float, no_neg: float
                  ) -> torch.Tensor:
    """One float32 weight per group: `advantageous` or `other` by maxPos > meanNeg, then the two degenerate cases,
    a group without a positive (`no_pos`) and one with positives but no usable negative (`no_neg`)."""
    def full(value: float) -> torch.Tensor:
        return torch.full(stats.has_pos.shape, float(value), dtype=torch.float32)

    w = torch.where(stats.advantageous, full(advantageous), full(other))
    w = torch.where(stats.has_pos & ~stats.has_usable_neg, full(no_neg), w)
    return torch.where(~stats.has_pos, full(no_pos), w)


@register_adora_rule("llm", "text trainer: no positive -> lam")
def llm_rule(stats: GroupStats, lam: float, boost: float) -> torch.Tensor:
    """The authors' text trainer: a group without a correct answer is attenuated, an all-correct one is not."""
    return table_weights(stats, advantageous=boost, other=lam, no_pos=lam, no_neg=boost)


@register_adora_rule("vl", "vision trainer: no positive -> boost, no usable negative -> lam")
def vl_rule(stats: GroupStats, lam: float, boost: float) -> torch.Tensor:
    """The authors' vision-language trainer: the degenerate cases the other way round."""
    return table_weights(stats, advantageous=boost, other=lam, no_pos=boost, no_neg=lam)


@register_adora_rule("paper_llm", "the paper's text rule: amplify when maxPos > meanNeg and success rate <= tau")
def paper_llm_rule(stats: GroupStats, lam: float, boost: float, *, paper: PaperParams = PaperParams()
                   ) -> torch.Tensor:
    """The paper's rule for language models: a group with both the Length Advantage (maxPos > meanNeg) and the
    Difficulty Advantage (success rate <= tau) is amplified by `amplify`; every other group keeps weight 1."""
    both = stats.advantageous & (stats.pass_rate <= float(paper.tau))
    return torch.where(both, torch.tensor(float(paper.amplify)), torch.tensor(1.0)).float()


@register_adora_rule("paper_vl", "the paper's vision-language rule: attenuate when not maxPos > meanNeg")
def paper_vl_rule(stats: GroupStats, lam: float, boost: float, *, paper: PaperParams = PaperParams()
                  ) -> torch.Tensor:
    """The paper's rule for vision-language models: a group without the Length Advantage (no positive, no usable
    negative, or maxPos <= meanNeg) is attenuated by `attenuate`; the others keep weight 1. Difficulty is not used."""
    return torch.where(stats.advantageous, torch.tensor(1.0), torch.tensor(float(paper.attenuate))).float()


def _takes_paper(fn) -> bool:
    try:
        return "paper" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def weights_from_stats(stats: GroupStats, *, variant: str = AdoraConfig.variant, lam: float = AdoraConfig.lam,
                       boost: float = AdoraConfig.boost, paper: Optional[PaperParams] = None) -> torch.Tensor:
    """The weight rule `variant` (module docstring), one float32 weight per group; `paper`: the paper rules'
    settings (default: the paper's values)."""
    rule = ADORA_RULES.get(variant, "variant")
    check_finite("lam", lam, minimum=0.0)
    check_finite("boost", boost, minimum=0.0)
    extra = {"paper": paper or PaperParams()} if _takes_paper(rule) else {}
    w = rule(stats, float(lam), float(boost), **extra)
    if not isinstance(w, torch.Tensor) or tuple(w.shape) != tuple(stats.has_pos.shape):
        raise ValueError(f"ADORA rule {variant!r} returned {getattr(w, 'shape', type(w).__name__)}; accepted: a "
                         f"tensor of shape {list(stats.has_pos.shape)} (one weight per group)")
    return w.float()


def adora_weights(
    scores,
    lengths,
    truncated=None,
    *,
    variant: str = AdoraConfig.variant,
    positive_threshold: float = AdoraConfig.positive_threshold,
    lam: float = AdoraConfig.lam,
    boost: float = AdoraConfig.boost,
    max_length=None,
    paper: Optional[PaperParams] = None,
) -> torch.Tensor:
    """One ADORA weight per prompt group.

    scores, lengths, truncated: [P, n] tensors or nested lists (truncated may be None: then a sample counts as
    truncated when its length is >= max_length if that is given, else none does). Returns a float32 tensor [P].
    """
    stats = group_stats(scores, lengths, truncated, positive_threshold=positive_threshold, max_length=max_length)
    warn_if_threshold_unreachable(scores, positive_threshold)
    return weights_from_stats(stats, variant=variant, lam=lam, boost=boost, paper=paper)


def threshold_unreachable(scores, positive_threshold: float) -> bool:
    """True when scores vary but none exceeds the threshold: every group looks 'no positive', which silently turns
    ADORA into lam x GRPO (the authors' text trainer does this with threshold 1.01 and 0/1 scores)."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    return s.numel() > 1 and bool(s.max() > s.min()) and not bool((s > positive_threshold).any())


def warn_if_threshold_unreachable(scores, positive_threshold: float) -> None:
    if threshold_unreachable(scores, positive_threshold):
        s = torch.as_tensor(scores, dtype=torch.float64)
        logger.warning(
            "ADORA: no score exceeds positive_threshold=%s although scores vary (min %.3g, max %.3g): every group is "
            "treated as having no correct answer. Lower --adora.positive_threshold to match your reward scale.",
            positive_threshold,
            s.min().item(),
            s.max().item(),
        )


def in_schedule(step: int, start_step: int = 0, end_step: int = -1) -> bool:
    """Weights apply for training steps in [start_step, end_step); end_step == -1 means forever."""
    return step >= start_step and (end_step == -1 or step < end_step)


# ---------------------------------------------------------------------------------------------------------------
# Custom weight functions: "path.py:function"


class WeightFuncError(ValueError):
    """A user weight function could not be loaded or returned something unusable. The message names both."""


WeightFunc = Callable[..., torch.Tensor]


def load_weight_func(spec: str) -> WeightFunc:
    """Load `path.py:function` and return a validated callable.

    The user function is called as ``function(scores, rewards, lengths, truncated, step)`` with float tensors
    [P, n] (truncated: bool [P, n]) and the global step (int). It must return weights of shape [P] or [P, n], finite
    and >= 0. The returned wrapper checks exactly that and raises WeightFuncError naming the file and the function;
    it returns a float32 tensor of the shape the user returned.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise WeightFuncError(f"weight function {spec!r}: expected 'path/to/file.py:function_name'")
    path, _, name = spec.rpartition(":")
    where = f"weight function {name!r} in {path!r}"
    if not name.isidentifier():
        raise WeightFuncError(f"{where}: {name!r} is not a valid Python function name")
    if not os.path.isfile(path):
        raise WeightFuncError(f"{where}: file not found (working directory {os.getcwd()!r})")
    module_name = f"_openrlhf_ada_weight_func_{abs(hash(os.path.abspath(path)))}"
    try:
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    except SyntaxError as e:
        raise WeightFuncError(f"{where}: syntax error at line {e.lineno}: {e.msg}") from e
    except Exception as e:
        raise WeightFuncError(f"{where}: importing the file raised {type(e).__name__}: {e}") from e
    sys.modules.setdefault(module_name, module)
    fn = getattr(module, name, None)
    if fn is None:
        raise WeightFuncError(f"{where}: the file defines no {name!r}")
    if not callable(fn):
        raise WeightFuncError(f"{where}: {name!r} is a {type(fn).__name__}, not a function")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: checked at the first call instead
        signature = None
    if signature is not None:
        try:
            signature.bind(*range(5))
        except TypeError as e:
            raise WeightFuncError(f"{where}: {name}{signature} cannot be called as {name}(scores, rewards, lengths, "
                                  f"truncated, step) ({e})") from None
    return _ValidatedWeightFunc(fn, where)


class _ValidatedWeightFunc:
    """Calls a user weight function and checks its result (picklable, so it can travel to Ray actors by spec)."""

    def __init__(self, fn, where: str):
        self.fn, self.where = fn, where

    def __call__(self, scores, rewards, lengths, truncated, step: int) -> torch.Tensor:
        P, n = scores.shape
        try:
            out = self.fn(scores, rewards, lengths, truncated, step)
        except Exception as e:
            raise WeightFuncError(f"{self.where} raised {type(e).__name__}: {e}") from e
        try:
            w = torch.as_tensor(out).detach().to("cpu", torch.float32)
        except Exception:
            raise WeightFuncError(
                f"{self.where} returned {type(out).__name__}; expected weights of shape [{P}] or [{P}, {n}]"
            ) from None
        if tuple(w.shape) not in ((P,), (P, n)):
            raise WeightFuncError(
                f"{self.where} returned shape {list(w.shape)}; expected [{P}] or [{P}, {n}] (num_prompts, n)"
            )
        if not torch.isfinite(w).all():
            raise WeightFuncError(f"{self.where} returned NaN or inf weights: {w.tolist()}")
        if (w < 0).any():
            raise WeightFuncError(f"{self.where} returned negative weights (min {w.min().item():.4g}); weights must be >= 0")
        return w

    def __repr__(self):
        return f"<{self.where}>"


def adora_metrics(stats: GroupStats, weights: torch.Tensor, boost: float = AdoraConfig.boost) -> Dict[str, float]:
    """The ADORA metrics of one step: mean weight, share of groups attenuated (weight below `boost`: the groups the
    built-in rule gives lam), share with no positive, share with no usable (non-truncated) negative.
    `weights` is [P] or [P, n].

    Only a mixed group (some samples right, some wrong) has a non-zero advantage under a group baseline, so only its
    weight changes the update: `adora/mixed_share` is their share, `adora/attenuated_mixed_share` the share of them
    weighted below `boost` (what ADORA actually re-weighted; 0 without mixed groups), and `adora/length_gap_mixed`
    the mean of maxPos - meanNeg (tokens) over mixed groups with a usable negative: what the rule reads (0 without
    such groups)."""
    w = weights.reshape(weights.shape[0], -1).float().mean(-1)
    mixed = stats.has_pos & (stats.pass_rate < 1) if stats.pass_rate is not None else stats.has_pos & stats.has_usable_neg
    gap = mixed & stats.has_usable_neg
    return {
        "adora/weight_mean": w.mean().item(),
        "adora/attenuated_share": (w < boost).float().mean().item(),
        "adora/no_pos_share": (~stats.has_pos).float().mean().item(),
        "adora/no_usable_neg_share": (~stats.has_usable_neg).float().mean().item(),
        "adora/mixed_share": mixed.float().mean().item(),
        "adora/attenuated_mixed_share": (w[mixed] < boost).float().mean().item() if mixed.any() else 0.0,
        "adora/length_gap_mixed": (stats.max_pos - stats.mean_neg)[gap].double().mean().item() if gap.any() else 0.0,
    }


# ---------------------------------------------------------------------------------------------------------------
# Groups of varying size (Reinforce-Ada-Est): per-sample vectors [S], contiguous groups given by their sizes


def ragged_group_stats(scores, lengths, truncated, sizes, *,
                       positive_threshold: float = AdoraConfig.positive_threshold) -> GroupStats:
    """`group_stats` of contiguous groups of the given sizes (a group of one included): each group's own samples,
    padded to the largest group and masked, so every fact (maxPos, meanNeg, the success rate) is the group's own."""
    s, mask = pad_groups(torch.as_tensor(scores, dtype=torch.float64), sizes)
    lens, _ = pad_groups(torch.as_tensor(lengths, dtype=torch.float64), sizes)
    trunc, _ = pad_groups(torch.as_tensor(truncated, dtype=torch.bool), sizes, fill=True)
    return group_stats(s, lens, trunc, positive_threshold=positive_threshold, mask=mask)


def ragged_sample_weights(config: AdoraConfig, *, scores, rewards, lengths, truncated, sizes, step: int,
                          weight_func: Optional[WeightFunc] = None, stats: Optional[GroupStats] = None
                          ) -> torch.Tensor:
    """Per-sample weights [S] for groups of varying size: ones outside [start_step, end_step); the registered rule's
    weight of each group (from `ragged_group_stats`, or `stats` when the caller has them) on each of its samples; a
    custom function is called once per group size with that size's groups as [P_k, k] matrices (its contract: groups
    of one size), and its [P_k] or [P_k, k] weights go back to their samples."""
    s = torch.as_tensor(scores, dtype=torch.float32).reshape(-1)
    size = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1)
    g = group_index(size)
    if not config.enable or not in_schedule(step, config.start_step, config.end_step):
        return torch.ones(s.numel(), dtype=torch.float32)
    if weight_func is None:
        if stats is None:
            stats = ragged_group_stats(s, lengths, truncated, size, positive_threshold=config.positive_threshold)
        warn_if_threshold_unreachable(s, config.positive_threshold)
        w = weights_from_stats(stats, variant=config.variant, lam=config.lam, boost=config.boost, paper=config.paper)
        return w[g]
    out = torch.empty(s.numel(), dtype=torch.float32)
    values = {"scores": s, "rewards": torch.as_tensor(rewards, dtype=torch.float32).reshape(-1),
              "lengths": torch.as_tensor(lengths, dtype=torch.float32).reshape(-1),
              "truncated": torch.as_tensor(truncated, dtype=torch.bool).reshape(-1)}
    for k in sorted(set(size.tolist())):
        rows = (size[g] == k).nonzero().reshape(-1)  # the samples of the groups of size k, group after group
        m = {name: v[rows].reshape(-1, k) for name, v in values.items()}
        w = weight_func(m["scores"], m["rewards"], m["lengths"], m["truncated"], step)
        out[rows] = w.reshape(m["scores"].shape[0], -1).expand(-1, k).reshape(-1)
    return out
