"""`python -m openrlhf_ada.cli.train_ppo_ray`: upstream's launcher with ADORA and Reinforce-Ada switched in by flags.

This recipe runs OpenRLHF 0.11.2's own `openrlhf.cli.train_ppo_ray` (its parser, its validations, its `train()`),
with three hooks set before it starts:

1. its parser also gets the project's flag groups (--adora.*, --ada.*), so `--help` lists both and unknown flags
   fail exactly as upstream's do;
2. right after upstream's `hierarchize`, the project's flags are checked (`openrlhf_ada.args.validate`): misuse
   stops here, before Ray or any model starts, and the trainer classes that `train()` imports are pointed at the
   project's (PPOTrainer -> AdaPPOTrainer, PPOTrainerAsync -> AdaPPOTrainerAsync);
3. `ray.init` adds the project's worker setup hook to the runtime_env upstream passes, so every Ray worker on every
   node can import openrlhf (CPU placeholder for the flash-attn extension where there is no CUDA).

The parsed namespace, project flags included, travels to every actor inside `strategy.args`.
"""

from __future__ import annotations

import argparse
import functools
import runpy
import sys
from typing import Callable, Optional

import openrlhf_ada  # noqa: F401  (CPU compatibility before anything imports openrlhf)
from openrlhf_ada.args import add_project_args, validate

PROG = "python -m openrlhf_ada.cli.train_ppo_ray"
WORKER_SETUP_HOOK = "openrlhf_ada.cpu_compat.worker_setup_hook"
DESCRIPTION = (
    "OpenRLHF 0.11.2 PPO/GRPO trainer (all upstream flags) with ADORA (--adora.*) and Reinforce-Ada (--ada.*)."
)


def install_trainers() -> None:
    """Point the names upstream's train() uses at the project's actors: the trainers, and the rollout engine that
    upstream's create_vllm_engines builds (with the reward guard)."""
    import openrlhf.trainer.ppo_trainer as sync_module
    import openrlhf.trainer.ppo_trainer_async as async_module
    import openrlhf.trainer.ray.vllm_engine as engine_module

    from openrlhf_ada.trainer.ppo_trainer import AdaPPOTrainer
    from openrlhf_ada.trainer.ppo_trainer_async import AdaPPOTrainerAsync
    from openrlhf_ada.trainer.ray.vllm_engine import AdaRolloutRayActor

    sync_module.PPOTrainer = AdaPPOTrainer
    async_module.PPOTrainerAsync = AdaPPOTrainerAsync
    engine_module.RolloutRayActor = AdaRolloutRayActor


def with_setup_hook(runtime_env: dict | None, env_vars: dict | None = None) -> dict:
    runtime_env = dict(runtime_env or {})
    runtime_env.setdefault("worker_process_setup_hook", WORKER_SETUP_HOOK)
    if env_vars:
        runtime_env["env_vars"] = {**env_vars, **runtime_env.get("env_vars", {})}
    return runtime_env


def _wrap_ray_init(env_vars: dict) -> None:
    import ray

    if getattr(ray.init, "_openrlhf_ada", False):
        return
    original = ray.init

    @functools.wraps(original)
    def init(*args, **kwargs):
        kwargs["runtime_env"] = with_setup_hook(kwargs.get("runtime_env"), env_vars)
        return original(*args, **kwargs)

    init._openrlhf_ada = True
    ray.init = init


def _fail(prog: str, message: str) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parsed(Exception):
    def __init__(self, args):
        self.namespace = args


def parse_args(argv, **parser_options):
    """Parse and validate exactly as `main` does (upstream's parser and every upstream check after it, then the
    project's), and return the final namespace instead of training. Used by tests, to check scripts, and by the
    single-machine trainer (with `extend_parser`, `extra_validate`, `defaults`, `prog`, `description`)."""
    try:
        main(argv, _parse_only=True, **parser_options)
    except _Parsed as parsed:
        return parsed.namespace
    raise RuntimeError("upstream's launcher returned without calling train()")


def main(
    argv=None,
    *,
    extend_parser: Optional[Callable[[argparse.ArgumentParser], None]] = None,
    defaults: Optional[dict] = None,
    extra_validate: Optional[Callable[[object], None]] = None,
    prog: str = PROG,
    description: str = DESCRIPTION,
    _parse_only: bool = False,
) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    import openrlhf.utils.config as config

    original_parse_args = argparse.ArgumentParser.parse_args
    original_hierarchize = config.hierarchize

    def parse_args(parser, args=None, namespace=None):
        argparse.ArgumentParser.parse_args = original_parse_args  # only upstream's parser gets the project flags
        parser.prog, parser.description = prog, description
        parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
        add_project_args(parser)
        if extend_parser is not None:
            extend_parser(parser)
        if defaults:
            parser.set_defaults(**defaults)
        return original_parse_args(parser, args, namespace)

    def hierarchize(namespace):
        config.hierarchize = original_hierarchize
        args = original_hierarchize(namespace)
        try:
            validate(args)
            if extra_validate is not None:
                extra_validate(args)
        except ValueError as e:
            _fail(prog, str(e))
        if _parse_only:  # upstream's checks still run; its train() is replaced in the launcher's own namespace
            def capture(final_args):
                raise _Parsed(final_args)

            sys._getframe(1).f_globals["train"] = capture
        else:
            install_trainers()
            _wrap_ray_init({"OPENRLHF_ADA_REWARD_TIMEOUT": str(args.fault.reward_timeout)})
        return args

    argparse.ArgumentParser.parse_args = parse_args
    config.hierarchize = hierarchize
    saved_argv = sys.argv
    sys.argv = [prog] + argv
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved_argv
        argparse.ArgumentParser.parse_args = original_parse_args
        config.hierarchize = original_hierarchize


if __name__ == "__main__":
    main()
