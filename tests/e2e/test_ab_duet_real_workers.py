"""ab's design: processes one after another with setups of their own, TTFT-only pairs, the duet and the budget.
The plan and the planner are checked as functions; the rest with real `llmbench worker` processes on a tiny Qwen2.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_ab_design.py."""

from __future__ import annotations

import os

import pytest

from llmbench.results.storage import load_run
from tests.helpers import check_a_duet, real_worker


@pytest.mark.subprocess
def test_a_duet_measures_both_sides_at_once_and_needs_one_thread_a_side(cli, tiny_model_dir, prompt_file, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a duet needs two CPUs")
    r = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir), "--head", real_worker(tiny_model_dir), "--duet",
            "--max-new-tokens", "4", "--repeats", "2", "-o", tmp_path / "d", "-q")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    base, head = (load_run(tmp_path / "d" / f"{x}.json") for x in ("base", "head"))
    check_a_duet(base, head)
    r = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir, threads=2), "--head", real_worker(tiny_model_dir),
            "--duet", "--max-new-tokens", "4", "-o", tmp_path / "e", "-q")  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "llmbench: error: --duet runs each side on one CPU: give the base worker --threads 1 (it has 2)"
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.subprocess
def test_spawn_fork_forks_later_processes_from_process_0(cli, tiny_model_dir, prompt_file, tmp_path):
    """--spawn fork: processes 1 and 2 are children of process 0 (loaded once), each measuring its own pairs with a
    heap padding of its own; none is a sample of the cold start; none outlives the run. A worker that can't fork
    (2 threads) is refused in one line with fork, and measured exec'd with auto."""
    r = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir), "--head", real_worker(tiny_model_dir),
            "--processes", "3", "--spawn", "fork", "--max-new-tokens", "4", "-o", tmp_path / "f", "-q")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    assert "caution: the worker processes were forked from each side's process 0" in r.stderr  # the interval's gap
    for role in ("base", "head"):
        run = load_run(tmp_path / "f" / f"{role}.json")
        procs = run.config.engine_settings["processes"]
        assert [p.get("spawn", "exec") for p in procs] == ["exec", "fork", "fork"]
        assert len({p["pid"] for p in procs}) == 3 and all(_gone(p["pid"]) for p in procs)
        assert procs[0]["load_s"] > 0 and all(p["load_s"] is None and p["startup_s"] is None for p in procs[1:])
        assert all(0 < p["fork_s"] < procs[0]["startup_s"] for p in procs[1:])
        setup = run.config.ab.setup
        assert setup["spawn"] == "fork" and len(set(setup["hash_seed"])) == 1
        assert [p["heap_pad"] for p in procs[1:]] == setup["heap_pad"][1:]
        assert {q.process for q in run.requests} == {0, 1, 2} and not run.failed_requests
    wide = real_worker(tiny_model_dir, threads=2)
    r = cli("ab", prompt_file, "--base", wide, "--head", real_worker(tiny_model_dir), "--processes", "2",
            "--spawn", "fork", "--max-new-tokens", "2", "-o", tmp_path / "g", "-q")  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "llmbench: error: --spawn fork: the base worker can't fork (it needs llmbench 0.3.0 or later, a transformers "
        "model on the CPU and --threads 1)"
    )
    assert not (tmp_path / "g").exists()
    r = cli("ab", prompt_file, "--base", wide, "--head", wide, "--processes", "2", "--spawn", "auto",
            "--max-new-tokens", "2", "-o", tmp_path / "h", "-q")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    assert "caution" not in r.stderr
    run = load_run(tmp_path / "h" / "base.json")
    assert "spawn" not in run.config.ab.setup
    assert all("fork_s" not in p for p in run.config.engine_settings["processes"])
