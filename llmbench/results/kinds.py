"""What kind of file is this? A run JSON, a sweep.json, a scan.json, a load.json, a quality.json, a paint JSON, or
(a folder) an ab run's base.json + head.json or a sweep/scan/load folder. Told once, here, for every reader:
``show``, ``report``, ``compare`` and the history's recording.

A run file is told by its first bytes (``schema_version`` comes first in every run llmbench writes), so a large
run is never parsed only to learn that it is one; anything not recognised is a run for its reader to refuse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError
from llmbench.core.version import __version__
from llmbench.results.schema import QUALITY_VERSION, SWEEP_VERSION

KINDS = ("run", "sweep", "scan", "load", "quality", "paint", "ab")
RECORDS = ("sweep.json", "scan.json", "load.json")  # a driver folder's summary file, looked for in this order


@dataclass(frozen=True)
class FileKind:
    """What a path holds: ``kind`` (one of :data:`KINDS`), the file to read (a folder's summary file; an ab
    run's folder itself) and, for a sweep, scan, load, quality or paint file, its parsed record."""

    kind: str
    path: Path
    record: dict[str, Any] | None = None


def is_run_file(path: str | Path) -> bool:
    """True when ``path``'s first bytes say it is a run JSON (no parse); False for anything else or unreadable."""
    try:
        with open(path, "rb") as f:
            return b'"schema_version"' in f.read(256)
    except OSError:
        return False


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None


def _check_version(p: Path, data: dict, key: str, version: int) -> None:
    """UserError for a record of another format version (a bool is none: ``true == 1`` in Python)."""
    v = data.get(key, version)
    if type(v) is not int or v != version:
        raise UserError(f"{p} has {key} {v!r}; this llmbench ({__version__}) reads version {version}")


def kind_of(path: str | Path, among: tuple[str, ...] = KINDS) -> FileKind:
    """The kind of ``path``, looking only for the kinds ``among`` (a run is always the answer left: its reader
    says what is wrong with a file that is none of them). A folder is an ab run or a driver's folder when
    ``"ab"`` is among them (else a run, for its reader to refuse); UserError for a folder that is neither.
    UserError for a record of another format version."""
    from llmbench.results.storage import read_load, read_paint, read_scan

    p = Path(path)
    if "ab" in among and p.is_dir():
        if (p / "head.json").exists() and (p / "base.json").exists():
            return FileKind("ab", p)
        for name in RECORDS:
            if (p / name).exists():
                return kind_of(p / name, among)
        raise UserError(f"{p}: no run, sweep.json, scan.json, load.json or ab run (base.json + head.json) in it")
    if is_run_file(p):
        return FileKind("run", p)
    if "load" in among and (load := read_load(p)) is not None:
        return FileKind("load", p, load)
    if "scan" in among and (scan := read_scan(p)) is not None:
        return FileKind("scan", p, scan)
    if "paint" in among and (paint := read_paint(p)) is not None:
        return FileKind("paint", p, paint)
    if "sweep" in among or "quality" in among:
        data = _json(p)
        if isinstance(data, dict):
            if "sweep" in among and ("sweep_version" in data or p.name == "sweep.json"):
                _check_version(p, data, "sweep_version", SWEEP_VERSION)
                return FileKind("sweep", p, data)
            if "quality" in among and "quality_version" in data:
                _check_version(p, data, "quality_version", QUALITY_VERSION)
                return FileKind("quality", p, data)
    return FileKind("run", p)
