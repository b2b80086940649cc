"""Run files on disk: atomic snapshots, the append-only journal, the columns of a large run, reading (with a
killed run's journal merged).

A run is saved so that a crash at any instant loses at most the request in flight, in O(n) total work:
every finished request (or recorded failure) is one journal line carrying the run's id, and the whole
JSON is rewritten atomically on a geometric schedule. No torch here.

**One file, or JSON plus columns** (issue 61). A run whose requests hold up to :func:`columns_from` token
stamps (about 18 MB of JSON: every run of the shipped prompt sets, 4,000 requests of 256 tokens) is one version-1
JSON file, as every release wrote it: what a user shares and any older reader opens. Past the line, the requests
move into an Arrow IPC stream beside the JSON (:mod:`llmbench.results.columns`, schema version 2: the JSON names
the file with its rows and sha256), where a reader maps the columns it needs instead of parsing every stamp, and
the writer appends a batch per group commit instead of rewriting the file. ``llmbench convert`` moves a run
either way. While columns are written, each request is one journal line (written, not fsynced: a killed process
loses nothing the kernel has), and every :data:`GROUP_ROWS` requests or :data:`GROUP_S` seconds they are appended
to the stream as one batch and fsynced, and the journal emptied: a power loss loses at most the requests since the
last group commit.

Two writers never share a path. Every output is *claimed* before any slow work (:func:`claim`): an exclusive
``flock`` on a hidden sidecar (``.<name>.lock``, holding the writer's pid) held for the rest of the process, and
the existence check made while holding it, so a second run aimed at the same path is refused in one line however
close together the two start. The first write of a claimed new file is exclusive too (``link``: it fails if the
path appeared meanwhile, whoever made it), so an existing file is never replaced unless the user said
``--overwrite`` or ``--resume``. Default names are claimed the same way, so two runs started in the same second
get two files.

Why one module of 800-odd lines (over 600): the claim, the journal, the snapshots, the group commits to columns and
the readers (which merge a killed run's journal, check a run's columns file, and give a run from before the shape of
the wait its shape) are one on-disk contract; split, a reader could drift from what the writer writes. (The columns'
own format is :mod:`llmbench.results.columns`.)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmbench.core.errors import UserError, read_user_file
from llmbench.results.schema import (
    LOAD_VERSION,
    PAINT_VERSION,
    SCAN_VERSION,
    SCHEMA_VERSIONS,
    Columns,
    FailedRequest,
    RequestResult,
    RequestScalars,
    Run,
    RunScalars,
    llmbench_version,
)

_UMASK = os.umask(0)
os.umask(_UMASK)


def columns_from() -> int:
    """The line between one JSON file and JSON plus columns, in token stamps (see the module's docstring):
    ``LLMBENCH_COLUMNS_FROM``, 1,000,000 by default."""
    from llmbench.core.settings import settings

    return settings().columns_from


# A group commit of a run written as columns: this many requests, or this many seconds, whichever comes first
GROUP_ROWS = 1024
GROUP_S = 1.0


def stamps_of(run: Run) -> int:
    """The token stamps a run holds (its requests' and ab's one-token requests'): what the line is drawn on."""
    return sum(len(r.token_times_ms) for r in run.requests) + len(run.ttft_requests)


def save_run(run: Run, path: str | Path, *, columns: bool | None = None) -> None:
    """Write ``run`` to ``path`` atomically: a temp file in the same folder, fsync, then rename. A reader (or a
    crash at any instant) sees either the previous complete file or the new one.

    ``columns``: its requests in a columns file beside the JSON (schema version 2), or inline (version 1); None:
    by the line (:func:`columns_from`). The columns file is new, written before the JSON that names it;
    the one the replaced JSON named goes after.
    """
    path = Path(path)
    previous = named_sidecar(path)
    if columns if columns is not None else stamps_of(run) > columns_from():
        from llmbench.results.columns import ColumnWriter, sidecar_name

        writer = ColumnWriter(path.parent / sidecar_name(path), run.run_id)
        try:
            items = [*run.requests, *run.ttft_requests]
            for start in range(0, len(items), GROUP_ROWS * 4):  # bounded memory: a batch at a time
                writer.add(items[start : start + GROUP_ROWS * 4], sync=False)
            ref = writer.close()
            write_atomic(path, dumped(run, ref))
        except BaseException:
            writer.abandon()
            raise
    else:
        ref = None
        write_atomic(path, dumped(run, None))
    if previous is not None and (ref is None or previous != ref.file):
        with contextlib.suppress(OSError):  # the JSON no longer names it: a stale file is harmless
            (path.parent / previous).unlink()


def convert_run(source: str | Path, output: str | Path, *, columns: bool) -> Run:
    """``llmbench convert``: the run at ``source`` (either form; a killed run's journal merged) written to
    ``output`` (claimed by the caller) as one version-1 JSON file, or as JSON plus columns; the run, as written."""
    run = load_run(source)
    save_run(run, output, columns=columns)
    return run


def dumped(run: Run, columns: Columns | None) -> bytes:
    """The run's JSON: version 1 with its requests inline, or version 2 naming ``columns`` (its lists empty);
    version 3, either way, for a workload of tool calls (``config.tools``: an answer may have no text, its
    ``ttft_ms`` null, which an older reader would refuse unclearly)."""
    tools = run.config.tools is not None
    if columns is None:
        shell = run.model_copy(update={"schema_version": 3 if tools else 1, "columns": None})
    else:
        shell = run.model_copy(update={"schema_version": 3 if tools else 2, "columns": columns, "requests": [],
                                       "ttft_requests": []})  # fmt: skip
    return shell.model_dump_json(exclude_none=False).encode("utf-8")


def named_sidecar(path: str | Path) -> str | None:
    """The columns file the run JSON at ``path`` names (None: none, or no such file). Read from the file's head:
    ``columns`` comes before the setup in every JSON llmbench writes."""
    import re

    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    found = re.search(rb'"columns":\{"file":"([A-Za-z0-9._-]+\.arrow)"', head)
    return found.group(1).decode() if found else None


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync and rename.

    The first write of a path claimed as new (:func:`claim` without ``replace``) links instead of renaming: it
    fails, keeping what is there, if the path appeared since the claim.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; a result file is as readable as any other
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        held = _claims.get(_key(path))
        if held is not None and held.fresh:
            try:
                os.link(tmp, path)  # exclusive: never replaces a file that appeared after the claim
            except FileExistsError:
                raise UserError(f"output {path} was created by someone else while this run measured; it is left "
                                "as it was: choose another -o") from None  # fmt: skip
            finally:
                Path(tmp).unlink(missing_ok=True)
            held.fresh = False
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------------------------- claiming outputs


class _Claim:
    """A path this process holds: the open, locked sidecar, and whether the path must still be created."""

    def __init__(self, fd: int, lock: Path, fresh: bool) -> None:
        self.fd, self.lock, self.fresh = fd, lock, fresh
        self.pid = os.getpid()  # a forked child inherits the dict, not the claim: it must not unlink the lock


_claims: dict[Path, _Claim] = {}


def _key(path: Path) -> Path:
    return Path(os.path.abspath(path))


def lock_path(path: str | Path) -> Path:
    """The sidecar a writer of ``path`` holds locked: ``.<name>.lock`` beside it."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


def _lock(lock: Path) -> int | None:
    """The fd of ``lock``, exclusively flocked by this process; None when another process holds it.

    The sidecar may be unlinked by its last holder between our open and our flock: then the inode we locked is
    no longer the one at the path, and we try again on the new one.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock; the exclusive first write still protects the file
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    import fcntl

    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _holder(lock: Path) -> str:
    try:
        pid = lock.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def claim(path: str | Path, *, replace: bool = False) -> Path:
    """Hold ``path`` for this process's writes until it exits (or :func:`release`); UserError when another
    llmbench process holds it, or when it exists and ``replace`` (``--overwrite``, ``--resume``) is not given.

    Claiming a path this process holds already is a no-op. The lock is an ``flock``: the kernel drops it when
    the process dies, however it dies, so a killed run never blocks the next one.
    """
    p = Path(path)
    key = _key(p)
    if key in _claims:
        return p
    columns_from()  # a malformed LLMBENCH_COLUMNS_FROM is one line now, not after the first request is measured
    lock = lock_path(p)
    try:
        fd = _lock(lock)
    except OSError as e:
        raise UserError(f"cannot write to {p.parent}: {e.strerror or e}") from None
    if fd is None:
        raise UserError(f"output {p} is being written by another llmbench process{_holder(lock)}; choose another "
                        "-o, or wait for it to finish")  # fmt: skip
    if p.exists() and not replace:
        lock.unlink(missing_ok=True)  # we hold it, so unlinking is safe (see _lock), and leaves no litter
        os.close(fd)
        raise UserError(f"output {p} already exists; choose another -o or pass --overwrite")
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _claims[key] = _Claim(fd, lock, fresh=not p.exists())
    return p


def release(path: str | Path) -> None:
    """Give up this process's claim on ``path`` (the lock file goes; unlinked while still locked, so no other
    process can lock the old inode and think it holds the path)."""
    held = _claims.pop(_key(Path(path)), None)
    if held is not None and held.pid == os.getpid():
        with contextlib.suppress(OSError):  # a folder made read-only meanwhile: a stale lock file is harmless
            held.lock.unlink(missing_ok=True)
        os.close(held.fd)


def _release_all() -> None:
    for key in list(_claims):
        release(key)


atexit.register(_release_all)


def journal_path(path: str | Path) -> Path:
    """The append-only sidecar of a run JSON: one finished request a line, until the run is compacted."""
    p = Path(path)
    return p.with_name(p.name + ".journal")


def journal_line(run_id: str, item: RequestResult | FailedRequest) -> bytes:
    """One journal line: ``{"run_id": ..., "request": {...}}`` or ``{"run_id": ..., "failed": {...}}``."""
    kind = "request" if isinstance(item, RequestResult) else "failed"
    return f'{{"run_id":"{run_id}","{kind}":{item.model_dump_json()}}}\n'.encode()


class RunWriter:
    """Saves a run so that a crash at any instant loses at most the request in flight, in O(n) total work.

    One JSON file (under the line, :func:`columns_from`): every finished request or recorded failure is
    appended to ``<path>.journal`` (one JSON line with the run's id, fsync): O(1) each. The full JSON is rewritten
    atomically (a *snapshot*) after each of the first ``always`` requests, then whenever the requests since the
    last snapshot reach ``growth`` (10%) of its size: snapshot sizes grow geometrically, so all of them together
    write about 1 + 1/growth = 11 times the final file, not n times. Each snapshot empties the journal.

    Past the line (or with ``columns``), the requests so far move into a columns file, and from then on each is a
    journal line written without fsync and a group commit appends them to the columns (see the module's
    docstring); the JSON, small now, is rewritten only when a failure must be kept.

    ``close()`` writes the final JSON and removes the journal. Readers (:func:`load_run`, ``--resume``) merge a
    journal left by a killed run.
    """

    def __init__(
        self,
        path: str | Path,
        run: Run,
        *,
        growth: float = 0.1,
        always: int = 20,
        clock: Callable[[], float] | None = None,
        columns: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self.journal = journal_path(path)
        self.growth, self.always = growth, always
        self._clock = clock or time.perf_counter
        self._last_n = 0
        self.snapshot_seconds = 0.0
        self.snapshots = 0
        self.journal_seconds = 0.0
        self.group_commits = 0
        self._auto = columns is None
        self._line = columns_from() if self._auto else 0
        self._stamps = stamps_of(run)
        self._previous = named_sidecar(self.path)  # a resumed run's columns: rewritten into a new file
        self._columns: Any = None  # the ColumnWriter, once the requests are columns
        self._ref: Columns | None = None
        self._pending: list[RequestResult] = []
        self._failed_since = False
        self._committed_at = self._clock()
        self._jfd: int | None = None
        self._broken: OSError | None = None  # a group commit that failed: the stream may end mid-batch
        if columns or (self._auto and self._stamps > self._line):
            self._to_columns(run)
        else:
            self.snapshot(run)

    @property
    def columns(self) -> bool:
        """True once the requests are written as columns."""
        return self._columns is not None

    def snapshot(self, run: Run) -> None:
        """Rewrite the whole JSON atomically and empty the journal (it is all in the snapshot now). Written as
        columns: every request so far committed first, then the JSON that names the file."""
        t = self._clock()
        if self._columns is not None:
            self._commit(run, json=True)
        else:
            save_run(run, self.path, columns=False)
            with open(self.journal, "wb") as f:
                os.fsync(f.fileno())
        self._last_n = len(run.requests) + len(run.ttft_requests) + len(run.failed_requests)
        self.snapshot_seconds += self._clock() - t
        self.snapshots += 1

    def add(self, run: Run, item: RequestResult | FailedRequest, summarize: Callable[[], None] | None = None) -> bool:
        """Record ``item`` (already appended to ``run``); returns True when a snapshot (or a group commit) was
        written. ``summarize`` refreshes ``run.summary`` before a snapshot (it is O(n), so only then; a run
        written as columns gets its summary at close)."""
        if self._columns is not None:
            return self._add_column(run, item)
        t = self._clock()
        with open(self.journal, "ab") as f:
            f.write(journal_line(run.run_id, item))
            f.flush()
            os.fsync(f.fileno())
        self.journal_seconds += self._clock() - t
        if isinstance(item, RequestResult):
            self._stamps += len(item.token_times_ms)
            if self._auto and self._stamps > self._line:
                self._to_columns(run)
                return True
        n = len(run.requests) + len(run.ttft_requests) + len(run.failed_requests)
        if n <= self.always or n - self._last_n >= self.growth * self._last_n:
            if summarize:
                summarize()
            self.snapshot(run)
            return True
        return False

    def _to_columns(self, run: Run) -> None:
        """Every request so far into a new columns file, the JSON naming it (version 2), the journal emptied."""
        from llmbench.results.columns import ColumnWriter, sidecar_name

        self._columns = ColumnWriter(self.path.parent / sidecar_name(self.path), run.run_id)
        self._ref = Columns(file=self._columns.path.name)  # rows and sha256 come at close
        self._pending = [*run.requests, *run.ttft_requests]
        self._commit(run, json=True)
        self._jfd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666 & ~_UMASK)
        if self._previous is not None and self._previous != self._ref.file:
            with contextlib.suppress(OSError):  # its requests are all in the new file, which the JSON names
                (self.path.parent / self._previous).unlink()
        self._previous = None

    def _add_column(self, run: Run, item: RequestResult | FailedRequest) -> bool:
        t = self._clock()
        assert self._jfd is not None
        if self._broken is not None:  # a journal line or a batch that failed: nothing more after it
            raise self._broken
        line = memoryview(journal_line(run.run_id, item))
        try:
            while line:  # a full disk may take part of a line without an error: the rest, or the error, follows
                line = line[os.write(self._jfd, line) :]  # the kernel has it: a killed process loses nothing
        except OSError as e:  # a torn last line: readers drop it (the request in flight)
            self._broken = e
            raise
        self.journal_seconds += self._clock() - t
        if isinstance(item, RequestResult):
            self._pending.append(item)
        else:
            self._failed_since = True  # a failure lives in the JSON: rewritten at the next group commit
        if len(self._pending) >= GROUP_ROWS or self._clock() - self._committed_at >= GROUP_S:
            self._commit(run, json=self._failed_since)
            return True
        return False

    def _commit(self, run: Run, *, json: bool) -> None:
        """A group commit: the pending requests appended to the columns and fsynced, the JSON rewritten when
        ``json`` (a failure since the last), then the journal emptied (what it held is durable elsewhere now)."""
        t = self._clock()
        assert self._columns is not None and self._ref is not None
        if self._broken is not None:  # nothing more is appended after a batch that may be cut: readers stop there
            raise self._broken
        try:
            for start in range(0, len(self._pending), GROUP_ROWS * 4):  # bounded memory: a batch at a time
                self._columns.add(self._pending[start : start + GROUP_ROWS * 4], sync=False)
            self._columns.sync()
        except OSError as e:  # a full disk: the journal still holds every request since the last commit
            self._broken = e
            raise
        self._pending = []
        if json:
            write_atomic(self.path, dumped(run, self._ref))
            self._failed_since = False
        if self._jfd is not None:
            os.ftruncate(self._jfd, 0)  # a power loss that brings lines back: readers skip what the columns hold
        else:
            with open(self.journal, "wb") as f:
                os.fsync(f.fileno())
        self._committed_at = self._clock()
        self.group_commits += 1
        self.snapshot_seconds += self._clock() - t

    def close(self, run: Run) -> None:
        """The final JSON; the journal goes."""
        if self._columns is not None:
            self._commit(run, json=False)
            self._ref = self._columns.close()
            write_atomic(self.path, dumped(run, self._ref))
            if self._jfd is not None:
                os.close(self._jfd)
                self._jfd = None
        else:
            save_run(run, self.path, columns=False)
        self.journal.unlink(missing_ok=True)


def merge_journal(run: Run, path: str | Path, *, resummarize: bool = False) -> int:
    """Add the requests and failures of ``path``'s journal (a killed run's) that the JSON lacks; returns how
    many. Every line must carry this run's id: a journal of another run is refused, never merged.

    A torn last line (the kill came mid-write) is the request in flight: dropped. Any other unreadable line is
    a :class:`UserError`. The summary is computed again when anything was added, or with ``resummarize``.
    """
    jp = journal_path(path)
    if not jp.is_file() and not resummarize:
        return 0
    data = jp.read_bytes() if jp.is_file() else b""
    lines = data.split(b"\n")
    have = {(r.prompt_index, r.repeat) for r in (*run.requests, *run.ttft_requests)}
    failed = {(f.prompt_index, f.repeat, f.session) for f in run.failed_requests}
    added = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = number == len(lines)  # the last line has no newline: it was being written when the run died
        item = _journal_item(jp, number, line, run.run_id, torn)
        if isinstance(item, RequestResult) and (item.prompt_index, item.repeat) not in have:
            (run.ttft_requests if item.ttft_only else run.requests).append(item)
            have.add((item.prompt_index, item.repeat))
            added += 1
        elif isinstance(item, FailedRequest) and (item.prompt_index, item.repeat, item.session) not in failed:
            run.failed_requests.append(item)
            failed.add((item.prompt_index, item.repeat, item.session))
            added += 1
    if added or resummarize:
        from llmbench.results.metrics import summarize

        old = run.summary
        run.summary = summarize(
            run.requests,
            run.load.decode_weight_bytes if run.load else None,
            old.roofline_mem_read_gbps if old else None,
            failed=len(run.failed_requests),
        )
    return added


def _journal_item(jp: Path, number: int, line: bytes, run_id: str, torn: bool) -> RequestResult | FailedRequest | None:
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        if obj.get("run_id") != run_id:
            raise UserError(
                f"{jp} belongs to run {obj.get('run_id')!r}, not to {jp.name.removesuffix('.journal')} "
                f"(run {run_id}): it was left by another run; move it away"
            )
        if "request" in obj:
            return RequestResult.model_validate(obj["request"])
        return FailedRequest.model_validate(obj["failed"])
    except (ValueError, KeyError, ValidationError):
        if torn:
            return None
        raise UserError(f"{jp}:{number}: not a journal line of this run (damaged?); move the journal away") from None


def load_run(
    path: str | Path, *, scalars_only: bool = False, request_fields: tuple[str, ...] = (), requests: bool = True
) -> Run:
    """Read and validate a run JSON (and its columns file, version 2); :class:`UserError` (one line, naming the
    file) for anything unusable.

    ``scalars_only`` skips the token stamps and texts (returns a :class:`RunScalars` whose requests carry
    RequestScalars' fields, plus ``request_fields`` of RequestResult): 3-10x faster on large runs; from columns,
    only those columns are read (a list column's values as numpy views, never a Python object per token).
    ``requests=False`` (with ``scalars_only``; show): a finished version-2 run's requests are left in their
    file, which is checked to be there at its size (a version-1 run's are read: they are in the JSON).
    """
    p = Path(path)
    data = read_user_file(p, "run file")
    if scalars_only and journal_path(p).is_file():
        scalars_only = False  # a killed run: read it whole so its journal can be merged
    try:
        # The fast paths: pydantic parses and validates a whole run in one pass (10,000 requests x 256 tokens in
        # ~0.26 s); a scalar reader's requests are decoded by msgspec, which skips the stamps (~0.03 s)
        run = _scalars(data, tuple(request_fields)) if scalars_only else Run.model_validate_json(data)
    except ValidationError:
        _diagnose(p, data)  # raises the one-line reason
        raise UserError(f"{p} is not a valid run JSON") from None  # _diagnose found nothing more precise
    if scalars_only and run.columns is not None and run.columns.sha256 is None:
        return load_run(p)  # a run killed while written as columns: its summary is computed from its requests
    if run.columns is not None and not requests and scalars_only and run.columns.sha256 is not None:
        from llmbench.results.columns import present

        present(p.parent / run.columns.file, run.columns)
    elif run.columns is not None:
        fields = (*RequestScalars.model_fields, *request_fields) if scalars_only else None
        _attach_columns(run, p, fields)
    if isinstance(run, Run):
        # a killed run's last requests are in its journal (no journal: nothing to do); one killed while written
        # as columns has a summary from before its last commits: computed again from what it holds
        merge_journal(run, p, resummarize=run.columns is not None and run.columns.sha256 is None)
        if any(r.shapeless() for r in (*run.requests, *run.ttft_requests)):  # from before the shape of the wait
            from llmbench.results.metrics import fill_shape

            fill_shape(run)
    elif _shapeless(run.requests):  # the shape needs the stamps and texts: such a run is read whole, once
        return load_run(p)
    return run  # type: ignore[return-value]  # RunScalars has every field a scalar reader uses


def _attach_columns(run: Run | RunScalars, p: Path, fields: tuple[str, ...] | None) -> None:
    """A version-2 run's requests, from the columns file its JSON names: ``fields`` only, as light rows, or
    every field as RequestResult (None)."""
    from llmbench.results import columns as col

    if run.requests or run.ttft_requests:
        raise UserError(f"{p} names a columns file and holds requests itself: not a file llmbench wrote")
    assert run.columns is not None
    names = list(dict.fromkeys(fields)) if fields is not None else None
    table = col.read_checked(p.parent / run.columns.file, run.columns, run.run_id, names)
    items = col.rows(table) if names is not None else col.requests_of(table)
    run.requests = [r for r in items if not r.ttft_only]
    run.ttft_requests = [r for r in items if r.ttft_only]


def _shapeless(requests: list[Any]) -> bool:
    """True for a run's requests recorded before the shape of the wait (it is computed from their stamps)."""
    return any(r.andes_qoe is None and r.output_tokens for r in requests)


_SCALAR_DECODERS: dict[tuple[str, ...], Any] = {}


def _scalar_decoder(extra: tuple[str, ...] = ()) -> Any:
    """A msgspec decoder of a run's top level: the requests as rows of exactly RequestScalars' fields and
    ``extra`` fields of RequestResult (their types derived from the pydantic models, so the two can't drift),
    everything else kept as raw JSON for pydantic."""
    if extra not in _SCALAR_DECODERS:
        import msgspec

        fields: list[Any] = []
        infos = {**RequestScalars.model_fields, **{k: RequestResult.model_fields[k] for k in extra}}
        for name, info in infos.items():
            kind = _msgspec_type(info.annotation, info.metadata)
            fields.append((name, kind) if info.is_required() else (name, kind, info.default))
        row = msgspec.defstruct("RequestRow", fields, forbid_unknown_fields=False, frozen=True, kw_only=True)
        top: list[Any] = [("schema_version", int), ("requests", list[row], [])]  # type: ignore[valid-type]
        top += [
            (name, msgspec.Raw, None) for name in RunScalars.model_fields if name not in ("schema_version", "requests")
        ]
        _SCALAR_DECODERS[extra] = msgspec.json.Decoder(msgspec.defstruct("RunTop", top, forbid_unknown_fields=False))
    return _SCALAR_DECODERS[extra]


def _msgspec_type(annotation: Any, metadata: Any = ()) -> Any:
    """A pydantic field's type for msgspec, its bounds kept (a negative time is refused on both read paths alike):
    pydantic's own ``Annotated`` metadata, which msgspec would ignore, is translated."""
    import types
    import typing

    import annotated_types
    import msgspec

    if typing.get_origin(annotation) is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        return _msgspec_type(base, [m for e in extra for m in getattr(e, "metadata", [e])])
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        annotation = typing.Union[tuple(_msgspec_type(a) for a in args)]
    elif args and origin is not typing.Literal:
        annotation = origin[tuple(_msgspec_type(a) for a in args)]
    kinds = (annotated_types.Ge, annotated_types.Gt, annotated_types.Le, annotated_types.Lt)
    bounds = {kind.__name__.lower(): getattr(m, kind.__name__.lower()) for m in metadata for kind in kinds
              if isinstance(m, kind)}  # fmt: skip
    return typing.Annotated[annotation, msgspec.Meta(**bounds)] if bounds else annotation


def _scalars(data: bytes, extra: tuple[str, ...] = ()) -> RunScalars:
    """A run without its stamps and texts: msgspec decodes the requests' scalars (and checks their types), pydantic
    validates the rest (config, environment, summary: small). ValidationError when anything is wrong, so the
    caller's diagnosis applies."""
    import msgspec

    try:
        top = _scalar_decoder(extra).decode(data)
    except msgspec.ValidationError as e:
        raise ValidationError.from_exception_data("RunScalars", []) from e
    except msgspec.DecodeError as e:
        raise ValidationError.from_exception_data("RunScalars", []) from e
    parts = [b'"schema_version":' + str(top.schema_version).encode()]
    for name in RunScalars.model_fields:
        raw = getattr(top, name, None) if name not in ("schema_version", "requests") else None
        if raw is not None:
            parts.append(b'"' + name.encode() + b'":' + bytes(raw))
    run = RunScalars.model_validate_json(b"{" + b",".join(parts) + b"}")
    # the rows stay msgspec structs: they carry RequestScalars' fields as attributes, type-checked by msgspec,
    # and building 10,000 pydantic objects from them would cost more than decoding did
    run.requests = top.requests
    return run


def _diagnose(p: Path, data: bytes) -> None:
    """Why ``data`` is not a run JSON, as a :class:`UserError`, checked in the order a user can act on."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{p} is not a run JSON (not UTF-8 text)") from None
    if not text.strip():
        raise UserError(f"{p} is empty, not a run JSON")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (truncated?)" if e.pos >= len(text.rstrip()) else ""
        raise UserError(f"{p} is not valid JSON{hint}: {e.msg} at line {e.lineno}") from None
    except RecursionError:  # nested deeper than any run: not ours
        raise UserError(f"{p} is not a run JSON (nested too deeply)") from None
    if not isinstance(obj, dict) or "schema_version" not in obj or "requests" not in obj:
        raise UserError(f"{p} is not an llmbench run JSON (no schema_version/requests)")
    version = obj["schema_version"]
    if type(version) is not int or version not in SCHEMA_VERSIONS:  # true == 1 in Python: a bool is no version
        raise UserError(
            f"{p} has schema_version {version!r}; this llmbench ({llmbench_version()}) reads versions "
            f"{', '.join(map(str, SCHEMA_VERSIONS))}: upgrade or downgrade llmbench to read it"
        )
    try:
        Run.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise UserError(f"{p} is not a valid run JSON: {loc}: {err['msg']}") from None


def read_scan(path: str | Path) -> dict | None:
    """A scan.json's record, or None when ``path`` is something else (a run file: read it with load_run).
    UserError for a scan of another version."""
    return _read_record(path, "scan_version", SCAN_VERSION)


def read_load(path: str | Path) -> dict | None:
    """A load.json's record (llmbench load), or None when ``path`` is something else. UserError for another
    version. A run file is told apart by its first bytes, so compare does not parse a large run twice."""
    try:
        with open(path, "rb") as f:
            if b'"load_version"' not in f.read(64):  # load.json is written with load_version first
                return None
    except OSError:
        return None  # the caller's own reading says what is wrong with the path
    return _read_record(path, "load_version", LOAD_VERSION)


def rate_runs(load_path: str | Path, record: dict) -> dict[float, tuple[Any, Any]]:
    """Each rate of a load.json with its run file (and its probes' file) beside it, read with the fields a rate's
    picture needs (a rate whose file is gone is left out: the picture shows what is there)."""
    folder = Path(load_path).parent
    fields = ("scheduled_s", "send_lateness_ms", "e2e_from_schedule_ms")  # a request's send and end on the run's clock
    out: dict[float, tuple[Any, Any]] = {}
    for row in record.get("rates", []):
        path = folder / str(row.get("run_file") or "")
        if not row.get("run_file") or not path.is_file():
            continue
        probe = (row.get("probes") or {}).get("run_file")
        probe_path = folder / probe if probe else None
        out[row["offered_rate_rps"]] = (
            load_run(path, scalars_only=True, request_fields=fields),
            load_run(probe_path, scalars_only=True, request_fields=fields)
            if probe_path is not None and probe_path.is_file() else None,
        )  # fmt: skip
    return out


def read_paint(path: str | Path) -> dict | None:
    """A paint JSON's record (llmbench paint), or None when ``path`` is something else. UserError for another
    version. Told by its first bytes (it is written with paint_version first), as a load.json."""
    try:
        with open(path, "rb") as f:
            if b'"paint_version"' not in f.read(64):
                return None
    except OSError:
        return None
    return _read_record(path, "paint_version", PAINT_VERSION)


def _read_record(path: str | Path, key: str, version: int) -> dict | None:
    """A driver's JSON record whose ``key`` names its format version; None for another kind of file. A run file
    (``schema_version`` comes first in every run llmbench writes) is told apart by its first bytes, so a large run
    is not parsed here only to be parsed again by its reader."""
    try:
        with open(path, "rb") as f:
            if b'"schema_version"' in f.read(256):
                return None
    except OSError:
        pass  # read_user_file below says what is wrong with the path
    try:
        data = json.loads(read_user_file(path, "file"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or key not in data:
        return None
    if type(data[key]) is not int or data[key] != version:  # true == 1 in Python: a bool is no version
        raise UserError(f"{path} has {key} {data[key]!r}; this llmbench ({llmbench_version()}) reads version "
                        f"{version}")  # fmt: skip
    return data


def default_output_path(model: str, device: str, folder: str | Path = "results") -> Path:
    """``results/<UTC time>-<model>-<device>.json``, claimed (:func:`claim`); a suffix keeps two runs in the same
    second apart, in one process or in several."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = Path(model.rstrip("/\\")).name or "model"
    slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{name}-{device.replace(':', '')}")
    return _claim_free(Path(folder) / f"{stamp}-{slug}", ".json")


def _claim_free(base: Path, suffix: str) -> Path:
    """The first of ``base<suffix>``, ``base-1<suffix>``, ... that this process can claim as a new path."""
    path, k = Path(f"{base}{suffix}"), 1
    while True:
        if not path.exists() and not lock_path(path).exists():
            try:
                return claim(path)
            except UserError:
                pass  # taken between the look and the claim: the next name
        path, k = Path(f"{base}-{k}{suffix}"), k + 1


def prepare_output(path: str | Path, overwrite: bool) -> Path:
    """Check and claim, before any slow work, that a file can be written at ``path`` without losing another.

    A missing folder is made; a folder that can't be made, an existing file (unless ``overwrite``), a path
    another llmbench process is writing, or an unwritable place is a :class:`UserError`.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"output {p} is a folder; give a file name such as {p / 'run.json'}")
    if p.exists() and not overwrite:
        raise UserError(f"output {p} already exists; choose another -o or pass --overwrite")
    prepare_dir(p.parent)
    return claim(p, replace=overwrite)


def write_text(path: str | Path, text: str) -> None:
    """A text output (a report page, a trend report), written atomically: a full disk leaves no half page."""
    write_atomic(path, text.encode("utf-8"))


def write_record(path: str | Path, record: dict) -> None:
    """A driver's JSON record (sweep.json, scan.json, load.json, quality.json), written atomically."""
    write_atomic(path, (json.dumps(record, indent=2) + "\n").encode("utf-8"))


def prepare_driver_dir(out: str | Path | None, kind: str) -> Path:
    """A driver's folder (``kind``: sweep, scan, load): ``results/<kind>-<UTC time>`` by default. A folder that
    already holds a ``<kind>.json`` is refused (a finished record is never overwritten), as is a file."""
    if out is None:
        return default_dir(kind, f"{kind}.json")
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"-o {out} is a file; give a folder for the {kind}'s runs")
    if (out / f"{kind}.json").exists():
        raise UserError(f"{out} already holds a {kind} ({kind}.json); choose another -o folder")
    prepare_dir(out)
    try:
        claim(out / f"{kind}.json")
    except UserError:
        raise UserError(f"{out} is being written by another llmbench {kind}; choose another -o folder") from None
    return out


def default_dir(kind: str, record: str, parent: str | Path = "results") -> Path:
    """``results/<kind>-<UTC time>`` (``-1``, ``-2``, ... when taken), made new, its ``record`` file claimed: two
    drivers started in the same second never share a folder."""
    base = Path(parent) / f"{kind}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    prepare_dir(base.parent)
    folder, k = base, 1
    while True:
        try:
            folder.mkdir()
        except FileExistsError:
            folder, k = Path(f"{base}-{k}"), k + 1
            continue
        except OSError as e:
            raise UserError(f"cannot make the output folder {folder}: {e.strerror or e}") from None
        prepare_dir(folder)
        claim(folder / record)
        return folder


@contextlib.contextmanager
def tidied_on_failure(made: list[Path], records: tuple[str, ...]) -> Iterator[None]:
    """The folders this command made (``made``, innermost first) that a failure left empty before anything was
    written in them: removed, the first with the lock files of its ``records``' claims, so a command that could
    not start leaves nothing behind. A folder holding any file (a finished request, a run file) is kept whole: an
    interrupted run keeps its work."""
    try:
        yield
    except BaseException:
        for name in records if made else ():
            release(made[0] / name)
        for folder in made:
            with contextlib.suppress(OSError):
                if not any(folder.iterdir()):
                    folder.rmdir()
        raise


def prepare_dir(folder: str | Path) -> Path:
    """Make ``folder`` (and its parents) and check that files can be written there; UserError otherwise."""
    d = Path(folder).expanduser()
    for parent in [d, *d.parents]:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"cannot make the output folder {d}: {parent} is a file")
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".llmbench.", suffix=".probe", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"cannot write to {d}: {e.strerror or e}") from None
    return d
