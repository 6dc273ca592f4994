"""Advantage computation overhead: the project's `AdoraPoolExperienceMaker` against upstream's `RemoteExperienceMaker`.

    python benchmarks/advantage_overhead.py                     # 512 prompts x {4, 32} samples x 1024 tokens
    python benchmarks/advantage_overhead.py --samples 4 --reps 3 --no-write

Both makers run `compute_advantages_and_returns` on identical OpenRLHF `Experience` micro-batches built as upstream
builds them for a rollout (`split_rollout_samples` without dynamic batching: `--rollout.micro_batch_size` samples per
micro-batch, in rollout order, each right-padded to its longest response; per-sample rewards, scores,
response_length, truncated; a KL tensor of zeros as `make_experience` leaves it without a reference model or with
the KL in the loss). Ours runs with everything on that touches this method: `--adora.enable --ada.enable
--ada.baseline pool` (per-sample group ids `ada_group` and pool statistics `ada_pool_count/_mean/_std` in `info`, as
RoundsSamplesGenerator puts them there); upstream ignores those extra `info` entries.

Timing: for every repetition and setting both makers run back to back on fresh copies of the same batch, the order
alternating between repetitions; the reported figure is the median over repetitions of the paired ratio
ours / upstream (robust against load from other processes on the machine), with both medians in seconds for
scale. Only ratios measured side by side in one run mean anything; the seconds depend on the machine and its load.

Writes its section of docs/benchmarks.md (between `<!-- BEGIN advantage_overhead -->` and `<!-- END ... -->`).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import os
import pstats
import statistics
import sys
import time
from typing import Dict, List, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402  (benchmarks/ is not a package)
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from openrlhf_ada.cpu.patches import use_cpu_mode_without_cuda  # noqa: E402

use_cpu_mode_without_cuda()  # before anything imports openrlhf: on a machine without CUDA, the CPU mode

# isort: split
from openrlhf.trainer.ppo_utils.experience import Experience  # noqa: E402
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # noqa: E402
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController  # noqa: E402

from openrlhf_ada.launcher import parse_args  # noqa: E402
from openrlhf_ada.trainer.ppo_utils.experience_maker import AdoraPoolExperienceMaker  # noqa: E402

SECTION = "advantage_overhead"
TARGET = 1.05
OURS_FLAGS = ("--adora.enable", "--ada.enable", "--ada.baseline", "pool")


def make_args(estimator: str, n: int, micro_batch_size: int, ours: bool):
    argv = ["--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
            "--rollout.n_samples_per_prompt", str(n), "--algo.advantage.estimator", estimator,
            "--rollout.micro_batch_size", str(micro_batch_size)]
    return parse_args(argv + list(OURS_FLAGS if ours else ()))


def make_maker(cls, args):
    strategy = type("Strategy", (), {"args": args})()
    return cls(None, None, None, None, FixedKLController(args.algo.kl.init_coef), strategy, None)


class Batch:
    """One rollout's per-sample data, kept once; `experiences()` builds fresh micro-batch Experiences from it
    (the methods under test replace rewards, kl, advantages and info entries, so every call gets its own)."""

    def __init__(self, prompts: int, n: int, max_tokens: int, micro_batch_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        total = prompts * n
        pass_rate = torch.rand(prompts, generator=g).repeat_interleave(n)
        self.rewards = (torch.rand(total, generator=g) < pass_rate).float()
        self.lengths = torch.randint(1, max_tokens + 1, (total,), generator=g)
        # pool statistics as RoundsSamplesGenerator reports them: the kept n plus further rounds of 2n
        extra = 2 * n * torch.randint(0, 4, (prompts,), generator=g)
        count = (n + extra).float()
        grouped = self.rewards.reshape(prompts, n)
        pos = grouped.sum(-1) + (torch.rand(prompts, generator=g) * extra).round()
        mean = pos / count
        std = (mean * (1 - mean) * count / (count - 1)).clamp(min=0).sqrt()
        self.pool = {"ada_group": torch.arange(prompts).repeat_interleave(n),
                     "ada_pool_count": count.repeat_interleave(n), "ada_pool_mean": mean.repeat_interleave(n),
                     "ada_pool_std": std.repeat_interleave(n)}
        self.chunks = []  # (index list, action_mask) per micro-batch; masks are read-only for both makers
        for start in range(0, total, micro_batch_size):
            idx = list(range(start, min(start + micro_batch_size, total)))
            lens = self.lengths[idx]
            mask = torch.arange(int(lens.max())).unsqueeze(0) < lens.unsqueeze(1)
            self.chunks.append((idx, mask))
        self.max_tokens = max_tokens

    def experiences(self) -> List[Experience]:
        out = []
        for idx, mask in self.chunks:
            lo, hi = idx[0], idx[-1] + 1
            rewards = self.rewards[lo:hi].clone()
            lengths = self.lengths[lo:hi]
            info = {"reward": rewards.clone(), **{k: v[lo:hi].clone() for k, v in self.pool.items()}}
            out.append(Experience(
                action_mask=mask,
                kl=torch.zeros(mask.shape, dtype=torch.float32),
                rewards=rewards,
                scores=rewards.clone(),
                response_length=lengths.float(),
                truncated=lengths >= self.max_tokens,
                total_length=lengths.float() + 64,
                index=list(idx),
                info=info,
            ))
        return out


def _time(maker, experiences):
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    maker.compute_advantages_and_returns(experiences)
    return time.perf_counter() - wall, time.process_time() - cpu


def run_overhead(
    *,
    prompts: int = 512,
    samples: Sequence[int] = (4, 32),
    max_tokens: int = 1024,
    estimators: Sequence[str] = ("group_norm", "dr_grpo"),
    reps: int = 7,
    micro_batch_size: int = 16,
    control: bool = True,
    seed: int = 0,
    log=print,
) -> List[Dict]:
    """One row per (samples per prompt, estimator): median paired time ratios ours / upstream (wall and CPU time).

    With `control`, a second upstream maker runs in the same rotation and its ratio to the first (an A/A
    comparison, ideally 1.0) shows how much of a ratio is noise from the machine."""
    settings = [(n, est) for n in samples for est in estimators]
    batches = {n: Batch(prompts, n, max_tokens, micro_batch_size, seed) for n in samples}
    variants = ["ours", "upstream"] + (["control"] if control else [])
    makers = {}
    for n, est in settings:
        makers[(n, est)] = {
            "ours": make_maker(AdoraPoolExperienceMaker, make_args(est, n, micro_batch_size, True)),
            "upstream": make_maker(RemoteExperienceMaker, make_args(est, n, micro_batch_size, False)),
            "control": make_maker(RemoteExperienceMaker, make_args(est, n, micro_batch_size, False)),
        }
    times = {s: {v: [] for v in variants} for s in settings}  # (wall, cpu) per repetition
    for s in settings:  # one untimed warm-up call per maker (first-call allocations, lazy imports)
        for v in variants:
            makers[s][v].compute_advantages_and_returns(batches[s[0]].experiences())
    for rep in range(reps):
        for s in settings:
            k = rep % len(variants)  # rotate, and reverse every other repetition: each variant runs in each slot
            order = variants[k:] + variants[:k]
            if (rep // len(variants)) % 2:
                order.reverse()
            for v in order:
                experiences = batches[s[0]].experiences()
                gc.collect()
                times[s][v].append(_time(makers[s][v], experiences))
                del experiences
            last = {v: times[s][v][-1] for v in variants}
            log(f"rep {rep + 1}/{reps} n={s[0]:>2} {s[1]:<10} wall " + " ".join(f"{v} {last[v][0]:.3f}s" for v in variants)
                + f" | ours/upstream wall {last['ours'][0] / last['upstream'][0]:.3f} cpu "
                f"{last['ours'][1] / last['upstream'][1]:.3f}")
    rows = []
    for n, est in settings:
        t = times[(n, est)]

        def ratios(a, b, i, t=t):
            return [x[i] / y[i] for x, y in zip(t[a], t[b])]

        wall, cpu = ratios("ours", "upstream", 0), ratios("ours", "upstream", 1)
        row = {
            "estimator": est,
            "prompts": prompts,
            "samples_per_prompt": n,
            "max_tokens": max_tokens,
            "micro_batches": len(batches[n].chunks),
            "reps": reps,
            "upstream_median_s": statistics.median(x[0] for x in t["upstream"]),
            "ours_median_s": statistics.median(x[0] for x in t["ours"]),
            "ratio_median": statistics.median(wall),
            "ratio_min": min(wall),
            "ratio_max": max(wall),
            "cpu_ratio_median": statistics.median(cpu),
            "cpu_ratio_min": min(cpu),
            "cpu_ratio_max": max(cpu),
        }
        if control:
            row["control_ratio_median"] = statistics.median(ratios("control", "upstream", 0))
            row["control_cpu_ratio_median"] = statistics.median(ratios("control", "upstream", 1))
        rows.append(row)
    return rows


def _own_seconds(stats: pstats.Stats, is_own) -> float:
    """Seconds spent in the functions `is_own(file, name)` selects plus the builtins (torch ops) they call directly."""
    total = 0.0
    for (file, _, name), (_, _, tottime, _, callers) in stats.stats.items():
        if is_own(file, name):
            total += tottime
        elif file == "~" or file.startswith("<"):
            total += sum(c[2] for caller, c in callers.items() if is_own(caller[0], caller[2]))
    return total


def profile_split(*, prompts: int, n: int, max_tokens: int, estimator: str, micro_batch_size: int = 16,
                  seed: int = 0) -> Dict:
    """One cProfile'd call of each maker: where the time goes. `own_s` is the time in the method's own code
    (openrlhf_ada's functions for ours, upstream's compute_advantages_and_returns body for upstream) and the torch ops
    it calls directly; `returns_s` is the per-token returns, once per micro-batch: upstream's get_cumulative_returns
    (a Python loop over token positions) for upstream, the project's undiscounted_returns (one reverse cumulative sum)
    for ours. Profiling slows Python calls, so these are shares, not timings."""
    batch = Batch(prompts, n, max_tokens, micro_batch_size, seed)
    out = {"estimator": estimator, "samples_per_prompt": n}
    upstream_file = os.path.join("openrlhf", "trainer", "ppo_utils", "experience_maker.py")
    selectors = {
        "ours": (AdoraPoolExperienceMaker, True, lambda f, name: f"{os.sep}openrlhf_ada{os.sep}" in f),
        "upstream": (RemoteExperienceMaker, False,
                     lambda f, name: f.endswith(upstream_file) and name == "compute_advantages_and_returns"),
    }
    for key, (cls, ours, is_own) in selectors.items():
        maker = make_maker(cls, make_args(estimator, n, micro_batch_size, ours))
        experiences = batch.experiences()
        gc.collect()
        profiler = cProfile.Profile()
        profiler.enable()
        maker.compute_advantages_and_returns(experiences)
        profiler.disable()
        stats = pstats.Stats(profiler)
        out[f"{key}_total_s"] = stats.total_tt
        out[f"{key}_own_s"] = _own_seconds(stats, is_own)
        out[f"{key}_returns_s"] = sum(v[3] for k, v in stats.stats.items()
                                      if k[2] in ("get_cumulative_returns", "undiscounted_returns"))
    return out


def profile_lines(profiles: List[Dict], prompts: int, max_tokens: int) -> str:
    lines = []
    for p in profiles:
        lines.append(
            f"- {p['estimator']}, {prompts} x {p['samples_per_prompt']} x {max_tokens}: ours {p['ours_total_s']:.2f} s, of "
            f"which the project's own code {p['ours_own_s']:.3f} s ({100 * p['ours_own_s'] / p['ours_total_s']:.1f}%) "
            f"and its returns {100 * p['ours_returns_s'] / p['ours_total_s']:.0f}%; upstream "
            f"{p['upstream_total_s']:.2f} s, its own method body {p['upstream_own_s']:.3f} s "
            f"({100 * p['upstream_own_s'] / p['upstream_total_s']:.1f}%), its per-token return loop "
            f"{100 * p['upstream_returns_s'] / p['upstream_total_s']:.0f}%")
    return "\n".join(lines)


def markdown_table(rows: List[Dict]) -> str:
    lines = ["| estimator | prompts x samples x tokens | micro-batches | upstream wall median (s) | ours wall median (s) "
             "| CPU-time ratio ours/upstream (median, range) | wall ratio (median, range) "
             "| A/A control upstream/upstream (CPU, wall) | CPU ratio within 1.05 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['estimator']} | {r['prompts']} x {r['samples_per_prompt']} x {r['max_tokens']} | {r['micro_batches']} "
            f"| {r['upstream_median_s']:.3f} | {r['ours_median_s']:.3f} "
            f"| **{r['cpu_ratio_median']:.3f}** ({r['cpu_ratio_min']:.3f} - {r['cpu_ratio_max']:.3f}) "
            f"| {r['ratio_median']:.3f} ({r['ratio_min']:.3f} - {r['ratio_max']:.3f}) "
            + (f"| {r['control_cpu_ratio_median']:.3f}, {r['control_ratio_median']:.3f} " if "control_ratio_median" in r
               else "| - ")
            + f"| {'yes' if within(r) else 'NO'} |"
        )
    return "\n".join(lines)


def within(row: Dict) -> bool:
    """Within target when the median paired ratio of process CPU time is: on a machine shared with other jobs,
    CPU time leaves out the time the process waits for a core, which wall time includes (both are reported)."""
    return row["cpu_ratio_median"] <= TARGET


def machine() -> str:
    return _report.machine(f"torch {torch.__version__}")


update_section = _report.update_section


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=512, help="prompts per rollout batch")
    parser.add_argument("--samples", type=int, nargs="+", default=[4, 32], help="samples per prompt (one setting each)")
    parser.add_argument("--tokens", type=int, default=1024, help="maximum response length; lengths are uniform in 1..tokens")
    parser.add_argument("--estimators", nargs="+", default=["group_norm", "dr_grpo"], help="advantage estimators")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per setting (interleaved)")
    parser.add_argument("--micro-batch-size", type=int, default=16, help="samples per Experience micro-batch")
    parser.add_argument("--no-control", action="store_true",
                        help="skip the A/A control (a second upstream maker timed in the same rotation)")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the cProfile split (one call per maker per estimator at the largest --samples)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: steadier on a shared machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--docs", default=os.path.join(REPO, "docs", "benchmarks.md"), help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the docs file alone")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rows = run_overhead(prompts=args.prompts, samples=args.samples, max_tokens=args.tokens,
                        estimators=args.estimators, reps=args.reps, micro_batch_size=args.micro_batch_size,
                        control=not args.no_control, seed=args.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    table = markdown_table(rows)
    print(table)
    worst_wall = max(r["ratio_median"] for r in rows)
    worst_cpu = max(r["cpu_ratio_median"] for r in rows)
    verdict = (f"{'All settings within' if all(within(r) for r in rows) else 'NOT all settings within'} the target of "
               f"{TARGET} x upstream's CPU time (worst median ratio: CPU time {worst_cpu:.3f}, wall {worst_wall:.3f}).")
    print(verdict)
    profiles = [] if args.no_profile else [
        profile_split(prompts=args.prompts, n=max(args.samples), max_tokens=args.tokens, estimator=est,
                      micro_batch_size=args.micro_batch_size, seed=args.seed) for est in args.estimators]
    where = profile_lines(profiles, args.prompts, args.tokens)
    if where:
        print("Where the time goes (cProfile, one call each):\n" + where)
    if not args.no_write:
        command = "python benchmarks/advantage_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:])
        body = "\n".join([
            "## Advantage computation overhead (ADORA + pool baseline vs upstream)",
            "",
            f"Command: `{command.strip()}`  ",
            f"Machine: {machine()}, torch threads {args.threads}  ",
            f"Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
            "",
            "`RemoteExperienceMaker.compute_advantages_and_returns` (upstream 0.11.2) against `AdoraPoolExperienceMaker` with "
            "`--adora.enable --ada.enable --ada.baseline pool` on identical Experience micro-batches "
            f"({args.micro_batch_size} samples each, response lengths uniform in 1..{args.tokens}, KL zeros). "
            f"Both run back to back on fresh copies, order alternating; {args.reps} repetitions; a ratio is the median "
            "of the paired per-repetition ratios, of wall time and of this process's CPU time (less disturbed by "
            "other jobs on a shared machine); seconds are for scale only. The A/A control times a second upstream "
            "maker in the same rotation: its distance from 1.0 is the noise of this measurement.",
            "",
            table,
            "",
            verdict,
        ] + (["", "Where the time goes (cProfile, one call of each maker; the project's own code = openrlhf_ada's "
                   "functions and the torch ops they call directly, i.e. the ADORA weights and the pool baseline; "
                   "shares only, profiling slows Python calls):", "", where] if where else []))
        update_section(args.docs, SECTION, body)
        print(f"wrote section '{SECTION}' of {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
