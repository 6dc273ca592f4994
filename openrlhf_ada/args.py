"""The project's flags (--adora.*, --ada.*), in upstream's dotted style, and the frozen configs built from them.

`add_project_args(parser)` adds both groups to any argparse parser (upstream's own, inside the launcher; the
single-machine trainer's). After upstream's `hierarchize`, the namespace carries `args.adora.*` and `args.ada.*`;
`validate(args)` checks them together with the upstream flags they depend on and raises ValueError with what is
wrong and how to fix it, before Ray or any model starts. The configs travel to every actor inside `strategy.args`
and are rebuilt there with `adora_config(args)` / `sampling_config(args)` (the strategy's: `FixedN`, `Seq` or
`Est`, chosen here once). The configs of the flags that belong to no
algorithm live here (`FaultConfig` of --fault.*, `EvalConfig` of --eval.avg_*), so that this module imports no trainer
module (the layers: algorithms/ <- args and trainer/ <- cli/).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Optional, Union

from openrlhf_ada.algorithms._checks import check_finite
from openrlhf_ada.algorithms.adora import ADORA_RULES, AdoraConfig, load_weight_func
from openrlhf_ada.algorithms.baselines import GROUP_BASELINE_ESTIMATORS
from openrlhf_ada.algorithms.estimate import ALLOCATION_RULES, EST_PRESETS, PROMPT_WEIGHTS, STRATEGIES
from openrlhf_ada.algorithms.greso import GresoConfig
from openrlhf_ada.algorithms.reinforce_ada import (
    BASELINES,
    CANCEL_ORDERS,
    EXIT_RULES,
    SCHEDULES,
    SELECTION_POLICIES,
    UNRESOLVED_POLICIES,
    Est,
    FixedN,
    Seq,
)
from openrlhf_ada.algorithms.skip_rules import SKIP_RULES, SkipRule
from openrlhf_ada.compatibility import check as check_compatibility
from openrlhf_ada.compatibility import flag_value
from openrlhf_ada.rewards.checks import check_reward_url, scored_by_reward_model

logger = logging.getLogger(__name__)


def _bool_flag(group, name, help):
    group.add_argument(name, action="store_true", default=False, help=help)


def add_project_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every default comes from the frozen config the flags build (AdoraConfig, Seq, Est, FaultConfig), and the
    choices and help of --adora.variant / --ada.mode from their rule registries."""
    adora, ada, fault, ev, gc = AdoraConfig, Seq, FaultConfig, EvalConfig, GresoConfig()  # the defaults
    g = parser.add_argument_group("ADORA (openrlhf-ada): per-prompt advantage weights")
    _bool_flag(g, "--adora.enable", "Multiply each prompt group's final advantages by its ADORA weight")
    g.add_argument("--adora.variant", type=str, default=adora.variant, choices=ADORA_RULES.names(),
                   help=f"Weight rule: {ADORA_RULES.describe()}")
    g.add_argument("--adora.lam", type=float, default=adora.lam, help="Weight of groups that are not advantageous")
    g.add_argument("--adora.boost", type=float, default=adora.boost, help="Weight of advantageous groups")
    g.add_argument("--adora.positive_threshold", type=float, default=adora.positive_threshold,
                   help="A sample is correct when its score (Experience.scores) is above this, for ADORA's weights "
                        "only: the two methods' authors classify on different reward scales (ADORA's text trainer: "
                        "1.01 on Logic-RL scores), so it is apart from --ada.positive_threshold")
    g.add_argument("--adora.tau", type=float, default=adora.tau,
                   help="With --adora.variant paper_llm: a group has the Difficulty Advantage when its success rate "
                        "(share of correct samples) is at most this (the paper's 0.5)")
    g.add_argument("--adora.amplify", type=float, default=adora.amplify,
                   help="With --adora.variant paper_llm: weight of groups with both the Length and the Difficulty "
                        "Advantage (the paper's 2.0; the others keep 1)")
    g.add_argument("--adora.attenuate", type=float, default=adora.attenuate,
                   help="With --adora.variant paper_vl: weight of groups without the Length Advantage (the paper's "
                        "0.1; the others keep 1)")
    g.add_argument("--adora.start_step", type=int, default=adora.start_step,
                   help="First global step (as logged) with weights")
    g.add_argument("--adora.end_step", type=int, default=adora.end_step,
                   help="First global step without weights again; -1 = never stop")
    g.add_argument("--adora.weight_func", type=str, default=adora.weight_func,
                   help="path.py:function replacing the built-in rule: f(scores, rewards, lengths, truncated, step) "
                        "-> weights [P] or [P, n]")

    g = parser.add_argument_group("Reinforce-Ada (openrlhf-ada): adaptive multi-round sampling per prompt")
    _bool_flag(g, "--ada.enable", "Sample prompts round after round until each shows signal; train on n per prompt")
    g.add_argument("--ada.mode", type=str, default=ada.mode, choices=EXIT_RULES.names(),
                   help=f"Exit rule: {EXIT_RULES.describe()}")
    g.add_argument("--ada.round_size", type=int, default=ada.round_size, help="Samples per round (default 2 x n)")
    g.add_argument("--ada.first_round_size", type=int, default=ada.first_round_size,
                   help="Samples in the first round (default: --ada.round_size)")
    g.add_argument("--ada.max_rounds", type=int, default=ada.max_rounds,
                   help="Rounds before a prompt counts as unresolved")
    g.add_argument("--ada.positive_threshold", type=float, default=ada.positive_threshold,
                   help="A sample is correct when its score is above this, for Reinforce-Ada's exit rule and "
                        "group selection, and for the held-out accuracy train_local logs (ADORA has "
                        "--adora.positive_threshold)")
    g.add_argument("--ada.unresolved", type=str, default=ada.unresolved, choices=UNRESOLVED_POLICIES,
                   help="Unresolved after max rounds: keep its group (authors' code) or drop and refill (paper)")
    g.add_argument("--ada.selection", type=str, default=ada.selection, choices=SELECTION_POLICIES,
                   help="Which samples of each class form the group: earliest generated, or seeded random")
    g.add_argument("--ada.baseline", type=str, default=ada.baseline, choices=BASELINES,
                   help="Group baseline from the whole pool's statistics (pool) or the kept n samples (group)")
    g.add_argument("--ada.schedule", type=str, default=ada.schedule, choices=SCHEDULES,
                   help="async: a prompt's next round starts as soon as its last is scored; sync: rounds in lockstep")
    _bool_flag(g, "--ada.cancel", "Check the exit rule after every sample and cancel a prompt's outstanding requests "
                                  "of the round once it holds (their tokens so far count as generated); rounds stay "
                                  "the cap and the schedule")
    g.add_argument("--ada.cancel_order", type=str, default=ada.cancel_order, choices=CANCEL_ORDERS,
                   help="With --ada.cancel: samples enter the pool as they arrive (arrival: stops soonest, but kept "
                        "samples are biased short) or in request order (request: kept samples unbiased in length, "
                        "the group the authors' rule would train; stops later, saves fewer tokens)")
    _bool_flag(g, "--ada.history", "Remember each prompt's outcomes across epochs (key: sha256 of the prompt) to skip "
                                   "prompts that were all-correct or all-wrong (and, with --ada.history_target, to "
                                   "size each prompt's first round)")
    g.add_argument("--ada.history_target", type=float, default=ada.history_target,
                   help="With --ada.history: first round = fewest samples (n..cap) holding both classes with this "
                        "probability (e.g. 0.9) under the prompt's Beta posterior pass rate, the rest of the cap "
                        "spread over the other rounds; 0 (default) keeps the configured rounds (sizing measured: "
                        "fewer rounds per prompt, more tokens; docs/benchmarks.md)")
    g.add_argument("--ada.history_skip", type=float, default=ada.history_skip,
                   help="With --ada.history: probability of skipping a prompt whose last --ada.history_window "
                        "epochs were all-correct or all-wrong (skipped prompts are counted, the next one taken)")
    g.add_argument("--ada.history_window", type=int, default=ada.history_window,
                   help="With --ada.history: epochs (the prompt's most recent sampled ones) that must all be "
                        "saturated before it can be skipped")
    g.add_argument("--ada.skip", type=str, default="none", choices=SKIP_RULES.names(),
                   help="Pre-rollout skip of prompts from what they showed in earlier epochs; a skipped prompt "
                        "generates nothing, is counted and the next prompt takes its slot. Rules: "
                        f"{SKIP_RULES.describe()}. greso: a prompt whose last z groups were all correct (or "
                        f"all wrong) is skipped (counted: ada/greso_skipped) with probability 1 - max(p_e^z, "
                        f"{gc.keep_floor}), p_e = p_easy (or p_hard), each moved by {gc.step} a step (within "
                        f"[{gc.p_min}, {gc.p_max}], from {gc.p_init}, from the second epoch on) toward "
                        "--ada.greso_target (logged: ada/greso_p_easy, ada/greso_p_hard). Works with fixed-n GRPO (no "
                        "--ada.enable), Seq and Est; keeps the per-prompt history itself (checkpointed), and with "
                        "--ada.history replaces its skip (docs/adaptive_family.md). A new rule is one class "
                        "registered in algorithms/skip_rules.py")
    g.add_argument("--ada.greso_target", type=float, default=gc.target,
                   help="With --ada.skip greso: the share of zero-variance groups (all correct or all wrong) among a "
                        f"step's rolled-out prompts that p_easy and p_hard steer toward, {gc.easy_share:.2g} of it "
                        f"all-correct and the rest all-wrong (the authors' {gc.target}); lower: skip more")
    g.add_argument("--ada.strategy", type=str, default=STRATEGIES[0], choices=STRATEGIES,
                   help="seq: rounds until each prompt shows signal, n trained per prompt (the authors' code); est: "
                        "Reinforce-Ada-Est, one pass per step with each prompt's sample count allocated from its "
                        "estimated pass rate, exactly --rollout.n_samples_per_prompt per prompt on average (the "
                        "budget: the paper's 8 matches GRPO with n = 8), every sample trained in groups of varying "
                        "size; the estimate is kept per prompt (sha256 of its text) in the checkpoints, like "
                        "--ada.history's. Its settings come from --ada.est_preset")
    g.add_argument("--ada.est_preset", type=str, default=Est.preset, choices=tuple(EST_PRESETS),
                   help="With --ada.strategy est: the values of every --ada.est_* flag left unset, the meaning of "
                        "--ada.prompt_weight auto, and the advantage: "
                        + "; ".join(f"{name}: {p.about}" for name, p in EST_PRESETS.items()))
    g.add_argument("--ada.est_allocation", type=str, default=None, choices=ALLOCATION_RULES.names(),
                   help=f"With --ada.strategy est: allocation rule (default: the preset's): "
                        f"{ALLOCATION_RULES.describe()}. A rule named here replaces only the preset's allocation: "
                        "the bounds stay the preset's (or --ada.est_min / --ada.est_max), and so do the estimator, "
                        "the advantage and the prompt weight")

    def preset_values(field):
        return ", ".join(f"{name} {'none' if getattr(p, field) is None else getattr(p, field)}"
                         for name, p in EST_PRESETS.items())

    g.add_argument("--ada.est_min", type=int, default=None,
                   help="With --ada.strategy est: fewest samples a prompt gets (>= 2 with a group baseline; the "
                        f"authors' advantage takes 1). Default: the preset's ({preset_values('n_min')})")
    g.add_argument("--ada.est_max", type=int, default=None,
                   help="With --ada.strategy est: most samples a prompt gets (the inv_sqrt and knapsack "
                        "allocations; the authors' has no bound; knapsack without one: none but the budget). "
                        f"Default: the preset's ({preset_values('n_max')})")
    g.add_argument("--ada.est_decay", type=float, default=None,
                   help="With --ada.strategy est: Ada-EMA's discount of a prompt's earlier counts each time it is "
                        f"sampled again (N <- decay x N + new samples). Default: the preset's "
                        f"({preset_values('decay')})")
    g.add_argument("--ada.est_alpha", type=float, default=None,
                   help="With --ada.strategy est: Beta prior's alpha; p_hat = (alpha + N_pos) / (alpha + beta + "
                        f"N_total), so an unseen prompt gets alpha / (alpha + beta). Default: the preset's "
                        f"({preset_values('alpha')})")
    g.add_argument("--ada.est_beta", type=float, default=None,
                   help=f"With --ada.strategy est: Beta prior's beta. Default: the preset's ({preset_values('beta')})")
    g.add_argument("--ada.est_eps", type=float, default=None,
                   help="With --ada.strategy est: added to 1/sqrt(p_hat) in the inv_sqrt allocation weight (larger: "
                        "more uniform allocation; the authors' and knapsack allocations have none and refuse it). "
                        f"Default: the preset's ({preset_values('eps')})")
    g.add_argument("--ada.prompt_weight", type=str, default=ada.prompt_weight, choices=("auto",) + PROMPT_WEIGHTS,
                   help="Explicit per-prompt weight of the log objective on each group's advantages after the "
                        "baseline, from the prompt's pass rate p (seq: its pool's; est: its samples'): none; "
                        "inv_pass_rate, min(cap, 1/p + eps) (the paper's Seq weight); inv_sqrt_pass_rate, "
                        "min(cap, 1/sqrt(p) + eps) (the paper's Est advantage); auto (default): none with seq, "
                        "the --ada.est_preset's with est (paper: inv_sqrt_pass_rate, authors: none). Meant for "
                        "dr_grpo (the paper's), rloo and reinforce_baseline; on group_norm it multiplies a group "
                        "already divided by its std (a warning says so)")
    g.add_argument("--ada.prompt_weight_eps", type=float, default=ada.prompt_weight_eps,
                   help="eps of --ada.prompt_weight")
    g.add_argument("--ada.prompt_weight_cap", type=float, default=ada.prompt_weight_cap,
                   help="Largest --ada.prompt_weight (a prompt with p = 0 gets it)")

    g = parser.add_argument_group("Faults (openrlhf-ada): what a long run survives")
    g.add_argument("--fault.reward_timeout", type=float, default=fault.reward_timeout,
                   help="Seconds one call of a Python reward function may run (counted from when it starts, not "
                        "while it waits for a thread); longer counts as a failed sample. HTTP reward servers keep "
                        "upstream's policy (180 s per request, 5 tries)")
    g.add_argument("--fault.max_failed_share", type=float, default=fault.max_failed_share,
                   help="Stop the run when more than this share of a step's samples got no usable reward")
    g.add_argument("--fault.engine_timeout", type=float, default=fault.engine_timeout,
                   help="Seconds without progress before a training step fails (engines hung). Progress is a token "
                        "generated on any engine or a rollout coming back; engines that do not report tokens "
                        "(vLLM without statistics, the hf engine) show only finished requests. Default: derived, "
                        f"{ENGINE_TIMEOUT_FLOOR:.0f} s while every engine reports tokens, otherwise max("
                        f"{ENGINE_TIMEOUT_FLOOR:.0f}, L / {SLOW_DECODE_TOKENS_PER_S:.0f}) s for L = "
                        "--rollout.max_new_tokens (--data.max_len when unset): one whole request at "
                        f"{SLOW_DECODE_TOKENS_PER_S:.0f} tokens/s")

    g = parser.add_argument_group("Held-out evaluation (openrlhf-ada): avg@k, next to upstream's eval flags")
    g.add_argument("--eval.avg_k", type=int, default=ev.avg_k,
                   help="Also draw this many samples per held-out problem at every evaluation and log avg@k (the "
                        "mean over problems of each problem's share of correct samples) with its standard error "
                        "over problems, next to the --eval.temperature evaluation (greedy with 0); 0: off")
    g.add_argument("--eval.avg_temperature", type=float, default=ev.avg_temperature,
                   help="Sampling temperature of the --eval.avg_k samples (> 0)")
    g.add_argument("--eval.avg_seed", type=int, default=ev.avg_seed,
                   help="Seed of the --eval.avg_k samples, apart from --train.seed so that every run draws the same "
                        "ones for the same weights (transformers engine: per sample; vLLM keeps the seed its "
                        "engines started with, --train.seed)")

    g = parser.add_argument_group("CPU mode (openrlhf-ada, OPENRLHF_ADA_CPU=1 on a machine without CUDA)")
    g.add_argument("--cpu.kv_cache_gb", type=float, default=0.0,
                   help="Each vLLM engine's KV cache in GiB (0: computed from the model's layers, KV heads, head "
                        "size, bf16, --data.max_len and the sequences a step sends each engine, and logged; requests "
                        "beyond it queue). On CPU it replaces --vllm.gpu_memory_utilization, which vLLM would apply "
                        "to the memory node's RAM. Ignored on a GPU")
    g.add_argument("--cpu.ray_dashboard", action="store_true", default=False,
                   help="Start Ray's dashboard with the local Ray the launcher starts in the CPU mode (off by "
                        "default: on a 2-core machine it takes about 10 s of CPU at start-up, next to the actors'). A "
                        "Ray started with `ray start` (make cluster-demo, ray job submit) keeps its own")
    return parser


def adora_config(args) -> AdoraConfig:
    a = args.adora
    return AdoraConfig(
        enable=a.enable, variant=a.variant, lam=a.lam, boost=a.boost, positive_threshold=a.positive_threshold,
        start_step=a.start_step, end_step=a.end_step, weight_func=a.weight_func,
        **{k: flag_value(args, "adora." + k, getattr(AdoraConfig, k)) for k in ("tau", "amplify", "attenuate")},
    )


def seq_config(args) -> Seq:
    """Seq's settings (--ada.enable, --ada.strategy seq)."""
    a = args.ada
    return Seq(
        n=args.rollout.n_samples_per_prompt, mode=a.mode, round_size=a.round_size,
        first_round_size=a.first_round_size, max_rounds=a.max_rounds, positive_threshold=a.positive_threshold,
        unresolved=a.unresolved, selection=a.selection, baseline=a.baseline, schedule=a.schedule,
        seed=flag_value(args, "train.seed", Seq.seed),
        # namespaces built without the newer flags (tests, older callers) get the config's defaults
        **{k: flag_value(args, "ada." + k, getattr(Seq, k))
           for k in ("cancel", "cancel_order", *HISTORY_FLAGS, *PROMPT_WEIGHT_FLAGS)},
    )


def est_config(args) -> Est:
    """Est's settings (--ada.enable --ada.strategy est)."""
    return Est(
        n=args.rollout.n_samples_per_prompt, positive_threshold=args.ada.positive_threshold,
        seed=flag_value(args, "train.seed", Est.seed),
        **{field: flag_value(args, "ada." + flag, getattr(Est, field)) for flag, field in EST_FIELDS.items()},
        **{k: flag_value(args, "ada." + k, getattr(Est, k))
           for k in ("history", "history_skip", "history_window", *PROMPT_WEIGHT_FLAGS)},
    )


def sampling_config(args) -> Union[FixedN, Seq, Est, None]:
    """The training steps' sampling strategy's config, chosen once from the flags: `Seq` (--ada.enable),
    `Est` (--ada.strategy est), `FixedN` (one round of n, every sample kept: Reinforce-Ada off), or None: upstream's
    own generation (n = 1, or a reward model scores the samples after generation: the engines return no reward to
    judge while sampling, and --ada.enable is refused then)."""
    if flag_value(args, "ada.enable", False):
        return est_config(args) if flag_value(args, "ada.strategy", STRATEGIES[0]) == "est" else seq_config(args)
    n = args.rollout.n_samples_per_prompt
    if n >= 2 and not scored_by_reward_model(args):
        return FixedN(n, seed=flag_value(args, "train.seed", FixedN.seed))
    return None


def greso_config(args) -> Optional[GresoConfig]:
    """GRESO's settings of --ada.skip greso (the rest: GresoConfig's defaults, the authors'); None without it."""
    if flag_value(args, "ada.skip", "none") != "greso":
        return None
    return GresoConfig.from_flags(args)


def skip_rule(args, *, seed: int) -> SkipRule:
    """The run's --ada.skip rule (algorithms/skip_rules.py), built from the flags."""
    return SKIP_RULES.get(flag_value(args, "ada.skip", "none"), "ada.skip")(args, seed=seed)


HISTORY_FLAGS = ("history", "history_target", "history_skip", "history_window")
PROMPT_WEIGHT_FLAGS = ("prompt_weight", "prompt_weight_eps", "prompt_weight_cap")
#: The flags that act only with --ada.strategy est, and the `Est` field each sets.
EST_FIELDS = {"est_preset": "preset", "est_allocation": "allocation", "est_min": "n_min", "est_max": "n_max",
              "est_decay": "decay", "est_alpha": "alpha", "est_beta": "beta", "est_eps": "eps"}
EST_ONLY_FLAGS = tuple(EST_FIELDS)
#: The flags of Seq's rounds, which Est (one pass) has no use for; --ada.cancel and --ada.history_target are refused
#: with Est by their own messages (validate_est).
SEQ_ONLY_FLAGS = ("mode", "round_size", "first_round_size", "max_rounds", "unresolved", "selection", "baseline",
                  "schedule")
#: The flags that change Reinforce-Ada's advantage or strategy (refused without --ada.enable).
EST_FLAGS = ("strategy", *EST_ONLY_FLAGS, *PROMPT_WEIGHT_FLAGS)
#: Each --ada.* flag's default, from the config that holds it.
ADA_DEFAULTS = {"strategy": STRATEGIES[0], **{k: getattr(Seq, k) for k in (
    *SEQ_ONLY_FLAGS, "cancel", "cancel_order", *HISTORY_FLAGS, *PROMPT_WEIGHT_FLAGS)},
    **{flag: getattr(Est, field) for flag, field in EST_FIELDS.items()}}


def changed_ada_flags(args, names) -> list:
    """The --ada.* flags among `names` set to something other than their default."""
    return [k for k in names if flag_value(args, "ada." + k, ADA_DEFAULTS[k]) != ADA_DEFAULTS[k]]

ENGINE_TIMEOUT_FLOOR = 900.0  # seconds: the derived --fault.engine_timeout never goes below this
SLOW_DECODE_TOKENS_PER_S = 10.0  # the slow decode rate one whole request must be allowed to run at


@dataclass(frozen=True)
class FaultConfig:
    """What a run survives and when it gives up.

    `engine_timeout`: seconds a training step may go without progress before it fails (the stall watchdog of the
    samples generator). None derives it from `max_new_tokens` (the longest response a request may generate:
    --rollout.max_new_tokens, or --data.max_len when unset) through `engine_timeout_for`:
    - every engine reports the tokens it generates: ENGINE_TIMEOUT_FLOOR (900 s). Progress is then any token, so
      the timeout measures silence, whatever the response length; 900 s covers what legitimately generates no
      token (a step's rewards: --fault.reward_timeout is 60 s per call) with a wide margin;
    - otherwise only a finished request (a round of a prompt coming back) shows progress, so the timeout must
      cover one whole request: max(ENGINE_TIMEOUT_FLOOR, max_new_tokens / SLOW_DECODE_TOKENS_PER_S), i.e. a
      request decoding at 10 tokens/s, a pessimistic rate for one sequence of a busy engine whose KV cache
      preempts (a 32k-token chain of thought then gets 3277 s; 9000 tokens or fewer keep 900 s).
    An explicit value is used as it is in both cases.
    """

    reward_timeout: float = 60.0
    max_failed_share: float = 0.5
    engine_timeout: Optional[float] = None
    max_new_tokens: Optional[int] = None

    def __post_init__(self):
        check_finite("fault.reward_timeout", self.reward_timeout, minimum=0.001)
        if self.engine_timeout is not None:
            check_finite("fault.engine_timeout", self.engine_timeout, minimum=0.001)
        check_finite("fault.max_failed_share", self.max_failed_share, minimum=0.0)
        if self.max_failed_share > 1:
            raise ValueError(f"fault.max_failed_share={self.max_failed_share} is invalid; accepted values: 0 to 1")

    def engine_timeout_for(self, token_progress: bool) -> float:
        """The stall timeout in seconds: `engine_timeout` when set, else derived (class docstring);
        `token_progress`: every engine reports its generated tokens."""
        if self.engine_timeout is not None:
            return float(self.engine_timeout)
        if token_progress or not self.max_new_tokens:
            return ENGINE_TIMEOUT_FLOOR
        return max(ENGINE_TIMEOUT_FLOOR, self.max_new_tokens / SLOW_DECODE_TOKENS_PER_S)


def fault_config(args) -> FaultConfig:
    f = flag_value(args, "fault")
    max_new = flag_value(args, "rollout.max_new_tokens") or flag_value(args, "data.max_len")
    if f is None:
        return FaultConfig(max_new_tokens=max_new)
    return FaultConfig(reward_timeout=f.reward_timeout, max_failed_share=f.max_failed_share,
                       engine_timeout=getattr(f, "engine_timeout", None), max_new_tokens=max_new)


@dataclass(frozen=True)
class EvalConfig:
    """The project's --eval.* flags (upstream's --eval.dataset, --eval.steps, --eval.temperature,
    --eval.n_samples_per_prompt keep their meaning).

    `avg_k`: samples per held-out problem for avg@k, drawn in a pass of their own after the usual evaluation
    (0: off, the default: the evaluation stays exactly upstream's plus the accuracy keys). `avg_temperature`:
    their sampling temperature. `avg_seed`: their seed. The transformers engine (`--local.engine hf`) draws the j-th
    sample of a problem with a generator seeded by (avg_seed, problem, j): the same samples for the same weights,
    in every run and every evaluation, whatever --train.seed. vLLM takes no seed per request on its CPU backend, so
    its engines keep the seed they started with (--train.seed): reproducible run by run, not shared across seeds.
    """

    avg_k: int = 0
    avg_temperature: float = 1.0
    avg_seed: int = 0

    def __post_init__(self):
        if self.avg_k < 0:
            raise ValueError(f"eval.avg_k={self.avg_k}: must be >= 0 (0: no avg@k)")
        if not self.avg_temperature > 0 or self.avg_temperature == float("inf"):
            raise ValueError(f"eval.avg_temperature={self.avg_temperature}: avg@k samples, so it must be a finite "
                             "number > 0 (greedy is --eval.temperature 0)")


def eval_config(args) -> EvalConfig:
    """The EvalConfig of parsed flags (namespaces without the flags get its defaults)."""
    ev = getattr(args, "eval", None)
    return EvalConfig(**{k: getattr(ev, k, getattr(EvalConfig, k)) for k in ("avg_k", "avg_temperature", "avg_seed")})


def validate_sizes(args) -> None:
    """Upstream flags whose misuse upstream reports with a bare assertion or a confusing error later (or not at all):
    batch sizes below 1, a length budget with no room for the prompt. Raise ValueError naming the flags."""
    for flag in ("rollout.batch_size", "rollout.n_samples_per_prompt", "rollout.micro_batch_size",
                 "train.batch_size", "train.micro_batch_size"):
        value = flag_value(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag}={value}: must be >= 1")
    n, batch, micro = (flag_value(args, f"rollout.{k}") for k in ("n_samples_per_prompt", "batch_size", "micro_batch_size"))
    actors = (flag_value(args, "actor.num_nodes", 1) * flag_value(args, "actor.num_gpus_per_node", 1)
              // flag_value(args, "ds.ring_attn_size", 1) // flag_value(args, "ds.tensor_parallel_size", 1))
    if None not in (n, batch, micro) and n * batch // micro < actors:
        raise ValueError(f"--rollout.n_samples_per_prompt {n} x --rollout.batch_size {batch} = {n * batch} samples "
                         f"per step make {n * batch // micro} micro-batches of --rollout.micro_batch_size {micro}, "
                         f"fewer than the {actors} actor process(es) that each need one: lower "
                         "--rollout.micro_batch_size or raise the batch")
    validate_dynamic_batch(args, n, batch, actors)
    max_len, max_new = flag_value(args, "data.max_len"), flag_value(args, "rollout.max_new_tokens")
    if max_new is not None and max_new < 1:
        raise ValueError(f"--rollout.max_new_tokens={max_new}: must be >= 1 (or unset: max_len - prompt length)")
    if max_len is not None and max_new is not None and max_len <= max_new:
        raise ValueError(f"--data.max_len={max_len} is the prompt + response budget, so it must exceed "
                         f"--rollout.max_new_tokens={max_new} (that leaves no room for the prompt): raise "
                         "--data.max_len or lower --rollout.max_new_tokens")


def validate_dynamic_batch(args, n, batch, actors: int) -> None:
    """--train.dynamic_batch_enable: upstream's replay buffer trains each rank's share in whole slices of
    --train.batch_size / ranks samples, as many as the smallest share fills and at most a full step's worth of train
    batches, and skips the rest without a word. A full step that is not a whole number of train batches, or a train
    batch that the ranks cannot split evenly, so loses samples every step (the step ledger would stop the run at step
    1): refuse it before anything starts, with how many samples a step would lose."""
    train_batch = flag_value(args, "train.batch_size")
    if not flag_value(args, "train.dynamic_batch_enable", False) or None in (n, batch, train_batch) or actors < 1:
        return
    step = n * batch
    if step % train_batch == 0 and train_batch % actors == 0:
        return
    per_rank = train_batch // actors  # the slice each rank trains per train batch
    trained = min(step // train_batch, (step // actors) // per_rank) * per_rank * actors if per_rank else 0
    fits = [size for size in range(min(train_batch, step), 0, -1) if step % size == 0 and size % actors == 0]
    fix = (f"--train.batch_size {fits[0]}" if fits else
           f"a --rollout.batch_size whose step is a multiple of --train.batch_size {train_batch}")
    raise ValueError(
        f"--train.dynamic_batch_enable with --rollout.batch_size {batch} x --rollout.n_samples_per_prompt {n} = "
        f"{step} samples a step and --train.batch_size {train_batch} over {actors} actor rank(s): upstream's replay "
        f"buffer trains each rank's share only in whole slices of {train_batch} / {actors} samples, so {step - trained} "
        f"of every {step} samples would never be trained. Make the step a whole number of train batches and the train "
        f"batch a multiple of the ranks (here: {fix}), or drop --train.dynamic_batch_enable")


def validate_group_estimator(args) -> None:
    """A group-baseline estimator with one sample per prompt (upstream: a bare assertion), named by its flags."""
    n, estimator = args.rollout.n_samples_per_prompt, flag_value(args, "algo.advantage.estimator")
    if estimator in GROUP_BASELINE_ESTIMATORS and n < 2:
        raise ValueError(f"--algo.advantage.estimator {estimator} compares the samples of each prompt, so it needs "
                         f"--rollout.n_samples_per_prompt >= 2 (got {n}); with one sample per prompt use "
                         "--algo.advantage.estimator reinforce")




def validate_cancel_and_history(args) -> None:
    """--ada.cancel / --ada.history and their options act only together with what they need; otherwise a run would
    silently do without them. Raise ValueError naming the flags."""
    cancel, history = bool(flag_value(args, "ada.cancel", False)), bool(flag_value(args, "ada.history", False))
    enable = bool(flag_value(args, "ada.enable", False))
    for flag, on in (("--ada.cancel", cancel), ("--ada.history", history)):
        if on and not enable:
            raise ValueError(f"{flag} changes Reinforce-Ada's sampling, so it needs --ada.enable (without it "
                             "training generation is one round of n per prompt and the flag would do nothing)")
    if not cancel and changed_ada_flags(args, ["cancel_order"]):
        raise ValueError(f"--ada.cancel_order {flag_value(args, 'ada.cancel_order')} only acts with --ada.cancel: add "
                         "--ada.cancel or drop the option")
    if not history:
        changed = [f"--ada.{k} {flag_value(args, 'ada.' + k)}" for k in changed_ada_flags(args, HISTORY_FLAGS[1:])]
        if changed:
            raise ValueError(f"{', '.join(changed)} only act(s) with --ada.history: add --ada.history or drop them")
    if cancel and flag_value(args, "local.engine") == "hf":
        raise ValueError(
            "--ada.cancel needs the vLLM engine: --local.engine hf generates one request at a time inside its "
            "event loop, so a running request cannot be interrupted, and which of the waiting ones got cancelled "
            "would depend on timing, breaking that engine's exact reproducibility. Use --local.engine vllm, or drop "
            "--ada.cancel"
        )


def validate_skip(args) -> None:
    """--ada.skip greso against what it needs and --ada.history's own skip; raise ValueError naming the flags."""
    try:
        greso = greso_config(args)
    except ValueError as e:
        raise ValueError(f"--ada.greso_target {flag_value(args, 'ada.greso_target')}: {e}") from None
    if greso is None:
        if flag_value(args, "ada.greso_target", GresoConfig.target) != GresoConfig.target:
            raise ValueError(f"--ada.greso_target {flag_value(args, 'ada.greso_target')} only acts with --ada.skip greso: "
                             "add it or drop the option")
        return
    n = flag_value(args, "rollout.n_samples_per_prompt", 1)
    if n < 2:
        raise ValueError(f"--ada.skip greso with --rollout.n_samples_per_prompt {n}: GRESO skips prompts whose groups "
                         "all had the same reward, and a group of one sample always has; use n >= 2 or drop "
                         "--ada.skip greso")
    if scored_by_reward_model(args):
        raise ValueError("--ada.skip greso with --reward.model_name_or_path: the skip reads each prompt's correct and "
                         "wrong samples as its groups finish, but a reward model scores them only after generation "
                         "(the samples generator then runs upstream's path). Score with a reward function "
                         "(--reward.remote_url path/to/reward.py or an HTTP reward server), or drop --ada.skip greso")
    if flag_value(args, "ada.history", False):
        changed = [f"--ada.{k} {flag_value(args, 'ada.' + k)}" for k in ("history_skip", "history_window")
                   if k in changed_ada_flags(args, [k])]
        if changed:
            raise ValueError(f"{', '.join(changed)} with --ada.skip greso: GRESO's skip replaces --ada.history's "
                             "(whose probability and window these set), so they would do nothing; drop them "
                             "(--ada.history keeps its first-round sizing, --ada.history_target) or drop "
                             "--ada.skip greso")


def validate(args) -> None:
    """Check the project's flags against each other and against upstream's; raise ValueError (what, how to fix).
    Upstream features that do not combine with a project setting are refused by one table: compatibility.py."""

    validate_sizes(args)
    check_compatibility(args)
    kv_cache_gb = flag_value(args, "cpu.kv_cache_gb", 0.0)
    if not kv_cache_gb >= 0 or kv_cache_gb == float("inf"):
        raise ValueError(f"--cpu.kv_cache_gb={kv_cache_gb}: must be a finite number >= 0 (0: computed)")
    check_reward_url(flag_value(args, "reward.remote_url"), flag_value(args, "train.agent_func_path"))
    try:
        fault_config(args)
    except ValueError as e:
        raise ValueError(f"--{e}") from None
    try:
        adora = adora_config(args)
        evaluation = eval_config(args)
    except ValueError as e:
        raise ValueError(f"--{e}") from None
    if evaluation.avg_k and not flag_value(args, "eval.dataset"):
        raise ValueError(f"--eval.avg_k {evaluation.avg_k} without --eval.dataset: name the held-out prompts to "
                         "evaluate")
    estimator = flag_value(args, "algo.advantage.estimator")
    has_reward_fn = bool(flag_value(args, "reward.remote_url") or flag_value(args, "train.agent_func_path"))
    if adora.enable and adora.weight_func:
        load_weight_func(adora.weight_func)  # fails now, naming file and function, not mid-run
    validate_cancel_and_history(args)
    validate_skip(args)
    if not args.ada.enable:
        changed = [f"--ada.{k}" for k in changed_ada_flags(args, EST_FLAGS)]
        if changed:
            raise ValueError(f"{', '.join(changed)} change(s) Reinforce-Ada, so it needs --ada.enable")
        validate_group_estimator(args)
        return
    try:
        ada = sampling_config(args)
    except ValueError as e:
        raise ValueError(f"--{e}" if str(e).startswith("ada.") else str(e)) from None
    if not has_reward_fn:
        raise ValueError(
            "--ada.enable decides on rewards while sampling, so it needs a reward function: pass "
            "--reward.remote_url path/to/reward.py (or an HTTP URL) or --train.agent_func_path"
        )
    validate_group_estimator(args)
    validate_prompt_weight(ada, estimator)
    if isinstance(ada, Est):
        validate_est(args, ada, estimator)
    else:
        validate_seq(args, ada, estimator)


def validate_prompt_weight(ada: Union[Seq, Est], estimator) -> None:
    """--ada.prompt_weight against the estimator (and a warning where the weight compounds a normalisation); raise
    ValueError naming the flags. docs/algorithms.md says why the refused pairs mean nothing."""
    if ada.weight_kind != "none" and estimator not in GROUP_BASELINE_ESTIMATORS:
        raise ValueError(f"--ada.prompt_weight {ada.weight_kind} weights each group's advantages after the baseline "
                         f"of {', '.join(GROUP_BASELINE_ESTIMATORS)}; --algo.advantage.estimator={estimator} has "
                         "none")
    if ada.weight_kind != "none" and estimator == "group_norm":
        logger.warning(f"--ada.prompt_weight {ada.weight_kind} on --algo.advantage.estimator group_norm: each group is "
                       "already divided by its reward std (for 0/1 rewards about sqrt(p (1 - p))), so the weight "
                       "compounds a normalisation (1/sqrt(p) on top of it: about 1 / (p sqrt(1 - p))). The paper's "
                       "Est advantage is dr_grpo with inv_sqrt_pass_rate; --ada.prompt_weight none keeps group_norm's")


def validate_seq(args, ada: Seq, estimator) -> None:
    """Seq's flags against the rest; raise ValueError naming the flags."""
    if ada.baseline == "pool" and estimator not in GROUP_BASELINE_ESTIMATORS:
        raise ValueError(
            f"--ada.baseline pool replaces the group baseline of {', '.join(GROUP_BASELINE_ESTIMATORS)}; "
            f"--algo.advantage.estimator={estimator} has none. Use one of those or --ada.baseline group"
        )
    if ada.weight_kind != "none" and ada.baseline != "pool":
        raise ValueError(f"--ada.prompt_weight {ada.weight_kind} with --ada.strategy seq reads the pool's pass rate: "
                         "it needs --ada.baseline pool")
    changed = [f"--ada.{k}" for k in changed_ada_flags(args, EST_ONLY_FLAGS)]
    if changed:
        raise ValueError(f"{', '.join(changed)} only act(s) with --ada.strategy est: add it or drop them")


def validate_est(args, ada: Est, estimator) -> None:
    """--ada.strategy est against the rest; raise ValueError naming the flags."""
    seq_only = [f"--ada.{k} {flag_value(args, 'ada.' + k)}" for k in changed_ada_flags(args, SEQ_ONLY_FLAGS)]
    if seq_only:
        raise ValueError(f"{', '.join(seq_only)} set(s) Seq's rounds (--ada.strategy seq); --ada.strategy est samples "
                         "each prompt once with its allocated count and trains every sample against its preset's "
                         "baseline (--ada.est_preset), so the flag would do nothing: drop it or use --ada.strategy seq")
    est = ada.resolved  # an estimator without a group baseline is refused in compatibility.py
    if est.baseline == "authors" and estimator not in ("dr_grpo", "group_norm"):
        raise ValueError(f"--ada.est_preset {ada.preset} trains the authors' advantage, their GRPO: "
                         "--algo.advantage.estimator dr_grpo (r - mean, their script's norm_adv_by_std_in_grpo=False) "
                         f"or group_norm ((r - mean) / (std + 1e-6)); got {estimator}")
    if est.allocation == "authors":
        unused = [f"--ada.{k}" for k in ("est_max", "est_eps") if flag_value(args, "ada." + k) is not None]
        if unused:
            raise ValueError(f"{', '.join(unused)} with the authors' allocation (--ada.est_allocation authors): their "
                             "rule has no upper bound and no eps, so the flag would do nothing; drop it or use "
                             "--ada.est_allocation inv_sqrt")
    if est.allocation == "knapsack" and flag_value(args, "ada.est_eps") is not None:
        raise ValueError("--ada.est_eps with --ada.est_allocation knapsack: "
                         "Knapsack-RL's allocation maximises the task value and has no eps, so the flag would do "
                         "nothing; drop --ada.est_eps, or use --ada.est_allocation inv_sqrt where eps flattens the "
                         "allocation")
    gen_batch = flag_value(args, "rollout.vllm_generate_batch_size")
    for flag, bad, why in (
            ("--ada.cancel", flag_value(args, "ada.cancel", False),
             "Est trains every sample it allocated: there is no exit rule to stop a prompt early on"),
            ("--ada.history_target", flag_value(args, "ada.history_target", 0.0) > 0,
             "it sizes Seq's first round; Est has no rounds, its allocation is already the per-prompt sizing"),
            ("--rollout.vllm_generate_batch_size", gen_batch not in (None, flag_value(args, "rollout.batch_size")),
             "upstream splits a larger generation batch into steps of batch x n samples, which cuts groups of "
             "varying size apart")):
        if bad:
            raise ValueError(f"--ada.strategy est samples each prompt once with its allocated count; {flag} does not "
                             f"combine with it: {why} (docs/algorithms.md)")
