"""A checkpoint is replaced only once its successor is complete, resume finds the last
complete one whatever moment a crash hit, and the folders follow the umask (not a forced 0700)."""

import json
import os
import stat

import pytest

from openrlhf_ada.trainer import checkpoint_dir
from openrlhf_ada.trainer.checkpoint_dir import find_checkpoint, remove_checkpoint, write_checkpoint


def writer(step, fail_after_model=False):
    def fill(folder):
        os.makedirs(os.path.join(folder, "model"))
        with open(os.path.join(folder, "model", "weights.bin"), "w") as f:
            f.write(f"weights of step {step}")
        if fail_after_model:
            raise KeyboardInterrupt  # a second Ctrl-C in the middle of the write
        with open(os.path.join(folder, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step}, f)
    return fill


def step_of(path):
    with open(os.path.join(path, "trainer_state.json")) as f:
        return json.load(f)["global_step"]


def test_replace_keeps_the_previous_until_the_new_one_is_complete(tmp_path):
    root = str(tmp_path / "ckpt")
    assert find_checkpoint(root) is None
    write_checkpoint(root, writer(2))
    assert step_of(find_checkpoint(root)) == 2
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(root, writer(4, fail_after_model=True))
    assert find_checkpoint(root) == os.path.join(root, "latest") and step_of(find_checkpoint(root)) == 2
    assert sorted(os.listdir(root)) == ["latest"]  # the half-written folder is gone
    write_checkpoint(root, writer(6))
    assert step_of(find_checkpoint(root)) == 6 and sorted(os.listdir(root)) == ["latest"]


def test_a_crash_between_the_two_renames_is_found_and_healed(tmp_path, monkeypatch):
    root = str(tmp_path / "ckpt")
    write_checkpoint(root, writer(3))
    real_replace = os.replace

    def crash_on_second_rename(src, dst):
        if os.path.basename(src).startswith(".latest.tmp-"):
            raise SystemExit("killed")  # the process dies after latest -> latest.old
        real_replace(src, dst)

    monkeypatch.setattr(checkpoint_dir.os, "replace", crash_on_second_rename)
    with pytest.raises(SystemExit):
        write_checkpoint(root, writer(4))
    monkeypatch.setattr(checkpoint_dir.os, "replace", real_replace)
    # no "latest" any more, only "latest.old" (and the complete temporary, which is never trusted)
    assert not os.path.exists(os.path.join(root, "latest"))
    assert find_checkpoint(root) == os.path.join(root, "latest.old") and step_of(find_checkpoint(root)) == 3
    write_checkpoint(root, writer(5))  # the next write heals the layout
    assert sorted(os.listdir(root)) == ["latest"] and step_of(find_checkpoint(root)) == 5
    remove_checkpoint(root)
    assert find_checkpoint(root) is None


def test_a_writer_that_forgets_the_marker_publishes_nothing(tmp_path):
    root = str(tmp_path / "ckpt")
    write_checkpoint(root, writer(1))
    with pytest.raises(RuntimeError, match="did not write trainer_state.json"):
        write_checkpoint(root, lambda folder: None)
    assert step_of(find_checkpoint(root)) == 1 and sorted(os.listdir(root)) == ["latest"]


@pytest.mark.parametrize("umask,mode", [(0o022, 0o755), (0o002, 0o775), (0o077, 0o700)])
def test_folders_follow_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = write_checkpoint(str(tmp_path / "ckpt"), writer(1))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert stat.S_IMODE(os.stat(os.path.join(path, "model")).st_mode) == mode
