"""First uses of one new (or old-schema) history database by 8 processes at the same moment, on SQLite and on a real
PostgreSQL server: every process succeeds and every row is there exactly once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmbench.history.db import HISTORY_VERSION, History, create_v1, create_v2
from tests import postgres

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8

# Each child imports everything first, says it is ready, then waits for the go file: the 8 then open the database
# within a millisecond or two of each other instead of a Python start-up apart. Each adds a result of its own and
# one that all of them add (the same sha256), and one run all of them add under different bytes (same run id).
CHILD = """
import sys, time
from pathlib import Path
from llmbench.history.db import History, Result
url, go, i = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
def result(sha, run_id=None):
    return Result(sha256=sha, kind="run", created_at=f"2026-11-01T00:00:{i:02d}Z", llmbench_version="0", machine_id="m",
                  machine={}, config_hash="c", config={}, prompt_sha256=None, model="m", engine="e", path=None,
                  metrics=[{"metric": "tpot_ms", "stat": "p50", "value": float(i), "ci_low": None, "ci_high": None,
                            "n": 1}], run_id=run_id, extra={"complete": True})
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
h = History(url)
h.add(result(f"own-{i}"))
h.add(result("shared"))
h.add(result(f"reserialized-{i}", run_id="one-run"))
h.close()
"""


def _race(url: str, go: Path) -> None:
    """8 children open ``url`` at once and add; each must exit 0."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url, str(go), str(i)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    assert errors == []


def _check(url: str) -> None:
    h = History(url)
    try:
        assert h.version() == HISTORY_VERSION
        rows = h.list()
        shas = sorted(r["sha256"] for r in rows if not r["sha256"].startswith("reserialized-"))
        assert shas == sorted([f"own-{i}" for i in range(PROCESSES)] + ["shared"])  # each exactly once
        assert [r["run_id"] for r in rows if r["run_id"]] == ["one-run"]  # one run, recorded once
        for r in rows:  # and each with its metric, written with it
            assert [m["metric"] for m in h.get(r["id"])["metrics"]] == ["tpot_ms"]
    finally:
        h.close()


@pytest.mark.subprocess
@pytest.mark.parametrize("start", ["new", "v1", "v2"])
def test_eight_first_uses_of_one_sqlite_file_at_once_all_succeed(tmp_path, start):
    for attempt in range(3 if start == "new" else 2):  # before the lock most tries of 8 processes lost the race
        _first_uses(f"sqlite:///{tmp_path / f'h{attempt}.db'}", start, tmp_path / f"go{attempt}")


def _first_uses(url: str, start: str, go: Path) -> None:
    """Eight processes first-use ``url`` (new, or left at schema v1/v2) at once; every row is there once."""
    if start == "v1":
        create_v1(url)
    elif start == "v2":
        create_v2(url)
    _race(url, go)
    _check(url)


@pytest.mark.subprocess
def test_eight_first_uses_of_one_postgres_database_at_once_all_succeed(pg_url, tmp_path):
    for attempt, start in enumerate(("new", "new", "v1")):
        url = postgres.new_database(pg_url, f"race{attempt}_{int(time.time())}")
        _first_uses(url, start, tmp_path / f"go{attempt}")
