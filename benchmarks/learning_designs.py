"""The learning comparison's designs: what each one runs, fixed before its runs, as frozen dataclasses.

A design names its settings (train_local flags added to the common ones), its seeds, its task and evaluation, its
folder and its report's section of docs/learning.md. `benchmarks/learning_comparison.py` runs a design (`--design
NAME`) and `benchmarks/learning_report.py` writes its report; the statistics are `openrlhf_ada.analysis`'s. Two
designs live here:

- `v2`: the last comparison (six settings, seeds 1-3, two axes, Holm over ten tests), whose runs are committed in
  `benchmarks/results/learning_v2`: kept so that its report can be rewritten from them (`--design v2
  --report-only`);
- `seq_vs_grpo`: the current design (docs/learning.md, "The current design"): Reinforce-Ada-Seq balance against
  GRPO n=4 at equal updates, one primary paired test, nine seeds, the plan's rules 1-6 (`SeqVsGrpoRules`);
- `seq_vs_grpo_equal_tokens`: the next one (docs/learning.md, "Seq against GRPO at equal generated tokens"): the
  committed Seq runs of `seq_vs_grpo`, reused as they are, against GRPO n=4 rerun on the same seed and trained on
  until it has generated as many tokens; a Seq A/A run first, each GRPO rerun checked against its committed run at
  update 24 (`EqualTokensRules`).

Everything a design fixes is here; the command line may only shrink it for a test (`--updates`, `--seeds`, ...),
and a folder refuses runs made with other values (`config.json`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

PROMPTS_PER_STEP = 8
TRAINED_PER_UPDATE = 32  # samples every setting trains per update (checked by tests/test_benchmarks_smoke.py)
N4 = ("--rollout.n_samples_per_prompt", "4")
ADORA = ("--adora.enable", "--adora.variant", "llm", "--adora.lam", "0.1", "--adora.boost", "1.0")
ADA = ("--ada.enable", "--ada.mode", "balance", "--ada.baseline", "pool", "--ada.round_size", "4",
       "--ada.max_rounds", "2")
EST = N4 + ("--ada.enable", "--ada.strategy", "est")  # 4 per prompt on average: GRPO n=4's total

#: the task: reasoning-gym chain_sum; each problem draws its number of terms and of digits per term
TASK = {"dataset": "chain_sum", "min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
#: the question's wording. "cot" asks for the partial sums first, so that an answer's length says something (what
#: ADORA's rule reads); the reward takes the last number of the response either way
TEMPLATES = {"cot": "What is {expression}? Work it out one term at a time, writing each partial result, and end "
                    "with the final answer.",
             "number": None}  # demo_task's default: "What is {expression}? Answer with just the number."


@dataclass(frozen=True)
class Setting:
    """One setting: its name (the run folders' prefix), its label in the report, its flags besides the common ones
    (which set n, and may set --rollout.batch_size, the prompts per step) and its plot colour."""

    name: str
    label: str
    flags: Tuple[str, ...]
    color: str = "tab:gray"

    def flag(self, flag: str, default=None):
        return self.flags[self.flags.index(flag) + 1] if flag in self.flags else default

    @property
    def prompts_per_step(self) -> int:
        return int(self.flag("--rollout.batch_size", PROMPTS_PER_STEP))

    @property
    def trained_per_update(self) -> int:
        """Samples an update trains: prompts x n (Seq keeps n of its pool; Est allocates n on average)."""
        return self.prompts_per_step * int(self.flag("--rollout.n_samples_per_prompt"))


@dataclass(frozen=True)
class SeqVsGrpoRules:
    """The current design's rules (docs/learning.md, "The current design", rules 1-6), as numbers."""

    pool_pass_rate: Tuple[float, float] = (0.10, 0.70)  # rule 1: the base model's pool pass rate must lie here
    aa_pair: Tuple[str, str] = ("grpo", "grpo_repeat")  # rule 2: the A/A control, seed `aa_seed`, run first
    aa_seed: int = 1
    aa_keys: Tuple[str, ...] = ("generated_tokens", "reward_mean")  # rule 2: equal at step 1
    minutes: Tuple[Tuple[str, float], ...] = (("grpo", 19.0), ("ada", 22.0))  # rule 5's estimates per run
    tolerance: float = 1.1  # rule 5: the A/A's minutes above tolerance x the estimate cut the seeds
    hours: float = 7.0  # rule 5: the machine time
    planned_seeds: int = 9  # rule 3 as first stated; the design's `seeds` are what rule 5 left
    cut: str = "by rule 5's amendment (written before seed 2 ran)"  # why `seeds` are fewer, for the report
    planning_sd: float = 0.034  # rule 3: the sd of the paired differences the plan was sized at
    seq_setting: str = "ada"  # rule 6: the setting whose Seq mechanism must engage in every run
    alpha: float = 0.05  # the primary test's level
    power: float = 0.8  # the detectable effect reported beside it
    token_budget: int = 12000  # secondary (a): the evaluation where a run first reaches this many tokens


@dataclass(frozen=True)
class EqualTokensRules:
    """The equal-token design's rules (docs/learning.md, "Seq against GRPO at equal generated tokens"), as numbers."""

    reuse: str = os.path.join("benchmarks", "results", "learning_v3")  # the committed runs, read as they are
    seq_setting: str = "ada"  # the committed Seq runs: the primary's Seq side, and each GRPO rerun's token budget
    rerun: str = "grpo"  # GRPO n=4, rerun on each seed until it has generated its Seq run's tokens
    aa_setting: str = "ada_repeat"  # the Seq A/A run: Seq seed `aa_seed` again, the first run
    aa_seed: int = 1
    max_steps: int = 120  # a rerun's cap on updates (5 x 24); its token budget stops it first
    reproduced: Tuple[str, ...] = ("avg_at_k", "accuracy", "tokens")  # equal at update 24, bit for bit
    late_steps: int = 8  # the time estimate reads the committed run's last 8 updates (two visits of the pool)
    hours: float = 7.0  # the machine time, the machine alone
    #: runs that did not have the machine alone, whose computation equals a committed run's made alone: the time rule
    #: counts their estimate (that run's minutes) as measured (docs/learning.md, rule 5's amendment of 2026-12-07)
    not_alone: Tuple[Tuple[str, int], ...] = (("ada_repeat", 1),)
    planning_sd: float = 0.0295  # the sd of the paired differences seq_vs_grpo observed
    sd_interval: Tuple[float, float] = (0.018, 0.072)  # its 95% interval (chi-square, 5 degrees of freedom)
    effect: float = 0.04  # the effect the power is stated at
    min_pairs: int = 4  # fewer pairs than this after a cut by the time rule: no verdict
    planned_seeds: int = 6  # as first stated; the design's `seeds` are what rule 5 left (its cut of 2026-12-07)
    cut: str = "by rule 5 before seed 4's rerun, on time only: its cut of 2026-12-07 in docs/learning.md"
    alpha: float = 0.05
    power: float = 0.8


@dataclass(frozen=True)
class Design:
    """A design: everything its runs share. `kind` selects the report ("v2": ten tests with Holm's correction;
    "seq_vs_grpo": one primary test and the plan's rules; "equal_tokens": one primary test against committed runs)."""

    name: str
    kind: str
    settings: Tuple[Setting, ...]
    reference: str
    seeds: Tuple[int, ...]
    out: str  # relative to the repository
    section: str  # the report's markers in docs/learning.md
    image_prefix: str  # docs/img/<prefix>_*.png
    stages: Tuple[Tuple[str, ...], ...] = ()  # v2's order of priority; seq_vs_grpo orders by its rule 4
    updates: int = 24
    budget: int = 0
    eval_points: int = 2  # evaluations every updates / eval_points updates (and at the end)
    eval_at_tokens: int = 0  # train_local's --local.eval_at_tokens
    request_seeds: bool = False  # train_local's --local.request_seeds
    skip_base_eval: bool = False  # train_local's --local.skip_base_eval: the base model measured once, not per run
    train_size: int = 32
    eval_size: int = 50
    max_digits: int = 2
    format: str = "cot"
    avg_k: int = 4
    avg_temperature: float = 1.0
    avg_seed: int = 0
    max_new_tokens: int = 64
    lr: float = 1e-5
    engine: str = "vllm"
    kv_cache_gb: float = 0.0
    save_steps: int = 5
    base_passes: Tuple[str, ...] = ("sampled", "greedy", "train_sampled")  # see learning_comparison.BASE_PASSES
    hours: float = 6.0
    target_half_width: float = 0.03
    rules: Optional[object] = None  # SeqVsGrpoRules or EqualTokensRules
    extra_settings: Tuple[str, ...] = ()  # settings outside the comparison (the A/A's repeat)

    def setting(self, name: str) -> Setting:
        return next(s for s in self.settings if s.name == name)

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(s.name for s in self.settings)

    def task(self, max_digits: Optional[int] = None) -> dict:
        return {**TASK, "max_digits": self.max_digits if max_digits is None else max_digits}


V2_SETTINGS = (
    Setting("grpo", "GRPO n=4", N4, "tab:blue"),
    Setting("grpo_n8", "GRPO n=8", ("--rollout.n_samples_per_prompt", "8", "--rollout.batch_size", "4"),
            "tab:purple"),
    Setting("grpo_adora", "GRPO + ADORA", N4 + ADORA, "tab:orange"),
    Setting("ada", "Reinforce-Ada balance", N4 + ADA, "tab:green"),
    Setting("ada_est", "Reinforce-Ada-Est", EST, "tab:brown"),
    Setting("ada_adora", "Reinforce-Ada balance + ADORA", N4 + ADA + ADORA, "tab:red"),
)

V2 = Design(
    name="v2", kind="v2", settings=V2_SETTINGS, reference="grpo", seeds=(1, 2, 3),
    out=os.path.join("benchmarks", "results", "learning_v2"), section="learning_comparison_v2",
    image_prefix="learning_v2", stages=(("grpo", "ada", "ada_est"), ("grpo_adora",), ("ada_adora",), ("grpo_n8",)),
)

SEQ_VS_GRPO = Design(
    name="seq_vs_grpo", kind="seq_vs_grpo",
    settings=(Setting("grpo", "GRPO n=4", N4, "tab:blue"),
              Setting("ada", "Reinforce-Ada balance", N4 + ADA, "tab:green"),
              Setting("grpo_repeat", "GRPO n=4 (A/A repeat)", N4, "tab:gray")),
    extra_settings=("grpo_repeat",),
    reference="grpo", seeds=tuple(range(1, 7)),  # rule 3 planned 9; rule 5 cut them to 6 (docs/learning.md)
    out=os.path.join("benchmarks", "results", "learning_v3"), section="learning_comparison_v3",
    image_prefix="learning_v3", updates=24, eval_points=1, eval_at_tokens=12000, request_seeds=True,
    skip_base_eval=True,
    train_size=32, eval_size=200, max_digits=1, base_passes=("train_sampled", "heldout"), hours=7.0,
    rules=SeqVsGrpoRules(),
)

#: the same regime and flags as SEQ_VS_GRPO (its runs are reused; every GRPO rerun must reproduce its committed run at
#: update 24): only the GRPO reruns' length differs (`EqualTokensRules.max_steps` and each seed's token budget)
SEQ_VS_GRPO_EQUAL_TOKENS = replace(
    SEQ_VS_GRPO, name="seq_vs_grpo_equal_tokens", kind="equal_tokens",
    settings=(SEQ_VS_GRPO.setting("grpo"),
              Setting("ada_repeat", "Reinforce-Ada balance (A/A repeat)", N4 + ADA, "tab:gray")),
    extra_settings=("ada_repeat",), out=os.path.join("benchmarks", "results", "learning_v4"),
    section="learning_comparison_v4", image_prefix="learning_v4", base_passes=(), rules=EqualTokensRules(),
    seeds=(1, 2, 3, 4, 5),  # 1-6 planned; rule 5 cut seed 6 before seed 4's rerun (time only, no outcome read)
)

DESIGNS: Dict[str, Design] = {d.name: d for d in (V2, SEQ_VS_GRPO, SEQ_VS_GRPO_EQUAL_TOKENS)}


def equal_tokens_order(design: Design, seeds) -> List[Tuple[str, int]]:
    """The equal-token design's order: the Seq A/A run first, then the GRPO reruns seed by seed."""
    rules = design.rules
    return [(rules.aa_setting, rules.aa_seed)] + [(rules.rerun, seed) for seed in seeds]
