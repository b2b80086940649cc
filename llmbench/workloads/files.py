"""Reading a user's data files (datasets, traces): text, JSON, JSONL, CSV, Parquet, ``save_to_disk`` folders, and
the token counts in them. Each reader names the file (and the line or row) in one UserError for anything a user
must fix; none of them knows what the records mean (:mod:`llmbench.workloads.dataset` and
:mod:`llmbench.workloads.trace` do)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads.limits import MAX_PROMPT_TOKENS

Records = Iterator[tuple[str, dict]]  # (where: ``file:line`` or ``file: row i``, the record)


def utf8(p: Path, raw: bytes, what: str) -> str:
    """A file's bytes as text (a BOM dropped); ``what``: the file's kind, for the message ("dataset", "trace")."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not UTF-8 text") from None


def json_value(p: Path, text: str) -> Any:
    """A JSON document."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    except ValueError as e:  # a number past Python's 4,300-digit limit for int()
        raise UserError(f"{p}: not valid JSON ({e})") from None


def jsonl_objects(p: Path, text: str) -> Records:
    """(``file:line``, object) for each non-blank line of a JSONL text; UserError naming the line otherwise."""
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:  # JSONDecodeError, or a number past Python's 4,300-digit limit for int()
            raise UserError(f"{p}:{number}: not valid JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{p}:{number}: expected a JSON object, not {type(obj).__name__}")
        yield f"{p}:{number}", obj


def csv_rows(p: Path, text: str, columns: tuple[str, ...] = (), what: str = "") -> Records:
    """(``file:line``, row) for each row of a CSV text with a header line (``line``: where the row starts; a quoted
    cell may span lines, and keeps its line breaks); ``columns``: those it must have (``what``: whose, for the
    message: "a BurstGPT trace has ..."). Lazy: a row is read when the caller comes to it."""
    try:
        # newline="": the csv module's own reading of line ends. Lines split apart (str.splitlines) lose the
        # breaks inside a quoted cell, and split on \x0b, \x1c, \u2028..., which are text inside a cell.
        reader = csv.DictReader(io.StringIO(text, newline=""))
        fields = reader.fieldnames or []  # reads the header line
        if columns:
            missing = [c for c in columns if c not in fields]
            if missing:
                raise UserError(f"{p}: no column {', '.join(repr(c) for c in missing)} (a {what} trace has "
                                f"{', '.join(columns)}; this one: {', '.join(fields) or 'none'})")  # fmt: skip
        end = reader.line_num  # the last line read so far
        for row in reader:
            yield f"{p}:{end + 1}", row
            end = reader.line_num
    except csv.Error as e:
        raise UserError(f"{p}: not a readable CSV file ({e})") from None


def parquet_rows(p: Path) -> Records:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError('reading .parquet needs pyarrow: pip install "llmbench[data]"') from None
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow's errors are many kinds; each means "not a Parquet file we can read"
        raise UserError(f"{p}: not a readable Parquet file ({str(e).strip()[:200]})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{p}: row {i}", row


def arrow_rows(p: Path) -> tuple[str, Records]:
    """A ``save_to_disk`` folder, through ``datasets`` itself (its layout is the library's to change): the hash of
    its data files, in order, and its rows."""
    try:
        import datasets
    except ImportError:
        raise UserError(f'{p}: reading a save_to_disk folder needs datasets: pip install "llmbench[data]"') from None
    try:
        ds = datasets.load_from_disk(str(p))
    except Exception as e:  # FileNotFoundError for a folder that isn't one, and the library's own errors
        raise UserError(f"{p}: not a folder written by datasets' save_to_disk ({str(e).strip()[:200]})") from None
    if isinstance(ds, datasets.DatasetDict):
        split = "train" if "train" in ds else next(iter(ds))
        ds = ds[split]
    digest = hashlib.sha256()
    for f in sorted(p.rglob("*.arrow")):
        digest.update(f.read_bytes())
    return digest.hexdigest(), ((f"{p}: row {i}", row) for i, row in enumerate(ds))


def whole(v: Any, where: str, column: str, low: int = 1, high: int = MAX_PROMPT_TOKENS) -> int:
    """A token count from a user's file (``3``, ``"3"``, ``3.0``: a Parquet column of floats); UserError naming
    the row for NaN, infinity, a fraction, text, a bool, or a count outside ``low..high``."""
    bad = f"{where}: '{column}' must be a whole number of tokens, not {str(v)[:60]!r}"
    if isinstance(v, bool) or v is None:
        raise UserError(bad)
    if isinstance(v, int):
        n = v
    else:
        try:
            f = float(str(v).strip())
        except ValueError:
            raise UserError(bad) from None
        if not math.isfinite(f) or f != int(f):  # NaN and infinity first: int() of them raises
            raise UserError(bad)
        n = int(f)
    if n < low:
        raise UserError(f"{where}: '{column}' must be a whole number of at least {low}, not {n}")
    if n > high:
        raise UserError(f"{where}: '{column}' is {n}: more tokens than any model reads or writes (at most {high:,})")
    return n
