"""The unit tier's guard: a unit test starts no process and opens no network socket.

What a unit test may use: this process, its files, threads, the tiny model built in this process. Anything that
starts a process (subprocess, os.system, fork, posix_spawn: multiprocessing and asyncio's subprocesses go
through them) or binds or connects an inet socket fails the test with the line below; such a test belongs in
``tests/integration`` (loopback servers, the fake worker) or ``tests/e2e`` (real workers, real-size models).
Local socket pairs (asyncio's self-pipe) stay allowed: they are no network.
"""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
import traceback

import pytest

WHY = "a unit test starts no process and opens no network socket: move it to tests/integration or tests/e2e"


class TierViolation(AssertionError):
    """What a unit test that reached for a process or the network gets (an AssertionError: pytest shows it)."""


def _caller() -> str:
    """The innermost frame outside the standard library's process and socket modules: who asked."""
    skip = ("/subprocess.py", "/asyncio/", "/socket.py", "/multiprocessing/", "tests/unit/conftest.py")
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.endswith(skip) and not any(s in frame.filename for s in skip):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


@pytest.fixture(scope="session", autouse=True)
def _import_time_side_effects():
    """Libraries that reach for a process or a socket once, when first imported, do it before the guard is on:
    matplotlib builds its font list with ``fc-list`` (once per cache folder: the suite's is new), urllib3 binds
    ``::1`` to learn whether IPv6 works. That is the environment settling, not the code under test."""
    import contextlib
    import importlib

    for name in ("urllib3", "matplotlib.font_manager"):
        with contextlib.suppress(ImportError):  # an extra not installed: its tests skip
            importlib.import_module(name)


@pytest.fixture(autouse=True)
def _unit_guard(monkeypatch):
    """Every unit test runs under the guard (monkeypatch undoes it after the test). A violation raises where it
    happens and fails the test at teardown too, so a test that swallows the exception still fails. Yields the
    violations seen (the guard's own tests empty it)."""
    seen: list[str] = []

    def refuse(what: str):
        def refused(*args, **kwargs):
            seen.append(f"{what} (from {_caller()})")
            raise TierViolation(f"{what}: {WHY}")

        return refused

    def inet_only(what: str, original):
        def guarded(self, *args, **kwargs):
            if self.family in (socket.AF_INET, socket.AF_INET6):
                seen.append(f"{what} (from {_caller()})")
                raise TierViolation(f"{what}: {WHY}")
            return original(self, *args, **kwargs)

        return guarded

    # _execute_child: Popen's __init__ closes the pipes it made when starting the child fails
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess.Popen"))
    # the call under every spawn (multiprocessing's "spawn" and "forkserver" reach it without subprocess.Popen)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refuse("a child process"))
    for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"os.{name}"))
    for name in ("bind", "connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, inet_only(f"socket.{name}", getattr(socket.socket, name)))
    yield seen
    if seen:
        pytest.fail(f"{', '.join(dict.fromkeys(seen))}: {WHY}", pytrace=False)
