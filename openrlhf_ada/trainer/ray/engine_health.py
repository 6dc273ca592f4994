"""Is every rollout engine alive, and what to tell the user when one is not.

`probe_engines` is the one health check that both the samples generator (it drops a dead engine and goes on) and
the cluster trainer (it stops before the weight sync would wait for a dead engine) use; `lost_engines_message` is
the one message for a run that stops on a lost engine, with `resume_hint` saying where the last checkpoint is.
`check_streaming_engines` refuses engines that cannot do what `--ada.cancel` needs."""

from __future__ import annotations

import os
from typing import List, Tuple

import ray


def resume_hint(args) -> str:
    """Where the cluster trainer's last checkpoint is and how to continue from it (upstream writes the tag of the
    newest DeepSpeed checkpoint into <ckpt.path>/_actor/latest)."""
    latest = os.path.join(args.ckpt.path, "_actor", "latest")
    if not os.path.isfile(latest):
        return (f"none in {args.ckpt.path} yet (--ckpt.save_steps {args.ckpt.save_steps}); a restart begins at step "
                "1")
    with open(latest) as f:
        tag = f.read().strip()
    return f"{tag} in {os.path.join(args.ckpt.path, '_actor')}; restart with the same flags plus --ckpt.load_enable"


def lost_engines_message(lost: List[str], when: str, args) -> str:
    """What a run that stops on lost engines says: which ones (`probe_engines`' lines), what the run was about to
    do or was doing (`when`, e.g. " during the weight sync"), and the last checkpoint to restart from."""
    return f"lost {'; '.join(lost)}{when}. Last checkpoint: {resume_hint(args)}"


def probe_engines(engines, timeout: float) -> Tuple[list, List[str]]:
    """Ask every rollout engine for a health check (`check_health`, else upstream's `get_num_unfinished_requests`).
    Returns (the engines that answered, one line per engine that did not: dead actor, dead vLLM engine core inside a
    live actor (a RayTaskError), or no answer within `timeout` seconds)."""
    alive, lost = [], []
    for i, engine in enumerate(engines):
        check = getattr(engine, "check_health", None) or engine.get_num_unfinished_requests
        try:
            ray.get(check.remote(), timeout=timeout)
            alive.append(engine)
        except Exception as e:  # noqa: BLE001 - any failure to answer means the engine can take no more work
            said = str(getattr(e, "cause", None) or e)  # a RayTaskError's own first line is only its header
            lost.append(f"rollout engine {i} of {len(engines)} ({engine}): {type(e).__name__}: "
                        f"{said.splitlines()[0][:1000] if said else ''}")
    return alive, lost


def check_streaming_engines(engines) -> None:
    """--ada.cancel needs engines that hand samples back one by one and cancel requests: the project's
    GuardedRolloutRayActor (vLLM). Raises ValueError naming the others."""
    lacking = [f"engine {i} ({engine})" for i, engine in enumerate(engines)
               if not (hasattr(engine, "generate_stream") and hasattr(engine, "cancel_stream"))]
    if lacking:
        raise ValueError(
            f"--ada.cancel needs rollout engines that stream samples and cancel requests (openrlhf_ada's "
            f"GuardedRolloutRayActor on vLLM); {', '.join(lacking)} cannot. Use the project's launchers "
            "(train_ppo_ray, train_local --local.engine vllm) or drop --ada.cancel."
        )

