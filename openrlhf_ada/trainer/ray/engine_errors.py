"""The root cause of a vLLM engine that fails to start, carried to the caller's error.

vLLM runs its engine core in a process of its own (EngineCore), started by the engine actor. When it fails during
start-up, the exception stays in that process: it is logged there ("EngineCore failed to start.") and the actor
only gets `RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}`
(vllm/v1/engine/utils.py, `wait_for_engine_startup`). Ray keeps the log in a worker's log file, so the driver's
error said "see root cause above" with nothing above it.

How it is carried: the engine actor names a folder in OPENRLHF_ADA_ENGINE_ERRORS before it starts vLLM; vLLM's
processes inherit it, and the project's vLLM plugin (openrlhf_ada/cpu/vllm_plugin.py, loaded by vLLM in every process
it starts) adds a logging handler there that writes each error vLLM logs with an exception to that folder. When
start-up fails, the actor reads them back and raises an error that says what the engine core said.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import traceback
from contextlib import contextmanager
from typing import List

ENV = "OPENRLHF_ADA_ENGINE_ERRORS"


class _RecordErrors(logging.Handler):
    """Appends every error vLLM logs with an exception to `path`, one JSON line each."""

    def __init__(self, path: str):
        super().__init__(logging.ERROR)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info or record.exc_info[1] is None:
            return
        error = record.exc_info[1]
        line = {"pid": os.getpid(), "message": record.getMessage(),
                "error": "".join(traceback.format_exception_only(type(error), error)).strip()}
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:  # the folder is gone (the actor has given up): nothing to tell
            pass


def record_errors_in_this_process() -> bool:
    """In a process vLLM started: record its logged errors where the engine actor will look (a no-op unless the
    actor named a folder). Returns True if a handler was added."""
    folder = os.environ.get(ENV)
    vllm_logger = logging.getLogger("vllm")
    if not folder or not os.path.isdir(folder) or any(isinstance(h, _RecordErrors) for h in vllm_logger.handlers):
        return False
    vllm_logger.addHandler(_RecordErrors(os.path.join(folder, f"{os.getpid()}.jsonl")))
    return True


def recorded_errors(folder: str) -> List[str]:
    """What the engine's processes logged as errors, oldest first, each once."""
    seen = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            for raw in f:
                try:
                    error = json.loads(raw)["error"]
                except (ValueError, KeyError):
                    continue
                if error not in seen:
                    seen.append(error)
    return seen


@contextmanager
def engine_start_errors():
    """Around starting a vLLM engine in this process: yields a list that, when start-up failed, holds the errors its
    processes logged (read as the block exits with an exception, which it lets through)."""
    folder = tempfile.mkdtemp(prefix="openrlhf_ada_engine_errors_")
    previous = os.environ.get(ENV)
    os.environ[ENV] = folder
    errors: List[str] = []
    try:
        yield errors
    except BaseException:
        errors.extend(recorded_errors(folder))
        raise
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
        shutil.rmtree(folder, ignore_errors=True)
