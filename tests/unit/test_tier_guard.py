"""The unit tier's guard (tests/unit/conftest.py) fails a unit test that starts a process or opens a network socket,
even one that catches the exception, and lets through what a unit test may do."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.unit.conftest import TierViolation


@pytest.mark.parametrize(
    "start",
    [
        lambda: subprocess.run(["true"]),
        lambda: subprocess.Popen([sys.executable, "-c", "pass"]),
        lambda: os.system("true"),
        lambda: asyncio.run(asyncio.create_subprocess_exec("true")),
        lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
        lambda: socket.create_connection(("127.0.0.1", 9), timeout=0.1),
        lambda: socket.socket().bind(("127.0.0.1", 0)),
    ],
    ids=["subprocess.run", "Popen", "os.system", "asyncio-subprocess", "multiprocessing", "connect", "bind"],
)
def test_a_process_or_a_socket_is_refused_where_it_starts(start, _unit_guard):
    with pytest.raises(TierViolation, match="a unit test starts no process and opens no network socket"):
        start()
    assert _unit_guard  # seen, so the test would fail at teardown too
    _unit_guard.clear()  # (here it is the subject)


def test_a_local_socket_pair_and_threads_are_allowed():
    a, b = socket.socketpair()  # asyncio's self-pipe is one: no network
    with a, b:
        a.sendall(b"x")
        assert b.recv(1) == b"x"
    assert asyncio.run(asyncio.sleep(0, result=5)) == 5


def test_a_unit_test_that_swallows_the_refusal_still_fails(pytester):
    """Run a unit test that catches the exception, under this tier's conftest: it fails at teardown."""
    pytester.makeconftest("from tests.unit.conftest import _unit_guard  # noqa: F401\n")
    pytester.makepyfile(
        test_sneaky=textwrap.dedent(
            """
            import subprocess

            def test_sneaky():
                try:
                    subprocess.run(["true"])
                except Exception:
                    pass
            """
        )
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*subprocess.Popen (from *test_sneaky.py:*): a unit test starts no process*"])
