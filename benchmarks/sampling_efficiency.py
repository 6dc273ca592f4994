"""Sampling efficiency of GRPO, DAPO-style filtering, Reinforce-Ada settings and an oracle, on simulated prompts.

    python benchmarks/sampling_efficiency.py                 # 2000 prompts per mix, seeds 0 1 2, writes docs/
    python benchmarks/sampling_efficiency.py --prompts 200 --seeds 0 --no-write --epoch-prompts 100

The model: a training step has B prompt slots (`--prompts`). Every prompt has a pass rate p drawn from a mix, and
its samples are independent Bernoulli(p) outcomes (reward 1 correct, 0 wrong; all responses the same length, so
shares of samples are shares of tokens). Each prompt owns one pre-drawn outcome stream, and every method reads the
same streams in the same order (common random numbers): a method that draws 4 samples of a prompt sees the same 4
outcomes as any other method that draws 4. Reinforce-Ada runs through the project's own per-prompt code
(`openrlhf_ada.algorithms.simulation.simulate`, i.e. `PromptPool`: exit rule, rounds, group selection).

Methods (n = trained group size):
- GRPO n: every prompt draws n samples and trains on them.
- DAPO n=8: every prompt draws 8; a group without both classes is filtered out and a fresh prompt is drawn in its
  place, until all B slots hold a group with both classes or `--cap` x B prompts have been drawn (then the step
  trains what it has; empty slots count as slots without signal).
- Reinforce-Ada (mode, first round size + round size x further rounds, unresolved keep/drop), n = 4: `simulate`.
  `drop`: a prompt unresolved after its last round is dropped and a fresh prompt goes through the same procedure in
  its place (the same cap).
- two oracles that know each prompt's pass rate p (n = 4, budget K = 32 = the authors' per-prompt maximum). Both
  skip *hopeless* prompts, those with P(both classes among K samples) = 1 - p^K - (1-p)^K < 0.5 (p = 0, p = 1,
  p < 2.1%, p > 97.9%), at no cost, drawing a fresh prompt in their place (the same cap), and train on n samples
  picked by the balance rule (`select_group`: both classes whenever the drawn samples have both).
  `oracle-batch` (knows p, not the outcomes) draws in one go the smallest k in [n, K] with
  P(both classes among k) >= 0.9, or K when none reaches it: "just enough samples for the expected signal".
  `oracle-seq` also sees the outcomes and draws one sample at a time (no rounds, no latency cost) until the samples
  hold both classes and at least n, or K: no round-based setting can stop earlier, so its eta is a ceiling for them
  on the prompts it keeps.

Per method and mix (pooled over seeds):
- samples / prompt: generated samples / B (per trained prompt slot; refills included);
- prompts / slot: prompts drawn / B (data consumed; 1 without refills);
- coverage: share of the B trained groups that have signal (both classes, i.e. non-zero advantage);
- eta: samples of trained groups with signal / all generated samples (the project's `ada_eta` on samples);
- resolved: share of drawn prompts that met the exit rule; rounds: mean rounds per drawn prompt, a proxy for the
  step's latency (each round is one more generation pass) (Reinforce-Ada only).

A second, multi-epoch model measures the options beyond the authors' algorithm against their settings
(`run_epoch_benchmark`): a dataset seen once per epoch, pass rates rising over the epochs, response lengths that
depend on correctness (two models: wrong answers longer, or correct ones longer), stopping inside a round
(`--ada.cancel`, arrival or request order) and the per-prompt history (`--ada.history`: first-round sizing, skips of
saturated prompts), through `simulate`. Per mix: generated tokens per trained group with signal, coverage, groups
with signal per prompt visit, eta on tokens, rounds, the expected maximum rounds of a 128-prompt step, and the
length of kept vs finished vs started samples with the share of groups ADORA finds advantageous; two reference
floors that no sampler can build show what the token target would need. Its assumptions are written into the section
it produces.

A setting *beats the authors* in a mix when its eta is at least 2% (relative) higher than that of the authors'
setting (balance, and separately pos: n = 4, a round of 8 then up to 3 more, keep) and its coverage is at least
theirs (all methods read the same outcome streams, so differences come from the decisions, not from sampling
noise; the 2% margin keeps ties decided by a handful of prompts out). Refilling methods (drop mode, DAPO, the
oracles) consume more prompts per step and train a different selection of prompts, so winners are listed apart
from keep-mode settings. A grid of Reinforce-Ada settings is searched for winners.

Writes its section of docs/benchmarks.md (between `<!-- BEGIN sampling_efficiency -->` and `<!-- END ... -->`).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402  (benchmarks/ is not a package)
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import torch  # noqa: E402

from openrlhf_ada.algorithms.adora import group_stats  # noqa: E402
from openrlhf_ada.algorithms.estimate import EstConfig  # noqa: E402
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory, prompt_key  # noqa: E402
from openrlhf_ada.algorithms.reinforce_ada import select_group  # noqa: E402
from openrlhf_ada.algorithms.simulation import simulate, simulate_est  # noqa: E402

SECTION = "sampling_efficiency"
N = 4  # the authors' trained group size
STREAM = 64  # outcomes pre-drawn per prompt: the longest setting below draws 8 + 8 x 7
ORACLE_BUDGET, ORACLE_TARGET, ORACLE_HOPELESS = 32, 0.9, 0.5
ETA_MARGIN = 1.02  # "beats": eta at least 2% above the reference's


# -- mixes of pass rates -------------------------------------------------------------------------------------------
def _saturated(rng, k):
    u = rng.random(k)
    return np.where(u < 0.3, 0.0, np.where(u < 0.6, 1.0, rng.uniform(0, 1, k)))


MIXES: Dict[str, tuple] = {
    "uniform": ("p ~ uniform(0, 1)", lambda rng, k: rng.uniform(0, 1, k)),
    "mostly_hard": ("p ~ Beta(0.5, 4) (mean 0.11)", lambda rng, k: rng.beta(0.5, 4, k)),
    "mostly_easy": ("p ~ Beta(4, 0.5) (mean 0.89)", lambda rng, k: rng.beta(4, 0.5, k)),
    "paper_hard": ("p in {1/16, 2/16} equally (Reinforce-Ada's hard set: 1-2 correct of 16)",
                   lambda rng, k: rng.choice([1 / 16, 2 / 16], k)),
    "saturated": ("30% p = 0, 30% p = 1, 40% p ~ uniform(0, 1)", _saturated),
}


class Universe:
    """The prompts of one (mix, seed): pass rates and outcome streams for B x cap prompts, drawn in order (slot
    prompts first, then the refills)."""

    def __init__(self, pass_rates: np.ndarray, seed: int, stream: int = STREAM):
        rng = np.random.default_rng([seed, 1])
        self.p = np.asarray(pass_rates, dtype=float)
        self.outcomes = (rng.random((len(self.p), stream)) < self.p[:, None]).astype(float)
        self.streams = self.outcomes.tolist()

    @classmethod
    def from_mix(cls, mix: str, prompts: int, seed: int, cap: int) -> "Universe":
        rng = np.random.default_rng([seed, 0])
        return cls(MIXES[mix][1](rng, prompts * cap), seed)

    def __len__(self):
        return len(self.p)


# -- per-prompt records and the refill loop ------------------------------------------------------------------------
@dataclass
class Record:
    samples: int  # generated samples for this prompt
    accepted: bool  # does it take a slot (False: filtered / dropped / skipped, a fresh prompt replaces it)
    kept: List[float] = field(default_factory=list)  # rewards of the trained group
    resolved: Optional[bool] = None  # Reinforce-Ada: met the exit rule
    rounds: int = 0  # Reinforce-Ada: rounds used

    @property
    def signal(self) -> bool:
        return self.accepted and len(set(self.kept)) > 1


def fill_slots(process: Callable[[range], List[Record]], slots: int, limit: int, refill: bool) -> Dict:
    """Run `process` on prompts 0..slots-1; with `refill`, every prompt it does not accept is replaced by the next
    fresh prompt, generation after generation, until the slots are full or `limit` prompts have been drawn."""
    drawn, records, taken = 0, [], 0
    pending = slots
    while pending > 0 and drawn < limit:
        ids = range(drawn, min(drawn + pending, limit))
        drawn = ids.stop
        batch = process(ids)
        records.extend(batch)
        taken += sum(r.accepted for r in batch)
        pending = slots - taken if refill else 0
    trained = [r for r in records if r.accepted][:slots]
    samples = sum(r.samples for r in records)
    useful = sum(len(r.kept) for r in trained if r.signal)
    resolved = [r.resolved for r in records if r.resolved is not None]
    return {
        "slots": slots,
        "drawn": drawn,
        "samples": samples,
        "signal_groups": sum(r.signal for r in trained),
        "useful_samples": useful,
        "resolved": sum(resolved),
        "rounds": sum(r.rounds for r in records),
        "ada_prompts": len(resolved),
    }


# -- methods -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Method:
    name: str
    family: str  # grpo | dapo | ada | oracle
    n: int = N
    mode: str = ""
    first: int = 0
    round: int = 0
    rounds: int = 0
    unresolved: str = "keep"

    @property
    def refill(self) -> bool:
        return self.family in ("dapo", "oracle") or self.unresolved == "drop"

    @property
    def label(self) -> str:
        return self.name

    def run(self, u: Universe, slots: int, cap: int) -> Dict:
        return fill_slots(lambda ids: PROCESS[self.family](self, u, ids), slots, slots * cap, self.refill)


def _grpo(m: Method, u: Universe, ids: range) -> List[Record]:
    return [Record(m.n, True, u.streams[i][: m.n]) for i in ids]


def _dapo(m: Method, u: Universe, ids: range) -> List[Record]:
    out = []
    for i in ids:
        group = u.streams[i][: m.n]
        out.append(Record(m.n, len(set(group)) > 1, group))
    return out


def _ada(m: Method, u: Universe, ids: range) -> List[Record]:
    streams = [u.streams[i] for i in ids]
    results = simulate(streams, n=m.n, round_size=m.round, first_round_size=m.first, max_rounds=m.rounds,
                       mode=m.mode, unresolved=m.unresolved, selection="first", seed=0)
    return [Record(r.samples, r.outcome in ("resolved", "kept"), [s[j] for j in r.kept], r.resolved, r.rounds)
            for r, s in zip(results, streams)]


def p_signal(p: float, k: int) -> float:
    """P(both classes among k Bernoulli(p) samples)."""
    return 1.0 - p**k - (1.0 - p) ** k


def oracle_batch_draws(p: float, n: int = N, budget: int = ORACLE_BUDGET, target: float = ORACLE_TARGET) -> int:
    """Samples oracle-batch draws for a prompt of pass rate p: the smallest k in [n, budget] with
    P(both classes among k) >= target, else budget."""
    for k in range(n, budget + 1):
        if p_signal(p, k) >= target:
            return k
    return budget


def oracle_seq_draws(stream: Sequence[float], n: int = N, budget: int = ORACLE_BUDGET) -> int:
    """Samples oracle-seq draws: one at a time until both classes and at least n are present, or budget."""
    for j, x in enumerate(stream[:budget]):
        if x != stream[0]:
            return max(n, j + 1)
    return budget


def _oracle(m: Method, u: Universe, ids: range) -> List[Record]:
    out = []
    for i in ids:
        p = float(u.p[i])
        if p_signal(p, ORACLE_BUDGET) < ORACLE_HOPELESS:
            out.append(Record(0, False))
            continue
        k = oracle_seq_draws(u.streams[i], m.n) if m.mode == "seq" else oracle_batch_draws(p, m.n)
        draws = u.streams[i][:k]
        chosen = select_group([x > 0.5 for x in draws], m.n, policy="first")
        out.append(Record(len(draws), True, [draws[j] for j in chosen]))
    return out


PROCESS = {"grpo": _grpo, "dapo": _dapo, "ada": _ada, "oracle": _oracle}


def ada(mode: str, first: int, round_: int, rounds: int, unresolved: str = "keep", name: str = "") -> Method:
    sizes = f"{first}" + (f"+{round_}x{rounds - 1}" if rounds > 1 else "")
    label = name or f"ada-{mode} {sizes}{' drop' if unresolved == 'drop' else ''}"
    return Method(label, "ada", N, mode, first, round_, rounds, unresolved)


AUTHORS = {
    "balance": ada("balance", 8, 8, 4, name="ada-balance 8+8x3 (authors)"),
    "pos": ada("pos", 8, 8, 4, name="ada-pos 8+8x3 (authors)"),
}

NAMED: List[Method] = [
    Method("GRPO n=4", "grpo", 4),
    Method("GRPO n=8", "grpo", 8),
    Method("GRPO n=16", "grpo", 16),
    Method("DAPO n=4 (filter + refill)", "dapo", 4),
    Method("DAPO n=8 (filter + refill)", "dapo", 8),
    AUTHORS["pos"],
    AUTHORS["balance"],
    ada("balance", 8, 8, 4, "drop", name="ada-balance 8+8x3 drop (paper)"),
    ada("balance", 4, 4, 4),
    ada("balance", 4, 4, 8),
    ada("balance", 4, 4, 8, "drop"),
    ada("pos", 4, 4, 8),
    Method("oracle-batch (knows p)", "oracle", N, mode="batch"),
    Method("oracle-seq (knows p, stops on outcomes)", "oracle", N, mode="seq"),
]


GRID_FIRST, GRID_ROUND, GRID_BUDGETS, GRID_ROUNDS = (4, 8), (2, 4, 8, 16), (16, 32, 64), (2, 3, 4)


def grid() -> List[Method]:
    """Reinforce-Ada settings searched for ones that beat the authors (n = 4): both modes; a first round of 4 or 8;
    later rounds of 2, 4, 8 or 16; as many rounds as fit a per-prompt budget of 16, 32 (the authors') or 64 samples,
    or 2, 3, 4 rounds; unresolved prompts kept or dropped. (A first round of 2 cannot resolve a prompt before it
    holds n = 4 samples, so it only adds rounds.)"""
    out = {}
    for mode, first, round_, unresolved in itertools.product(("balance", "pos"), GRID_FIRST, GRID_ROUND,
                                                            ("keep", "drop")):
        rounds = {1 + (budget - first) // round_ for budget in GRID_BUDGETS} | set(GRID_ROUNDS)
        for r in sorted(rounds):
            m = ada(mode, first, round_, r, unresolved)
            out.setdefault(m.label, m)
    return list(out.values())


# -- the benchmark -------------------------------------------------------------------------------------------------
def _row(mix: str, method: Method, agg: Dict) -> Dict:
    B = agg["slots"]
    return {
        "mix": mix,
        "method": method.label,
        "family": method.family,
        "n": method.n,
        "mode": method.mode or None,
        "first_round_size": method.first or None,
        "round_size": method.round or None,
        "max_rounds": method.rounds or None,
        "unresolved": method.unresolved if method.family == "ada" else None,
        "max_samples_per_prompt": (method.first + method.round * (method.rounds - 1)) if method.family == "ada" else None,
        "slots": B,
        "samples": agg["samples"],
        "samples_per_prompt": agg["samples"] / B,
        "prompts_per_slot": agg["drawn"] / B,
        "coverage": agg["signal_groups"] / B,
        "eta": agg["useful_samples"] / agg["samples"] if agg["samples"] else 0.0,
        "resolved_share": agg["resolved"] / agg["ada_prompts"] if agg["ada_prompts"] else None,
        "rounds_mean": agg["rounds"] / agg["ada_prompts"] if agg["ada_prompts"] else None,
    }


def run_benchmark(
    *,
    prompts: int = 2000,
    seeds: Sequence[int] = (0, 1, 2),
    mixes: Optional[Dict[str, np.ndarray]] = None,
    methods: Optional[Sequence[Method]] = None,
    cap: int = 10,
) -> List[Dict]:
    """One row per (mix, method), pooled over seeds (each seed is a step of `prompts` slots with its own prompts).

    `mixes` maps a name to either a key of MIXES (drawn per seed) or an array of pass rates (used as given, cycled
    to prompts x cap prompts)."""
    methods = list(NAMED if methods is None else methods)
    mixes = {name: name for name in MIXES} if mixes is None else mixes
    rows = []
    for mix, source in mixes.items():
        totals = {m: None for m in methods}
        for seed in seeds:
            if isinstance(source, str):
                u = Universe.from_mix(source, prompts, seed, cap)
            else:
                p = np.resize(np.asarray(source, dtype=float), prompts * cap)
                u = Universe(p, seed)
            for m in methods:
                agg = m.run(u, prompts, cap)
                totals[m] = agg if totals[m] is None else {k: totals[m][k] + agg[k] for k in agg}
        rows.extend(_row(mix, m, totals[m]) for m in methods)
    return rows


def beats(row: Dict, ref: Dict, margin: float = ETA_MARGIN) -> bool:
    """Higher eta (by the relative margin) at equal or better coverage."""
    return row["eta"] > 0 and row["eta"] >= margin * ref["eta"] and row["coverage"] >= ref["coverage"]


def reference_row(rows: List[Dict], mix: str, reference: str) -> Dict:
    return next(r for r in rows if r["mix"] == mix and r["method"] == AUTHORS[reference].label)


def refills(row: Dict) -> bool:
    return row["family"] in ("dapo", "oracle") or row["unresolved"] == "drop"


def winners(rows: List[Dict], reference: str) -> Dict[str, List[Dict]]:
    """Per mix, the rows that beat the authors' setting `reference` ("balance" or "pos"), best eta first."""
    out = {}
    for mix in dict.fromkeys(r["mix"] for r in rows):
        ref = reference_row(rows, mix, reference)
        out[mix] = sorted((r for r in rows if r["mix"] == mix and r is not ref and beats(r, ref)),
                          key=lambda r: -r["eta"])
    return out


def everywhere(rows: List[Dict], reference: str, refill: Optional[bool] = False,
               max_rounds: Optional[int] = None) -> List[Dict]:
    """Reinforce-Ada settings that beat the reference in every mix (keep mode only with refill=False, drop mode only
    with True, both with None; at most `max_rounds` rounds if given), best first by the geometric mean over mixes of
    eta / the reference's eta. Returns one dict per setting: method, eta_gain (that mean), and its rows."""
    w = winners(rows, reference)
    mixes = list(w)
    names = None
    for ws in w.values():
        found = {r["method"] for r in ws if r["family"] == "ada" and (refill is None or refills(r) == refill)
                 and (max_rounds is None or r["max_rounds"] <= max_rounds)}
        names = found if names is None else names & found
    out = []
    for name in names or ():
        mine = [next(r for r in rows if r["mix"] == mix and r["method"] == name) for mix in mixes]
        gains = [r["eta"] / reference_row(rows, r["mix"], reference)["eta"] for r in mine]
        out.append({"method": name, "eta_gain": float(np.exp(np.mean(np.log(gains)))), "rows": mine})
    return sorted(out, key=lambda d: -d["eta_gain"])


# -- output --------------------------------------------------------------------------------------------------------
def _fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def method_table(rows: List[Dict], refs: Optional[Dict[str, Dict]] = None) -> str:
    lines = ["| method | samples / prompt | prompts / slot | coverage | eta | resolved | rounds "
             "| vs authors' balance / pos |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        marks = ""
        if refs:
            marks = " / ".join("ref" if r["method"] == ref["method"] else ("**beats**" if beats(r, ref) else "-")
                               for ref in refs.values())
        lines.append(f"| {r['method']} | {_fmt(r['samples_per_prompt'], 2)} | {_fmt(r['prompts_per_slot'], 2)} "
                     f"| {_fmt(r['coverage'])} | {_fmt(r['eta'])} | {_fmt(r['resolved_share'])} "
                     f"| {_fmt(r['rounds_mean'], 2)} | {marks} |")
    return "\n".join(lines)


def _short(r: Dict, with_slots: bool = False) -> str:
    slots = f", {_fmt(r['prompts_per_slot'], 2)} prompts/slot" if with_slots else ""
    rounds = f", {_fmt(r['rounds_mean'], 1)} rounds" if r["rounds_mean"] is not None else ""
    return (f"`{r['method']}` ({_fmt(r['samples_per_prompt'], 1)} samples{slots}{rounds}, cov "
            f"{_fmt(r['coverage'])}, eta {_fmt(r['eta'])})")


def _cell(rows: List[Dict], with_slots: bool, top: int) -> str:
    return f"{len(rows)}: " + "; ".join(_short(r, with_slots) for r in rows[:top]) if rows else "none"


def report(rows: List[Dict], grid_rows: List[Dict], mix_names: Sequence[str], top: int = 3) -> str:
    parts = []
    all_rows = rows + grid_rows
    for mix in mix_names:
        mix_rows = [r for r in rows if r["mix"] == mix]
        refs = {k: reference_row(rows, mix, k) for k in ("balance", "pos")}
        desc = MIXES[mix][0] if mix in MIXES else mix
        parts += [f"### {mix}: {desc}", "", method_table(mix_rows, refs), ""]
    searched = len({r["method"] for r in all_rows if r["family"] == "ada"})
    for reference in ("balance", "pos"):
        w = winners(all_rows, reference)
        parts += [f"### Beating the authors' {reference} ({AUTHORS[reference].label}): eta >= "
                  f"{ETA_MARGIN:g} x theirs at equal or better coverage, {searched} Reinforce-Ada settings searched", "",
                  "| mix | authors' samples / coverage / eta | keep-mode settings that beat it (best by eta) "
                  "| with refills (drop mode; best by eta) | other methods |", "|---|---|---|---|---|"]
        for mix in mix_names:
            ref = reference_row(all_rows, mix, reference)
            keep = [r for r in w[mix] if r["family"] == "ada" and not refills(r)]
            drop = [r for r in w[mix] if r["family"] == "ada" and refills(r)]
            other = [r["method"] for r in w[mix] if r["family"] != "ada"]
            parts.append(f"| {mix} | {_fmt(ref['samples_per_prompt'], 2)} / {_fmt(ref['coverage'])} / "
                         f"{_fmt(ref['eta'])} | {_cell(keep, False, top)} | {_cell(drop, True, top)} "
                         f"| {', '.join(other) or 'none'} |")
        parts.append("")
        authors_rounds = AUTHORS[reference].rounds
        for refill, max_rounds, what in (
            (False, None, "keep mode (same prompts, no refills)"),
            (False, authors_rounds, f"keep mode with at most the authors' {authors_rounds} rounds (same latency bound)"),
            (True, None, "drop mode (refills)"),
        ):
            common = everywhere(all_rows, reference, refill, max_rounds)
            if not common:
                parts += [f"**In every mix, {what}: none beats the authors' {reference}.**", ""]
                continue
            names = ", ".join(f"`{c['method']}` (x{c['eta_gain']:.2f})" for c in common[:8])
            more = f" and {len(common) - 8} more" if len(common) > 8 else ""
            best = common[0]
            per_mix = "; ".join(f"{r['mix']}: cov {_fmt(r['coverage'])}, eta {_fmt(r['eta'])}, "
                                f"{_fmt(r['samples_per_prompt'], 1)} samples"
                                + (f", {_fmt(r['prompts_per_slot'], 2)} prompts/slot" if refill else "")
                                for r in best["rows"])
            parts += [f"**In every mix, {what}: {len(common)} settings beat the authors' {reference}** "
                      f"(geometric-mean eta gain over the mixes): {names}{more}. Best: `{best['method']}`: {per_mix}.",
                      ""]
    return "\n".join(parts).rstrip() + "\n"


# -- the multi-epoch model: cancel and history ---------------------------------------------------------------------
# Each prompt of a dataset is seen once per epoch. Its pass rate rises along a logistic curve, logit p_e = logit p_0
# + g e with g ~ uniform(0, 2 x RISE) per prompt (p_0 = 0 or 1 stays). Responses have lengths: a prompt-specific
# scale ~ LogNormal(0, PROMPT_SIGMA) times LogNormal(log median_class, LEN_SIGMA), the median depending on whether
# the answer is correct (LENGTH_MODELS), rounded, at least MIN_LEN and at most MAX_LEN; a wrong answer at MAX_LEN is
# truncated (ADORA leaves it out of meanNeg), a correct one ends at MAX_LEN - 1 at the latest.
EPOCHS, RISE = 4, 0.5
LENGTH_MODELS = {  # (median correct, median wrong) tokens
    "wrong_longer": (600, 1000),
    "correct_longer": (1000, 600),
}
LEN_SIGMA, PROMPT_SIGMA, MIN_LEN, MAX_LEN = 0.5, 0.3, 16, 4096
CAP, STEP_PROMPTS = 32, 128  # samples per prompt at most (the authors' 8 + 8 x 3); prompts per training step
TARGET_RATIO = 0.67  # the target: tokens per trained group with signal at most 0.67 x the authors' balance


class EpochUniverse:
    """The prompts of one (mix, length model, seed) over the epochs: keys (sha256 of a synthetic prompt text),
    per-epoch pass rates, and per-epoch outcome and length streams of CAP samples (common to every method)."""

    def __init__(self, mix, lengths: str, prompts: int, seed: int, epochs: int = EPOCHS, rise: float = RISE):
        """`mix`: a key of MIXES (initial pass rates drawn per seed) or an array of initial pass rates (cycled)."""
        named = isinstance(mix, str)
        rng = np.random.default_rng([seed, 2, list(MIXES).index(mix) if named else len(MIXES)])
        p0 = MIXES[mix][1](rng, prompts) if named else np.resize(np.asarray(mix, dtype=float), prompts)
        mix = mix if named else "given"
        g = rng.uniform(0.0, 2.0 * rise, prompts)
        scale = rng.lognormal(0.0, PROMPT_SIGMA, prompts)
        med_c, med_w = LENGTH_MODELS[lengths]
        logit0 = np.log(np.clip(p0, 1e-12, 1 - 1e-12) / (1 - np.clip(p0, 1e-12, 1 - 1e-12)))
        self.keys = [prompt_key(f"{mix} prompt {i}") for i in range(prompts)]
        self.p, self.outcomes, self.lengths, self.truncated = [], [], [], []
        for e in range(epochs):
            p = np.where((p0 == 0) | (p0 == 1), p0, 1 / (1 + np.exp(-(logit0 + g * e))))
            correct = rng.random((prompts, CAP)) < p[:, None]
            med = np.where(correct, med_c, med_w) * scale[:, None]
            raw = np.rint(med * rng.lognormal(0.0, LEN_SIGMA, (prompts, CAP))).astype(int)
            length = np.clip(raw, MIN_LEN, np.where(correct, MAX_LEN - 1, MAX_LEN))
            self.p.append(p)
            self.outcomes.append(correct.astype(float))
            self.lengths.append(length)
            self.truncated.append(~correct & (length >= MAX_LEN))


@dataclass(frozen=True)
class EpochMethod:
    """A sampler over the epochs. family "grpo": n samples per prompt; "ada": `simulate` with these options; "est":
    Reinforce-Ada-Est (`simulate_est`, steps of STEP_PROMPTS prompts, n samples per prompt on average)."""

    name: str
    family: str = "ada"
    n: int = N  # grpo: samples per prompt; est: the mean samples per prompt (the budget)
    mode: str = "balance"
    first: int = 8
    round: int = 8
    rounds: int = 4
    cancel: bool = False
    order: str = "arrival"
    history: bool = False
    target: float = 0.9
    skip: float = 0.5
    window: int = 1

    @property
    def cap(self) -> int:
        if self.family == "est":
            return EstConfig(budget=self.n).n_max
        return self.n if self.family == "grpo" else self.first + self.round * (self.rounds - 1)


EPOCH_REFERENCE = "ada-balance 8+8x3 (authors)"
FLOOR_BALANCE = "floor: sequential balance, free skip of prompts without signal"
EPOCH_METHODS: List[EpochMethod] = [
    EpochMethod("GRPO n=4", "grpo"),
    EpochMethod("GRPO n=8", "grpo", n=8),
    EpochMethod("Est: 8 per prompt on average, 2..32 (--ada.strategy est)", "est", n=8),
    EpochMethod("ada-pos 8+8x3 (authors)", mode="pos"),
    EpochMethod(EPOCH_REFERENCE),
    EpochMethod("+ cancel (arrival)", cancel=True),
    EpochMethod("+ cancel (request order)", cancel=True, order="request"),
    EpochMethod("+ history: sizing (target 0.9), no skip", history=True, skip=0.0),
    EpochMethod("+ history: skip 0.5, no sizing", history=True, target=0.0),
    EpochMethod("+ history: skip 0.9, no sizing", history=True, target=0.0, skip=0.9),
    EpochMethod("+ history (target 0.9, skip 0.5)", history=True),
    EpochMethod("+ cancel (arrival) + history: skip 0.9", cancel=True, history=True, target=0.0, skip=0.9),
    EpochMethod("+ cancel (request) + history: skip 0.9", cancel=True, order="request", history=True, target=0.0,
                skip=0.9),
    EpochMethod("+ cancel (arrival) + history (target 0.9, skip 0.9)", cancel=True, history=True, skip=0.9),
    EpochMethod("sequential: ada-balance 4+1x28 (no rounds limit)", first=4, round=1, rounds=29),
    EpochMethod(FLOOR_BALANCE, "floor", mode="balance"),
    EpochMethod("floor: sequential, stop at both classes, free skip", "floor", mode="signal"),
]


def run_epochs(method: EpochMethod, u: EpochUniverse, seed: int) -> Dict:
    """Totals of one method over all epochs of a universe (see epoch_row for what they become)."""
    history = PromptHistory(HistoryConfig(target=method.target, skip=method.skip, window=method.window)) \
        if method.history else None
    if method.family == "est":  # the estimator's counts, from the project's defaults
        est = EstConfig(budget=method.n)
        history = PromptHistory(HistoryConfig(ema=True, ema_decay=est.decay))
    t = {k: 0 for k in ("visits", "skipped", "trained", "signal", "tokens", "useful_tokens", "samples",
                        "kept_len", "kept_n", "finished_len", "finished_n", "started_len", "started_n",
                        "kept_pos_len", "kept_pos_n", "started_pos_len", "started_pos_n",
                        "kept_neg_len", "kept_neg_n", "started_neg_len", "started_neg_n", "missed_signal")}
    rounds_hist: Dict[int, int] = {}
    adora_rows = []
    for e in range(len(u.outcomes)):
        outcomes, lengths, trunc = u.outcomes[e], u.lengths[e], u.truncated[e]
        P = len(outcomes)
        if method.family == "est":  # one step per STEP_PROMPTS prompts, each allocated from the estimates so far
            results = []
            for start in range(0, P, STEP_PROMPTS):
                part = slice(start, min(start + STEP_PROMPTS, P))
                results += simulate_est(outcomes[part].tolist(), config=est, history=history,
                                        prompt_keys=u.keys[part], epoch=e, length_streams=lengths[part].tolist())
        elif method.family != "ada":
            results = [None] * P
        else:
            results = simulate(outcomes.tolist(), n=N, round_size=method.round, first_round_size=method.first,
                               max_rounds=method.rounds, mode=method.mode, seed=seed, length_streams=lengths.tolist(),
                               cancel=method.cancel, cancel_order=method.order, history=history,
                               prompt_keys=u.keys, epoch=e)
        for i, r in enumerate(results):
            t["visits"] += 1
            if r is not None and r.skipped:
                t["skipped"] += 1
                rounds_hist[0] = rounds_hist.get(0, 0) + 1
                both = 0 < outcomes[i][:CAP].sum() < CAP  # would the authors' cap of samples have shown signal?
                t["missed_signal"] += int(both)
                continue
            if method.family == "grpo":  # the first n samples, one round
                n = method.n
                drawn, finished, kept, rounds, tokens = n, range(n), list(range(n)), 1, int(lengths[i][:n].sum())
            elif method.family == "floor":
                drawn = floor_draws(outcomes[i], method.mode)
                if drawn == 0:  # no signal in its cap of samples: skipped for free, not counted as a visit
                    t["visits"] -= 1
                    continue
                finished, rounds, tokens = range(drawn), drawn, int(lengths[i][:drawn].sum())
                kept = select_group([x > 0.5 for x in outcomes[i][:drawn]], N, policy="first")
            else:
                drawn, finished, kept, rounds, tokens = r.samples, r.finished, r.kept, r.rounds, r.tokens
            rounds_hist[rounds] = rounds_hist.get(rounds, 0) + 1
            t["samples"] += drawn
            t["tokens"] += tokens
            L, o = lengths[i], outcomes[i]
            t["started_len"] += int(L[:drawn].sum())
            t["started_n"] += drawn
            pos_started = o[:drawn] > 0.5
            t["started_pos_len"] += int(L[:drawn][pos_started].sum())
            t["started_pos_n"] += int(pos_started.sum())
            t["started_neg_len"] += int(L[:drawn][~pos_started].sum())
            t["started_neg_n"] += int((~pos_started).sum())
            t["finished_len"] += int(sum(int(L[j]) for j in finished))
            t["finished_n"] += len(finished)
            if not kept:
                continue
            t["trained"] += 1
            kept_len = [int(L[j]) for j in kept]
            kept_pos = [o[j] > 0.5 for j in kept]
            t["kept_len"] += sum(kept_len)
            t["kept_n"] += len(kept)
            t["kept_pos_len"] += sum(x for x, c in zip(kept_len, kept_pos) if c)
            t["kept_pos_n"] += sum(kept_pos)
            t["kept_neg_len"] += sum(x for x, c in zip(kept_len, kept_pos) if not c)
            t["kept_neg_n"] += len(kept) - sum(kept_pos)
            if 0 < sum(kept_pos) < len(kept):
                t["signal"] += 1
                t["useful_tokens"] += sum(kept_len)
                adora_rows.append(([o[j] for j in kept], kept_len, [bool(trunc[i][j]) for j in kept]))
    t["rounds_hist"] = rounds_hist
    t["adora_advantageous"] = 0
    for size in sorted({len(row[0]) for row in adora_rows}):  # groups of one size at a time (Est's vary)
        same = [row for row in adora_rows if len(row[0]) == size]
        scores, lens, truncs = (torch.tensor([row[k] for row in same]) for k in range(3))
        t["adora_advantageous"] += int(group_stats(scores, lens, truncs).advantageous.sum())
    return t


def floor_draws(outcomes: Sequence[float], rule: str, n: int = N, cap: int = CAP) -> int:
    """Reference floors (they know which prompts will show no signal): 0 for a prompt without both classes in its
    cap of samples (skipped for free), else the samples a one-at-a-time sampler draws until its rule holds (balance:
    the authors' exit rule; signal: both classes and n samples), or the cap."""
    o = [x > 0.5 for x in outcomes[:cap]]
    if all(o) or not any(o):
        return 0
    pos = 0
    for j, x in enumerate(o):
        pos += x
        neg = j + 1 - pos
        if j + 1 >= n and (pos >= n // 2 and neg >= n - n // 2 if rule == "balance" else pos and neg):
            return j + 1
    return cap


def expected_max_rounds(hist: Dict[int, int], prompts: int = STEP_PROMPTS) -> float:
    """E[max rounds over `prompts` prompts drawn independently from the histogram] = sum_r P(max > r)."""
    total = sum(hist.values())
    if not total:
        return 0.0
    cdf, out = 0.0, 0.0
    for r in range(max(hist) + 1):
        cdf += hist.get(r, 0) / total
        out += 1.0 - min(cdf, 1.0) ** prompts
    return out


def _ratio(a, b):
    return a / b if b else None


def epoch_row(mix: str, lengths: str, method: EpochMethod, per_seed: List[Dict]) -> Dict:
    """Pool the seeds' totals into one row; tokens per signal group also per seed (for the spread)."""
    tot = {k: sum(t[k] for t in per_seed) for k in per_seed[0] if k != "rounds_hist"}
    hist: Dict[int, int] = {}
    for t in per_seed:
        for r, c in t["rounds_hist"].items():
            hist[r] = hist.get(r, 0) + c
    sampled = tot["visits"] - tot["skipped"]
    return {
        "mix": mix, "lengths": lengths, "method": method.name, "cap": method.cap,
        "tokens_per_signal": _ratio(tot["tokens"], tot["signal"]),
        "tokens_per_signal_seeds": [_ratio(t["tokens"], t["signal"]) for t in per_seed],
        "coverage": _ratio(tot["signal"], tot["trained"]),
        "signal_per_visit": _ratio(tot["signal"], tot["visits"]),
        "eta": _ratio(tot["useful_tokens"], tot["tokens"]),
        "rounds_mean": _ratio(sum(r * c for r, c in hist.items()), sampled),
        "max_rounds_step": expected_max_rounds(hist),
        "skipped_share": _ratio(tot["skipped"], tot["visits"]),
        "missed_signal_share": _ratio(tot["missed_signal"], tot["visits"]),
        "samples_per_visit": _ratio(tot["samples"], tot["visits"]),
        "kept_len": _ratio(tot["kept_len"], tot["kept_n"]),
        "finished_len": _ratio(tot["finished_len"], tot["finished_n"]),
        "started_len": _ratio(tot["started_len"], tot["started_n"]),
        "kept_pos_len": _ratio(tot["kept_pos_len"], tot["kept_pos_n"]),
        "started_pos_len": _ratio(tot["started_pos_len"], tot["started_pos_n"]),
        "kept_neg_len": _ratio(tot["kept_neg_len"], tot["kept_neg_n"]),
        "started_neg_len": _ratio(tot["started_neg_len"], tot["started_neg_n"]),
        "adora_advantageous": _ratio(tot["adora_advantageous"], tot["signal"]),
    }


def run_epoch_benchmark(*, prompts: int = 300, seeds: Sequence[int] = (0, 1, 2), mixes=tuple(MIXES),
                        lengths: Sequence[str] = tuple(LENGTH_MODELS), methods: Optional[Sequence[EpochMethod]] = None,
                        epochs: int = EPOCHS, rise: float = RISE) -> List[Dict]:
    """One row per (mix, length model, method), pooled over seeds; every method reads the same universes.
    `mixes`: names of MIXES, or a dict from a name to a MIXES key or an array of initial pass rates."""
    methods = list(EPOCH_METHODS if methods is None else methods)
    mixes = mixes if isinstance(mixes, dict) else {name: name for name in mixes}
    rows = []
    for mix, source in mixes.items():
        for lm in lengths:
            per = {m.name: [] for m in methods}
            for seed in seeds:
                u = EpochUniverse(source, lm, prompts, seed, epochs, rise)
                for m in methods:
                    per[m.name].append(run_epochs(m, u, seed))
            ref = per.get(EPOCH_REFERENCE)
            for m in methods:
                row = epoch_row(mix, lm, m, per[m.name])
                if ref is not None:
                    ratios = [_ratio(a["tokens"] * b["signal"], a["signal"] * b["tokens"])
                              for a, b in zip(per[m.name], ref)]
                    row["ratio_seeds"] = ratios
                    row["ratio"] = _ratio(row["tokens_per_signal"], epoch_row(mix, lm, m, ref)["tokens_per_signal"])
                rows.append(row)
    return rows


def target_check(row: Dict, ref: Dict) -> Dict[str, bool]:
    """The targets for one row against the authors' balance in the same (mix, length model)."""
    return {
        "tokens": row["ratio"] is not None and row["ratio"] <= TARGET_RATIO,
        "coverage": row["coverage"] is not None and row["coverage"] >= ref["coverage"],
        "cap": row["cap"] == ref["cap"],
        "rounds": row["max_rounds_step"] <= ref["max_rounds_step"] + 1e-9,
    }


def _seed_range(values: Sequence[Optional[float]]) -> str:
    vals = [v for v in values if v is not None]
    return f"{min(vals):.2f}-{max(vals):.2f}" if vals else "-"


def epoch_tables(rows: List[Dict], mixes: Sequence[str], lengths: Sequence[str]) -> str:
    """Per mix: one table of the methods (outcome-driven columns once, token columns per length model)."""
    parts = []
    for mix in mixes:
        desc = MIXES[mix][0] if mix in MIXES else mix
        head = ["method", "samples / visit", "coverage", "signal / visit", "rounds",
                f"E[max rounds], {STEP_PROMPTS} prompts",
                "skipped (of which signal lost)"]
        for lm in lengths:
            head += [f"{lm}: tokens / signal group", "x authors' balance (seeds)", "eta (tokens)"]
        parts += [f"#### {mix}: initial {desc}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        by = {(r["lengths"], r["method"]): r for r in rows if r["mix"] == mix}
        for name in dict.fromkeys(r["method"] for r in rows if r["mix"] == mix):
            first = by[(lengths[0], name)]
            cells = [name, _fmt(first["samples_per_visit"], 2), _fmt(first["coverage"]),
                     _fmt(first["signal_per_visit"]), _fmt(first["rounds_mean"], 2),
                     _fmt(first["max_rounds_step"], 2),
                     f"{_fmt(first['skipped_share'])} ({_fmt(first['missed_signal_share'])})"]
            for lm in lengths:
                r = by[(lm, name)]
                tps = r["tokens_per_signal"]
                cells += ["-" if tps is None else f"{tps / 1000:.1f}k",
                          f"{_fmt(r.get('ratio'), 2)} ({_seed_range(r.get('ratio_seeds', []))})", _fmt(r["eta"])]
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def target_table(rows: List[Dict], mixes: Sequence[str], lengths: Sequence[str]) -> Tuple[str, List[str]]:
    """Per (mix, length model) and new method: the token ratio and which targets fail; and the methods that meet
    all targets everywhere."""
    new = [m.name for m in EPOCH_METHODS if m.name.startswith("+ ")]
    new = [name for name in new if any(r["method"] == name for r in rows)]
    head = ["mix / lengths"] + new
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    meets = {name: True for name in new}
    for mix in mixes:
        for lm in lengths:
            by = {r["method"]: r for r in rows if r["mix"] == mix and r["lengths"] == lm}
            ref = by[EPOCH_REFERENCE]
            cells = [f"{mix} / {lm}"]
            for name in new:
                checks = target_check(by[name], ref)
                meets[name] &= all(checks.values())
                failed = [k for k, ok in checks.items() if not ok]
                cells.append(f"{_fmt(by[name]['ratio'], 2)} " + ("**all met**" if not failed else
                                                                 "misses " + ", ".join(failed)))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), [name for name, ok in meets.items() if ok]


def bias_table(rows: List[Dict], mixes: Sequence[str], lengths: Sequence[str], methods: Sequence[str]) -> str:
    head = ["mix", "method"]
    for lm in lengths:
        head += [f"{lm}: mean length kept / finished / started", "kept / started: correct, wrong",
                 "ADORA advantageous"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mix in mixes:
        for name in methods:
            cells = [mix, name]
            for lm in lengths:
                r = next((x for x in rows if x["mix"] == mix and x["lengths"] == lm and x["method"] == name), None)
                if r is None:
                    cells += ["-", "-", "-"]
                    continue
                cells += [f"{r['kept_len']:.0f} / {r['finished_len']:.0f} / {r['started_len']:.0f}",
                          f"{_fmt(_ratio(r['kept_pos_len'], r['started_pos_len']), 2)}, "
                          f"{_fmt(_ratio(r['kept_neg_len'], r['started_neg_len']), 2)}",
                          _fmt(r["adora_advantageous"])]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def epoch_report(rows: List[Dict], mixes: Sequence[str], lengths: Sequence[str]) -> str:
    targets, everywhere_ok = target_table(rows, mixes, lengths)
    bias_methods = [EPOCH_REFERENCE, "+ cancel (arrival)", "+ cancel (request order)"]
    verdict = (f"**Every target met on every mix and length model by: {', '.join(f'`{m}`' for m in everywhere_ok)}.**"
               if everywhere_ok else "**No new setting meets every target on every mix and length model.**")
    floor = [r for r in rows if r["method"] == FLOOR_BALANCE and r["ratio"] is not None]
    out_of_reach = [f"{r['mix']} / {r['lengths']} ({r['ratio']:.2f})" for r in floor if r["ratio"] > TARGET_RATIO]
    if floor:
        verdict += (" Where even the balance floor (free skips of every prompt without signal, one sample at a time) "
                    f"needs more than {TARGET_RATIO:g} x the authors' tokens, no sampler that keeps the authors' exit "
                    "rule, cap and coverage without biasing lengths can meet the token target: "
                    + (", ".join(out_of_reach) if out_of_reach else "nowhere here") + ".")
    return "\n".join([
        epoch_tables(rows, mixes, lengths),
        f"#### Targets (tokens / signal group <= {TARGET_RATIO:g} x the authors' balance, coverage no lower, the same "
        f"cap of {CAP} samples, E[max rounds] of a {STEP_PROMPTS}-prompt step no more than theirs)",
        "",
        targets,
        "",
        verdict,
        "",
        "#### Length bias of stopping inside a round, and ADORA",
        "",
        "Mean response length of the samples kept in trained groups, of all samples that finished, and of all "
        "requests started (cancelled ones at the length they would have had); kept / started per class; share of "
        "groups with signal that ADORA finds advantageous (longest kept correct > mean kept non-truncated wrong).",
        "",
        bias_table(rows, mixes, lengths, bias_methods),
        "",
        "Arrival order keeps the samples that finish first, i.e. the shortest of each class, and stops before the "
        "long ones exist: ADORA's maxPos (longest kept correct) and meanNeg (mean kept wrong, truncated ones left "
        "out; with arrival order a truncated answer is almost never kept) both shrink, by amounts that depend on "
        "how many of each class finish before the stop, so the share of groups ADORA calls advantageous moves, in "
        "either direction by mix. Request order keeps exactly the authors' group in balance mode (the same "
        "samples, lengths and ADORA weights; only the pool statistics lose the samples after the stop) and saves "
        "fewer tokens.",
    ]).rstrip() + "\n"


def epoch_section(args, rows: List[Dict]) -> str:
    """The multi-epoch part of the docs section: the model's assumptions, then the tables."""
    lengths = list(LENGTH_MODELS)
    models = "; ".join(f"`{k}`: median {c} tokens correct, {w} wrong" for k, (c, w) in LENGTH_MODELS.items())
    return "\n".join([
        "### Multi-epoch model: stopping inside a round (`--ada.cancel`) and per-prompt history (`--ada.history`)",
        "",
        f"A dataset of {args.epoch_prompts} prompts (per seed; seeds {' '.join(map(str, args.seeds))}) is seen once "
        f"per epoch for {args.epochs} epochs. A prompt's initial pass rate comes from the mix; it rises along a "
        f"logistic curve, logit p_e = logit p_0 + g e with g ~ uniform(0, {2 * args.rise:g}) per prompt (p_0 = 0 or "
        "1 stays: some prompts are never learnt, some always solved). The rise is the same for every method: the "
        "model does not let a sampler that trains more signal learn faster. Samples are independent Bernoulli(p_e) "
        "outcomes; a response's length is a per-prompt scale ~ LogNormal(0, "
        f"{PROMPT_SIGMA:g}) times LogNormal(log median, {LEN_SIGMA:g}) with the median set by correctness, two "
        f"models: {models}; clipped to [{MIN_LEN}, {MAX_LEN}], a wrong answer at {MAX_LEN} is truncated. Every "
        "method reads the same outcome and length streams (and the two length models the same outcomes). Timing "
        "for `cancel`: a round's requests start together and decode at the same token rate, so a sample finishes at "
        "a time proportional to its length, shortest first; when the prompt resolves, each outstanding request has "
        "generated as many tokens as the sample that resolved it, and those tokens count as generated (verifier "
        "time, prefill and batching effects are not modelled). All Reinforce-Ada settings are n = 4, a first round "
        f"of 8 then up to 3 more of 8 (cap {CAP} samples per prompt, 4 rounds), keep mode, `first` selection; "
        "`+ ...` rows add the new options to the authors' balance setting. History: a uniform Beta(1, 1) prior, "
        "older epochs weighted 0.5 per epoch of age; `sizing (target t)` sizes the first round for P(both classes) "
        ">= t; `skip s` skips a prompt that was all-correct or all-wrong in its last sampled epoch with "
        "probability s (skipped prompts generate nothing and train nothing; in a trainer the next prompt takes its "
        "slot).",
        "",
        "Columns: coverage = share of trained groups with both classes (skipped prompts are not trained); signal / "
        "visit = groups with signal per prompt visit (skipping a prompt that would have shown signal lowers it); "
        "rounds = mean rounds per sampled prompt; E[max rounds] = expected maximum over a step of "
        f"{STEP_PROMPTS} prompts drawn from the visits (skipped = 0 rounds), the step's latency in generation "
        "passes; skipped = share of visits skipped (in brackets: of which the cap of samples would have shown "
        "both classes); tokens / signal group = all generated tokens (cancelled requests' included) per trained "
        "group with both classes; x authors' balance = that over the authors' balance setting's, pooled (seeds: "
        "range of the per-seed ratios); eta = tokens of the samples in trained groups with signal / all generated "
        "tokens (with arrival-order cancelling the kept samples are short, so eta falls even where tokens per "
        "group fall). The two `floor` rows are references no sampler can build: they know which prompts will show "
        "no signal within the cap and skip them for free, and draw one sample at a time (no rounds); the first "
        "stops on the authors' exit rule (2 correct + 2 wrong), the second as soon as both classes and 4 samples "
        "are there (the rule of the single-step `oracle-seq`). `sequential` draws one sample per round through "
        "the project's code (29 rounds). samples / visit = samples generated per prompt visit: `GRPO n=8` and "
        "`Est` spend the same budget, 8 per prompt (Est allocates it in steps of "
        f"{STEP_PROMPTS} prompts from each prompt's Ada-EMA pass-rate estimate over the earlier epochs, within "
        "[2, 32], decay 0.9, Beta(1, 1) prior, eps 0.01, every sample trained: its groups have different sizes, "
        "and a group counts as signal when it holds both classes); the authors' balance spends what its rounds "
        "need.",
        "",
        epoch_report(rows, list(args.mixes), lengths),
    ])


def machine() -> str:
    return _report.machine(f"numpy {np.__version__}")


update_section = _report.update_section


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2000, help="prompt slots per step (per seed and mix)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one step per seed; results pooled")
    parser.add_argument("--mixes", nargs="+", default=list(MIXES), choices=list(MIXES), help="pass-rate mixes")
    parser.add_argument("--cap", type=int, default=10,
                        help="refilling methods draw at most cap x prompts per step (verl's DAPO recipe: 10 batches)")
    parser.add_argument("--no-grid", action="store_true", help="skip the search over Reinforce-Ada settings")
    parser.add_argument("--epoch-prompts", type=int, default=300,
                        help="multi-epoch model: prompts in the dataset (per seed, mix and length model)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="multi-epoch model: epochs")
    parser.add_argument("--rise", type=float, default=RISE,
                        help="multi-epoch model: mean rise of a prompt's logit pass rate per epoch")
    parser.add_argument("--no-epochs", action="store_true", help="skip the multi-epoch model (cancel, history)")
    parser.add_argument("--docs", default=os.path.join(REPO, "docs", "benchmarks.md"), help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the docs file alone")
    args = parser.parse_args(argv)

    mixes = {m: m for m in args.mixes}
    rows = run_benchmark(prompts=args.prompts, seeds=args.seeds, mixes=mixes, cap=args.cap)
    named = {m.label for m in NAMED}
    grid_methods = [] if args.no_grid else [m for m in grid() if m.label not in named]
    grid_rows = run_benchmark(prompts=args.prompts, seeds=args.seeds, mixes=mixes, methods=grid_methods,
                              cap=args.cap) if grid_methods else []
    text = report(rows, grid_rows, args.mixes)
    if not args.no_epochs:
        epoch_rows = run_epoch_benchmark(prompts=args.epoch_prompts, seeds=args.seeds, mixes=args.mixes,
                                         epochs=args.epochs, rise=args.rise)
        text += "\n" + epoch_section(args, epoch_rows)
    print(text)
    if not args.no_write:
        command = "python benchmarks/sampling_efficiency.py " + " ".join(argv if argv is not None else sys.argv[1:])
        body = "\n".join([
            "## Sampling efficiency (simulated Bernoulli prompts)",
            "",
            f"Command: `{command.strip()}`  ",
            f"Machine: {machine()}  ",
            f"Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
            "",
            f"{args.prompts} prompt slots per step, seeds {' '.join(map(str, args.seeds))} (pooled), refill cap "
            f"{args.cap} x slots. Each prompt has a pass rate p from the mix and a fixed stream of Bernoulli(p) "
            "outcomes that every method reads in the same order; Reinforce-Ada runs through the project's "
            "`simulate` (`PromptPool`). `ada-MODE F+RxK` = a first round of F samples, then up to K more rounds of R "
            "(`--ada.first_round_size F --ada.round_size R --ada.max_rounds K+1`; `ada-MODE F` = one round of F), "
            "n = 4; `drop` = unresolved prompts are dropped and replaced by fresh ones (`--ada.unresolved drop`). "
            "DAPO n: groups without both classes are replaced by fresh prompts. The oracles know each p, skip "
            f"hopeless prompts (P(both classes within {ORACLE_BUDGET}) < {ORACLE_HOPELESS:g}) at no cost and "
            "refill them, and train 4 samples picked by the balance rule: `oracle-batch` draws at once the fewest "
            f"k in [4, {ORACLE_BUDGET}] with P(both classes) >= {ORACLE_TARGET:g}; `oracle-seq` also sees outcomes "
            "and draws one at a time until both classes and 4 samples are there (a ceiling for round-based "
            "settings).",
            "",
            "Columns: samples / prompt = generated samples per trained prompt slot (refills included); prompts / "
            "slot = prompts drawn per slot (data consumed); coverage = share of trained groups with both classes "
            "(non-zero advantage); eta = samples in trained groups with signal / generated samples (all responses "
            "equally long, so the share of tokens too); resolved = share of drawn prompts that met the exit rule; "
            "rounds = mean rounds per drawn prompt (latency: each round is one more generation pass). "
            f"`beats` = eta at least {ETA_MARGIN:g} x the authors' setting's at equal or better coverage.",
            "",
            text,
        ])
        update_section(args.docs, SECTION, body)
        print(f"wrote section '{SECTION}' of {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
