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
  3 (llmbench 0.3.0): ``results.run_id``, unique where not null (NULLs are distinct in both SQLite's and
    PostgreSQL's unique indexes): a run is recorded once whatever its bytes (a resumed or re-serialized file),
    and a partial run (``extra.complete`` false) is replaced, metrics and all, by its complete file. A run's id
    is its ``run_id``; an ab pair's ``ab:BASE+HEAD``. Results recorded before version 3 have none (the upgrade
    leaves them NULL): only their sha256 keeps them from being recorded twice.

Concurrency: every write (creating the schema, upgrading it, adding, pruning) is one transaction under a lock that
all llmbench processes take: SQLite's write lock from the start (``BEGIN IMMEDIATE``, with the sqlite3 driver's own
transaction handling turned off so that DDL is part of the transaction), PostgreSQL's transaction-scoped advisory
lock ``HISTORY_LOCK`` (DDL is transactional there). Any number of processes may first-use or upgrade one database
at once: one creates it, the others wait and then find it done.

Why one module of 600-odd lines: the schema, its upgrades and every operation on it share one connection and
one lock discipline; each operation is a short method of :class:`History`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError, require

HISTORY_VERSION = 3
KINDS = ("run", "ab", "sweep", "scan", "load", "quality")
HISTORY_LOCK = int.from_bytes(b"llmbench", "big")  # PostgreSQL advisory lock key (per database)

# Version 1's columns; version 2 added the ab/anchor columns, version 3 the run id (see the module docstring).
_V2_RESULT_COLUMNS = ("base_commit", "head_commit", "anchor_ref", "head_ref")
_V2_METRIC_COLUMNS = ("change_pct", "change_ci_low", "change_ci_high", "mdc_pct")
_RUN_ID_INDEX = "ux_llmbench_results_run_id"
_RESULT_FIELDS = (
    *("sha256", "kind", "created_at", "llmbench_version", "commit", "branch", "dirty", "machine_id", "machine"),
    *("config_hash", "config", "prompt_sha256", "label", "model", "engine", "path", "extra", "run_id"),
    *_V2_RESULT_COLUMNS,
)


def default_url() -> str:
    """The embedded SQLite file: ``$XDG_DATA_HOME/llmbench/history.db`` (~/.local/share)."""
    from llmbench.core.settings import settings

    return f"sqlite:///{settings().data_root / 'history.db'}"


def resolve_url(url: str | None) -> str | None:
    """``--history``'s value -> a database URL: None (and no ``LLMBENCH_HISTORY``): no history; ``default``: the
    SQLite file; a path ending .db/.sqlite: that SQLite file; otherwise a SQLAlchemy URL (sqlite:///...,
    postgresql://...). UserError for what is none of these, and for an in-memory SQLite database (it would keep
    nothing)."""
    if url is None:
        from llmbench.core.settings import settings

        url = settings().history  # LLMBENCH_HISTORY ("" is unset)
    if url is None:
        return None
    value = url.strip()
    if value in ("", "default", "1", "true", "yes"):
        return default_url()
    if "://" not in value:
        if value.endswith((".db", ".sqlite", ".sqlite3")):
            return f"sqlite:///{Path(value).expanduser().resolve()}"
        raise UserError(
            f"--history {shown(value)}: expected a database URL (sqlite:///FILE.db, postgresql://...) or a .db file"
        )
    scheme = value.split("://", 1)[0].split("+", 1)[0]
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise UserError(f"--history {scheme}://...: llmbench keeps history in SQLite or PostgreSQL")
    if scheme == "sqlite" and sqlite_path(value) is None:
        raise UserError(f"--history {shown(value)}: an in-memory database keeps nothing; give a file")
    if scheme == "postgres":  # libpq's spelling; SQLAlchemy's is postgresql
        value = "postgresql" + value[len("postgres") :]
    if value.startswith("postgresql://"):
        value = "postgresql+psycopg://" + value[len("postgresql://") :]  # psycopg 3, the maintained driver
    if scheme != "sqlite" and "@" in (_parsed_host(value) or ""):  # "u:p@ss@h": the driver would try host "ss@h"
        raise UserError(f"--history {shown(value)}: write an '@' in the password as %40 (the URL is %-encoded)")
    return value


def _parsed_host(url: str) -> str | None:
    try:
        from sqlalchemy.engine import make_url
    except ImportError:
        return None
    try:
        return make_url(url).host
    except Exception:  # not a URL SQLAlchemy can parse: History says so, in one line
        return None


def sqlite_path(url: str) -> str | None:
    """The file of a sqlite:// URL; None for an in-memory database (``sqlite://``, ``:memory:``)."""
    rest = url.split("://", 1)[1] if "://" in url else url
    path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel.db -> rel.db; sqlite:////abs -> /abs
    path = path.split("?", 1)[0]
    return None if path in ("", ":memory:") or path.startswith("file::memory:") else path


_PASSWORD_PARAM = re.compile(r"(?i)((?:^|[?&;\s])(?:password|passwd|pass|sslpassword)=)[^&;\s]*")


def shown(url: str) -> str:
    """A URL (or what was given as one) fit for a message: no password, neither in the credentials, however
    they are spelled (an unencoded ``@`` in the password included), nor in the query (``?password=``)."""
    scheme, sep, rest = url.partition("://")
    if scheme.startswith("sqlite"):
        return url  # a file's path: no credentials ('@' and ':' are the path's)
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        cut = rest.rfind("@")  # a password may hold '@', ':' or '/': all before the last '@' are credentials
        credentials, host = rest[:cut], rest[cut + 1 :]
        if ":" in credentials or not sep:
            user = credentials.split(":", 1)[0] if sep else ""
            rest = f"{user}:***@{host}" if user else f"***@{host}"
    return _PASSWORD_PARAM.sub(r"\1***", f"{scheme}{sep}{rest}")


def _secrets(url: str) -> list[str]:
    """The password of ``url`` in every spelling a message could carry it in (as given, %-decoded)."""
    from urllib.parse import unquote

    found: list[str] = []
    rest = url.partition("://")[2] or url
    if "@" in rest:
        credentials = rest[: rest.rfind("@")]
        if ":" in credentials:
            found.append(credentials.split(":", 1)[1])
    found += [m.group(0).split("=", 1)[1] for m in _PASSWORD_PARAM.finditer(url)]
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's message, which may quote the DSN) with ``url``'s password replaced by ***."""
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def since_time(text: str | None) -> str | None:
    """``--since``: ``30d``/``12h``/``2w`` -> the UTC time that long ago; a date or ISO time (a zone converted to
    UTC, none taken as UTC) -> that time, as results' times are written (``2026-11-30T00:00:00Z``), so that the
    database compares like with like. UserError for anything else, a zero span or one past the calendar."""
    from datetime import datetime, timedelta, timezone

    if text is None:
        return None
    value = text.strip()
    m = re.fullmatch(r"(\d+)\s*([hdw])", value)
    if m:
        hours = int(m.group(1)) * {"h": 1, "d": 24, "w": 168}[m.group(2)]
        if hours < 1:
            raise UserError(f"--since {text}: a span of at least 1 hour (30d, 12h, 2w)")
        try:
            then = datetime.now(timezone.utc) - timedelta(hours=hours)
        except OverflowError:
            raise UserError(f"--since {text}: longer ago than the calendar goes") from None
        return then.isoformat(timespec="seconds").replace("+00:00", "Z")
    try:
        when = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except ValueError:
        raise UserError(f"--since {text}: expected 30d, 12h, 2w or a date (2026-11-30)") from None
    when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


# -------------------------------------------------------------------------------------------------- the schema


def _tables(version: int = HISTORY_VERSION):
    from sqlalchemy import JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

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
    if version >= 3:
        result_cols.append(Column("run_id", Text))
    results = Table("llmbench_results", md, *result_cols)
    if version >= 3:
        Index(_RUN_ID_INDEX, results.c.run_id, unique=True)
    metrics = Table("llmbench_metrics", md, *metric_cols)
    return md, meta, results, metrics


@dataclass
class Result:
    """One result to record (see :mod:`llmbench.history.records`, which builds them)."""

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
    run_id: str | None = None  # the run's own id (ab: "ab:BASE+HEAD"); None for a driver's summary values
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """False for a partial run (interrupted, or still being resumed)."""
        return is_complete(self.extra)


def lock_timeout_s() -> float:
    """How long a writer waits for another writer's lock: ``LLMBENCH_HISTORY_TIMEOUT_S`` seconds, else 60
    (UserError when malformed)."""
    from llmbench.core.settings import settings

    return settings().history_timeout_s


def _wal(cur: Any, timeout_s: float) -> None:
    """``PRAGMA journal_mode=WAL``, tried again while the database is locked, up to ``timeout_s``. Switching a
    rollback-journal file (a new one, or an older llmbench's) to WAL takes an exclusive lock; when several
    processes open it at the same moment, each holding a shared lock, SQLite answers "database is locked" at once
    instead of calling the busy handler (it would deadlock), so the busy timeout never applies (SQLite's busy
    handler docs). The likely cause of a test's 8 first uses at once failing so on a fast CPU; not reproduced
    on demand."""
    import random
    import sqlite3
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))  # apart, so the next tries don't meet again


def is_complete(extra: dict[str, Any] | None) -> bool:
    """A recorded result's ``extra`` -> whether it is complete (records without the notion are)."""
    return (extra or {}).get("complete") is not False


class History:
    """A connection to one history database, created (``create``) or upgraded on open.

    ``create=False`` (the reading commands) refuses a database that holds no history, in one line, instead of
    creating one: a mistyped path would otherwise "work" and show an empty history."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        require("--history", "history", "sqlalchemy")
        from sqlalchemy import create_engine, event

        self.url = url
        self.sqlite = url.startswith("sqlite")
        path = sqlite_path(url) if self.sqlite else None
        if self.sqlite:
            if path is None:
                raise UserError(f"history database {shown(url)}: an in-memory database keeps nothing; give a file")
            if not create and not Path(path).expanduser().is_file():
                raise UserError(f"no history database at {path}")
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        elif "psycopg" in url:
            require("--history postgresql://...", "history", "psycopg")
        kwargs: dict[str, Any] = {"future": True}
        self.timeout_s = lock_timeout_s()
        if self.sqlite:
            kwargs["connect_args"] = {"timeout": self.timeout_s}  # another writer holds the lock: wait, don't fail
        else:
            kwargs["connect_args"] = {"connect_timeout": 10}
        try:
            self.engine = create_engine(url, **kwargs)
        except Exception as e:  # a malformed URL, a missing driver
            raise UserError(f"history database {shown(url)}: {self._first(e)}") from None
        if self.sqlite:

            @event.listens_for(self.engine, "connect")
            def _connect(dbapi_conn: Any, _record: Any) -> None:
                # SQLAlchemy's documented pysqlite recipe: the driver's own BEGIN (deferred, and none before DDL)
                # is turned off and the "begin" event below emits ours, so CREATE/ALTER are part of the transaction
                dbapi_conn.isolation_level = None
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                _wal(cur, self.timeout_s)  # readers never block the writer, nor it them
                cur.close()

            @event.listens_for(self.engine, "begin")
            def _begin(conn: Any) -> None:
                # a writer takes the write lock at once: two writers never both read "no tables" and then create
                conn.exec_driver_sql(
                    "BEGIN IMMEDIATE" if conn.get_execution_options().get("llmbench_write") else "BEGIN"
                )

        self.md, self.meta, self.results, self.metrics = _tables()
        try:
            self._open(create)
        except BaseException:
            self.engine.dispose()
            raise

    def _first(self, e: BaseException) -> str:
        return scrub(_first(e), self.url)

    def _state(self, conn: Any) -> int | None:
        """The schema version found (None: no llmbench tables; 1 for a table without its version row)."""
        from sqlalchemy import inspect, select

        if "llmbench_results" not in set(inspect(conn).get_table_names()):
            return None
        row = conn.execute(select(self.meta.c.value).where(self.meta.c.key == "schema_version")).first()
        return int(row[0]) if row else 1

    def _open(self, create: bool) -> None:
        """Create the tables, or check (and upgrade) an existing database's version: read first (a current
        database, the common case, takes no lock), then, if there is work, under the write lock, reading again."""
        with self._tx() as conn:
            version = self._state(conn)
        if version == HISTORY_VERSION:
            return
        if version is None and not create:
            where = sqlite_path(self.url) if self.sqlite else shown(self.url)
            raise UserError(f"no history database at {where}: it holds no llmbench history")
        with self._tx(write=True) as conn:
            version = self._state(conn)  # another process may have created or upgraded it while we waited
            if version is None:
                self.md.create_all(conn, checkfirst=True)
                conn.execute(self.meta.insert().values(key="schema_version", value=str(HISTORY_VERSION)))
            elif version > HISTORY_VERSION:
                raise UserError(
                    f"history database {shown(self.url)} has schema version {version}; this llmbench "
                    f"knows up to {HISTORY_VERSION}: upgrade llmbench"
                )
            elif version < HISTORY_VERSION:
                self._upgrade(conn, version)

    def _upgrade(self, conn: Any, version: int) -> None:
        """Bring an older database to HISTORY_VERSION, step by step, in the caller's (locked) transaction."""
        from sqlalchemy import text, update

        if version < 2:
            for col in _V2_RESULT_COLUMNS:
                conn.execute(text(f"ALTER TABLE llmbench_results ADD COLUMN {col} VARCHAR(64)"))
            for col in _V2_METRIC_COLUMNS:
                conn.execute(text(f"ALTER TABLE llmbench_metrics ADD COLUMN {col} FLOAT"))
        if version < 3:
            conn.execute(text("ALTER TABLE llmbench_results ADD COLUMN run_id TEXT"))
            conn.execute(text(f"CREATE UNIQUE INDEX {_RUN_ID_INDEX} ON llmbench_results (run_id)"))
        done = conn.execute(
            update(self.meta).where(self.meta.c.key == "schema_version").values(value=str(HISTORY_VERSION))
        )
        if done.rowcount == 0:
            conn.execute(self.meta.insert().values(key="schema_version", value=str(HISTORY_VERSION)))

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[Any]:
        """One transaction; ``write``: under the lock every llmbench writer takes (see the module docstring).
        Errors of the database become one-line UserErrors without the URL's password."""
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.connect() as conn:
                if write and self.sqlite:
                    conn.execution_options(llmbench_write=True)  # read by the "begin" event: BEGIN IMMEDIATE
                with conn.begin():
                    if write and not self.sqlite:  # waits as long as SQLite's busy timeout, then fails in one line
                        conn.execute(text(f"SET LOCAL lock_timeout = {int(self.timeout_s * 1000)}"))
                        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": HISTORY_LOCK})
                    yield conn
        except UserError:
            raise
        except (SQLAlchemyError, ValueError, OSError) as e:  # ValueError/OSError: a URL the driver can't use
            raise UserError(f"history database {shown(self.url)}: {self._first(e)}") from None

    # -- writing ------------------------------------------------------------------------------------------------

    def add(self, result: Result) -> tuple[int, bool]:
        """Record ``result`` in one transaction (its metrics with it); (its id, True) when the history changed,
        (the existing id, False) when it is there already: the same bytes (sha256), or the same run (run id)
        recorded complete, or partial with as many requests. A partial run is replaced in place (same id),
        metrics and all, by a later, more complete copy of it."""
        try:
            return self._add(result)
        except UserError as e:
            if "UNIQUE" in str(e) or "duplicate key" in str(e):
                return self._add(result)  # a writer that takes no lock (an older llmbench) won: read its row
            raise

    def _add(self, result: Result) -> tuple[int, bool]:
        from sqlalchemy import delete, select, update

        r = self.results
        row = {k: getattr(result, k) for k in _RESULT_FIELDS}
        row["recorded_at"] = _utc_now()
        metrics = result.metrics
        with self._tx(write=True) as conn:
            rid = conn.execute(select(r.c.id).where(r.c.sha256 == result.sha256)).scalar()
            if rid is not None:
                return int(rid), False
            if result.run_id is not None:
                old = conn.execute(select(r.c.id, r.c.extra).where(r.c.run_id == result.run_id)).first()
                if old is not None:
                    if not _more_complete(result.extra, old.extra):
                        return int(old.id), False
                    conn.execute(update(r).where(r.c.id == old.id).values(**row))
                    conn.execute(delete(self.metrics).where(self.metrics.c.result_id == old.id))
                    if metrics:
                        conn.execute(self.metrics.insert(), [{**m, "result_id": old.id} for m in metrics])
                    return int(old.id), True
            rid = conn.execute(r.insert().values(**row)).inserted_primary_key[0]
            if metrics:
                conn.execute(self.metrics.insert(), [{**m, "result_id": rid} for m in metrics])
        return int(rid), True

    def find(self, sha256: str) -> int | None:
        """The id of the result recorded with this sha256, or None."""
        from sqlalchemy import select

        with self._tx() as conn:
            rid = conn.execute(select(self.results.c.id).where(self.results.c.sha256 == sha256)).scalar()
        return int(rid) if rid is not None else None

    def resolve(self, what: str, prefix: str) -> str:
        """A machine id or setup hash (``what``: machine, config) given by its start -> the one it names;
        UserError when none or several match (filtering by an ambiguous prefix would mix series)."""
        from sqlalchemy import select

        col = self.results.c.machine_id if what == "machine" else self.results.c.config_hash
        if not prefix.strip():
            raise UserError(f"--{what}: empty")
        with self._tx() as conn:
            found = sorted(
                x
                for x in conn.execute(select(col).where(col.startswith(prefix, autoescape=True)).distinct()).scalars()
                if x
            )
        if not found:
            raise UserError(f"--{what} {prefix}: no such {_WHAT[what]} in the history (see llmbench history list)")
        if len(found) > 1:
            shown_ids = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise UserError(f"--{what} {prefix} matches {len(found)} {_WHAT[what]}s ({shown_ids}): give more of it")
        return str(found[0])

    def prune(self, keep: int, machine: str | None = None) -> int:
        """Keep the newest-measured ``keep`` results of each series (machine, setup, kind, label, anchor); the
        number deleted. Newest by when they were measured, not recorded: a backlog added later is not "newer".
        An ab record that moved an anchor is kept: it links the anchors' series into one (trend --anchor)."""
        from sqlalchemy import delete, select

        if keep < 1:
            raise UserError(f"--keep must be at least 1, not {keep}")
        r = self.results
        mid = self.resolve("machine", machine) if machine is not None else None
        with self._tx(write=True) as conn:
            q = select(
                r.c.id, r.c.created_at, r.c.machine_id, r.c.config_hash, r.c.kind, r.c.label, r.c.anchor_ref, r.c.extra
            )
            if mid is not None:
                q = q.where(r.c.machine_id == mid)
            rows = sorted(conn.execute(q), key=lambda x: (x.created_at or "", x.id), reverse=True)
            seen: dict[tuple, int] = {}
            drop = []
            for x in rows:
                if (x.extra or {}).get("moves_anchor"):
                    continue
                key = (x.machine_id, x.config_hash, x.kind, x.label, x.anchor_ref)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > keep:
                    drop.append(x.id)
            for i in range(0, len(drop), 500):
                chunk = drop[i : i + 500]
                conn.execute(delete(self.metrics).where(self.metrics.c.result_id.in_(chunk)))
                conn.execute(delete(r).where(r.c.id.in_(chunk)))
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
        """Results, oldest first (by when they were measured), filtered; each a dict of its columns (without
        metrics). ``machine``, ``config`` and ``commit`` match by their start; ``limit``: the newest N."""
        from sqlalchemy import func, select

        if kind is not None and kind not in KINDS:
            raise UserError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
        if limit is not None and limit < 1:
            raise UserError(f"--limit must be at least 1, not {limit}")
        r = self.results
        q = select(r).order_by(func.coalesce(r.c.created_at, ""), r.c.id)  # NULLs first in SQLite and PostgreSQL
        if since is not None:
            q = q.where(r.c.created_at >= since)
        if machine is not None:
            q = q.where(r.c.machine_id.startswith(machine, autoescape=True))  # '_' and '%' are not wildcards
        if config is not None:
            q = q.where(r.c.config_hash.startswith(config, autoescape=True))
        if commit is not None:
            q = q.where(
                r.c.commit.startswith(commit, autoescape=True) | r.c.head_commit.startswith(commit, autoescape=True)
            )
        if kind is not None:
            q = q.where(r.c.kind == kind)
        if anchor is not None:
            q = q.where(r.c.anchor_ref == anchor)
        with self._tx() as conn:
            rows = [dict(x._mapping) for x in conn.execute(q)]
        return rows[-limit:] if limit is not None else rows

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
        """The database's schema version."""
        from sqlalchemy import select

        with self._tx() as conn:
            return int(conn.execute(select(self.meta.c.value).where(self.meta.c.key == "schema_version")).scalar())

    def close(self) -> None:
        """Close the connections."""
        self.engine.dispose()


_WHAT = {"machine": "machine", "config": "setup"}


def _more_complete(new: dict[str, Any] | None, old: dict[str, Any] | None) -> bool:
    """Whether a run's new copy replaces its recorded one: only a partial one is replaced, by a complete copy
    or a partial one with more requests (a resume in progress)."""
    if is_complete(old):
        return False
    if is_complete(new):
        return True
    return int((new or {}).get("requests") or 0) > int((old or {}).get("requests") or 0)


def open_history(url: str | None, *, create: bool = True) -> History | None:
    """The history at ``url`` (``--history``/``LLMBENCH_HISTORY``, see :func:`resolve_url`), or None."""
    resolved = resolve_url(url)
    return History(resolved, create=create) if resolved else None


def create_old(url: str, version: int) -> None:
    """A database of an older schema ``version``, as the llmbench that wrote it created it: for the upgrade tests
    and for anyone checking an upgrade by hand."""
    from sqlalchemy import create_engine

    md, meta, _results, _metrics = _tables(version=version)
    engine = create_engine(url)
    with engine.begin() as conn:
        md.create_all(conn)
        conn.execute(meta.insert().values(key="schema_version", value=str(version)))
    engine.dispose()


def create_v1(url: str) -> None:
    """A version-1 database (before ab records), as llmbench 0.3.0's first history wrote it."""
    create_old(url, 1)


def create_v2(url: str) -> None:
    """A version-2 database (ab records, no run ids)."""
    create_old(url, 2)


def _utc_now() -> str:
    """schema.utc_now's format (ISO 8601 UTC to the second), without importing the run schema (pydantic): a
    process that only records pays for SQLAlchemy alone."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _first(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line[:240]


def dumps(obj: Any) -> str:
    """JSON for the terminal's --format json."""
    return json.dumps(obj, indent=2, default=str)
