"""The gate statistic ``gaps``: TPOT from per-token gaps paired by position. Ground truth from runs built with
known gaps: a uniform slowdown, bursts that hit a few tokens of a few requests, processes that disagree.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_gate_gaps.py."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from llmbench.results.storage import save_run
from tests.helpers import synthetic_run
from tests.unit.test_gate_gaps import bundled, every, noisy_gaps, with_gaps


@pytest.mark.subprocess
def test_compare_cli_gates_on_gaps_from_the_files(tmp_path):
    base = with_gaps(synthetic_run(n=40), noisy_gaps(8, bursts={4: 0}))
    head = with_gaps(synthetic_run(n=40), noisy_gaps(9, slower=0.06, bursts={11: 3, 12: 8}))
    save_run(base, tmp_path / "base.json")
    save_run(head, tmp_path / "head.json")
    args = [sys.executable, "-m", "llmbench", "compare", str(tmp_path / "base.json"), str(tmp_path / "head.json"),
            "--fail-on-regression", "4", "--gate-stat", "gaps"]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert re.search(r"gate tpot_ms gaps: \+[56]\.\d%, 95% CI \+[56]\.\d\.\.\+[56]\.\d%, threshold 4%: REGRESSION",
                     r.stdout)  # fmt: skip
    assert "TPOT (gaps)" in r.stdout  # the detectable change is the gate's own statistic's
    ok = subprocess.run([*args[:-4], "--fail-on-regression", "8", "--gate-stat", "gaps"], capture_output=True,
                        text=True, timeout=60)  # fmt: skip
    assert ok.returncode == 0 and "Traceback" not in ok.stderr


@pytest.mark.subprocess
def test_compare_cli_fails_a_bundling_head_that_is_slower(tmp_path):
    base = with_gaps(synthetic_run(n=40), noisy_gaps(20))
    head = with_gaps(synthetic_run(n=40), bundled(noisy_gaps(21, slower=0.2), every(4)))
    save_run(base, tmp_path / "base.json")
    save_run(head, tmp_path / "head.json")
    r = subprocess.run([sys.executable, "-m", "llmbench", "compare", str(tmp_path / "base.json"),
                        str(tmp_path / "head.json"), "--fail-on-regression", "5", "--gate-stat", "gaps"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"gate tpot_ms gaps: \+(19|20|21)\.\d%.*REGRESSION", r.stdout), r.stdout
