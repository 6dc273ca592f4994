"""The project's actor classes survive the way Ray ships them to their worker processes.

Ray pickles an actor class with every method it inherits copied into it (its tracing wrappers), and cloudpickle
copies an upstream method by value, together with a copy of its class, whenever `module.ClassName.method` does not
resolve to it (upstream's actor names are Ray ActorClass objects). A zero-arg `super()` in such a copy names the
copied class, which is not in the shipped class's MRO, and fails inside the actor (seen on the CPU pipeline with
`TrainingActor.broadcast_to_vllm` in async mode). The check, in a fresh interpreter: every class a shipped method's
`__class__` cell names must be in the shipped class's MRO. The negative control is a plain subclass of upstream's
TrainingActor, which fails it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import ray

CHECK = """
import json, sys, ray
sys.path.insert(0, sys.argv[1])
import openrlhf_ada  # noqa: F401
report = {}
for path in sys.argv[2:]:
    cls = ray.cloudpickle.loads(open(path, "rb").read())
    bad = set()
    for name, f in vars(cls).items():
        f = getattr(f, "__wrapped__", f)
        for cell in getattr(f, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if isinstance(value, type) and value not in cls.__mro__:
                bad.add(name)
    report[path] = sorted(bad)
print("REPORT " + json.dumps(report))
"""

PLAIN_SUBCLASS = """
import openrlhf_ada  # noqa: F401
import openrlhf.trainer.ppo_trainer_async as upstream
import ray


class PlainSubclass(upstream.TrainingActor.__ray_actor_class__):
    pass


PlainActor = ray.remote(PlainSubclass)
"""


def shipped_methods_with_foreign_class(tmp_path, actor_classes: dict) -> dict:
    """{name: [methods whose super() would name a class outside the shipped class's MRO]}, checked after a
    round trip through Ray's pickling into a fresh interpreter."""
    paths = {}
    for name, actor_class in actor_classes.items():
        paths[name] = tmp_path / f"{name}.pkl"
        paths[name].write_bytes(ray.cloudpickle.dumps(actor_class.__ray_metadata__.modified_class))
    out = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path), *map(str, paths.values())],
                         capture_output=True, text=True, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT "):])
    return {name: report[str(path)] for name, path in paths.items()}


def test_project_actors_ship_with_a_consistent_super(tmp_path):
    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolPPOTrainer
    from openrlhf_ada.trainer.ppo_trainer_async import (
        AdoraPoolPPOTrainerAsync,
        AdoraPoolTrainingActor,
        RoundsGenerateSamplesActor,
    )
    from openrlhf_ada.trainer.ray.hf_engine import HFRolloutActor
    from openrlhf_ada.trainer.ray.ppo_actor import LoraSyncPolicyModelActor
    from openrlhf_ada.trainer.ray.vllm_engine import GuardedRolloutRayActor

    actors = {"AdoraPoolPPOTrainer": AdoraPoolPPOTrainer, "AdoraPoolPPOTrainerAsync": AdoraPoolPPOTrainerAsync,
              "RoundsGenerateSamplesActor": RoundsGenerateSamplesActor, "AdoraPoolTrainingActor": AdoraPoolTrainingActor,
              "GuardedRolloutRayActor": GuardedRolloutRayActor, "HFRolloutActor": HFRolloutActor,
              "LoraSyncPolicyModelActor": LoraSyncPolicyModelActor}
    (tmp_path / "plain_subclass_module.py").write_text(PLAIN_SUBCLASS)
    sys.path.insert(0, str(tmp_path))
    try:
        from plain_subclass_module import PlainActor  # the negative control
    finally:
        sys.path.remove(str(tmp_path))
    report = shipped_methods_with_foreign_class(tmp_path, {**actors, "PlainActor": PlainActor})
    assert "broadcast_to_vllm" in report.pop("PlainActor")  # the check catches the trap
    assert report == {name: [] for name in actors}
