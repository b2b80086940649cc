"""The one exception type that means "the user asked for something we can't do", and reading user files."""

from __future__ import annotations

from pathlib import Path


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
