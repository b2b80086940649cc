"""Every figure `report` draws reads at a glance: no tick label, legend entry or title over another (matplotlib's
own text extents after drawing), reference lines that mean what their legend says, short names, units on every
axis; and a screenshot of each report kind, taken in headless Chromium, kept in test-artifacts/.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_figures.py."""

from __future__ import annotations

import pytest

from tests.unit.test_figures import (
    _assert_readable,
    figures,  # noqa: F401 (fixtures)
)


@pytest.mark.slow
def test_a_scan_report_reads_at_a_glance(figures, cli, tiny_model_dir, tmp_path):
    out = tmp_path / "scan"
    r = cli("scan", "-m", tiny_model_dir, "--dtype", "float32", "--prompt-tokens", "32,64,128,256", "--depth",
            "0,64,128", "--batch", "1,2,4", "--rounds", "1", "--prompts-per-point", "2", "--max-new-tokens", "4",
            "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert cli("report", out / "scan.json", "-o", tmp_path / "scan.html").returncode == 0
    _assert_readable(figures)
    assert len(figures) == 3
