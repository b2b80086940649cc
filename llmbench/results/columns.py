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
"""

from __future__ import annotations

import functools
import hashlib
import os
import types
import typing
from collections.abc import Iterable, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from llmbench.core.errors import UserError
from llmbench.results.schema import RequestResult

SUFFIX = ".arrow"
# the values one list column of a batch may hold: an Arrow list's offsets are int32 (ColumnWriter splits a batch)
BATCH_VALUES = 2**31 - 1
# narrower than the field's type says, where the values can't need more (character offsets of one answer)
NARROW = {"text_offsets": pa.list_(pa.int32())}


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
    field's default."""
    return [RequestResult.model_construct(**row) for row in table.to_pylist()]


class ColumnWriter:
    """Appends requests to a stream file as record batches (one a call: the run loop's group commit), each
    flushed and fsynced before :meth:`add` returns, so a power loss loses at most the batch being written. The
    file is made new (never over an existing one)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "xb")  # noqa: SIM115 (closed by close()); "x": a second writer fails
        self._writer = ipc.new_stream(self._file, arrow_schema())
        self.rows = 0

    def add(self, requests: Sequence[RequestResult]) -> None:
        """Append ``requests`` (nothing for none) and make them durable."""
        if not requests:
            return
        for part in _parts(requests):
            self._writer.write_batch(to_batch(part))
        self._file.flush()
        os.fsync(self._file.fileno())
        self.rows += len(requests)

    def close(self) -> None:
        """End the stream (its end marker) and close the file."""
        self._writer.close()
        self._file.close()


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


def read_table(path: str | Path, columns: Iterable[str] | None = None) -> tuple[pa.Table, bool]:
    """The requests' columns (memory-mapped: a column not read is never touched) and whether the stream ended
    before its end marker (a killed writer: every batch before the cut is there). ``columns``: those only. A file
    that is no Arrow stream is one UserError line."""
    batches: list[pa.RecordBatch] = []
    cut = False
    try:
        reader = ipc.open_stream(pa.memory_map(str(path), "r"))
    except (OSError, pa.ArrowInvalid) as e:
        raise UserError(f"{path}: not a run's columns file ({str(e).splitlines()[0]})") from None
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
        batches.append(batch.select(list(columns)) if columns is not None else batch)
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


def check(path: str | Path, sha256: str, rows: int) -> None:
    """UserError in one line unless ``path`` is the columns file its run names: that sha256, that many rows (an
    altered, truncated or swapped sidecar)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: the run's columns file is missing (its JSON names it; copy both together)")
    got = file_sha256(p)
    if got != sha256:
        raise UserError(f"{p}: not the columns file its run names (sha256 {got[:12]}..., the run says "
                        f"{sha256[:12]}...): altered, truncated or another run's")  # fmt: skip
    table, cut = read_table(p, columns=["prompt_index"])
    if cut or table.num_rows != rows:
        raise UserError(f"{p}: {table.num_rows:,} requests, the run says {rows:,}")
