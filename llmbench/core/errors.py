"""The one exception type that means "the user asked for something we can't do", and reading user files."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class UserError(Exception):
    """A bad input or an impossible request.

    The CLI prints its message as one line on stderr and exits 2; it never shows a traceback.
    The message must name the file, line, field or option at fault and, where there is one, the way out.
    """


def read_user_file(path: str | Path, what: str) -> bytes:
    """The bytes of a file the user named; UserError naming it (as ``what``) when missing, a folder or unreadable."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} not found: {p}")
    if p.is_dir():
        raise UserError(f"{what} is a folder, not a file: {p}")
    try:
        return p.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {what} {p}: {e.strerror or e}") from None


def require(what: str, extra: str, *modules: str) -> None:
    """UserError naming the extra to install when one of ``modules`` is missing (``what`` needs them)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"{what} needs {', '.join(missing)}: pip install 'llmbench[{extra}]'")


class RunInterrupted(Exception):
    """A stop (Ctrl-C, SIGTERM, ``Stop.request()``) ended the run early; ``runs`` hold every finished request
    and, where a file was asked for, ``path`` names it (a driver's summary file for several runs)."""

    def __init__(self, runs: list[Any], path: Path | None, signal_name: str = "SIGINT") -> None:
        done = sum(len(r.requests) for r in runs)
        super().__init__(f"interrupted by {signal_name} after {done} requests")
        self.runs = runs
        self.path = path
        self.signal_name = signal_name

    @property
    def run(self) -> Any:
        """The first (for ``run``: the only) interrupted run."""
        return self.runs[0]

    @property
    def exit_code(self) -> int:
        """130 for SIGINT, 143 for SIGTERM: 128 + the signal's number, as shells report it."""
        return 143 if self.signal_name == "SIGTERM" else 130


class RequestFailed(Exception):
    """One request went wrong (an HTTP error status, a broken or malformed stream): recorded in the run's
    ``failed_requests`` and the run goes on. ``status`` is the HTTP status, if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BackendUnavailable(Exception):
    """The backend can't go on (a server that can't be reached, a worker that died): the run ends, keeping
    everything finished."""
