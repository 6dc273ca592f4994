"""Upstream's launcher with the project's hooks: what `python -m openrlhf_ada.cli.train_ppo_ray` runs.

`main` runs OpenRLHF 0.11.2's own `openrlhf.cli.train_ppo_ray` (its parser, its validations, its `train()`) as
`__main__`, with three hooks set before it starts:

1. its parser also gets the project's flag groups (--adora.*, --ada.*), so `--help` lists both and unknown flags
   fail exactly as upstream's do;
2. right after upstream's `hierarchize`, the project's flags are checked (`openrlhf_ada.args.validate`): misuse
   stops here, before Ray or any model starts, and the trainer classes that `train()` imports are pointed at the
   project's (PPOTrainer -> AdoraPoolPPOTrainer, PPOTrainerAsync -> AdoraPoolPPOTrainerAsync);
3. `ray.init` adds the project's worker setup hook to the runtime_env upstream passes, so every Ray worker on every
   node can import openrlhf (CPU placeholder for the flash-attn extension where there is no CUDA).

`parse_args` stops at the point where upstream would call `train()` and returns the final namespace: the single-
machine trainer, the tests and the benchmarks build their arguments with it, so every one of them gets upstream's
parser and checks and the project's. The parsed namespace, project flags included, travels to every actor inside
`strategy.args`.

CPU mode (`OPENRLHF_ADA_CPU=1` on a machine without CUDA; see openrlhf_ada.cpu.patches): the same run on CPU. The
patches are applied in this process, carried to every Ray worker (setup hook + env var) and to vLLM's processes
(plugin); after upstream's checks, flags that cannot work on CPU are switched for their CPU equivalents (each
switch printed) or refused; a Ray started here declares logical GPUs for upstream's bundles, and a cluster without
enough of them is an error instead of a hang.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import runpy
import sys
from dataclasses import dataclass
from typing import Callable, Optional

import openrlhf_ada  # noqa: F401  (CPU compatibility before anything imports openrlhf)
from openrlhf_ada.args import add_project_args, validate
from openrlhf_ada.cpu import patches as cpu_compat
from openrlhf_ada.data.checks import check_dataset_images

PROG = "python -m openrlhf_ada.cli.train_ppo_ray"
WORKER_SETUP_HOOK = "openrlhf_ada.cpu.patches.worker_setup_hook"
DESCRIPTION = (
    "OpenRLHF 0.11.2 PPO/GRPO trainer (all upstream flags) with ADORA (--adora.*) and Reinforce-Ada (--ada.*)."
)


def install_trainers(launcher_globals: dict) -> None:
    """Point the names upstream's train() uses at the project's actors: the trainers, the rollout engine that
    upstream's create_vllm_engines builds (with the reward guard), and the policy actor (a LoRA policy syncs its
    merged weights), which upstream's launcher module (`launcher_globals`) imported by name."""
    import openrlhf.trainer.ppo_trainer as sync_module
    import openrlhf.trainer.ppo_trainer_async as async_module
    import openrlhf.trainer.ray.vllm_engine as engine_module

    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolPPOTrainer
    from openrlhf_ada.trainer.ppo_trainer_async import AdoraPoolPPOTrainerAsync
    from openrlhf_ada.trainer.ray.ppo_actor import LoraSyncPolicyModelActor
    from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

    sync_module.PPOTrainer = AdoraPoolPPOTrainer
    async_module.PPOTrainerAsync = AdoraPoolPPOTrainerAsync
    engine_module.RolloutRayActor = GuardedRolloutRayActor
    launcher_globals["PolicyModelActor"] = LoraSyncPolicyModelActor


def with_setup_hook(runtime_env: dict | None, env_vars: dict | None = None) -> dict:
    runtime_env = dict(runtime_env or {})
    runtime_env.setdefault("worker_process_setup_hook", WORKER_SETUP_HOOK)
    if env_vars:
        runtime_env["env_vars"] = {**env_vars, **runtime_env.get("env_vars", {})}
    return runtime_env


def _wrap_ray_init(env_vars: dict, args=None) -> None:
    """ray.init (upstream's train() calls it) gets the worker setup hook and `env_vars`; in CPU mode also the CPU
    mode's env var, logical GPUs when it starts Ray itself, and a check that the cluster can hold the run."""
    import ray

    if getattr(ray.init, "_openrlhf_ada", False):
        ray.init = ray.init.__wrapped__
    original = ray.init
    cpu = args is not None and cpu_compat.cpu_mode_active()

    @functools.wraps(original)
    def init(*a, **kwargs):
        kwargs["runtime_env"] = with_setup_hook(kwargs.get("runtime_env"), env_vars)
        if cpu:
            kwargs = cpu_compat.ray_init_kwargs_for_cpu(args, kwargs)
        result = original(*a, **kwargs)
        if cpu:
            cpu_compat.check_ray_resources(args)
        return result

    init._openrlhf_ada = True
    ray.init = init


def _shutdown_own_ray() -> None:
    """After upstream's train(), also when it fails: shut Ray down here, and unlink the shared-memory segments
    (/dev/shm/psm_*, 160 MB or more each) that the vLLM engine processes under this process map, since Ray kills
    them with SIGKILL and they leave them behind (openrlhf_ada.cpu.shm_leftovers). Only a Ray this process
    started has its workers under this process: on a cluster it joined, nothing is found and nothing removed."""
    import ray

    from openrlhf_ada.cpu.shm_leftovers import mapped_segments, remove_segments

    if not ray.is_initialized():
        return
    held = mapped_segments([os.getpid()])
    ray.shutdown()
    removed = remove_segments(held)
    if removed:
        print(f"[openrlhf_ada] removed {len(removed)} shared-memory segment(s) the vLLM engines left in /dev/shm",
              flush=True)


def _fail(prog: str, message: str) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


@dataclass(frozen=True)
class LaunchOptions:
    """What a caller changes about the launcher: `extend_parser` adds flags to upstream's parser, `defaults` replaces
    defaults, `extra_validate` checks the parsed namespace after the project's checks, `prog` and `description` are
    what `--help` and errors show; `upstream_only`: upstream's trainer and flags as they are (no project flags,
    checks or classes), only the worker setup hook and the CPU mode (cli/train_ppo_ray_upstream)."""

    extend_parser: Optional[Callable[[argparse.ArgumentParser], None]] = None
    defaults: Optional[dict] = None
    extra_validate: Optional[Callable[[object], None]] = None
    prog: str = PROG
    description: str = DESCRIPTION
    upstream_only: bool = False


def parse_args(argv, **options):
    """Parse and validate exactly as `main` does (upstream's parser and every upstream check after it, then the
    project's), and return the final namespace instead of training. Used by tests, to check scripts, and by the
    single-machine trainer (`options`: LaunchOptions' fields)."""
    options = LaunchOptions(**options)
    cpu = _prepare_this_process(options.prog, apply_cpu_patches=False)
    parsed = []
    _run_upstream_launcher(argv, options, functools.partial(_keep_final_args, into=parsed, prog=options.prog, cpu=cpu))
    if not parsed:
        raise RuntimeError("upstream's launcher returned without calling train()")
    return parsed[0]


def main(argv=None, **options) -> None:
    """Run upstream's launcher module with the project's hooks (`options`: LaunchOptions' fields)."""
    options = LaunchOptions(**options)
    cpu = _prepare_this_process(options.prog, apply_cpu_patches=True)
    _run_upstream_launcher(argv, options, functools.partial(_train, options=options, cpu=cpu))


def _prepare_this_process(prog: str, *, apply_cpu_patches: bool) -> bool:
    """The CPU mode decided (and said so when asked for on a machine with CUDA), its patches applied when a run
    follows, and flash-attn's extension required outside it. Returns whether the CPU mode is on."""
    import openrlhf.utils.config  # noqa: F401  (imported before the CPU patches, as upstream's launcher is)

    cpu = cpu_compat.cpu_mode_active()
    if cpu_compat.cpu_mode_requested() and not cpu:
        why = f"{cpu_compat.CPU_ENV}=1" if os.environ.get(cpu_compat.CPU_ENV) else "the CPU stack's environment"
        print(f"[openrlhf_ada] the CPU mode ({why}) ignored: this machine has CUDA", file=sys.stderr)
    if cpu and apply_cpu_patches:
        cpu_compat.apply_cpu_patches()
    if not cpu and importlib.util.find_spec(cpu_compat.EXT_NAME) is None:
        _fail(prog, f"flash-attn's compiled CUDA extension ({cpu_compat.EXT_NAME}) is not installed, and openrlhf "
                    "imports it: on a GPU node install the GPU stack (pip install -e '.[gpu]', or the Docker image); "
                    f"to run the whole pipeline on this machine's CPU, set {cpu_compat.CPU_ENV}=1")
    return cpu


def _run_upstream_launcher(argv, options: LaunchOptions, at_train: Callable) -> None:
    """Upstream's `openrlhf.cli.train_ppo_ray` run as `__main__` on `argv` (None: this process's), with its parser and `hierarchize`
    hooked (each hook undoes itself when called, and both are undone when the module returns or fails); its
    closing `train(args)` call goes to `at_train(args, launcher_globals=..., upstream_train=...)`."""
    import openrlhf.utils.config as config

    argv = list(sys.argv[1:] if argv is None else argv)
    original_parse_args, original_hierarchize = argparse.ArgumentParser.parse_args, config.hierarchize
    argparse.ArgumentParser.parse_args = functools.partialmethod(_parse_with_project_flags, options=options,
                                                                 original=original_parse_args)
    config.hierarchize = functools.partial(_hierarchize_and_check, options=options, original=original_hierarchize,
                                           at_train=at_train)
    saved_argv = sys.argv
    sys.argv = [options.prog] + argv
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved_argv
        argparse.ArgumentParser.parse_args = original_parse_args
        config.hierarchize = original_hierarchize


def _parse_with_project_flags(parser, args=None, namespace=None, *, options: LaunchOptions, original: Callable):
    """Hook 1, upstream's `parser.parse_args()`: its parser (only the first one parsed) also gets the project's flags
    and the caller's, and the caller's defaults."""
    argparse.ArgumentParser.parse_args = original
    parser.prog = options.prog
    if not options.upstream_only:
        parser.description = options.description
        parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
        add_project_args(parser)
    if options.extend_parser is not None:
        options.extend_parser(parser)
    if options.defaults:
        parser.set_defaults(**options.defaults)
    return original(parser, args, namespace)


def _hierarchize_and_check(namespace, *, options: LaunchOptions, original: Callable, at_train: Callable):
    """Hook 2, upstream's `hierarchize`: the project's checks and the caller's on the dotted namespace (misuse stops
    here), and upstream's `train` (called after its remaining checks) pointed at `at_train`."""
    import openrlhf.utils.config as config

    config.hierarchize = original
    args = original(namespace)
    if not options.upstream_only:
        try:
            validate(args)
            if options.extra_validate is not None:
                options.extra_validate(args)
        except ValueError as e:
            _fail(options.prog, str(e))
    launcher_globals = sys._getframe(1).f_globals  # upstream's launcher module, the caller
    launcher_globals["train"] = functools.partial(at_train, launcher_globals=launcher_globals,
                                                  upstream_train=launcher_globals["train"])
    return args


def _cpu_notes(final_args, prog: str, *, plan_kv_cache: bool) -> list:
    """The CPU mode's switches of flags that cannot work on CPU (refused ones stop here), and with `plan_kv_cache`
    the engines' KV cache planned; what was changed, one note each."""
    try:
        notes = cpu_compat.adjust_args_for_cpu(final_args)
        if plan_kv_cache and final_args.vllm.num_engines:
            notes += [cpu_compat.plan_engine_kv_cache(final_args)]
    except ValueError as e:
        _fail(prog, str(e))
    return notes


def _keep_final_args(final_args, *, launcher_globals, upstream_train, into: list, prog: str, cpu: bool) -> None:
    """`parse_args`'s end of upstream's launcher: the final namespace (with the CPU mode's switches) kept, nothing
    trained."""
    if cpu:
        _cpu_notes(final_args, prog, plan_kv_cache=False)
    into.append(final_args)


def _train(final_args, *, launcher_globals, upstream_train, options: LaunchOptions, cpu: bool):
    """`main`'s end of upstream's launcher: the CPU mode's switches, the dataset's images checked and the project's
    classes installed, then upstream's `train()` with ray.init hooked, and this process's Ray shut down after it."""
    if cpu:
        for note in _cpu_notes(final_args, options.prog, plan_kv_cache=True):
            print(f"[openrlhf_ada] CPU mode: {note}", flush=True)
    if not options.upstream_only:
        try:  # images a run cannot use: refused here, naming file and line, not inside an engine later
            check_dataset_images(final_args)
        except ValueError as e:
            _fail(options.prog, str(e))
        install_trainers(launcher_globals)
    if cpu:
        cpu_compat.prepare_deepspeed_cpu_ops()
    reward_timeout = getattr(getattr(final_args, "fault", None), "reward_timeout", None)
    _wrap_ray_init({"OPENRLHF_ADA_REWARD_TIMEOUT": str(reward_timeout)} if reward_timeout else {}, final_args)
    try:
        return upstream_train(final_args)
    finally:
        _shutdown_own_ray()
