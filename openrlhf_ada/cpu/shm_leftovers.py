"""Shared-memory segments that killed vLLM engines leave behind, found before the kill and removed after it.

vLLM's engine core and worker processes create POSIX shared-memory message queues (`/dev/shm/psm_*`, 160 MB or more
each) and unlink them when they shut down cleanly. Ray ends actors with SIGKILL (`ray.kill`, `ray.shutdown`, a node
stopped), so the segments stay: RAM taken until reboot (measured here: 0.4 GB per `make demo`, 4.3 GB after a day of
runs). vLLM's own clean shutdown (`AsyncLLM.shutdown`) takes its whole timeout on CPU: its worker does not exit within
the engine core's 5 s grace, and with a shorter timeout one segment still leaks. So instead, just before the kill, the
processes of this run are asked which segments they have mapped; the ones still there after the kill are unlinked
(`mapped_segments`, `remove_segments`: train_local). Only segments mapped by the given processes or their descendants
are touched: another job's engines keep theirs. A private local Ray cluster, whose jobs' actors Ray kills when each job
ends, also removes at its stop the orphans: segments created since it started that no live process maps
(`remove_orphans`). Linux only: elsewhere nothing is found and nothing is removed.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Dict, Iterable, List, Set

PREFIX = "/dev/shm/psm_"


def _children() -> Dict[int, List[int]]:
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # the command name may hold spaces and parentheses
        children.setdefault(ppid, []).append(int(entry))
    return children


def process_tree(roots: Iterable[int]) -> Set[int]:
    """The given pids and all their descendants (those alive now)."""
    if not os.path.isdir("/proc"):
        return set()
    children, seen, todo = _children(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return seen


def mapped_segments(roots: Iterable[int]) -> Dict[str, Set[int]]:
    """The `/dev/shm/psm_*` segments mapped by `roots` or any of their descendants: path -> the pids mapping it."""
    found: Dict[str, Set[int]] = {}
    for pid in process_tree(roots):
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    at = line.find(PREFIX)
                    if at >= 0:
                        found.setdefault(line[at:].split()[0], set()).add(pid)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has unmapped everything


def remove_segments(found: Dict[str, Set[int]], wait: float = 10.0) -> List[str]:
    """Once every process that mapped them has exited (at most `wait` seconds), unlink the segments of `found`
    (from `mapped_segments`) that are still there; returns the ones removed. The wait keeps a dying engine's own
    clean-up from tripping over a missing segment; unlinking one still mapped would be safe anyway (the memory
    goes when the last process unmaps it)."""
    holders = set().union(*found.values()) if found else set()
    deadline = time.time() + wait
    while any(_alive(pid) for pid in holders) and time.time() < deadline:
        time.sleep(0.2)
    return [path for path in sorted(found) if _unlink(path)]


def segments() -> Set[str]:
    """The `/dev/shm/psm_*` segments there now."""
    return set(glob.glob(PREFIX + "*"))


def orphans(since: Set[str]) -> List[str]:
    """This user's segments that appeared after `since` (from `segments()`) and that no live process maps: nobody
    can use them any more (vLLM's readers attach right after creation), they only hold RAM. The segments are listed
    before the processes' maps are read: one created while they are read (its file appears a moment before its
    creator maps it) would otherwise look unmapped and be taken from a live process."""
    new = segments() - since
    mapped = mapped_segments([1])  # every process of this machine (or container) whose maps this user may read
    return sorted(path for path in new if path not in mapped and _mine(path))


def _mine(path: str) -> bool:
    """Only this user's segments count: another user's processes' maps cannot be read, so theirs look unmapped."""
    try:
        return os.stat(path).st_uid == os.getuid()
    except OSError:
        return False


def remove_orphans(since: Set[str]) -> List[str]:
    """Unlink `orphans(since)`; returns the ones removed. For a run that owns the machine's vLLM engines (a private
    local Ray cluster) and ends: it also catches engines killed before the end, whose segments nobody maps by then."""
    return [path for path in orphans(since) if _unlink(path)]


def _unlink(path: str) -> bool:
    if not path.startswith(PREFIX) or "/" in path[len(PREFIX) :]:
        return False
    try:
        os.unlink(path)
        return True
    except OSError:  # FileNotFoundError: the engine cleaned up after itself
        return False
