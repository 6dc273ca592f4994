"""`probe_engines`: the one health check both the samples generator (drop a dead engine) and the trainer (stop before
a weight sync would wait for one) use. Small Ray actors stand in for the engines' health answers: one healthy, one
killed (RayActorError), one alive whose check raises (what a dead vLLM engine core inside a live actor gives: a
RayTaskError), one that never answers within the timeout, one with only upstream's `get_num_unfinished_requests`."""

import threading
import time

import pytest

from openrlhf_ada.trainer.ray.engine_health import probe_engines


def wait_until_dead(ray, actor, within: float = 60.0) -> None:
    """`ray.kill` returns before the actor is gone: a call made at once may still be served by it (seen on a loaded
    2-core machine). Wait until the actor answers with RayActorError, so that the probe meets a dead engine."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            ray.get(actor.check_health.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the killed actor still answered {within:.0f} s after ray.kill")


@pytest.fixture(scope="module")
def actors(ray_local):
    ray = ray_local

    @ray.remote(num_cpus=0)
    class Healthy:
        def check_health(self):
            return None

    @ray.remote(num_cpus=0)
    class CoreDead:
        def check_health(self):
            raise RuntimeError("EngineCore died unexpectedly")

    @ray.remote(num_cpus=0, max_concurrency=2)
    class Hung:
        def __init__(self):
            self.release = threading.Event()

        def check_health(self):
            self.release.wait(30)

    @ray.remote(num_cpus=0)
    class UpstreamOnly:
        def get_num_unfinished_requests(self):
            return 0

    healthy, dead, core_dead, hung, upstream = Healthy.remote(), Healthy.remote(), CoreDead.remote(), Hung.remote(), \
        UpstreamOnly.remote()
    ray.get([healthy.check_health.remote(), dead.check_health.remote(), upstream.get_num_unfinished_requests.remote()])
    # Every actor started before a test probes it with a 2 s timeout: a worker's start can take longer than that on a
    # loaded machine (two test processes), and the core-dead engine must answer with its error, not time out.
    ray.get([core_dead.__ray_ready__.remote(), hung.__ray_ready__.remote()])
    ray.kill(dead)
    wait_until_dead(ray, dead)
    yield dict(healthy=healthy, dead=dead, core_dead=core_dead, hung=hung, upstream=upstream)
    for actor in (healthy, core_dead, hung, upstream):
        ray.kill(actor)


def test_only_the_engines_that_answer_stay(actors):
    engines = [actors[k] for k in ("healthy", "dead", "core_dead", "hung", "upstream")]
    alive, lost = probe_engines(engines, timeout=2)
    assert alive == [actors["healthy"], actors["upstream"]]
    assert len(lost) == 3
    assert lost[0].startswith("rollout engine 1 of 5") and "Actor" in lost[0].split(": ")[1]
    assert lost[1].startswith("rollout engine 2 of 5") and "EngineCore died unexpectedly" in lost[1]
    # the hung engine would answer after 30 s: listed as lost only because the 2 s timeout applies
    assert lost[2].startswith("rollout engine 3 of 5") and "Timeout" in lost[2]


def test_all_healthy_loses_none(actors):
    alive, lost = probe_engines([actors["healthy"], actors["upstream"]], timeout=5)
    assert len(alive) == 2 and lost == []
