"""Two writers never share an output: claims (an flock'd sidecar held for the process), exclusive first writes,
default names that can't collide, and a second run aimed at the same file refused while the first's file stays
whole. Real processes throughout: the race is between processes.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_outputs.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.results.storage import claim, lock_path, release
from tests.unit.test_outputs import RACE_DEFAULT, RACE_DIR, _holding, _python


def test_a_path_held_by_another_process_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run.json"
    holder = _holding(out)
    try:
        with pytest.raises(UserError, match=f"being written by another llmbench process \\(pid {holder.pid}\\)"):
            claim(out)
        with pytest.raises(UserError, match="being written by another"):
            claim(out, replace=True)  # --overwrite does not let two writers share it either
    finally:
        holder.kill()
        holder.wait()
    # the holder died (SIGKILL: no clean-up ran): its lock went with it, so the path is free again
    assert lock_path(out).exists()
    assert claim(out) == out
    release(out)
    assert not lock_path(out).exists()


def test_default_names_chosen_by_eight_processes_at_once_never_collide(tmp_path):
    start = time.time() + 4.0  # enough for eight interpreters to import llmbench on a slow day
    procs = [_python(RACE_DEFAULT, str(tmp_path), str(start)) for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    paths = [o[0].strip() for o in outs]
    assert len(set(paths)) == 8
    for p in paths:  # each file holds what its own writer wrote: nobody's result replaced another's
        assert Path(p).read_text() == p
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".lock")]  # released at exit


def test_default_driver_folders_chosen_at_once_are_distinct(tmp_path):
    start = time.time() + 4.0
    procs = [_python(RACE_DIR, str(tmp_path), str(start)) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    folders = {o[0].strip() for o in outs}
    assert len(folders) == 4 and all(Path(f).is_dir() for f in folders)
