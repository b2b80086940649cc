"""The fault matrix's CI subset (benchmarks/fault_matrix.py --quick): real commands, real faults, and nothing that
finished is lost in any row; the table it prints says what the rows say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fault_matrix


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_quick_fault_matrix_loses_nothing_and_says_each_fault_in_one_line(tmp_path, capsys):
    rows = fault_matrix.main(["--quick", "--json", str(tmp_path / "rows.json")])
    printed = capsys.readouterr().out
    assert {(o.command, o.fault) for o in rows} == fault_matrix.QUICK
    for o in rows:
        if o.skipped:
            continue
        assert o.lost == 0, o
        assert o.clear is not False, o
        assert o.exit_ok, o
        assert o.resume in ("ok", "n/a"), o
        assert o.history in ("consistent", "n/a"), o
    ran = [o for o in rows if not o.skipped]
    assert sum(o.finished for o in ran) > 0  # faults landed mid-run, with finished requests to lose
    for line in fault_matrix.table(rows):  # the table it printed is the rows'
        assert line in printed
    assert f"faults injected: {len(ran)}, survived: {len(ran)}, requests lost: 0" in printed


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
