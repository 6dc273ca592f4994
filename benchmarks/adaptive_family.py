"""The adaptive-sampling family at equal generated tokens, on simulated prompts whose pass rates drift with training.

    python benchmarks/adaptive_family.py                          # 3 mixes x 3 seeds, writes docs/benchmarks.md
    python benchmarks/adaptive_family.py --prompts 128 --seeds 0 --epochs 2 --no-write     # seconds

Which rule puts the most generated tokens into trained groups with signal (a correct and a wrong answer, so a
non-zero GRPO-style gradient)? Every rule gets the same token budget: what GRPO n=4 generates in `--epochs` passes
over the data. Each rule runs training steps of `--batch` prompt slots over the same data, until its next step would
pass the budget.

The model (its assumptions, written into the section it produces):
- a data set of `--prompts` prompts, each with an initial pass rate from a mix (`sampling_efficiency.MIXES`), seen
  in one shuffled order per pass (the same orders for every rule);
- pass rates drift as training moves them: at update t a prompt's logit is its initial one plus g x t / (steps per
  pass), g ~ uniform(0, 2 x RISE) per prompt (RISE logits per pass on average); prompts at exactly 0 or 1 stay there
  (unsolvable / solved). Every rule makes one update per step, so a rule whose steps cost fewer tokens gets further
  in updates within the budget, and its prompts are easier there, as in a real run;
- outcomes and lengths are common random numbers: sample k of a prompt's e-th visit reads the same uniform draw
  under every rule (correct when it is below the pass rate at that update), and its length the same log-normal
  draw, scaled by a per-prompt factor and the median of its class (`--lengths`, as in `sampling_efficiency`);
- each rule is the project's own code: Seq through `simulate` (the `PromptPool` of the trainers), Est and Knapsack
  through `simulate_est` (the estimator, the history's Ada-EMA counts and the registered allocation rule), GRESO
  through `greso.decide_skip` / `greso.adapt` on the groups each prompt had in its earlier passes.

Rules: GRPO n=4 and n=8; DAPO-style dynamic filtering (upstream's `--algo.dynamic_filtering_enable`: n=4 for every
drawn prompt, a group without both classes is dropped and the next prompt drawn, until the step has `--batch` groups
or has drawn `--dapo-cap` x `--batch` prompts); Seq balance (the authors' n=4, a round of 8 then up to 3 more); Est
paper and Est authors (budget 4 per prompt); Knapsack (Est's estimator, the knapsack allocation within [2, 32]);
GRESO's skip before each of GRPO n=4, Seq balance and Est paper. An A/A row (GRPO n=4 again, its seed's draws
shifted) shows the spread that chance alone gives.

Per rule and mix, the median over seeds and the range:
- updates: steps within the budget; trained groups with signal (the learning signal bought with the budget);
- signal share: trained groups with signal / trained groups;
- tokens per signal group: generated tokens / trained groups with signal;
- never trained: share of the data set's prompts never in a trained group with signal; in brackets, the same share
  among the prompts that could have had one (initial 0 < p < 1).

Writes its section of docs/benchmarks.md (between `<!-- BEGIN adaptive_family -->` and `<!-- END ... -->`).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402
from sampling_efficiency import LEN_SIGMA, LENGTH_MODELS, MAX_LEN, MIN_LEN, MIXES, PROMPT_SIGMA  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from openrlhf_ada.algorithms import greso  # noqa: E402
from openrlhf_ada.algorithms.estimate import EstConfig  # noqa: E402
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory, prompt_key  # noqa: E402
from openrlhf_ada.algorithms.simulation import simulate, simulate_est  # noqa: E402

SECTION = "adaptive_family"
N = 4
STREAM = 256  # draws per prompt visit: Est authors' allocation has no upper bound (at most batch x N - batch + 1)
RISE = 0.5  # mean logit gain per pass over the data
GRESO_WINDOW = 4  # GRESO reads a prompt's last few groups (the project's history keeps the last epochs)


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str  # grpo | dapo | seq | est
    n: int = N
    preset: str = "paper"  # est
    allocation: Optional[str] = None  # est: None = the preset's
    greso: bool = False


RULES: List[Rule] = [
    Rule("GRPO n=4", "grpo"),
    Rule("GRPO n=4 (A/A)", "grpo"),
    Rule("GRPO n=8", "grpo", n=8),
    Rule("DAPO dynamic filtering n=4", "dapo"),
    Rule("Seq balance (8 + 8 x 3)", "seq"),
    Rule("Est paper", "est"),
    Rule("Est authors", "est", preset="authors"),
    Rule("Knapsack (Est's estimator)", "est", allocation="knapsack"),
    Rule("GRESO + GRPO n=4", "grpo", greso=True),
    Rule("GRESO + Seq balance", "seq", greso=True),
    Rule("GRESO + Est paper", "est", greso=True),
]
AA = "GRPO n=4 (A/A)"
REFERENCE = RULES[0]  # GRPO n=4: its tokens in `--epochs` passes are every rule's budget


class World:
    """One (mix, seed): initial pass rates, drift rates, per-prompt length scales, pass orders, and the draws of each
    prompt visit (uniforms for outcomes, log-normal factors for lengths), made on first use and shared by all rules."""

    def __init__(self, mix: str, lengths: str, prompts: int, batch: int, seed: int):
        rng = np.random.default_rng([seed, 7, list(MIXES).index(mix)])
        self.seed, self.prompts, self.batch = seed, prompts, batch
        self.p0 = MIXES[mix][1](rng, prompts)
        clipped = np.clip(self.p0, 1e-12, 1 - 1e-12)
        self.logit0 = np.log(clipped / (1 - clipped))
        self.gain = rng.uniform(0.0, 2.0 * RISE, prompts)
        self.scale = rng.lognormal(0.0, PROMPT_SIGMA, prompts)
        self.median = LENGTH_MODELS[lengths]
        self.keys = [prompt_key(f"{mix} {seed} prompt {i}") for i in range(prompts)]
        self._orders: Dict[int, np.ndarray] = {}
        self._draws: Dict[int, tuple] = {}

    def order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders[epoch] = np.random.default_rng([self.seed, 8, epoch]).permutation(self.prompts)
        return self._orders[epoch]

    def pass_rate(self, i: int, update: int) -> float:
        if self.p0[i] in (0.0, 1.0):
            return float(self.p0[i])
        logit = self.logit0[i] + self.gain[i] * update * self.batch / self.prompts
        return float(1.0 / (1.0 + np.exp(-logit)))

    def visit(self, i: int, epoch: int, update: int, shift: int = 0):
        """Outcomes (1.0 correct) and lengths of the STREAM samples prompt i would produce on its `epoch`-th visit at
        `update`."""
        key = epoch + 1000 * shift
        if key not in self._draws:
            rng = np.random.default_rng([self.seed, 9, epoch, shift])
            self._draws[key] = (rng.random((self.prompts, STREAM)), rng.lognormal(0.0, LEN_SIGMA, (self.prompts, STREAM)))
        u, noise = self._draws[key]
        correct = u[i] < self.pass_rate(i, update)
        med = np.where(correct, self.median[0], self.median[1]) * self.scale[i]
        length = np.clip(np.rint(med * noise[i]).astype(int), MIN_LEN, MAX_LEN)
        return correct.astype(float).tolist(), length.tolist()


def _group(outcomes: Sequence[float]) -> tuple:
    pos = int(sum(1 for x in outcomes if x > 0.5))
    return pos, len(outcomes) - pos


def run_rule(rule: Rule, world: World, budget: float, dapo_cap: int, max_updates: Optional[int] = None) -> Dict:
    """Training steps of `world.batch` slots until the next would pass `budget` generated tokens (or, with
    `max_updates`, after that many steps)."""
    shift = 1 if rule.name == AA else 0
    est_history = est = None
    if rule.kind == "est":
        overrides = {"allocation": rule.allocation} if rule.allocation else {}
        est = EstConfig.from_preset(rule.preset, rule.n, **overrides)
        est_history = PromptHistory(HistoryConfig(ema=True, ema_decay=est.decay))
    gconf, gstate = greso.GresoConfig(), None
    if rule.greso:
        gstate = greso.GresoState.initial(gconf)
    groups: Dict[int, List[tuple]] = {}  # GRESO: each prompt's groups in earlier passes, oldest first
    visits = np.zeros(world.prompts, dtype=int)
    signal_prompts = np.zeros(world.prompts, dtype=bool)
    ever_open = (world.p0 > 0.0) & (world.p0 < 1.0)  # p = 0 and p = 1 stay there; others drift, never reaching them
    cursor, tokens, updates = 0, 0, 0
    t = {"trained": 0, "signal": 0, "skipped": 0, "drawn": 0}

    def next_prompt():
        nonlocal cursor
        epoch, pos = divmod(cursor, world.prompts)
        cursor += 1
        return int(world.order(epoch)[pos]), epoch

    while max_updates is None or updates < max_updates:
        step_tokens, step, step_skipped = 0, [], 0  # step: (prompt, generated outcomes, trained outcomes)
        slots = []
        while len(slots) < world.batch:  # the step's prompts; GRESO skips before rollout
            i, epoch = next_prompt()
            if gstate is not None and greso.decide_skip(groups.get(i, [])[-GRESO_WINDOW:], gstate, gconf,
                                                        greso.skip_rng(world.seed, epoch, world.keys[i])):
                step_skipped += 1
                continue
            slots.append(i)
        draws = []
        for i in slots:
            outcomes, lengths = world.visit(i, int(visits[i]), updates, shift)
            draws.append((i, outcomes, lengths))
            visits[i] += 1
        if rule.kind == "grpo":
            for i, o, L in draws:
                step.append((i, o[:rule.n], o[:rule.n]))
                step_tokens += sum(L[:rule.n])
        elif rule.kind == "dapo":
            queue, drawn, accepted = list(draws), 0, 0
            while accepted < world.batch and drawn < dapo_cap * world.batch:
                if not queue:
                    i, _ = next_prompt()
                    o, L = world.visit(i, int(visits[i]), updates, shift)
                    visits[i] += 1
                    queue.append((i, o, L))
                i, o, L = queue.pop(0)
                drawn += 1
                step_tokens += sum(L[:rule.n])
                kept = o[:rule.n]
                if 0 < sum(kept) < len(kept):
                    accepted += 1
                    step.append((i, kept, kept))
                else:
                    step.append((i, kept, None))  # filtered: generated, not trained
        elif rule.kind == "seq":
            results = simulate([o for _, o, _ in draws], n=N, round_size=8, first_round_size=8, max_rounds=4,
                               mode="balance", seed=world.seed, length_streams=[L for _, _, L in draws])
            for (i, o, _), r in zip(draws, results):
                step_tokens += r.tokens
                step.append((i, o[:r.samples], [o[j] for j in r.kept]))
        else:
            results = simulate_est([o for _, o, _ in draws], config=est, history=est_history,
                                   prompt_keys=[world.keys[i] for i in slots], epoch=updates,
                                   length_streams=[L for _, _, L in draws])
            for (i, o, _), r in zip(draws, results):
                step_tokens += r.tokens
                step.append((i, o[:r.samples], [o[j] for j in r.kept]))
        if tokens + step_tokens > budget:
            break
        tokens += step_tokens
        updates += 1
        t["skipped"] += step_skipped
        rolled = []
        for i, generated, trained in step:
            t["drawn"] += 1
            rolled.append(_group(generated))
            groups.setdefault(i, []).append(_group(generated))
            if trained is None:
                continue
            t["trained"] += 1
            if 0 < sum(trained) < len(trained):
                t["signal"] += 1
                signal_prompts[i] = True
        if gstate is not None:
            easy, hard, total = greso.zero_variance_counts(rolled)
            gstate = greso.adapt(gstate, easy, hard, total, gconf, epoch=cursor // world.prompts)
    never = ~signal_prompts
    return {
        "updates": updates, "tokens": tokens, "trained": t["trained"], "signal": t["signal"],
        "share": t["signal"] / max(t["trained"], 1), "tokens_per_signal": tokens / max(t["signal"], 1),
        "never": float(never.mean()), "never_open": float((never & ever_open).sum() / max(ever_open.sum(), 1)),
        "skipped": t["skipped"], "p_easy": gstate.p_easy if gstate else None, "p_hard": gstate.p_hard if gstate else None,
    }


def run(mixes: Sequence[str], seeds: Sequence[int], prompts: int, batch: int, epochs: float, lengths: str,
        dapo_cap: int) -> List[Dict]:
    rows = []
    for mix in mixes:
        for seed in seeds:
            world = World(mix, lengths, prompts, batch, seed)
            budget = grpo_budget(world, epochs)
            order = RULES[seed % len(RULES):] + RULES[:seed % len(RULES)]  # rotating order (no state is shared)
            for rule in order:
                start = time.process_time()
                out = run_rule(rule, world, budget, dapo_cap)
                rows.append({"mix": mix, "seed": seed, "rule": rule.name, "budget": budget,
                             "cpu_s": time.process_time() - start, **out})
    return rows


def grpo_budget(world: World, epochs: float) -> float:
    """Every rule's token budget: what GRPO n=4 generates in `epochs` passes over the data (its own run, stopped
    after that many steps)."""
    steps = int(round(epochs * world.prompts / world.batch))
    return float(run_rule(REFERENCE, world, math.inf, dapo_cap=0, max_updates=steps)["tokens"])


def _cell(values: Sequence[float], fmt: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    mid = statistics.median(values)
    return fmt.format(mid) if len(values) == 1 else f"{fmt.format(mid)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(rows: List[Dict], mix: str) -> str:
    mine = [r for r in rows if r["mix"] == mix]
    ref = statistics.median(r["tokens_per_signal"] for r in mine if r["rule"] == "GRPO n=4")
    lines = ["| rule | updates | trained groups with signal | signal share | tokens per signal group | ratio to GRPO n=4 "
             "| never trained (of 0 < p < 1) | skipped by GRESO | p_easy / p_hard at the end |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rule in RULES:
        rs = [r for r in mine if r["rule"] == rule.name]
        lines.append(" | ".join([
            f"| {rule.name}", _cell([r["updates"] for r in rs], "{:.0f}"), _cell([r["signal"] for r in rs], "{:.0f}"),
            _cell([r["share"] for r in rs], "{:.2f}"), _cell([r["tokens_per_signal"] / 1000 for r in rs], "{:.1f}k"),
            _cell([r["tokens_per_signal"] / ref for r in rs], "{:.2f}"),
            f"{_cell([r['never'] for r in rs], '{:.2f}')} ({_cell([r['never_open'] for r in rs], '{:.2f}')})",
            _cell([r["skipped"] for r in rs], "{:.0f}") if rule.greso else "-",
            (f"{_cell([r['p_easy'] for r in rs], '{:.2f}')} / {_cell([r['p_hard'] for r in rs], '{:.2f}')}"
             if rule.greso else "-"),
        ]) + " |")
    return "\n".join(lines)


def section(args, rows: List[Dict], argv: Sequence[str], minutes: float) -> str:
    command = "python benchmarks/adaptive_family.py " + " ".join(argv)
    budget = {mix: statistics.median(r["budget"] for r in rows if r["mix"] == mix) for mix in args.mixes}
    parts = [
        "## The adaptive-sampling family at equal generated tokens (simulated prompts)",
        "",
        f"Written by `benchmarks/adaptive_family.py`: `{command.strip()}`. Machine: {_report.machine()}; "
        f"{minutes:.1f} minutes of CPU (pure python: no model, no engine). Date: {time.strftime('%Y-%m-%d')}.",
        "",
        f"**The model.** {args.prompts} prompts, steps of {args.batch} prompt slots, one update per step; the budget "
        f"is what GRPO n=4 generates in {args.epochs:g} passes over the data (a rule stops before the step that would "
        f"pass it). Pass rates drift with updates ({RISE} logits per pass of updates on average, per prompt uniform in "
        f"[0, {2 * RISE}]; p = 0 and p = 1 stay); lengths: `{args.lengths}` (median {LENGTH_MODELS[args.lengths][0]} "
        f"tokens correct, {LENGTH_MODELS[args.lengths][1]} wrong, per-prompt scale and per-sample noise log-normal); "
        f"outcomes and lengths are common random numbers across rules (the A/A row reads another seed's draws). "
        f"Each rule is the project's own code (Seq: `simulate`; Est, Knapsack: `simulate_est` with the registered "
        f"allocation; GRESO: `greso.decide_skip`, `greso.adapt`, the authors' values, on each prompt's last "
        f"{GRESO_WINDOW} groups). DAPO draws at most {args.dapo_cap} x {args.batch} prompts per step. Seeds "
        f"{' '.join(map(str, args.seeds))}: the median and [range] over seeds. The assumptions that decide the "
        f"numbers: independent Bernoulli outcomes at a pass rate known to the simulator, drift by updates alone "
        f"(not by what a rule trains), and lengths that do not change with training.",
        "",
    ]
    for mix in args.mixes:
        parts += [f"### Mix `{mix}`: {MIXES[mix][0]}; budget {budget[mix] / 1e6:.1f}M tokens", "", table(rows, mix), ""]
    parts += ["**Reading it.**", "", *reading(rows, args.mixes), "",
              "**What the model cannot say.** It counts signal, not learning: the drift does not depend on what a "
              "rule trains, so a rule that stops training a kind of prompt (GRESO skipping a streak, DAPO dropping "
              "all-wrong groups) loses nothing here for it, and what Seq's extra samples buy besides signal (a baseline "
              "from the whole pool, balanced groups) and what Est's and Knapsack's weighting do to the gradient are not "
              "modelled. A skip costs no tokens here, and the prompts that fill its slots come from further along the "
              "data, so a skipping rule makes more passes over the data within the budget. Whether more signal per "
              "token becomes more accuracy per token is for a learning comparison (docs/learning.md) to show."]
    return "\n".join(parts)


def reading(rows: List[Dict], mixes: Sequence[str]) -> List[str]:
    """Per mix: the rule with the fewest tokens per trained group with signal and the most signal groups, each with its
    ratio to GRPO n=4 and the A/A row's distance from 1."""
    out = []
    for mix in mixes:
        med = {rule.name: {k: statistics.median(r[k] for r in rows if r["mix"] == mix and r["rule"] == rule.name)
                           for k in ("tokens_per_signal", "signal", "never")} for rule in RULES}
        ref = med["GRPO n=4"]
        cheapest = min(med, key=lambda k: med[k]["tokens_per_signal"])
        most = max(med, key=lambda k: med[k]["signal"])
        aa = med[AA]["tokens_per_signal"] / ref["tokens_per_signal"]
        out.append(f"- `{mix}`: fewest tokens per signal group: {cheapest} "
                   f"({med[cheapest]['tokens_per_signal'] / ref['tokens_per_signal']:.2f}x GRPO n=4); most trained "
                   f"groups with signal within the budget: {most} ({med[most]['signal']:.0f} against GRPO n=4's "
                   f"{ref['signal']:.0f}); the A/A row at {aa:.2f}x.")
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=512, help="prompts in the data set")
    parser.add_argument("--batch", type=int, default=64, help="prompt slots per step (--rollout.batch_size)")
    parser.add_argument("--epochs", type=float, default=8.0, help="the budget: GRPO n=4's tokens in this many passes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--mixes", nargs="+", default=["uniform", "mostly_hard", "saturated"], choices=list(MIXES))
    parser.add_argument("--lengths", default="wrong_longer", choices=list(LENGTH_MODELS))
    parser.add_argument("--dapo-cap", type=int, default=10, help="DAPO draws at most this many batches per step")
    parser.add_argument("--docs", default=os.path.join(REPO, "docs", "benchmarks.md"))
    parser.add_argument("--no-write", action="store_true", help="print only; leave the docs file alone")
    args = parser.parse_args(argv)
    start = time.process_time()
    rows = run(args.mixes, args.seeds, args.prompts, args.batch, args.epochs, args.lengths, args.dapo_cap)
    text = section(args, rows, argv, (time.process_time() - start) / 60)
    print(text)
    if not args.no_write:
        _report.update_section(args.docs, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
