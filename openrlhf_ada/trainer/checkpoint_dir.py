"""A checkpoint folder that is replaced only once its successor is complete, and that resume always finds.

Why: a run that crashes, is killed, or gets a second Ctrl-C while it writes a checkpoint must not lose the previous
one. The layout under the checkpoint root (``--ckpt.path``):

    <name>/                 the checkpoint (complete: it holds the marker file, written last)
    <name>.old/             the previous one, only between the two renames of a replacement (or after a crash there)
    .<name>.tmp-<random>/   a checkpoint being written; left behind only by a crash, removed by the next write

`write_checkpoint` fills a fresh temporary folder, flushes it to disk, then swaps it in with two renames; at every
moment either ``<name>`` or ``<name>.old`` is a complete checkpoint. `find_checkpoint` returns the newest complete one.
Folders are created with ``os.makedirs``, so their mode follows the umask (``tempfile.mkdtemp`` would force 0700,
unreadable for the rest of a group on a shared file system).
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Callable, Optional

MARKER = "trainer_state.json"


def _complete(path: str, marker: str) -> bool:
    return os.path.isfile(os.path.join(path, marker))


def find_checkpoint(root: str, name: str = "latest", marker: str = MARKER) -> Optional[str]:
    """The complete checkpoint under `root`: ``<name>``, else ``<name>.old`` (a replacement cut short), else None."""
    for path in (os.path.join(root, name), os.path.join(root, name + ".old")):
        if _complete(path, marker):
            return path
    return None


def _fsync_tree(path: str) -> None:
    """Flush every file and folder under `path` to disk, so that a rename never publishes half-written files."""
    for folder, _, files in os.walk(path):
        for file in files:
            with open(os.path.join(folder, file), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_leftovers(root: str, name: str = "latest") -> None:
    """Remove temporary folders that a crashed write left behind (never a complete checkpoint)."""
    if not os.path.isdir(root):
        return
    for entry in os.listdir(root):
        if entry.startswith(f".{name}.tmp-"):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)


def write_checkpoint(root: str, fill: Callable[[str], None], name: str = "latest", marker: str = MARKER) -> str:
    """Write a checkpoint with `fill(folder)` (which must write `marker` last) and make it ``root/<name>``.

    If `fill` raises, or the process dies at any point, the previous complete checkpoint stays where
    `find_checkpoint` finds it. Returns the final path."""
    os.makedirs(root, exist_ok=True)
    remove_leftovers(root, name)
    final, old = os.path.join(root, name), os.path.join(root, name + ".old")
    tmp = os.path.join(root, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
    os.makedirs(tmp)  # mode 0777 & ~umask
    try:
        fill(tmp)
        if not _complete(tmp, marker):
            raise RuntimeError(f"checkpoint writer did not write {marker} into {tmp}")
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if _complete(final, marker):
        shutil.rmtree(old, ignore_errors=True)  # `final` is complete, so `old` is redundant
        os.replace(final, old)
    elif os.path.exists(final):  # not a checkpoint (never written by this function): keep `old`, the last good one
        shutil.rmtree(final)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def remove_checkpoint(root: str, name: str = "latest") -> None:
    """Delete the checkpoint, its previous version and leftovers (starting a run over with --local.overwrite)."""
    for path in (os.path.join(root, name), os.path.join(root, name + ".old")):
        shutil.rmtree(path, ignore_errors=True)
    remove_leftovers(root, name)
