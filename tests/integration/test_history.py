"""The history: results recorded into SQLite and a real PostgreSQL server, idempotent adds, concurrent writers, an
upgrade from an older schema, errors in one line; trends with change points; creep against an anchor.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_history.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmbench.core.errors import UserError
from llmbench.history import records
from llmbench.history import trend as tr
from llmbench.history.db import HISTORY_VERSION, History, create_v1, resolve_url
from llmbench.results.storage import load_run
from tests import postgres
from tests.unit.test_history import _ab_result, _plain, _run, _run_file, _series, _tpot_n, sqlite_url


def test_a_run_is_recorded_once_with_its_code_machine_setup_and_intervals(cli, tmp_path, prompt_file, tiny_model_dir):
    url = sqlite_url(tmp_path)
    r, out = _run(cli, tmp_path, prompt_file, tiny_model_dir, "a", "--history", url)
    assert r.returncode == 0, r.stderr
    assert "recorded 1 new result(s) in the history" in r.stderr
    again = cli("history", "add", out, "--history", url)
    assert again.returncode == 0 and "0 new, 1 already recorded" in again.stdout
    r2, out2 = _run(cli, tmp_path, prompt_file, tiny_model_dir, "b", "--history", url)
    assert r2.returncode == 0, r2.stderr
    listed = json.loads(cli("history", "list", "--format", "json", "--history", url).stdout)
    assert [x["path"] for x in listed] == [str(out.resolve()), str(out2.resolve())]
    a, b = listed
    assert a["machine_id"] == b["machine_id"] and a["config_hash"] == b["config_hash"]  # the same machine and setup
    assert a["sha256"] == records.file_sha256(out) and a["commit"] == load_run(out).environment.git["commit"]
    assert a["machine"]["cpu_flags"] and "ram_gib" in a["machine"]  # stable facts, no measured speed
    shown = json.loads(cli("history", "show", str(a["id"]), "--format", "json", "--history", url).stdout)
    tpot = {m["stat"]: m for m in shown["metrics"] if m["metric"] == "tpot_ms"}
    assert set(tpot) == {"mean", "p50", "p90", "p99"} and tpot["p50"]["n"] == 3
    # 3 requests: no interval of a run's own mean (40) or p50 (6) holds 95% there, so none is recorded
    assert all(tpot[s]["ci_low"] is None and tpot[s]["ci_high"] is None for s in tpot)
    assert tpot["mean"]["value"] == pytest.approx(load_run(out).summary.tpot_ms.mean)


def test_a_corrupt_or_unreachable_database_is_one_line_and_the_run_is_kept(cli, tmp_path, prompt_file,
                                                                           tiny_model_dir):  # fmt: skip
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    for name, url in (("c", f"sqlite:///{corrupt}"), ("u", "postgresql://nobody@127.0.0.1:1/none")):
        r, out = _run(cli, tmp_path, prompt_file, tiny_model_dir, name, "--history", url)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and lines[-1].startswith("llmbench: error: history database") and len(lines) == 1
        assert f"the result is written: {out}" in lines[-1] and load_run(out).complete
        assert "Traceback" not in r.stderr


def test_postgres_records_trends_upgrades_and_takes_concurrent_writers(pg_url, tmp_path, cli, prompt_file,
                                                                        tiny_model_dir):  # fmt: skip
    from sqlalchemy import create_engine, text

    r, out = _run(cli, tmp_path, prompt_file, tiny_model_dir, "pg", "--history", pg_url)
    assert r.returncode == 0, r.stderr
    h = History(resolve_url(pg_url))
    assert h.version() == HISTORY_VERSION and len(h.list(kind="run")) == 1
    # two processes adding the same files at once: one record each, no error
    script = ("import sys; from llmbench.history.recording import record_files; from pathlib import Path; "
              f"record_files({pg_url!r}, [Path(sys.argv[1])])")  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-c", script, str(out)], stderr=subprocess.PIPE, text=True)
             for _ in range(3)]  # fmt: skip
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    assert len(h.list(kind="run")) == 1
    _series(h, [0.0, 0.2, -0.1, 0.1, 2.5, 2.7, 2.4, 2.6], anchor="pg-anchor")
    t = tr.anchored(h, "tpot_ms", "p50", "pg-anchor")
    assert len(t.points) == 8 and [c.index for c in t.changes] == [4]
    h.close()
    # an older schema on the server is upgraded in place
    engine = create_engine(resolve_url(pg_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE llmbench_metrics; DROP TABLE llmbench_results; DROP TABLE llmbench_meta"))
    engine.dispose()
    create_v1(resolve_url(pg_url))
    h = History(resolve_url(pg_url))
    assert h.version() == HISTORY_VERSION and h.add(_ab_result(1, 1.0, "v9"))[1]
    h.close()


def test_ab_records_the_head_against_a_pinned_anchor(cli, tmp_path, prompt_file, fake_worker):
    url = sqlite_url(tmp_path)
    for step, tpot in enumerate((2, 22)):  # the second head takes 20 ms more a token: clearly slower
        head = fake_worker("--tpot-ms", str(tpot))
        r = cli("ab", prompt_file, "--base", fake_worker("--tpot-ms", "2"), "--head", head, "--max-new-tokens", "4",
                "--repeats", "2", "-o", tmp_path / f"ab{step}", "-q", "--history", url, "--anchor", "v1",
                "--head-ref", f"head{step}")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "recorded 1 new result(s)" in r.stderr
    rows = History(url).list(kind="ab")
    assert [(x["anchor_ref"], x["head_ref"]) for x in rows] == [("v1", "head0"), ("v1", "head1")]
    out = cli("trend", "tpot_ms", "--anchor", "v1", "--format", "json", "--history", url)
    assert out.returncode == 0, out.stderr
    points = json.loads(out.stdout)["points"]
    assert len(points) == 2 and points[1]["value"] > points[0]["value"] + 500  # 22 ms a token against 2
    assert points[1]["ci_low"] > 0 and points[1]["mdc_pct"] is not None
    again = cli("history", "add", tmp_path / "ab1", "--history", url)
    assert "0 new, 1 already recorded" in again.stdout  # the ab folder is the same record


def test_a_writer_waits_for_the_lock_as_long_as_told_then_fails_in_one_line(tmp_path, monkeypatch, pg_url):
    import sqlite3
    import time

    from sqlalchemy import create_engine, text

    from llmbench.history.db import HISTORY_LOCK

    url = sqlite_url(tmp_path)
    History(url).close()
    monkeypatch.setenv("LLMBENCH_HISTORY_TIMEOUT_S", "0.5")
    holder = sqlite3.connect(tmp_path / "history.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer, in the middle of its transaction
    pg = postgres.new_database(pg_url, "locked")
    History(pg).close()
    engine = create_engine(pg)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": HISTORY_LOCK})
            for where in (url, pg):
                h = History(where)
                started = time.monotonic()
                with pytest.raises(UserError, match="locked|lock timeout") as e:
                    h.add(_plain(0))
                assert time.monotonic() - started < 10 and "\n" not in str(e.value)
                h.close()
    finally:
        holder.close()
        engine.dispose()
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv("LLMBENCH_HISTORY_TIMEOUT_S", bad)
        with pytest.raises(UserError, match="LLMBENCH_HISTORY_TIMEOUT_S"):
            History(url)


def test_postgres_records_a_run_once_replaces_a_partial_one_and_refuses_an_empty_database(pg_url, cli, tmp_path):
    url = postgres.new_database(pg_url, "once")
    r = cli("history", "list", "--history", url)  # a reading command never creates the schema
    assert r.returncode == 2 and "no history database at" in r.stderr and "holds no llmbench history" in r.stderr
    partial = _run_file(tmp_path / "p.json", n=4, complete=False)
    assert "partial" in cli("history", "add", partial, "--history", url).stdout
    done = _run_file(tmp_path / "p.json", n=10)
    again = _run_file(tmp_path / "p2.json", n=10, indent=2)
    r = cli("history", "add", done, again, "--history", url)
    assert r.returncode == 0 and "1 new, 1 already recorded" in r.stdout, r.stdout + r.stderr
    h = History(url)
    (row,) = h.list()
    assert row["extra"]["complete"] is True and _tpot_n(h, row["id"]) == 10 and h.version() == HISTORY_VERSION
    h.close()
