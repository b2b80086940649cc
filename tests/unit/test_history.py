"""The history: results recorded into SQLite and a real PostgreSQL server, idempotent adds, concurrent writers, an
upgrade from an older schema, errors in one line; trends with change points; creep against an anchor."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmbench.analysis import changepoints
from llmbench.core.errors import UserError
from llmbench.history import records
from llmbench.history import trend as tr
from llmbench.history.db import HISTORY_VERSION, History, Result, create_v1, resolve_url


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


# -------------------------------------------------------------------------------- trends (ground-truth series)


def _sha(i: int) -> str:
    """Merge i's commit: a full-length sha whose first 12 characters tell the merges apart."""
    return f"{i:04x}{'a' * 36}"


def _ab_result(i: int, change: float, anchor: str, *, half: float = 0.8, moves: str | None = None) -> Result:
    """An ab record whose head is ``change`` % against ``anchor`` (interval +-``half``)."""
    metrics = [{"metric": "tpot_ms", "stat": "p50", "value": 50 * (1 + change / 100), "ci_low": None, "ci_high": None,
                "n": 40, "change_pct": change, "change_ci_low": change - half, "change_ci_high": change + half,
                "mdc_pct": half}]  # fmt: skip
    return Result(sha256=f"{anchor}-{i}-{change}", kind="ab", created_at=f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00",
                  llmbench_version="0.3.0", machine_id=f"m{i % 3}", machine={}, config_hash="c", config={},
                  prompt_sha256="p", model="m", engine="transformers", path=None, metrics=metrics,
                  commit=_sha(i), head_commit=_sha(i), anchor_ref=anchor, head_ref=moves or f"c{i}",
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


def test_a_step_over_budget_prints_the_bisect_that_would_find_it(tmp_path, cli):
    """A +8% step at merge 6: trend --check names it and prints `llmbench bisect` over the stretch around it,
    from two points before the change point to one after, at half its size (and the JSON carries the same)."""
    url = sqlite_url(tmp_path)
    h = History(url)
    _series(h, [0.0, 0.3, -0.2, 0.1, -0.1, 0.2, 8.0, 8.2, 7.9, 8.1, 8.0, 7.8])
    t = tr.anchored(h, "tpot_ms", "p50", "v1")
    [c] = t.changes
    hints = tr.bisect_hints(t, 5.0)
    step = next(x for x in hints if x["threshold_pct"] == round(c.size / 2, 2))
    assert (step["good"], step["bad"]) == (_sha(c.index - 2), _sha(c.index + 1))
    latest = next(x for x in hints if x is not step)  # the head over budget: from the newest point under half of it
    assert (latest["good"], latest["bad"], latest["threshold_pct"]) == (_sha(5), _sha(11), 2.5)
    r = cli("trend", "tpot_ms", "--anchor", "v1", "--check", "--budget", "5", "--history", url)
    assert r.returncode == 1
    assert (
        f"to find the commit: llmbench bisect {_sha(c.index - 2)[:12]} {_sha(c.index + 1)[:12]} --metric tpot_ms"
        in r.stderr
    )
    r = cli("trend", "tpot_ms", "--anchor", "v1", "--check", "--budget", "5", "--history", url, "--format", "json")
    assert json.loads(r.stdout)["check"]["bisect"] == hints
    # points of a series without commits give no hint, and the problems stay
    assert tr.check(t, 5.0) and tr.bisect_hints(tr.Trend(t.metric, t.stat, t.unit, [
        tr.Point(p.result_id, p.created_at, None, p.label, p.value, p.ci_low, p.ci_high) for p in t.points],
        t.changes, anchor=None), 5.0) == []  # fmt: skip


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


# -------------------------------------------------------------------------------- a real PostgreSQL server


# -------------------------------------------------------------------------------- a run once, partial runs, v2 -> v3


def _run_file(path: Path, *, run_id: str = "run-1", n: int = 10, complete: bool = True, tpot: float = 20.0,
              created_at: str = "2026-11-01T00:00:00Z", indent: int | None = None) -> Path:  # fmt: skip
    """A run file (synthetic, no model) with the first ``n`` of 10 requests; ``indent``: the same run, other bytes."""
    from tests.helpers import synthetic_run

    run = synthetic_run(n=10, tpot_ms=tpot)
    run = run.model_copy(update={"run_id": run_id, "complete": complete, "created_at": created_at,
                                 "requests": run.requests[:n]})  # fmt: skip
    data = run.model_dump(mode="json")
    path.write_text(json.dumps(data, indent=indent), encoding="utf-8")
    return path


def _tpot_n(h: History, rid: int) -> int:
    return next(m["n"] for m in h.get(rid)["metrics"] if m["metric"] == "tpot_ms" and m["stat"] == "p50")


def test_a_run_is_recorded_once_by_its_run_id_whatever_its_bytes(cli, tmp_path):
    url = sqlite_url(tmp_path)
    first = _run_file(tmp_path / "a.json")
    again = _run_file(tmp_path / "a-reserialized.json", indent=2)  # the same run, re-serialized: other bytes
    assert records.file_sha256(first) != records.file_sha256(again)
    assert "1 new, 0 already recorded" in cli("history", "add", first, "--history", url).stdout
    r = cli("history", "add", again, "--history", url)
    assert r.returncode == 0 and "0 new, 1 already recorded" in r.stdout, r.stdout + r.stderr
    rows = History(url).list()
    assert len(rows) == 1 and rows[0]["run_id"] == "run-1" and rows[0]["path"] == str(first.resolve())


def test_a_partial_run_is_marked_and_replaced_by_its_complete_file(cli, tmp_path):
    url = sqlite_url(tmp_path)
    partial = _run_file(tmp_path / "p.json", n=4, complete=False, tpot=30.0)
    r = cli("history", "add", partial, "--history", url)
    assert r.returncode == 0 and "1 new" in r.stdout and "partial" in r.stdout, r.stdout
    h = History(url)
    (row,) = h.list()
    assert row["extra"]["complete"] is False and _tpot_n(h, row["id"]) == 4
    more = _run_file(tmp_path / "p.json", n=7, complete=False, tpot=30.0)  # a resume under way: more requests
    assert "1 new" in cli("history", "add", more, "--history", url).stdout
    done = _run_file(tmp_path / "p.json", n=10, complete=True, tpot=20.0)  # it completes, in the same file
    assert "1 new" in cli("history", "add", done, "--history", url).stdout
    (row2,) = h.list()  # replaced in place: one row, the same id, the complete run's metrics only
    assert row2["id"] == row["id"] and row2["extra"]["complete"] is True
    assert row2["sha256"] == records.file_sha256(done)
    tpot = [m for m in h.get(row["id"])["metrics"] if m["metric"] == "tpot_ms"]
    assert len(tpot) == 4 and {m["n"] for m in tpot} == {10}
    assert tpot[0]["value"] == pytest.approx(20.0, rel=0.01)
    old = _run_file(tmp_path / "old.json", n=4, complete=False, tpot=30.0)  # a stale partial copy: no downgrade
    assert "0 new, 1 already recorded" in cli("history", "add", old, "--history", url).stdout
    assert _tpot_n(h, row["id"]) == 10
    # the trend leaves partial runs out, and says so
    _run_file(tmp_path / "q.json", run_id="run-2", n=3, complete=False, created_at="2026-11-02T00:00:00Z")
    _run_file(tmp_path / "r.json", run_id="run-3", created_at="2026-11-03T00:00:00Z")
    assert cli("history", "add", tmp_path / "q.json", tmp_path / "r.json", "--history", url).returncode == 0
    t = tr.series(h, "tpot_ms", "p50")
    assert len(t.points) == 2 and any("1 partial result(s) left out" in n for n in t.notes)
    h.close()


def test_a_v2_database_is_upgraded_to_run_ids(tmp_path):
    from sqlalchemy import create_engine, inspect

    from llmbench.history.db import create_v2

    url = sqlite_url(tmp_path)
    create_v2(url)
    engine = create_engine(url)
    with engine.begin() as conn:  # a v2 result, as llmbench wrote it before run ids
        conn.exec_driver_sql("INSERT INTO llmbench_results (sha256, kind, recorded_at, machine_id, config_hash) "
                             "VALUES ('old', 'run', '2026-10-01T00:00:00Z', 'm', 'c')")  # fmt: skip
    engine.dispose()
    h = History(url)
    assert h.version() == HISTORY_VERSION == 3
    (old,) = h.list()
    assert old["sha256"] == "old" and old["run_id"] is None
    assert any(ix["unique"] and ix["column_names"] == ["run_id"] for ix in inspect(h.engine).get_indexes(
        "llmbench_results"))  # fmt: skip
    a = _ab_result(0, 1.0, "v1")
    a.run_id = "ab:x+y"
    assert h.add(a)[1] and h.add(_ab_result(1, 1.0, "v1"))[1]  # NULL run ids don't collide
    b = _ab_result(2, 2.0, "v1")
    b.run_id = "ab:x+y"
    assert h.add(b) == (h.list(kind="ab")[0]["id"], False)  # the same pair, other bytes: recorded once
    h.close()
    assert History(url).version() == 3  # opening it again changes nothing


# -------------------------------------------------------------------------------- reading commands, filters, numbers


def test_reading_commands_refuse_a_missing_database_and_writing_ones_create_it(cli, tmp_path):
    missing = tmp_path / "typo" / "hsitory.db"
    for args in (("history", "list"), ("history", "show", "1"), ("history", "prune", "--keep", "1"),
                 ("history", "export", "-o", tmp_path / "x.csv"), ("trend", "tpot_ms")):  # fmt: skip
        r = cli(*args, "--history", missing)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and lines == [f"llmbench: error: no history database at {missing}"], r.stderr
    assert not missing.exists() and not missing.parent.exists()
    r = cli("history", "add", _run_file(tmp_path / "a.json"), "--history", missing)
    assert r.returncode == 0 and missing.is_file(), r.stderr
    assert len(json.loads(cli("history", "list", "--format", "json", "--history", missing).stdout)) == 1


def test_an_in_memory_database_is_refused(cli, tmp_path):
    for url in ("sqlite://", "sqlite:///:memory:"):
        r = cli("history", "add", _run_file(tmp_path / "a.json"), "--history", url)
        assert r.returncode == 2 and "in-memory database keeps nothing" in r.stderr and "new" not in r.stdout


@pytest.mark.parametrize("budget", ["nan", "inf", "-1"])
def test_a_budget_that_is_not_a_finite_percentage_is_refused_before_any_work(cli, tmp_path, budget):
    url = sqlite_url(tmp_path)
    _series(History(url), [0.0, 1.0])
    r = cli("trend", "tpot_ms", "--anchor", "v1", "--check", "--budget", budget, "--history", url)
    assert r.returncode == 2 and "within" not in r.stderr and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"llmbench: error: --budget {float(budget):g}: expected a finite "
                                             "percentage of at least 0 (the allowed slowdown)"]  # fmt: skip
    r = cli("trend", "tpot_ms", "--check", "--anchor", "v1", "--budget", budget, "--history", tmp_path / "none.db")
    assert r.returncode == 2 and "--budget" in r.stderr  # before the database is opened
    r = cli("trend", "tpot_ms", "--budget", "3", "--history", url)  # a budget with nothing to apply it to
    assert r.returncode == 2 and "--budget goes with --anchor" in r.stderr


def test_list_filters_and_numbers_filter_or_are_refused(cli, tmp_path):
    url = sqlite_url(tmp_path)
    h = History(url)
    _series(h, [0.0, 1.0, 2.0, 3.0])
    for i in range(4):
        h.add(_plain(i))  # runs measured at 00:00 .. 03:00 UTC
    h.close()
    ids = [x["id"] for x in json.loads(cli("history", "list", "--format", "json", "--history", url).stdout)]
    assert len(ids) == 8
    newest = json.loads(cli("history", "list", "--limit", "1", "--format", "json", "--history", url).stdout)
    assert [x["id"] for x in newest] == ids[-1:]
    at_least = "--limit must be 1 to"
    for args, why in ((("--limit", "0"), at_least), (("--limit", "-2"), at_least),
                      (("--kind", "runs"), "--kind runs: expected one of"), (("--since", "2026-13-45"), "--since"),
                      (("--since", "0d"), "--since 0d"), (("--since", "99999999999d"), "--since")):  # fmt: skip
        r = cli("history", "list", *args, "--history", url)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    # prefixes are prefixes: '_' and '%' are characters, not LIKE's wildcards
    for args in (("--commit", "_"), ("--commit", "%"), ("--machine", "_"), ("--config", "%")):
        assert json.loads(cli("history", "list", *args, "--format", "json", "--history", url).stdout) == []
    # a zone is converted: 03:00+02:00 is 01:00 UTC, so the runs of 01:00, 02:00 and 03:00 UTC are in
    since = json.loads(cli("history", "list", "--kind", "run", "--since", "2026-11-01T03:00:00+02:00", "--format",
                           "json", "--history", url).stdout)  # fmt: skip
    assert [x["sha256"] for x in since] == ["plain-1", "plain-2", "plain-3"]


def _plain(i: int, *, machine: str = "aaaa0000aaaa0000", config: str = "c", created: str | None = None,
           kind: str = "run", label: str | None = None, value: float = 50.0) -> Result:  # fmt: skip
    metrics = [{"metric": "tpot_ms", "stat": "p50", "value": value, "ci_low": value - 1, "ci_high": value + 1,
                "n": 10}]  # fmt: skip
    return Result(sha256=f"plain-{i}", kind=kind, created_at=created or f"2026-11-01T{i:02d}:00:00Z",
                  llmbench_version="0", machine_id=machine, machine={}, config_hash=config, config={},
                  prompt_sha256=None, model="m", engine="e", path=None, metrics=metrics, label=label,
                  run_id=f"plain-{i}", extra={"complete": True})  # fmt: skip


def test_prune_keeps_the_newest_measured_of_each_series(cli, tmp_path):
    url = sqlite_url(tmp_path)
    h = History(url)
    new_id = h.add(_plain(0, created="2026-11-30T00:00:00Z"))[0]  # recorded first, measured last
    h.add(_plain(1, created="2026-11-01T00:00:00Z"))  # a backlog added later: measured earlier
    rate = h.add(_plain(2, kind="load", label="rate-1"))[0]  # one load test: a rate's run and its summary values,
    summary = h.add(_plain(3, kind="load", label="load.json"))[0]  # the same machine, setup and kind
    other = h.add(_plain(4, machine="bbbb0000bbbb0000"))[0]
    h.add(_plain(5, machine="bbbb0000bbbb0000", created="2026-10-01T00:00:00Z"))
    _series(h, [0.0, 1.0])  # v1's series: ab rows 0 and 1 (machines m0, m1)
    move = h.add(_ab_result(2, 3.0, "v1", moves="v2"))[0]  # on m2, the only one there: keep it whatever its age
    later = _ab_result(5, 3.5, "v1")  # a later result of the move's series (m2, against v1)
    later.machine_id = "m2"
    h.add(later)
    before = {x["id"] for x in h.list()}
    r = cli("history", "prune", "--keep", "1", "--machine", "aaaa", "--history", url)  # a prefix, as list shows
    assert r.returncode == 0 and r.stdout.strip() == "deleted 1 results", r.stdout + r.stderr
    left = {x["id"] for x in h.list()}
    assert before - left == {new_id + 1}  # the older-measured run; the newest measured, the rate and summary stay
    assert {new_id, rate, summary, other} <= left
    r = cli("history", "prune", "--keep", "1", "--history", url)
    assert r.returncode == 0 and r.stdout.strip() == "deleted 1 results"  # machine b's older run only
    assert move in {x["id"] for x in h.list()}  # the move record links v2 to v1: never pruned
    for machine, why in (("zzzz", "no such machine"), ("", "empty")):
        r = cli("history", "prune", "--keep", "1", "--machine", machine, "--history", url)
        assert r.returncode == 2 and why in r.stderr
    h.add(_plain(6, machine="aaaa1111aaaa1111"))
    r = cli("history", "prune", "--keep", "1", "--machine", "aaaa", "--history", url)
    assert r.returncode == 2 and "matches 2 machines" in r.stderr  # an ambiguous prefix prunes nothing
    h.close()


def test_a_trend_never_mixes_machines_or_setups(cli, tmp_path):
    url = sqlite_url(tmp_path)
    h = History(url)
    for i in range(6):  # two machines whose ids share a start, alternating: 50 ms and 80 ms
        h.add(_plain(i, machine="abcd0000abcd0000" if i % 2 else "abcd1111abcd1111", value=50.0 + 30 * (i % 2)))
    r = cli("trend", "tpot_ms", "--machine", "abcd", "--history", url)
    assert r.returncode == 2 and "matches 2 machines" in r.stderr
    t = tr.series(h, "tpot_ms", "p50", machine="abcd0")
    assert [p.value for p in t.points] == [80.0, 80.0, 80.0] and t.machine_id == "abcd0000abcd0000"
    # against an anchor: one setup (the newest's, or --config), every runner unless --machine
    for i, (cfg, change) in enumerate([("c", 0.0), ("d", 9.0), ("c", 0.5), ("d", 9.5), ("c", 1.0)]):
        a = _ab_result(i, change, "v1")
        a.config_hash, a.sha256 = cfg, f"cfg-{i}"
        h.add(a)
    t = tr.anchored(h, "tpot_ms", "p50", "v1")
    assert [p.value for p in t.points] == pytest.approx([0.0, 0.5, 1.0]) and t.config_hash == "c"
    assert any("1 other setup series left out" in n for n in t.notes)
    t = tr.anchored(h, "tpot_ms", "p50", "v1", config="d")
    assert [p.value for p in t.points] == pytest.approx([9.0, 9.5])
    t = tr.anchored(h, "tpot_ms", "p50", "v1", machine="m1")  # rows 1 and 4 ran on m1; 1 is of setup d
    assert [p.result_id for p in t.points] == [x["id"] for x in h.list(kind="ab", machine="m1", config="c")]
    out = json.loads(cli("trend", "tpot_ms", "--anchor", "v1", "--machine", "m0", "--format", "json",
                         "--history", url).stdout)  # fmt: skip
    assert [p["id"] for p in out["points"]] == [x["id"] for x in h.list(kind="ab", machine="m0", config="d")]
    h.close()


def test_since_limits_the_points_of_a_chained_anchor_not_the_chain(tmp_path):
    h = History(sqlite_url(tmp_path))
    _series(h, [0.0, 1.0, 2.0])  # Nov 1, 00:00-02:00
    h.add(_ab_result(3, 3.0, "v1", moves="v2"))  # 03:00: v2 is +3% on v1
    for i, v in enumerate([0.0, 1.0], start=4):  # 04:00, 05:00 against v2
        h.add(_ab_result(i, v, "v2"))
    t = tr.anchored(h, "tpot_ms", "p50", "v1", since="2026-11-01T03:30:00Z")
    assert t.chained == ["v2"] and [round(p.value, 4) for p in t.points] == [3.0, round((1.03 * 1.01 - 1) * 100, 4)]
    h.close()


def test_history_add_refuses_what_would_record_nothing_or_part(cli, tmp_path):
    url = sqlite_url(tmp_path)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    _run_file(sweep / "s1.json", run_id="s1")
    rows = [{"label": "s1", "run_file": "s1.json"}, {"label": "s2", "run_file": "s2.json"}]
    (sweep / "sweep.json").write_text(json.dumps({"sweep_version": 1, "results": rows}), encoding="utf-8")
    r = cli("history", "add", sweep, "--history", url)
    assert r.returncode == 2 and "names s2.json, which is not in" in r.stderr
    ab = tmp_path / "notab"  # two runs named like an ab folder's, not written by llmbench ab
    ab.mkdir()
    _run_file(ab / "base.json", run_id="b")
    _run_file(ab / "head.json", run_id="h")
    r = cli("history", "add", _run_file(tmp_path / "ok.json", run_id="ok"), ab, "--history", url)
    assert r.returncode == 2 and "nothing in it to record" in r.stderr
    empty = _run_file(tmp_path / "empty.json", run_id="e", n=0, complete=False)  # interrupted before a request
    r = cli("history", "add", empty, "--history", url)
    assert r.returncode == 2 and "no measured request" in r.stderr
    assert History(url).list() == []  # every path is read before anything is added


@pytest.mark.parametrize(
    ("name", "record", "said"),
    [
        ("sweep.json", {"sweep_version": 1, "results": [{"run_file": 5}]}, "results[0].run_file is 5"),
        ("sweep.json", {"sweep_version": 1, "results": 5}, "'results' is int, not a list"),
        ("sweep.json", {"sweep_version": 1, "results": {"run_file": "r.json"}}, "'results' is dict, not a list"),
        ("sweep.json", {"sweep_version": 1, "results": [{"run_file": "r.json"}, "r.json"]}, "results[1] is str"),
        ("sweep.json", {"sweep_version": 1, "results": [{"run_file": "gone.json"}]}, "names gone.json"),
        ("sweep.json", {"sweep_version": 1, "results": [{"run_file": "r.json", "label": 7}]}, "results[0].label"),
        ("sweep.json", {"sweep_version": 1, "results": [{"run_file": "../r.json"}]}, "not a file name in its folder"),
        ("quality.json", {"quality_version": 1, "kld_mean": "low"}, "kld_mean is 'low', not a number"),
        ("quality.json", {"quality_version": 1, "kld_mean": 0.1, "greedy": [1]}, "'greedy' is list, not an object"),
        ("scan.json", {"scan_version": 1, "points": [{"run_file": ["r.json"]}]}, "points[0].run_file is ['r.json']"),
        ("scan.json", {"scan_version": 1, "points": "r.json"}, "'points' is str, not a list"),
        ("load.json", {"load_version": 1, "rates": 5}, "'rates' is int, not a list"),
        ("load.json", {"load_version": 1, "rates": [None]}, "rates[0] is NoneType"),
        ("load.json", {"load_version": 1, "rates": [{"run_file": 5, "offered_rate_rps": 1}]}, "rates[0].run_file"),
        ("load.json", {"load_version": 1, "rates": [{"run_file": "r.json"}]}, "rates[0].offered_rate_rps is None"),
        ("load.json", {"load_version": 1, "rates": [{"run_file": "r.json", "offered_rate_rps": "2"}]},
         "rates[0].offered_rate_rps is '2', not a number"),
        ("load.json", {"load_version": 1, "rates": [{"offered_rate_rps": 1},
                                                    {"run_file": "r.json", "offered_rate_rps": 2, "goodput_rps": 1}]},
         None),
        ("load.json", {"load_version": 1, "rates": [{"run_file": "r.json", "offered_rate_rps": 1,
                                                     "goodput_rps": "many"}]}, "rates[0].goodput_rps is 'many'"),
        ("load.json", {"load_version": 1, "rates": [], "saturation": 3}, "'saturation' is int, not an object"),
    ],
)  # fmt: skip
def test_history_add_of_a_malformed_driver_record_is_one_line_naming_it(cli, tmp_path, name, record, said):
    # a hand-edited or cut sweep/scan/load record was "internal error: TypeError" (or AttributeError, KeyError)
    url = sqlite_url(tmp_path)
    folder = tmp_path / "driver"
    folder.mkdir()
    _run_file(folder / "r.json", run_id="r")
    path = folder / name
    path.write_text(json.dumps(record), encoding="utf-8")  # load_version first: load.json is told by it
    r = cli("history", "add", path, "--history", url)
    if said is None:  # a rate without a run file (not measured) is no error: the others are recorded
        assert r.returncode == 0 and "2 new" in r.stdout, r.stdout + r.stderr
        return
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"llmbench: error: {path}: ") and said in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "internal error" not in r.stderr
    assert History(url).list() == []


def test_a_database_password_is_never_printed(cli, tmp_path):
    run = _run_file(tmp_path / "a.json")
    for url in ("postgresql://u:s3cretpw@127.0.0.1:1/none", "postgresql://u:s3cret@pw@127.0.0.1:1/none",
                "postgresql://u@127.0.0.1:1/none?password=s3cretpw", "postgresql://u:s3cretpw@127.0.0.1:x/none",
                "u:s3cretpw@127.0.0.1/none"):  # fmt: skip
        for args in (("history", "add", run), ("history", "list"), ("trend", "tpot_ms")):
            r = cli(*args, f"--history={url}")
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (url, r.stderr)
            assert "s3cret" not in r.stderr + r.stdout and "pw@" not in r.stderr, (url, r.stderr)
    from llmbench.history.db import scrub, shown

    for url, password in (("postgresql+psycopg://u:s3cretpw@h/db", "s3cretpw"),
                          ("postgresql+psycopg://u@h/db?sslmode=require&password=s3cretpw", "s3cretpw"),
                          ("postgresql+psycopg://u:s3cret%40pw@h/db", "s3cret@pw")):  # fmt: skip
        assert "s3cret" not in shown(url)
        assert "s3cret" not in scrub(f"connection to {url} failed for password {password}", url)
