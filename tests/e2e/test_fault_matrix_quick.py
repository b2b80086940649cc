"""The fault matrix's CI subset (benchmarks/fault_matrix.py --quick): real commands, real faults, and nothing that
finished is lost in any row; the table it prints says what the rows say.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_fault_matrix.py."""

from __future__ import annotations

import pytest

from tests.unit.test_fault_matrix import fault_matrix


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
