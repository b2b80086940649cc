"""``--history`` and ``llmbench history``: results into the history database, after their files are written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmbench.errors import UserError
from llmbench.history import History, Result, open_history, resolve_url, shown


def check_url(url: str | None) -> str | None:
    """Validate ``--history``/``LLMBENCH_HISTORY`` before anything is measured (a typo fails now, not after an
    hour); the database itself is opened after the result is written."""
    return resolve_url(url)


def record(url: str | None, results: list[Result]) -> list[tuple[int, bool]]:
    """Add ``results``; [(id, new)] (new False: it was recorded before). UserError (one line) when the database
    can't be reached, is corrupt or is newer than this llmbench: the result's files are written already."""
    h = open_history(url)
    if h is None:
        return []
    try:
        return [h.add(r) for r in results]
    finally:
        h.close()


def record_files(url: str | None, paths: list[Path]) -> list[tuple[Path, int, bool]]:
    """``history add``: every record each file (or result folder) gives, through one connection."""
    from llmbench.records import results_of_file

    for p in paths:
        if not p.exists():
            raise UserError(f"{p}: no such file or folder")
    h = open_history(url)
    if h is None:
        return []
    out = []
    try:
        for p in paths:
            if p.is_file() and _is_run_file(p):  # recorded before? then nothing to compute (adds are by sha256)
                from llmbench.records import file_sha256

                known = h.find(file_sha256(p))
                if known is not None:
                    out.append((p, known, False))
                    continue
            for r in results_of_file(p):
                rid, new = h.add(r)
                out.append((p, rid, new))
    finally:
        h.close()
    return out


def after_write(url: str | None, results: Any, where: str) -> str | None:
    """Record what a command just wrote; the line to print, or UserError saying the files are kept."""
    if resolve_url(url) is None:
        return None
    try:
        done = record(url, list(results))
    except UserError as e:
        raise UserError(f"{e} (the result is written: {where})") from None
    new = sum(1 for _, n in done if n)
    resolved = resolve_url(url)
    assert resolved is not None
    ids = ", ".join(str(i) for i, _ in done)
    return f"recorded {new} new result(s) in the history ({shown(resolved)}; id {ids})" + (
        f"; {len(done) - new} already there" if len(done) > new else ""
    )


def get_history(url: str | None) -> History:
    """The history ``history``/``trend`` read: ``--history`` or ``LLMBENCH_HISTORY``, else the default file."""
    h = open_history(url if url is not None else "default") if resolve_url(url) is None else open_history(url)
    assert h is not None
    return h


def _is_run_file(p: Path) -> bool:
    with p.open("rb") as f:
        return b'"schema_version"' in f.read(256)
