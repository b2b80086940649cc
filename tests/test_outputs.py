"""Two writers never share an output: claims (an flock'd sidecar held for the process), exclusive first writes,
default names that can't collide, and a second run aimed at the same file refused while the first's file stays
whole. Real processes throughout: the race is between processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.results.storage import claim, default_dir, default_output_path, load_run, lock_path, release, write_atomic
from tests.helpers import cli_process


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


HOLD = """
import sys, time
from llmbench.results.storage import claim
claim(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holding(path: Path, seconds: float = 30.0) -> subprocess.Popen:
    proc = _python(HOLD, str(path), str(seconds))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


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


def test_claiming_twice_in_one_process_is_a_no_op_and_an_existing_file_needs_replace(tmp_path):
    out = tmp_path / "run.json"
    assert claim(out) == claim(out) == out
    release(out)
    out.write_text("{}")
    with pytest.raises(UserError, match="already exists"):
        claim(out)
    assert claim(out, replace=True) == out
    write_atomic(out, b'{"new": 1}')
    assert json.loads(out.read_text()) == {"new": 1}
    release(out)


def test_the_first_write_never_replaces_a_file_that_appeared_after_the_claim(tmp_path):
    out = tmp_path / "run.json"
    claim(out)
    out.write_text("someone else's result")  # not llmbench: it took no lock
    try:
        with pytest.raises(UserError, match="created by someone else"):
            write_atomic(out, b"ours")
        assert out.read_text() == "someone else's result"
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no temp file left
    finally:
        release(out)


def test_after_the_first_write_a_claimed_file_is_replaced_atomically(tmp_path):
    out = tmp_path / "run.json"
    claim(out)
    write_atomic(out, b"1")
    write_atomic(out, b"2")  # a snapshot of the same run: the claim is ours, so it replaces
    assert out.read_text() == "2"
    release(out)


RACE_DEFAULT = """
import sys, time
from llmbench.results.storage import default_output_path, write_atomic
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all start at the same instant (same second, same name)
p = default_output_path("Qwen/Qwen2.5-0.5B-Instruct", "cpu", sys.argv[1])
write_atomic(p, str(p).encode())
print(p, flush=True)
"""


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


RACE_DIR = """
import sys, time
from llmbench.results.storage import default_dir
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(default_dir("sweep", "sweep.json", sys.argv[1]), flush=True)
"""


def test_default_driver_folders_chosen_at_once_are_distinct(tmp_path):
    start = time.time() + 4.0
    procs = [_python(RACE_DIR, str(tmp_path), str(start)) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    folders = {o[0].strip() for o in outs}
    assert len(folders) == 4 and all(Path(f).is_dir() for f in folders)


def test_default_output_path_in_one_process_skips_names_it_holds(tmp_path):
    a = default_output_path("m", "cpu", tmp_path)
    b = default_output_path("m", "cpu", tmp_path)
    assert a != b
    release(a)
    release(b)
    d = default_dir("ab", "base.json", tmp_path)
    assert d.is_dir() and d.parent == tmp_path
    release(d / "base.json")


@pytest.mark.subprocess
def test_two_runs_aimed_at_one_file_one_is_refused_and_the_others_file_is_whole(tiny_model_dir, prompt_file, tmp_path):
    out = tmp_path / "same.json"
    args = ("run", prompt_file, "--model", tiny_model_dir, "--max-new-tokens", "4", "--warmup", "0", "-o", out, "-q")
    env = {"LLMBENCH_HISTORY": ""}
    procs = [cli_process(*args, env=env) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], results
    loser = next(r for p, r in zip(procs, results, strict=True) if p.returncode == 2)
    err_lines = [line for line in loser[1].splitlines() if line.strip()]
    assert len(err_lines) == 1 and "same.json" in err_lines[0], loser[1]
    assert "Traceback" not in loser[1]
    run = load_run(out)
    assert run.complete and len(run.requests) == 3
    assert not lock_path(out).exists()


@pytest.mark.subprocess
def test_a_run_killed_while_it_holds_its_output_leaves_the_next_run_free_to_resume(
    tiny_model_dir, many_prompts, tmp_path
):
    from tests.helpers import wait_for_requests

    out = tmp_path / "run.json"
    args = ("run", many_prompts, "--model", tiny_model_dir, "--max-new-tokens", "8", "--warmup", "0", "-o", out, "-q")
    proc = cli_process(*args, env={"LLMBENCH_HISTORY": ""})
    wait_for_requests(out, 3, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(load_run(out).requests)
    assert done >= 3
    resumed = cli_process("run", many_prompts, "--model", tiny_model_dir, "--max-new-tokens", "8", "--warmup", "0",
                          "--resume", out, "-q", env={"LLMBENCH_HISTORY": ""})  # fmt: skip
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    run = load_run(out)
    assert run.complete and len(run.requests) >= done
