"""The fault matrix's CI subset (benchmarks/fault_matrix.py --quick): real commands, real faults, and nothing that
finished is lost in any row; the table it prints says what the rows say."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fault_matrix


def test_the_table_counts_what_its_rows_hold():
    rows = [
        fault_matrix.Outcome("run", "sigkill", exit=-9, expected_exit="-9", finished=5, kept=5),
        fault_matrix.Outcome("run", "disk-full", exit=2, expected_exit="2", clear=True, finished=7, kept=6),
        fault_matrix.Outcome("run", "read-only", skipped="cannot mount a tmpfs here"),
    ]
    lines = fault_matrix.table(rows)
    assert rows[0].survived and not rows[1].survived and rows[1].lost == 1
    assert "| run | disk-full | 2 (2) | yes | 7 | 6 | 1 | n/a | n/a | NO |" in lines
    assert lines[-1] == "faults injected: 2, survived: 1, requests lost: 1, skipped: 1"
