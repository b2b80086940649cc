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


class RunInterrupted(Exception):
    """Ctrl-C/SIGTERM stopped the run; the JSON at ``path`` holds every finished request."""

    def __init__(self, run: Any, path: Path, signal_name: str = "SIGINT") -> None:
        super().__init__(f"interrupted by {signal_name} after {len(run.requests)} requests")
        self.run = run
        self.path = path
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """130 for SIGINT, 143 for SIGTERM: 128 + the signal's number, as shells report it."""
        return 143 if self.signal_name == "SIGTERM" else 130
