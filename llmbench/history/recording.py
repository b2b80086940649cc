"""``--history`` and ``llmbench history``: results into the history database, after their files are written."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from llmbench.core.errors import UserError
from llmbench.history.db import History, Result, open_history, resolve_url, shown


class Recorded(NamedTuple):
    """What ``history add`` did with one record of a path."""

    path: Path
    id: int
    new: bool  # False: it was recorded before (the same bytes, or the same run as complete)
    partial: bool  # a partial run: recorded as such, replaced when its complete file is added


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


def record_files(url: str | None, paths: list[Path]) -> list[Recorded]:
    """``history add``: every record each file (or result folder) gives, through one connection. Every path is
    read before anything is added: a path that gives nothing to record (no measured request, or a run file it
    names is not there) is refused with nothing recorded."""
    from llmbench.history.records import file_sha256, results_of_file

    for p in paths:
        if not p.exists():
            raise UserError(f"{p}: no such file or folder")
    h = open_history(url)
    if h is None:
        return []
    out: list[Recorded] = []
    try:
        todo: list[tuple[Path, list[Result]]] = []
        for p in paths:
            if p.is_file() and _is_run_file(p):  # recorded before? then nothing to compute (adds are by sha256)
                known = h.find(file_sha256(p))
                if known is not None:
                    out.append(Recorded(p, known, False, False))
                    continue
            results = [r for r in results_of_file(p) if r.metrics]  # a row without figures would say nothing
            if not results:
                raise UserError(f"{p}: nothing in it to record (no measured request; an ab folder's runs must "
                                "come from llmbench ab)")  # fmt: skip
            todo.append((p, results))
        for p, results in todo:
            for r in results:
                rid, new = h.add(r)
                out.append(Recorded(p, rid, new, not r.complete))
    finally:
        h.close()
    return out


def after_write(url: str | None, results: Any, where: str) -> str | None:
    """Record what a command just wrote; the line to print, or UserError saying the files are kept."""
    resolved = resolve_url(url)
    if resolved is None:
        return None
    results = [r for r in results if r.metrics]  # a run with no measured request: nothing to record
    if not results:
        return "nothing measured to record in the history"
    try:
        done = record(url, results)
    except UserError as e:
        raise UserError(f"{e} (the result is written: {where})") from None
    new = sum(1 for _, n in done if n)
    partial = sum(1 for r in results if not r.complete)
    ids = ", ".join(str(i) for i, _ in done)
    return (
        f"recorded {new} new result(s) in the history ({shown(resolved)}; id {ids})"
        + (f"; {len(done) - new} already there" if len(done) > new else "")
        + (f"; {partial} partial (replaced when the run completes)" if partial else "")
    )


def get_history(url: str | None) -> History:
    """The history ``history``/``trend`` read: ``--history`` or ``LLMBENCH_HISTORY``, else the default file. A
    database that isn't there is refused (a mistyped path must not read as an empty history)."""
    h = open_history(url if resolve_url(url) is not None else "default", create=False)
    assert h is not None
    return h


def _is_run_file(p: Path) -> bool:
    with p.open("rb") as f:
        return b'"schema_version"' in f.read(256)
