"""The history: results recorded into SQLite and a real PostgreSQL server, idempotent adds, concurrent writers, an
upgrade from an older schema, errors in one line; trends with change points; creep against an anchor.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_history.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmbench.history.db import HISTORY_VERSION, History
from tests.unit.test_history import _series, sqlite_url


@pytest.mark.subprocess
def test_two_runs_recording_at_once_both_land(tmp_path, prompt_file, tiny_model_dir):
    url = sqlite_url(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "llmbench", "run", str(prompt_file), "-m", str(tiny_model_dir),
                               "--dtype", "float32", "--max-new-tokens", "3", "--ignore-eos", "-o",
                               str(tmp_path / f"{i}.json"), "-q", "--history", url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    h = History(url)
    assert len(h.list()) == 2 and h.version() == HISTORY_VERSION


@pytest.mark.browser
def test_the_trend_page_draws_the_series_and_its_change_points(tmp_path, cli):
    url = sqlite_url(tmp_path)
    h = History(url)
    _series(h, [0.1, -0.2, 0.0, 0.3, 3.1, 2.9, 3.2, 3.0])
    page = tmp_path / "trend.html"
    r = cli("trend", "tpot_ms", "--anchor", "v1", "-o", page, "--history", url)
    assert r.returncode == 0, r.stderr
    text = page.read_text(encoding="utf-8")
    assert "<svg" in text and "Change points" in text and "budget" not in text.split("<svg")[0]
    assert text.count("<tr>") == 8 + 1
