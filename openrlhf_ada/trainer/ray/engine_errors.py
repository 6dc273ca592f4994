"""The root cause of a vLLM engine core that fails, at start-up or later, carried to the caller's error.

vLLM runs its engine core in a process of its own (EngineCore), started by the engine actor. When it fails, the
exception stays in that process: it is logged there ("EngineCore failed to start." / "EngineCore encountered a fatal
error.") and the actor only gets `RuntimeError: Engine core initialization failed. See root cause above. Failed core
proc(s): {}` (vllm/v1/engine/utils.py, `wait_for_engine_startup`) or, mid-run, `EngineDeadError: EngineCore
encountered an issue. See stack trace (above) for the root cause.` Ray keeps that log in a worker's log file, so the
driver's error said "see above" with nothing above it.

How it is carried: the engine actor keeps an `EngineErrorLog`, a folder named in OPENRLHF_ADA_ENGINE_ERRORS while it
starts vLLM; vLLM's processes inherit the name, and the project's vLLM plugin (openrlhf_ada/cpu/vllm_plugin.py,
loaded by vLLM in every process it starts) adds a logging handler there that writes each error vLLM logs with an
exception to that folder. The folder lives as long as the actor: when start-up fails, or the engine core dies later,
the actor reads the errors back and raises an error that says what the engine core said.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import traceback
from contextlib import contextmanager
from typing import List, NoReturn

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
        line = {"pid": os.getpid(), "time": record.created, "message": record.getMessage(),
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
    lines = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                    lines.append((float(line.get("time", 0.0)), line["error"]))
                except (ValueError, KeyError, TypeError):
                    continue
    return list(dict.fromkeys(error for _, error in sorted(lines, key=lambda x: x[0])))


class EngineErrorLog:
    """The errors one vLLM engine's processes log, in a folder of its own that lives as long as this object's
    process (removed by `close`, or when the process exits normally)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="openrlhf_ada_engine_errors_")
        atexit.register(self.close)

    @contextmanager
    def named_for_new_processes(self):
        """Around starting the engine: the processes vLLM starts inside the block record their errors here."""
        previous = os.environ.get(ENV)
        os.environ[ENV] = self.folder
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = previous

    def reraise_with_cause(self, error: BaseException, what: str, last: int = 3) -> NoReturn:
        """Inside an `except` for `error`: raise RuntimeError("<what>: <the last `last` errors the engine's processes
        logged, other than `error` itself>") from it, or `error` itself when they logged none."""
        said = str(error).strip()  # `error` itself, when vLLM logged it too (the actor's EngineDeadError), says nothing new
        errors = [e for e in recorded_errors(self.folder) if e.split(": ", 1)[-1].strip() != said][-last:]
        if not errors:
            raise error
        raise RuntimeError(f"{what}: " + "; ".join(" ".join(e.split()) for e in errors)) from error

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
