"""The docs: the front door stays short and its links resolve, the site builds with no warning, and the Python API
example on docs/api.md keeps working as written.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_docs.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.unit.test_docs import NO_MKDOCS, ROOT


@pytest.mark.skipif(NO_MKDOCS, reason="mkdocs is not installed (pip install -e '.[dev]' brings mkdocs-material)")
def test_the_site_builds_strict(tmp_path):
    """Every page in the nav, no broken link or anchor, no warning (mkdocs.yml: strict, validation)."""
    site = tmp_path / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    r = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "index.html").is_file() and (site / "api" / "index.html").is_file()
