"""An engine core that dies says why: the errors vLLM's own processes log reach the engine actor's error.

The engine core here is a Python process started inside `EngineErrorLog.named_for_new_processes` that does what the
project's vLLM plugin and vLLM's engine core do when they fail: it records its logged errors, then logs a fatal
error with its exception. The actor is `_GuardedRolloutRayActor` itself with a stand-in for vLLM's engine whose
calls raise vLLM's own `EngineDeadError`, as a live actor's engine does once its engine core has died. Expected
messages are written out by hand.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest
import vllm
from vllm.v1.engine.exceptions import EngineDeadError

from openrlhf_ada.trainer.ray.engine_errors import EngineErrorLog
from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor

ENGINE_CORE = """
import logging, sys, time
from openrlhf_ada.trainer.ray.engine_errors import record_errors_in_this_process

assert record_errors_in_this_process()
log = logging.getLogger("vllm.v1.engine.core")
for text in sys.argv[1:]:
    kind, _, message = text.partition(":")
    try:
        raise {"RuntimeError": RuntimeError, "ValueError": ValueError}[kind](message)
    except Exception:
        log.exception("EngineCore encountered a fatal error.")
    time.sleep(0.01)  # each its own time stamp: the order is the order they were logged in
log.error("an error without an exception is not recorded")
"""


def run_engine_core(log: EngineErrorLog, *errors: str) -> None:
    with log.named_for_new_processes():
        subprocess.run([sys.executable, "-c", textwrap.dedent(ENGINE_CORE), *errors], check=True, timeout=120)


class DeadLLM:
    """vLLM's engine once its engine core has died: every call raises EngineDeadError."""

    async def check_health(self):
        raise EngineDeadError()

    def generate(self, *args, **kwargs):
        raise EngineDeadError()


def dead_actor(log: EngineErrorLog):
    actor = object.__new__(_GuardedRolloutRayActor)  # its __init__ starts vLLM
    actor.llm, actor.engine_errors, actor._mm_pad_token_ids = DeadLLM(), log, []
    return actor


@pytest.fixture
def log():
    log = EngineErrorLog()
    yield log
    log.close()


def test_a_dead_engine_core_names_its_last_errors_in_the_health_check_and_in_generate(log):
    run_engine_core(log, "ValueError:first", "RuntimeError:CPU Generator does not use offset")
    said = ("the vLLM engine core died: ValueError: first; RuntimeError: CPU Generator does not use offset")
    actor = dead_actor(log)
    with pytest.raises(RuntimeError) as health:
        asyncio.run(actor.check_health())
    assert str(health.value) == said and isinstance(health.value.__cause__, EngineDeadError)
    with pytest.raises(RuntimeError) as generate:
        asyncio.run(actor.generate([1, 2, 3], vllm.SamplingParams(max_tokens=4)))
    assert str(generate.value) == said and isinstance(generate.value.__cause__, EngineDeadError)


def test_only_the_last_three_are_named_and_the_dead_error_itself_is_not_repeated(log):
    # the actor's own process logs vLLM's EngineDeadError as well: it says nothing the caller does not already have
    dead = f"RuntimeError:{EngineDeadError()}"
    run_engine_core(log, "ValueError:a", "ValueError:b", "ValueError:c", "ValueError:d", dead)
    with pytest.raises(RuntimeError) as health:
        asyncio.run(dead_actor(log).check_health())
    assert str(health.value) == "the vLLM engine core died: ValueError: b; ValueError: c; ValueError: d"


def test_with_nothing_logged_the_engines_own_error_goes_through(log):
    run_engine_core(log)
    with pytest.raises(EngineDeadError):
        asyncio.run(dead_actor(log).check_health())


def test_processes_started_outside_the_block_record_nothing_and_the_folder_goes_with_close(log):
    folder = log.folder
    subprocess.run([sys.executable, "-c", "from openrlhf_ada.trainer.ray.engine_errors import "
                    "record_errors_in_this_process as r; assert not r()"], check=True, timeout=120)
    with pytest.raises(EngineDeadError):
        asyncio.run(dead_actor(log).check_health())
    log.close()
    assert not os.path.exists(folder)
