"""The history: results recorded into SQLite and a real PostgreSQL server, idempotent adds, concurrent writers, an
upgrade from an older schema, errors in one line; trends with change points; creep against an anchor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmbench import changepoints, records
from llmbench import trend as tr
from llmbench.errors import UserError
from llmbench.history import HISTORY_VERSION, History, Result, create_v1, resolve_url
from llmbench.storage import load_run
from tests import postgres


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.db'}"


def test_urls_are_resolved_or_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMBENCH_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert resolve_url(None) is None
    assert resolve_url("default") == f"sqlite:///{tmp_path / 'llmbench' / 'history.db'}"
    assert resolve_url(str(tmp_path / "h.db")) == f"sqlite:///{tmp_path / 'h.db'}"
    assert resolve_url("postgres://u@h:5/db") == "postgresql+psycopg://u@h:5/db"
    monkeypatch.setenv("LLMBENCH_HISTORY", "sqlite:///x.db")
    assert resolve_url(None) == "sqlite:///x.db"
    for bad in ("mysql://h/db", "history"):
        with pytest.raises(UserError):
            resolve_url(bad)


def _run(cli, tmp_path, prompt_file, tiny_model_dir, name, *extra):
    out = tmp_path / f"{name}.json"
    r = cli("run", prompt_file, "-m", tiny_model_dir, "--dtype", "float32", "--max-new-tokens", "3", "--ignore-eos",
            "-o", out, "-q", *extra)  # fmt: skip
    return r, out


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
    assert tpot["mean"]["ci_low"] <= tpot["mean"]["value"] <= tpot["mean"]["ci_high"]
    assert tpot["mean"]["value"] == pytest.approx(load_run(out).summary.tpot_ms.mean)


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


def test_an_older_database_is_upgraded_and_a_newer_one_refused(tmp_path):
    url = sqlite_url(tmp_path)
    create_v1(url)
    h = History(url)  # opening upgrades it
    assert h.version() == HISTORY_VERSION
    rid, new = h.add(_ab_result(0, 1.0, "v1"))
    assert new and h.get(rid)["anchor_ref"] == "v1"
    from sqlalchemy import update

    with h.engine.begin() as conn:
        conn.execute(update(h.meta).values(value="99"))
    h.close()
    with pytest.raises(UserError, match="schema version 99; this llmbench knows up to"):
        History(url)


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


# -------------------------------------------------------------------------------- trends (ground-truth series)


def _ab_result(i: int, change: float, anchor: str, *, half: float = 0.8, moves: str | None = None) -> Result:
    """An ab record whose head is ``change`` % against ``anchor`` (interval +-``half``)."""
    metrics = [{"metric": "tpot_ms", "stat": "p50", "value": 50 * (1 + change / 100), "ci_low": None, "ci_high": None,
                "n": 40, "change_pct": change, "change_ci_low": change - half, "change_ci_high": change + half,
                "mdc_pct": half}]  # fmt: skip
    return Result(sha256=f"{anchor}-{i}-{change}", kind="ab", created_at=f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00",
                  llmbench_version="0.3.0", machine_id=f"m{i % 3}", machine={}, config_hash="c", config={},
                  prompt_sha256="p", model="m", engine="transformers", path=None, metrics=metrics,
                  commit=f"{i:040x}", head_commit=f"{i:040x}", anchor_ref=anchor, head_ref=moves or f"c{i}",
                  base_commit=anchor, extra={"moves_anchor": moves is not None})  # fmt: skip


def _series(h: History, values: list[float], anchor: str = "v1") -> None:
    for i, v in enumerate(values):
        h.add(_ab_result(i, v, anchor))


def test_creep_against_an_anchor_passes_under_the_budget_and_fails_over_it(tmp_path, cli):
    rng = np.random.default_rng(3)
    creep = [1.0 * k + rng.normal(0, 0.4) for k in range(12)]  # +1% per merge, measured with ab's noise
    url = sqlite_url(tmp_path)
    h = History(url)
    _series(h, creep[:5])  # 0..4%: under the 5% budget
    t = tr.anchored(h, "tpot_ms", "p50", "v1")
    assert tr.check(t, 5.0) == []
    r = cli("trend", "tpot_ms", "--anchor", "v1", "--check", "--budget", "5", "--history", url)
    assert r.returncode == 0 and "within the 5% budget" in r.stderr
    for i, v in enumerate(creep[5:], start=5):
        h.add(_ab_result(i, v, "v1"))
    t = tr.anchored(h, "tpot_ms", "p50", "v1")
    assert t.changes and all(c.upward for c in t.changes)  # the ramp comes out as upward steps
    assert tr.check(t, 5.0)
    r = cli("trend", "tpot_ms", "--anchor", "v1", "--check", "--budget", "5", "--history", url)
    assert r.returncode == 1 and "over budget" in r.stderr and "v1" in r.stderr
    assert "change point between" in r.stdout


def test_an_a_a_series_raises_no_alarm(tmp_path):
    rng = np.random.default_rng(7)
    h = History(sqlite_url(tmp_path))
    _series(h, list(rng.normal(0, 0.6, 20)))
    t = tr.anchored(h, "tpot_ms", "p50", "v1")
    assert t.changes == [] and tr.check(t, 5.0) == []


def test_a_moved_anchor_chains_into_one_index(tmp_path):
    h = History(sqlite_url(tmp_path))
    _series(h, [0.0, 1.0, 2.0])
    h.add(_ab_result(3, 3.0, "v1", moves="v2"))  # v2 measured against v1: +3%
    for i, v in enumerate([0.0, 1.0], start=4):
        h.add(_ab_result(i, v, "v2"))
    t = tr.anchored(h, "tpot_ms", "p50", "v1")
    assert t.chained == ["v2"]
    assert [round(p.value, 4) for p in t.points] == [0.0, 1.0, 2.0, 3.0, round((1.03 * 1.01 - 1) * 100, 4)]


def test_a_step_in_a_plain_series_is_found_where_it_happened(tmp_path):
    rng = np.random.default_rng(1)
    values = [50 + rng.normal(0, 0.3) for _ in range(10)] + [51.5 + rng.normal(0, 0.3) for _ in range(10)]
    changes = changepoints.detect(values, [f"c{i}" for i in range(20)])
    assert len(changes) == 1 and changes[0].index == 10 and changes[0].between == ("c9", "c10")
    assert changes[0].ci_low < 1.5 < changes[0].ci_high and changes[0].significant


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


# -------------------------------------------------------------------------------- a real PostgreSQL server


@pytest.fixture(scope="module")
def pg_url():
    why = postgres.available()
    if why:
        pytest.skip(why)
    with postgres.server() as url:
        yield url


def test_postgres_records_trends_upgrades_and_takes_concurrent_writers(pg_url, tmp_path, cli, prompt_file,
                                                                        tiny_model_dir):  # fmt: skip
    from sqlalchemy import create_engine, text

    r, out = _run(cli, tmp_path, prompt_file, tiny_model_dir, "pg", "--history", pg_url)
    assert r.returncode == 0, r.stderr
    h = History(resolve_url(pg_url))
    assert h.version() == HISTORY_VERSION and len(h.list(kind="run")) == 1
    # two processes adding the same files at once: one record each, no error
    script = ("import sys; from llmbench.drivers.history import record_files; from pathlib import Path; "
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


@pytest.mark.subprocess
def test_ab_records_the_head_against_a_pinned_anchor(cli, tmp_path, prompt_file, tiny_model_dir):
    from tests.test_ab import _worker

    url = sqlite_url(tmp_path)
    for step, sleep in enumerate((0, 20)):  # the second head sleeps 20 ms after each forward: clearly slower
        head = _worker(tiny_model_dir, f"LLMBENCH_INJECT_SLEEP_MS={sleep}") if sleep else _worker(tiny_model_dir)
        r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", head, "--max-new-tokens", "4",
                "--repeats", "2", "-o", tmp_path / f"ab{step}", "-q", "--history", url, "--anchor", "v1",
                "--head-ref", f"head{step}")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "recorded 1 new result(s)" in r.stderr
    rows = History(url).list(kind="ab")
    assert [(x["anchor_ref"], x["head_ref"]) for x in rows] == [("v1", "head0"), ("v1", "head1")]
    out = cli("trend", "tpot_ms", "--anchor", "v1", "--format", "json", "--history", url)
    assert out.returncode == 0, out.stderr
    points = json.loads(out.stdout)["points"]
    assert len(points) == 2 and points[1]["value"] > points[0]["value"] + 50  # 20 ms a token on a ~2 ms step
    assert points[1]["ci_low"] > 0 and points[1]["mdc_pct"] is not None
    again = cli("history", "add", tmp_path / "ab1", "--history", url)
    assert "0 new, 1 already recorded" in again.stdout  # the ab folder is the same record
