"""What kind of file a path is (llmbench/results/kinds.py) and what a gate decides (llmbench/analysis/gate.py).

Real files only: runs are written with ``save_run`` from synthetic runs of the real schema, driver records with
``write_record`` (the writers' own function, so each record's version key comes first, as written), and the
gates decide over real ``compare_runs`` comparisons. No model is loaded: the whole file runs in seconds.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_kinds_gate.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.test_kinds_gate import MDC_ERROR


def test_require_mdc_names_the_metrics_in_the_same_order_every_time():
    root = Path(__file__).resolve().parents[2]
    lines = set()
    for seed in ("0", "1"):  # two seeds known to order a set of the three metrics differently
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-c", MDC_ERROR], capture_output=True, text=True, cwd=root, env=env)
        assert r.returncode == 0 and "--require-mdc 0.01" in r.stdout, r.stderr
        lines.add(r.stdout)
    assert len(lines) == 1, lines
