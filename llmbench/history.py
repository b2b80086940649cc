"""The history database: every result recorded over time, per machine, so slow creep and "since when?" can be seen.

One schema for an embedded SQLite file (the default, ``~/.local/share/llmbench/history.db``) and a PostgreSQL
server a team points every runner at (``postgresql://...``), written through SQLAlchemy Core (no SQL per
dialect). Two tables: ``llmbench_results`` (one row per recorded result: what was measured, where, from which
code) and ``llmbench_metrics`` (its statistics with intervals). Per-request data stays in the run JSON; a result
names it by path and sha256.

Schema history (``HISTORY_VERSION``; an older database is upgraded in place, a newer one refused):
  1 (llmbench 0.3.0): results of runs (and sweep setups, scan points, load rates, quality) with their metrics.
  2 (llmbench 0.3.0): ``ab`` results: base and head commits, the anchor's ref, and per metric the paired
    change, its interval and the minimum detectable change (results.base_commit/head_commit/anchor_ref/head_ref,
    metrics.change_pct/change_ci_low/change_ci_high/mdc_pct).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmbench.errors import UserError, require

HISTORY_VERSION = 2
ENV_HISTORY = "LLMBENCH_HISTORY"

# Version 1's columns; version 2 added the ab/anchor columns (see the module docstring).
_V2_RESULT_COLUMNS = ("base_commit", "head_commit", "anchor_ref", "head_ref")
_V2_METRIC_COLUMNS = ("change_pct", "change_ci_low", "change_ci_high", "mdc_pct")


def default_url() -> str:
    """The embedded SQLite file: ``$XDG_DATA_HOME/llmbench/history.db`` (~/.local/share)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{base / 'llmbench' / 'history.db'}"


def resolve_url(url: str | None) -> str | None:
    """``--history``'s value -> a database URL: None (and no ``LLMBENCH_HISTORY``): no history; ``default``: the
    SQLite file; a path ending .db/.sqlite: that SQLite file; otherwise a SQLAlchemy URL (sqlite:///...,
    postgresql://...). UserError for what is none of these."""
    value = url if url is not None else os.environ.get(ENV_HISTORY) or None
    if value is None:
        return None
    value = value.strip()
    if value in ("", "default", "1", "true", "yes"):
        return default_url()
    if "://" not in value:
        if value.endswith((".db", ".sqlite", ".sqlite3")):
            return f"sqlite:///{Path(value).expanduser().resolve()}"
        raise UserError(
            f"--history {value}: expected a database URL (sqlite:///FILE.db, postgresql://...) or a .db file"
        )
    scheme = value.split("://", 1)[0].split("+", 1)[0]
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise UserError(f"--history {value.split('://')[0]}://...: llmbench keeps history in SQLite or PostgreSQL")
    if scheme == "postgres":  # libpq's spelling; SQLAlchemy's is postgresql
        value = "postgresql" + value[len("postgres") :]
    if value.startswith("postgresql://"):
        value = "postgresql+psycopg://" + value[len("postgresql://") :]  # psycopg 3, the maintained driver
    return value


def shown(url: str) -> str:
    """A URL fit for a message: no password."""
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError
    except ImportError:
        return url.split("@")[-1]
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy can parse: show what follows any credentials
        return url.split("@")[-1]


# -------------------------------------------------------------------------------------------------- the schema


def _tables(version: int = HISTORY_VERSION):
    from sqlalchemy import JSON, Boolean, Column, Float, ForeignKey, Integer, MetaData, String, Table, Text

    md = MetaData()
    meta = Table("llmbench_meta", md, Column("key", String(64), primary_key=True), Column("value", Text))
    result_cols: list[Any] = [
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("sha256", String(64), nullable=False, unique=True),  # the result file's (or record's) content hash
        Column("kind", String(16), nullable=False, index=True),  # run | ab | sweep | scan | load | quality
        Column("recorded_at", String(32), nullable=False),
        Column("created_at", String(32)),  # when it was measured
        Column("llmbench_version", String(32)),
        Column("commit", String(64), index=True),  # the measured code (ab: the head's)
        Column("branch", String(255)),
        Column("dirty", Boolean),
        Column("machine_id", String(16), index=True),
        Column("machine", JSON),
        Column("config_hash", String(16), index=True),
        Column("config", JSON),
        Column("prompt_sha256", String(64)),
        Column("label", String(255)),  # a sweep setup, a scan point, a load rate
        Column("model", Text),
        Column("engine", String(32)),
        Column("path", Text),
        Column("extra", JSON),
    ]
    metric_cols: list[Any] = [
        Column("result_id", Integer, ForeignKey("llmbench_results.id", ondelete="CASCADE"), nullable=False, index=True),
        Column("metric", String(64), nullable=False),
        Column("stat", String(8), nullable=False),
        Column("value", Float),
        Column("ci_low", Float),
        Column("ci_high", Float),
        Column("n", Integer),
    ]
    if version >= 2:
        result_cols += [Column(c, String(64)) for c in _V2_RESULT_COLUMNS]
        metric_cols += [Column(c, Float) for c in _V2_METRIC_COLUMNS]
    results = Table("llmbench_results", md, *result_cols)
    metrics = Table("llmbench_metrics", md, *metric_cols)
    return md, meta, results, metrics


@dataclass
class Result:
    """One result to record (see :mod:`llmbench.records`, which builds them)."""

    sha256: str
    kind: str
    created_at: str | None
    llmbench_version: str | None
    machine_id: str
    machine: dict[str, Any]
    config_hash: str
    config: dict[str, Any]
    prompt_sha256: str | None
    model: str | None
    engine: str | None
    path: str | None
    metrics: list[dict[str, Any]]
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    label: str | None = None
    base_commit: str | None = None
    head_commit: str | None = None
    anchor_ref: str | None = None
    head_ref: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class History:
    """A connection to one history database, created or upgraded on open."""

    def __init__(self, url: str) -> None:
        require("--history", "history", "sqlalchemy")
        from sqlalchemy import create_engine, event

        self.url = url
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            path = url.split(":///", 1)[1] if ":///" in url else ""
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        elif "psycopg" in url:
            require("--history postgresql://...", "history", "psycopg")
        kwargs: dict[str, Any] = {"future": True}
        if self.sqlite:
            kwargs["connect_args"] = {"timeout": 60}  # another writer holds the lock: wait, don't fail
        else:
            kwargs["connect_args"] = {"connect_timeout": 10}
        try:
            self.engine = create_engine(url, **kwargs)
        except Exception as e:  # a malformed URL, a missing driver
            raise UserError(f"history database {shown(url)}: {_first(e)}") from None
        if self.sqlite:

            @event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
                cur.close()

        self.md, self.meta, self.results, self.metrics = _tables()
        self._open()

    def _open(self) -> None:
        """Create the tables, or check (and upgrade) an existing database's version."""
        from sqlalchemy import inspect, select
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                names = set(inspect(conn).get_table_names())
                if "llmbench_results" not in names:
                    self.md.create_all(conn, checkfirst=True)
                    conn.execute(self.meta.insert().values(key="schema_version", value=str(HISTORY_VERSION)))
                    return
                row = conn.execute(select(self.meta.c.value).where(self.meta.c.key == "schema_version")).first()
                version = int(row[0]) if row else 1
                if version > HISTORY_VERSION:
                    raise UserError(
                        f"history database {shown(self.url)} has schema version {version}; this llmbench "
                        f"knows up to {HISTORY_VERSION}: upgrade llmbench"
                    )
                if version < HISTORY_VERSION:
                    self._upgrade(conn, version)
        except UserError:
            raise
        except SQLAlchemyError as e:
            if "already exists" in str(e) or "UNIQUE constraint failed: llmbench_meta" in str(e):
                return self._open()  # another process created it at the same moment: read it now
            raise UserError(f"history database {shown(self.url)}: {_first(e)}") from None

    def _upgrade(self, conn: Any, version: int) -> None:
        """Bring an older database to HISTORY_VERSION, step by step, in one transaction."""
        from sqlalchemy import text, update

        if version < 2:
            for col in _V2_RESULT_COLUMNS:
                conn.execute(text(f"ALTER TABLE llmbench_results ADD COLUMN {col} VARCHAR(64)"))
            for col in _V2_METRIC_COLUMNS:
                conn.execute(text(f"ALTER TABLE llmbench_metrics ADD COLUMN {col} FLOAT"))
        done = conn.execute(
            update(self.meta).where(self.meta.c.key == "schema_version").values(value=str(HISTORY_VERSION))
        )
        if done.rowcount == 0:
            conn.execute(self.meta.insert().values(key="schema_version", value=str(HISTORY_VERSION)))

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                yield conn
        except UserError:
            raise
        except SQLAlchemyError as e:
            raise UserError(f"history database {shown(self.url)}: {_first(e)}") from None

    # -- writing ------------------------------------------------------------------------------------------------

    def add(self, result: Result) -> tuple[int, bool]:
        """Record ``result``; (its id, True) when new, (the existing id, False) when a result with the same sha256
        is there already (adding is idempotent)."""
        from sqlalchemy import select
        from sqlalchemy.exc import IntegrityError

        from llmbench.schema import utc_now

        row = {
            k: getattr(result, k)
            for k in (
                "sha256",
                "kind",
                "created_at",
                "llmbench_version",
                "commit",
                "branch",
                "dirty",
                "machine_id",
                "machine",
                "config_hash",
                "config",
                "prompt_sha256",
                "label",
                "model",
                "engine",
                "path",
                "extra",
                *_V2_RESULT_COLUMNS,
            )
        }
        row["recorded_at"] = utc_now()
        existing = self.find(result.sha256)
        if existing is not None:
            return existing, False
        try:
            with self._tx() as conn:
                rid = conn.execute(self.results.insert().values(**row)).inserted_primary_key[0]
                if result.metrics:
                    conn.execute(self.metrics.insert(), [{**m, "result_id": rid} for m in result.metrics])
            return int(rid), True
        except UserError as e:
            # two processes adding the same file at once: the other one won, which is the same outcome
            if "UNIQUE" in str(e) or "duplicate key" in str(e):
                with self._tx() as conn:
                    rid = conn.execute(select(self.results.c.id).where(self.results.c.sha256 == result.sha256)).scalar()
                return int(rid), False
            raise
        except IntegrityError:  # pragma: no cover - _tx turns it into a UserError
            raise

    def find(self, sha256: str) -> int | None:
        from sqlalchemy import select

        with self._tx() as conn:
            rid = conn.execute(select(self.results.c.id).where(self.results.c.sha256 == sha256)).scalar()
        return int(rid) if rid is not None else None

    def prune(self, keep: int, machine: str | None = None) -> int:
        """Keep the newest ``keep`` results (per machine and config); the number deleted."""
        from sqlalchemy import delete, select

        with self._tx() as conn:
            q = select(
                self.results.c.id, self.results.c.machine_id, self.results.c.config_hash, self.results.c.kind
            ).order_by(self.results.c.recorded_at.desc(), self.results.c.id.desc())
            if machine:
                q = q.where(self.results.c.machine_id == machine)
            seen: dict[tuple, int] = {}
            drop = []
            for rid, mid, cfg, kind in conn.execute(q):
                key = (mid, cfg, kind)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > keep:
                    drop.append(rid)
            for i in range(0, len(drop), 500):
                chunk = drop[i : i + 500]
                conn.execute(delete(self.metrics).where(self.metrics.c.result_id.in_(chunk)))
                conn.execute(delete(self.results).where(self.results.c.id.in_(chunk)))
        return len(drop)

    # -- reading ------------------------------------------------------------------------------------------------

    def list(
        self,
        *,
        since: str | None = None,
        machine: str | None = None,
        config: str | None = None,
        commit: str | None = None,
        kind: str | None = None,
        anchor: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Results, oldest first, filtered; each a dict of its columns (without metrics)."""
        from sqlalchemy import select

        r = self.results
        q = select(r).order_by(r.c.created_at, r.c.id)
        if since:
            q = q.where(r.c.created_at >= since)
        if machine:
            q = q.where(r.c.machine_id.startswith(machine))
        if config:
            q = q.where(r.c.config_hash.startswith(config))
        if commit:
            q = q.where((r.c.commit.startswith(commit)) | (r.c.head_commit.startswith(commit)))
        if kind:
            q = q.where(r.c.kind == kind)
        if anchor:
            q = q.where(r.c.anchor_ref == anchor)
        with self._tx() as conn:
            rows = [dict(x._mapping) for x in conn.execute(q)]
        return rows[-limit:] if limit else rows

    def get(self, rid: int) -> dict[str, Any] | None:
        """One result with its metrics (``metrics``: a list of dicts)."""
        from sqlalchemy import select

        with self._tx() as conn:
            row = conn.execute(select(self.results).where(self.results.c.id == rid)).first()
            if row is None:
                return None
            out = dict(row._mapping)
            out["metrics"] = [
                dict(m._mapping) for m in conn.execute(select(self.metrics).where(self.metrics.c.result_id == rid))
            ]
        return out

    def series(self, metric: str, stat: str, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The (metric, stat) row of each result in ``ids``."""
        from sqlalchemy import select

        m = self.metrics
        out: dict[int, dict[str, Any]] = {}
        with self._tx() as conn:
            for i in range(0, len(ids), 500):
                q = select(m).where(m.c.result_id.in_(list(ids[i : i + 500])), m.c.metric == metric, m.c.stat == stat)
                for row in conn.execute(q):
                    out[int(row.result_id)] = dict(row._mapping)
        return out

    def version(self) -> int:
        from sqlalchemy import select

        with self._tx() as conn:
            return int(conn.execute(select(self.meta.c.value).where(self.meta.c.key == "schema_version")).scalar())

    def close(self) -> None:
        self.engine.dispose()


def open_history(url: str | None) -> History | None:
    """The history at ``url`` (``--history``/``LLMBENCH_HISTORY``, see :func:`resolve_url`), or None."""
    resolved = resolve_url(url)
    return History(resolved) if resolved else None


def create_v1(url: str) -> None:
    """A version-1 database (before ab records), as llmbench 0.3.0's first history wrote it: for the upgrade test
    and for anyone checking an upgrade by hand."""
    from sqlalchemy import create_engine

    md, meta, _results, _metrics = _tables(version=1)
    engine = create_engine(url)
    with engine.begin() as conn:
        md.create_all(conn)
        conn.execute(meta.insert().values(key="schema_version", value="1"))
    engine.dispose()


def _first(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line[:240]


def dumps(obj: Any) -> str:
    """JSON for the terminal's --format json."""
    return json.dumps(obj, indent=2, default=str)
