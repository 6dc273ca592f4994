"""GRESO's pre-rollout skip (arXiv 2506.02177): before a prompt is rolled out, skip it with a probability that grows
with the number of its most recent groups in a row that had zero variance (every sample correct, or every sample
wrong), and move the base of that probability so that the share of zero-variance prompts among those rolled out
stays near a target. A skipped prompt generates nothing; the step takes the next prompt in its place.

For one prompt, from its groups in earlier epochs (oldest first, as (num_pos, num_neg) pairs):

    z        the number of its most recent groups in a row that were all correct ("easy" streak) or all wrong
             ("hard" streak); at most one of the two is non-zero (the last group decides which)
    skip     1 - max(p_e ^ z, keep_floor),  with p_e = p_easy or p_hard by the streak's kind; 0 when z = 0

so a prompt is always kept with probability at least keep_floor (a minimum exploration probability: even a
prompt that has been zero-variance for long is re-sampled now and then). The numbers are the authors' code's. A group with no scored sample says nothing and is passed over.

After each step, from the groups rolled out in it (skipped prompts are not among them):

    share_easy = all-correct groups / groups,   share_hard = all-wrong groups / groups
    p_easy <- p_easy - step  if share_easy >= target x easy_parts / parts  else p_easy + step  (within [p_min, p_max])
    p_hard <- p_hard - step  if share_hard >= target x hard_parts / parts  else p_hard + step

with parts = easy_parts + hard_parts, each target computed as (target x its parts) / parts: with the default 1 and
2 parts, the all-wrong target is target x 2 / 3, which at target 0.25 is the double nearest 1/6, so a step with
exactly one all-wrong group in six reaches it (target x (1 - 1/3) would round above 1/6 and miss it).

a lower p_e skips more. The adaptation starts with the second epoch (`adapt_from_epoch`): in the first, no prompt
has a history to be skipped by, and the shares say nothing about the skip.

The values are the authors' (Infini-AI-Lab/GRESO, verl/trainer/ppo/ray_trainer.py and
verl/trainer/ttis/presampling_selector.py, their scripts): target 0.25 split 1/3 to all-correct and 2/3 to
all-wrong streaks ("more exploration on hard examples": they are the ones likely to change while the reward
rises), p_e from 0.5 in steps of 0.01 within [0.05, 0.95], keep_floor 0.01. Where the project departs from their
code:

- their streaks read each epoch's mean reward (>= 0.98 all correct, <= 0.11 all wrong for their 1 / 0.1 / 0
  rewards), and their step shares count all-wrong groups only when every reward is the 0.1 of a well-formatted
  wrong answer (a group of format errors, reward 0, is not counted); here a group is all correct or all wrong by
  the project's counts of correct and wrong samples, whatever the reward values;
- they draw from the global torch generator, one draw for the easy test and another for the hard one; here one
  draw from a generator the caller gives (`skip_rng`: keyed by seed, epoch and prompt, so a prompt's decision does
  not depend on the other prompts or their order); the streaks exclude each other, so the law is the same;
- their shares are over the step's rolled-out prompts of every generation round of a dynamic-sampling step; here
  over the groups the caller passes (the step's finished prompts);
- the history is the project's per-prompt record of earlier epochs (one group per epoch; the record keeps the last
  few epochs, so z is at most that many), theirs every epoch since the start.

The state (`GresoState`: p_easy, p_hard) is a small frozen dataclass with to_dict / from_dict, checkpointed next to
the per-prompt history. Pure python: no torch, no Ray, no vLLM.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Sequence, Tuple

from openrlhf_ada.algorithms._checks import check_finite, check_int

GRESO_FORMAT = 1  # version of the dict written by GresoState.to_dict
EASY, HARD = "easy", "hard"  # the kinds of streak: all correct, all wrong


@dataclass(frozen=True)
class GresoConfig:
    """GRESO's settings; defaults: the authors' values (module docstring)."""

    target: float = 0.25  # target share of zero-variance groups among those rolled out in a step
    easy_parts: int = 1  # the target is split in easy_parts + hard_parts parts: these for all-correct groups,
    hard_parts: int = 2  # these for all-wrong ones
    p_init: float = 0.5  # p_easy and p_hard at the start
    step: float = 0.01  # how far p_e moves per step
    p_min: float = 0.05  # p_e's bounds
    p_max: float = 0.95
    keep_floor: float = 0.01  # a prompt is kept with at least this probability (0: the plain 1 - p_e^z)
    adapt_from_epoch: int = 1  # epochs before this one leave p_e as it is

    def __post_init__(self):
        check_int("greso easy_parts", self.easy_parts, 0)
        check_int("greso hard_parts", self.hard_parts, 0)
        if self.easy_parts + self.hard_parts == 0:
            raise ValueError("greso easy_parts=0, hard_parts=0 are invalid; accepted values: at least one part")
        for name in ("target", "keep_floor"):
            value = getattr(self, name)
            check_finite(f"greso {name}", value, minimum=0.0)
            if float(value) > 1.0:
                raise ValueError(f"greso {name}={value!r} is invalid; accepted values: numbers in [0, 1]")
        check_finite("greso step", self.step, minimum=0.0)
        check_finite("greso p_min", self.p_min, minimum=0.0)
        check_finite("greso p_max", self.p_max, minimum=0.0)
        if not 0.0 <= self.p_min <= self.p_max <= 1.0:
            raise ValueError(f"greso p_min={self.p_min!r}, p_max={self.p_max!r} are invalid; accepted values: "
                             "0 <= p_min <= p_max <= 1")
        check_finite("greso p_init", self.p_init, minimum=0.0)
        if not self.p_min <= self.p_init <= self.p_max:
            raise ValueError(f"greso p_init={self.p_init!r} is invalid; accepted values: numbers in "
                             f"[p_min, p_max] = [{self.p_min}, {self.p_max}]")
        check_int("greso adapt_from_epoch", self.adapt_from_epoch, 0)

    @classmethod
    def from_flags(cls, args) -> "GresoConfig":
        """The settings of `--ada.skip greso` from parsed flags: the target of --ada.greso_target (a namespace without
        it: the default), the rest the defaults."""
        return cls(target=getattr(getattr(args, "ada", None), "greso_target", cls.target))

    @property
    def easy_share(self) -> float:
        """The part of the target for all-correct groups (1/3 by default)."""
        return self.easy_parts / (self.easy_parts + self.hard_parts)

    @property
    def target_easy(self) -> float:
        return self.target * self.easy_parts / (self.easy_parts + self.hard_parts)

    @property
    def target_hard(self) -> float:
        return self.target * self.hard_parts / (self.easy_parts + self.hard_parts)


@dataclass(frozen=True)
class GresoState:
    """The base keep probabilities p_e for prompts on an all-correct streak (p_easy) and an all-wrong one (p_hard)."""

    p_easy: float
    p_hard: float

    @classmethod
    def initial(cls, config: GresoConfig) -> "GresoState":
        return cls(float(config.p_init), float(config.p_init))

    def to_dict(self) -> dict:
        return {"format": GRESO_FORMAT, "p_easy": self.p_easy, "p_hard": self.p_hard}

    @classmethod
    def from_dict(cls, data: dict) -> "GresoState":
        if not isinstance(data, dict) or data.get("format") != GRESO_FORMAT:
            raise ValueError(f"not a GRESO state of format {GRESO_FORMAT}: expected "
                             "{'format': 1, 'p_easy': float, 'p_hard': float}")
        values = []
        for name in ("p_easy", "p_hard"):
            value = data.get(name)
            check_finite(f"GRESO state {name}", value, minimum=0.0)
            if float(value) > 1.0:
                raise ValueError(f"GRESO state {name}={value!r} is invalid; accepted values: numbers in [0, 1]")
            values.append(float(value))
        return cls(*values)


def _group(counts) -> Tuple[int, int]:
    if len(counts) != 2:
        raise ValueError(f"a group is (num_pos, num_neg); got {counts!r}")
    num_pos, num_neg = counts
    check_int("num_pos", num_pos, 0)
    check_int("num_neg", num_neg, 0)
    return num_pos, num_neg


def streak(groups: Sequence[Tuple[int, int]]) -> Tuple[str, int]:
    """(kind, z): the kind (EASY: all correct, HARD: all wrong, "" none) and length of the prompt's most recent
    zero-variance groups in a row; `groups` oldest first, as (num_pos, num_neg); groups with no sample passed over.
    [(3, 5), (8, 0), (8, 0)] -> ("easy", 2); [(8, 0), (0, 8)] -> ("hard", 1); [(8, 0), (3, 5)] -> ("", 0)."""
    kind, z = "", 0
    for num_pos, num_neg in reversed([_group(g) for g in groups]):
        if num_pos + num_neg == 0:
            continue
        this = EASY if num_neg == 0 else HARD if num_pos == 0 else ""
        if not this or (kind and this != kind):
            break
        kind, z = this, z + 1
    return kind, z


def skip_probability(groups: Sequence[Tuple[int, int]], state: GresoState, config: GresoConfig) -> float:
    """1 - max(p_e ^ z, keep_floor) for the prompt's streak (p_e: p_easy or p_hard by its kind); 0 without one."""
    kind, z = streak(groups)
    if z == 0:
        return 0.0
    p_e = state.p_easy if kind == EASY else state.p_hard
    return 1.0 - max(float(p_e) ** z, float(config.keep_floor))


def skip_rng(seed: int, epoch: int, key: str) -> random.Random:
    """The generator of one prompt's skip draw in one epoch: keyed by (seed, epoch, key) alone, so the decision is
    the same whatever the other prompts do, the order they come in, or a resume."""
    return random.Random(f"greso-skip:{seed}:{epoch}:{key}")


def decide_skip(groups: Sequence[Tuple[int, int]], state: GresoState, config: GresoConfig,
                rng: random.Random) -> bool:
    """Skip the prompt before rollout? One uniform draw from `rng` against `skip_probability` (no draw without a
    streak)."""
    probability = skip_probability(groups, state, config)
    return probability > 0.0 and rng.random() < probability


def zero_variance_counts(groups: Iterable[Tuple[int, int]]) -> Tuple[int, int, int]:
    """(all-correct groups, all-wrong groups, groups with a sample) among a step's rolled-out groups."""
    easy = hard = total = 0
    for num_pos, num_neg in (_group(g) for g in groups):
        if num_pos + num_neg == 0:
            continue
        total += 1
        easy += num_neg == 0
        hard += num_pos == 0
    return easy, hard, total


def _move(p: float, share: float, target: float, config: GresoConfig) -> float:
    if share >= target:  # too many zero-variance groups of this kind: skip more
        return max(p - config.step, config.p_min)
    return min(p + config.step, config.p_max)


def adapt(state: GresoState, easy: int, hard: int, total: int, config: GresoConfig, *, epoch: int) -> GresoState:
    """The state after a step whose rolled-out groups held `easy` all-correct and `hard` all-wrong ones of `total`
    (`zero_variance_counts`): each p_e one step down when its share reached its target, else one step up, within
    [p_min, p_max]. Unchanged before `adapt_from_epoch` or after a step with no group."""
    check_int("easy", easy, 0)
    check_int("hard", hard, 0)
    check_int("total", total, 0)
    check_int("epoch", epoch, 0)
    if easy + hard > total:
        raise ValueError(f"{easy} all-correct and {hard} all-wrong groups out of {total}: accepted: easy + hard <= total")
    if total == 0 or epoch < config.adapt_from_epoch:
        return state
    return GresoState(_move(state.p_easy, easy / total, config.target_easy, config),
                      _move(state.p_hard, hard / total, config.target_hard, config))
