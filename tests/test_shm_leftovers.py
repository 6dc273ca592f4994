"""openrlhf_ada.cpu.shm_leftovers: the shared-memory segments of killed processes are found and removed; nobody
else's are touched. A child process holds a segment the way vLLM's engine processes do (created with Python's
SharedMemory, name /dev/shm/psm_*) and is killed with SIGKILL, as Ray kills actors."""

import os
import signal
import subprocess
import sys
from multiprocessing import resource_tracker, shared_memory

import pytest

from openrlhf_ada.cpu import shm_leftovers
from openrlhf_ada.cpu.shm_leftovers import (
    mapped_segments,
    orphans,
    process_tree,
    remove_orphans,
    remove_segments,
    segments,
)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc") or not os.path.isdir("/dev/shm"), reason="Linux only")

# Creates a segment, optionally from a grandchild, prints its name, then waits to be killed. Python's resource tracker
# would unlink it when the creator dies; vLLM's killed processes take theirs along no such way, so it is unregistered.
HOLDER = r"""
import subprocess, sys, time
from multiprocessing import resource_tracker, shared_memory
if sys.argv[1] == "grandchild":
    subprocess.Popen([sys.executable, "-c", sys.argv[2], "direct", sys.argv[2]])
else:
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    resource_tracker.unregister(shm._name, "shared_memory")
    print(shm._name, flush=True)
time.sleep(120)
"""


def hold(mode):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, mode, HOLDER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    name = proc.stdout.readline().strip()
    assert name.startswith("/psm_"), name
    return proc, "/dev/shm" + name


def kill(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def bystander():
    """A segment of another process tree (this one): it must survive."""
    shm = shared_memory.SharedMemory(create=True, size=1 << 16)
    yield "/dev/shm/" + shm.name.lstrip("/")
    shm.close()
    shm.unlink()


def keep_mapped(path):
    """Map the segment from this test process too, so that no orphan sweep of another test process of the run (the
    per-module clean-up of `pytest -n 2`'s other worker) takes it before the test's own check: a segment that a live
    process maps is nobody's orphan. remove_segments waits only for the holders it is given."""
    keeper = shared_memory.SharedMemory(name=os.path.basename(path))
    resource_tracker.unregister(keeper._name, "shared_memory")  # the test unlinks it, not this process's exit
    return keeper


@pytest.mark.parametrize("mode", ["direct", "grandchild"])
def test_a_killed_holder_s_segment_is_found_and_removed(mode, bystander):
    proc, path = hold(mode)
    try:
        found = mapped_segments([proc.pid])
        assert path in found and bystander not in found
        holders = found[path]
        assert holders <= process_tree([proc.pid]) and (mode == "direct") == (holders == {proc.pid})
        keeper = keep_mapped(path)
    finally:
        kill(proc)
    try:
        assert os.path.exists(path)  # killed: nothing cleaned it up
        assert remove_segments(found) == [path]
        assert not os.path.exists(path) and os.path.exists(bystander)
    finally:
        keeper.close()


def test_nothing_mapped_nothing_removed_and_only_psm_paths(bystander, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert mapped_segments([proc.pid]) == {}
    finally:
        proc.kill()
        proc.wait()
    other = tmp_path / "psm_x"
    other.write_text("")
    crafted = {str(other): {proc.pid}, "/dev/shm/psm_../../etc/x": {proc.pid}, bystander + "/..": {proc.pid}}
    assert remove_segments(crafted, wait=0) == []
    assert other.exists() and os.path.exists(bystander)


def test_an_already_removed_segment_is_not_an_error():
    assert remove_segments({"/dev/shm/psm_doesnotexist0": {999999}}, wait=0) == []


def test_orphans_are_the_new_segments_nobody_maps(bystander):
    since = segments() - {bystander}  # the bystander counts as new, but its creator (this process) maps it
    live, live_path = hold("direct")
    try:
        # An orphan is unmapped by definition, so the other test process's per-module sweep (pytest -n 2) may take it
        # between the kill and this test's own removal: then it is gone without this test's call, and the test
        # tries again with a new one. Any other outcome is decided at once.
        for _ in range(5):
            dead, dead_path = hold("direct")
            kill(dead)
            # other test processes of the run may leave orphans of their own meanwhile: only these two count
            listed = [p for p in orphans(since) if p in (dead_path, live_path)]
            # only this test's orphan may be removed here: another test's killed holder leaves an unmapped segment for
            # a moment before that test removes it itself (and checks that it did), so everything else counts as old
            removed = remove_orphans(segments() - {dead_path})
            if removed or os.path.exists(dead_path):
                break
        assert listed == [dead_path] and removed == [dead_path]
        assert live_path not in orphans(since)
        assert not os.path.exists(dead_path) and os.path.exists(live_path) and os.path.exists(bystander)
    finally:
        kill(live)
        remove_segments({live_path: {live.pid}}, wait=0)


def test_a_segment_created_while_the_maps_are_read_is_not_an_orphan(monkeypatch):
    """A process that creates a segment while orphans() reads the maps has its file before its mapping: orphans()
    must not offer it for removal (another test process's sweep once took a live holder's segment so)."""
    since, made = segments(), []

    def scan(roots):  # the maps as read while a segment appears: not mapped yet
        made.append(shared_memory.SharedMemory(create=True, size=1 << 12))
        return {}

    monkeypatch.setattr(shm_leftovers, "mapped_segments", scan)
    try:
        listed = orphans(since)
        assert made and "/dev/shm/" + made[0].name.lstrip("/") not in listed
    finally:
        for shm in made:
            shm.close()
            shm.unlink()
