"""Two writers never share an output: claims (an flock'd sidecar held for the process), exclusive first writes,
default names that can't collide, and a second run aimed at the same file refused while the first's file stays
whole. Real processes throughout: the race is between processes.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_outputs.py."""

from __future__ import annotations

import os
import signal

import pytest

from llmbench.results.storage import load_run, lock_path
from tests.helpers import cli_process


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
