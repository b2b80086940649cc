"""A real PostgreSQL server for the history tests: Debian's binaries, a cluster in a temporary folder, on a loopback
port, started and stopped by the tests (initdb refuses to run as root: as root the cluster is the postgres
user's)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def available() -> str | None:
    """None when a server can be started here, else why not."""
    if not all(_binary(b) for b in ("initdb", "pg_ctl", "createdb")):
        return "PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql; .ci/run does)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user to own the cluster"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server() -> Iterator[str]:
    """A fresh server; yields the URL of an empty database ``history``. Its cluster lives in a folder of its own
    under the system's temp folder (pytest's are private to root, where the postgres user can't reach)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="llmbench-pg-"))
    os.chmod(folder, 0o755)
    data = folder / "pgdata"
    data.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for p in (folder, data):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*argv: str) -> None:
        subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True, timeout=120)

    run(_binary("initdb") or "initdb", "-D", str(data), "-U", "llmbench", "--auth=trust", "-E", "UTF8")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={data} -c fsync=off"
    run(_binary("pg_ctl") or "pg_ctl", "-D", str(data), "-o", options, "-l", str(data / "log"), "-w", "start")
    try:
        run(_binary("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "llmbench", "history")
        yield f"postgresql://llmbench@127.0.0.1:{port}/history"
    finally:
        subprocess.run([*prefix, _binary("pg_ctl") or "pg_ctl", "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


def new_database(server_url: str, name: str) -> str:
    """A new, empty database on the test server; its URL (SQLAlchemy's spelling)."""
    from sqlalchemy import create_engine, text

    from llmbench.history.db import resolve_url

    url = resolve_url(server_url)
    assert url is not None
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return url.rsplit("/", 1)[0] + f"/{name}"
