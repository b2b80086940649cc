"""The docs: the front door stays short and its links resolve, the site builds with no warning, and the Python API
example on docs/api.md keeps working as written.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_docs.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.unit.test_docs import ROOT


@pytest.mark.slow
def test_the_api_example_on_the_docs_runs(tmp_path):
    """docs/api.md's Python API example, as a script: it must keep working as written."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    start = text.index("```python\nimport llmbench\nimport pandas as pd")
    code = text[start + len("```python\n") : text.index("```", start + 10)]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "regressions:" in r.stdout and "tpot_ms mean" in r.stdout
    assert list(tmp_path.iterdir()) == []  # it wrote nothing
