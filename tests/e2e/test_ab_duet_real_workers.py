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
