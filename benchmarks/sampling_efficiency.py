"""Sampling efficiency of GRPO, DAPO-style filtering, Reinforce-Ada settings and an oracle, on simulated prompts.

    python benchmarks/sampling_efficiency.py                 # 2000 prompts per mix, seeds 0 1 2, writes docs/
    python benchmarks/sampling_efficiency.py --prompts 200 --seeds 0 --no-write

The model: a training step has B prompt slots (`--prompts`). Every prompt has a pass rate p drawn from a mix, and
its samples are independent Bernoulli(p) outcomes (reward 1 correct, 0 wrong; all responses the same length, so
shares of samples are shares of tokens). Each prompt owns one pre-drawn outcome stream, and every method reads the
same streams in the same order (common random numbers): a method that draws 4 samples of a prompt sees the same 4
outcomes as any other method that draws 4. Reinforce-Ada runs through the project's own per-prompt code
(`openrlhf_ada.algorithms.reinforce_ada.simulate`, i.e. `PromptPool`: exit rule, rounds, group selection).

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
from typing import Callable, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402  (benchmarks/ is not a package)
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from openrlhf_ada.algorithms.reinforce_ada import select_group, simulate  # noqa: E402

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
