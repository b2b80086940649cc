"""A run's requests as columns (issue 61): one Arrow row per request, its stamps as list columns, in an Arrow IPC
*stream* file beside the run's JSON.

Why this format (``benchmarks/stamp_formats.py``, 100,000 requests x 256 tokens, this project's 2-core EPYC):
plain Arrow IPC wrote in 0.4 s and read one scalar column in 7 ms memory-mapped (Parquet: 2.0 s and 11-20 ms,
LZ4/ZSTD IPC: 84-202 ms, they decompress whole buffers); 310 MB against the JSON's 465. And a stream has no
footer: a killed writer leaves every batch it finished readable, where a Parquet file without its footer is
lost. ``llmbench export --format parquet`` stays the format to hand on.

The columns are derived from :class:`llmbench.results.schema.RequestResult`'s fields (a field added there is a
column here without an edit), typed as Arrow types: integers int64 (``text_offsets``: int32, a string's offsets),
numbers float64, text large_string, list fields lists of those. pyarrow is imported here only: a reader that never
meets a sidecar never imports it.

The file is named ``<run>.<8 hex>.arrow``: a new name each time a run's columns are written (a resume, a
``--overwrite``), so a new file never replaces the one the JSON on disk names; the old one goes once the new JSON
is in place. The stream's schema carries the run's id (``llmbench_run_id``): a killed run's file, which has no
sha256 yet, is still told from another run's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import types
import typing
from collections.abc import Iterable, Sequence
from itertools import chain, pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from llmbench.core.errors import UserError
from llmbench.results.schema import Columns, RequestResult

SUFFIX = ".arrow"
# the values one list column of a batch may hold: an Arrow list's offsets are int32 (ColumnWriter splits a batch)
BATCH_VALUES = 2**31 - 1
# narrower than the field's type says, where the values can't need more (character offsets of one answer)
NARROW = {"text_offsets": pa.list_(pa.int32())}
RUN_ID = b"llmbench_run_id"  # the schema's metadata key that names the run


def sidecar_name(json_path: str | Path) -> str:
    """A new columns file name for the run JSON at ``json_path``: ``<stem>.<8 random hex>.arrow``."""
    name = Path(json_path).name
    stem = name[: -len(".json")] if name.endswith(".json") else name
    stem = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in stem).lstrip(".") or "run"
    return f"{stem}.{secrets.token_hex(4)}{SUFFIX}"


def _arrow_type(annotation: Any) -> pa.DataType:
    """A pydantic field's annotation as an Arrow type: Optional and Annotated unwrapped, a Literal as text."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _arrow_type(inner)
    if origin is typing.Annotated:
        return _arrow_type(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return pa.large_string()
    if origin is list:
        return pa.list_(_arrow_type(typing.get_args(annotation)[0]))
    scalar = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.large_string()}
    if annotation not in scalar:
        raise TypeError(f"no Arrow column for {annotation!r}")
    return scalar[annotation]


@functools.cache
def arrow_schema() -> pa.Schema:
    """The columns of a run's requests, in RequestResult's field order."""
    return pa.schema([pa.field(name, NARROW.get(name) or _arrow_type(fi.annotation), nullable=True)
                      for name, fi in RequestResult.model_fields.items()])  # fmt: skip


def to_batch(requests: Sequence[RequestResult]) -> pa.RecordBatch:
    """``requests`` as one record batch (a column per field)."""
    schema = arrow_schema()
    return pa.record_batch([_column([getattr(r, f.name) for r in requests], f.type) for f in schema], schema=schema)


def _column(values: list[Any], kind: pa.DataType) -> pa.Array:
    """One column; a list column built from its values flattened (one C loop, not one Arrow list per request:
    4x faster for 256 stamps a request)."""
    if not pa.types.is_list(kind):
        return pa.array(values, type=kind)
    import numpy as np

    lengths = np.fromiter((0 if v is None else len(v) for v in values), dtype=np.int64, count=len(values))
    ends = np.cumsum(lengths)
    if len(ends) and ends[-1] > BATCH_VALUES:  # ColumnWriter splits before this; a caller of to_batch must too
        raise ValueError(f"{int(ends[-1]):,} values in one list column of a batch: more than its int32 offsets hold")
    offsets = pa.array(np.concatenate([[0], ends]).astype(np.int32), type=pa.int32())
    flat = pa.array(list(chain.from_iterable(v for v in values if v is not None)), type=kind.value_type)
    missing = pa.array([v is None for v in values]) if any(v is None for v in values) else None
    return pa.ListArray.from_arrays(offsets, flat, type=kind, mask=missing)


def requests_of(table: pa.Table | pa.RecordBatch) -> list[RequestResult]:
    """The requests of a table (a whole-run reader's: report, resume), unvalidated: the file was checked against
    its run's sha256, and these are the values a validated run wrote. A column an older file lacks keeps its
    field's default. Built a column at a time (a third faster than a dict per row)."""
    names = table.column_names
    values = [table.column(n).to_pylist() for n in names]
    build = RequestResult.model_construct
    return [build(**dict(zip(names, row, strict=True))) for row in zip(*values, strict=True)]


class _HashedFile:
    """The open file a stream is written to, hashed as it is written: the run names the file by its sha256
    without reading 300 MB back."""

    def __init__(self, f: Any) -> None:
        self.f, self.sha256, self.closed, self.size = f, hashlib.sha256(), False, 0

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        self.size += len(memoryview(data).cast("B"))
        return int(self.f.write(data))

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.closed = True


class ColumnWriter:
    """Appends requests to a stream file as record batches (one per :meth:`add`: the run loop's group commit),
    each flushed and fsynced before ``add`` returns (``sync``), so a power loss loses at most the batch being
    written. The file is made new (never over an existing one): ``path`` is a :func:`sidecar_name`."""

    def __init__(self, path: str | Path, run_id: str) -> None:
        self.path = Path(path)
        self._file = open(self.path, "xb")  # noqa: SIM115 (closed by close()); "x": a second writer fails
        self._sink = _HashedFile(self._file)
        schema = arrow_schema().with_metadata({RUN_ID: run_id.encode()})
        self._writer = ipc.new_stream(self._sink, schema)
        # the schema goes out with the first batch: an empty one now, so a run killed before its first group
        # commit leaves a stream that reads (no rows, its run id) rather than an empty file
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=schema))
        self.sync()
        self.rows = 0

    def add(self, requests: Sequence[RequestResult], *, sync: bool = True) -> None:
        """Append ``requests`` (nothing for none); with ``sync``, durable when this returns."""
        for part in _parts(requests) if requests else ():
            self._writer.write_batch(to_batch(part))
        self.rows += len(requests)
        if sync:
            self.sync()

    def sync(self) -> None:
        """What was added is on the disk (flush and fsync)."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> Columns:
        """End the stream (its end marker), make it durable and close it; what the run JSON names it by."""
        self._writer.close()
        self.sync()
        self._file.close()
        return Columns(file=self.path.name, rows=self.rows, sha256=self._sink.sha256.hexdigest(),
                       size_bytes=self._sink.size)  # fmt: skip

    def abandon(self) -> None:
        """Close and remove the file (a write that failed: the JSON never named it)."""
        with contextlib.suppress(Exception):
            self._file.close()
        self.path.unlink(missing_ok=True)


def _parts(requests: Sequence[RequestResult]) -> list[Sequence[RequestResult]]:
    """``requests`` in runs whose list columns each hold at most :data:`BATCH_VALUES` values (a request's longest
    list is its stamps)."""
    parts, start, held = [], 0, 0
    for i, r in enumerate(requests):
        n = max(len(r.token_times_ms), len(r.server_send_ms or ()), len(r.text_offsets or ()))
        if held + n > BATCH_VALUES and i > start:
            parts.append(requests[start:i])
            start, held = i, 0
        held += n
    parts.append(requests[start:])
    return parts


def read_table(
    path: str | Path, columns: Iterable[str] | None = None, run_id: str | None = None
) -> tuple[pa.Table, bool]:
    """The requests' columns (memory-mapped: a column not read is never touched) and whether the stream ended
    before its end marker (a killed writer: every batch before the cut is there). ``columns``: those only;
    ``run_id``: the run the file must belong to. A file that is no Arrow stream, or another run's, is one
    UserError line."""
    batches: list[pa.RecordBatch] = []
    cut = False
    try:
        reader = ipc.open_stream(pa.memory_map(str(path), "r"))
    except (OSError, pa.ArrowInvalid) as e:
        raise UserError(f"{path}: not a run's columns file ({str(e).splitlines()[0]})") from None
    owner = (reader.schema.metadata or {}).get(RUN_ID, b"").decode("ascii", "replace")
    if run_id is not None and owner != run_id:
        raise UserError(f"{path} holds the columns of run {owner or '(none named)'!r}, not of run {run_id}: "
                        "another run's file")  # fmt: skip
    columns = list(columns) if columns is not None else None
    missing = [c for c in columns or () if c not in reader.schema.names]
    if missing:
        raise UserError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(reader.schema.names)})")
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except (OSError, pa.ArrowInvalid):  # a batch cut short: the last one a killed writer was writing
            cut = True
            break
        batches.append(batch.select(columns) if columns is not None else batch)
    schema = batches[0].schema if batches else (reader.schema if columns is None else
                                                pa.schema([reader.schema.field(c) for c in columns]))  # fmt: skip
    return pa.Table.from_batches(batches, schema=schema), cut


def file_sha256(path: str | Path) -> str:
    """The file's sha256 (what the run JSON names it by)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def present(path: str | Path, ref: Columns) -> Path:
    """``path``, when it is there at the size its run names (what a reader that needs no request checks);
    UserError in one line otherwise."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: the run's columns file is missing (its JSON names it; copy both together)")
    if ref.size_bytes is not None and (size := p.stat().st_size) != ref.size_bytes:
        raise UserError(f"{p}: {size:,} bytes, the run says {ref.size_bytes:,}: truncated, altered or another run's")
    return p


def read_checked(path: str | Path, ref: Columns, run_id: str, columns: Iterable[str] | None = None) -> pa.Table:
    """The columns of the run ``run_id`` whose JSON names ``ref``: a finished run's file must have its sha256 and
    row count (altered, truncated or swapped: one UserError line); a killed run's (no sha256 yet) is read up to
    where the writer stopped."""
    p = present(path, ref)
    if ref.sha256 is not None and not _checked_before(p, ref.sha256):
        got = file_sha256(p)
        if got != ref.sha256:
            raise UserError(f"{p}: not the columns file its run names (sha256 {got[:12]}..., the run says "
                            f"{ref.sha256[:12]}...): altered, truncated or another run's")  # fmt: skip
        _remember_check(p, got)
    table, cut = read_table(p, columns, run_id)
    if ref.rows is not None and (cut or table.num_rows != ref.rows):
        raise UserError(f"{p}: {table.num_rows:,} requests, the run says {ref.rows:,}")
    return table


# A columns file whose sha256 was checked is not hashed again while it stays the same file, unchanged: its device,
# inode, size, modification and change times are remembered with the hash (as git's index remembers a file's stat),
# in <user cache>/llmbench/verified/. Any write to the file moves its change time, which no program can set back;
# and a check is remembered only for a file unchanged for QUIET_NS before it (a write in the same clock tick as the
# check would otherwise keep the change time it had).
QUIET_NS = 2_000_000_000


def _stamp(p: Path) -> list[int]:
    st = p.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _memo_path(p: Path) -> Path:
    from llmbench.core.settings import settings

    key = hashlib.sha256(str(p.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return settings().cache_root / "verified" / key


def _checked_before(p: Path, sha256: str) -> bool:
    """True when ``p``, as it is now, was hashed to ``sha256`` before (see :data:`QUIET_NS`)."""
    import json

    try:
        memo = json.loads(_memo_path(p).read_text(encoding="utf-8"))
        return bool(memo["sha256"] == sha256 and memo["stat"] == _stamp(p))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _remember_check(p: Path, sha256: str) -> None:
    """Remember that ``p`` hashed to ``sha256`` (nothing when it changed within :data:`QUIET_NS`, or the cache
    can't be written: the next read hashes again)."""
    import json
    import time

    try:
        stamp = _stamp(p)
        if stamp[4] > time.time_ns() - QUIET_NS:
            return
        memo = _memo_path(p)
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"sha256": sha256, "stat": stamp}), encoding="utf-8")
        os.replace(tmp, memo)  # two readers at once: the last rename wins, both wrote the same
    except OSError:
        return


@functools.cache
def _row_type(names: tuple[str, ...]) -> Any:
    import msgspec

    return msgspec.defstruct("RequestRow", list(names), frozen=True)


def rows(table: pa.Table) -> list[Any]:
    """A scalar reader's requests (compare, show, history, export's request table): one light row per request
    with the table's columns as attributes, built a column at a time (no object per token: a list column's
    values are numpy views into the memory-mapped file)."""
    values = [_values(table.column(name)) for name in table.column_names]
    return list(map(_row_type(tuple(table.column_names)), *values)) if values else []


def _values(col: pa.ChunkedArray) -> list[Any]:
    """A column's values, one a request; a list column's as numpy views into the mapped file, a batch at a time
    (joining the batches first would copy, and touch, every value), None where the request has none."""
    if not pa.types.is_list(col.type):
        return col.to_pylist()
    out: list[Any] = []
    for arr in col.chunks:
        offsets = arr.offsets.to_numpy()
        flat = arr.values.to_numpy(zero_copy_only=False)
        lengths = np.diff(offsets)
        if len(arr) and (lengths == lengths[0]).all():  # every request as long (ignore_eos): one reshape, no slicing
            start = int(offsets[0])
            views = list(flat[start : start + len(arr) * int(lengths[0])].reshape(len(arr), int(lengths[0])))
        else:
            views = [flat[a:b] for a, b in pairwise(offsets.tolist())]
        if arr.null_count:
            views = [None if null else v for v, null in zip(views, arr.is_null().to_pylist(), strict=True)]
        out += views
    return out
