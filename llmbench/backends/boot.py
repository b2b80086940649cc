"""A server the run starts itself (``run --endpoint URL --server-command CMD``), and its cold start as its first
user sees it.

Every instant is on this process's ``time.perf_counter()``, the clock the endpoint client stamps tokens with:

- **exec**: just before the command is forked and executed (``subprocess.Popen``: no shell, a session of its own,
  stdin from /dev/null, stdout and stderr into the log);
- **listening**: the first TCP connect to the endpoint's host and port that succeeds;
- **ready**: the arrival of the first ``GET /v1/models`` (the OpenAI-compatible model list: no generation)
  answered 200, asked once listening;
- **the first request's start and first token**: the endpoint backend's own stamps (``request_start``, the first
  content event). The run loop sends it before any warm-up (``cold_first``), so it is the first generation the
  server ever gets.

Listening and ready are polled every :data:`POLL_S` (recorded as ``poll_s``: each phase is late by at most that and
one try). A server that exits before it is ready, or is not ready within ``--boot-timeout``, is one UserError line
naming its exit status (or the phase it did not reach) and its log, with the log's last line; so is a port that
something else listens on already (the run would measure that instead). The server is stopped at the end,
whatever the end (a finished run, an error, Ctrl-C: the driver closes it in a ``finally``): SIGTERM to its
process group, SIGKILL after :data:`GRACE_S`, then SIGKILL to whatever of the group is left. What the boot's
line shows of the command is its program's file name: its arguments may hold a secret (``--api-key X``), and
a quoted log line is masked the way :func:`llmbench.core.redact.redact_command` would hide them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from llmbench.backends.http.client import chat_url
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.core.redact import REDACTED, mask, redact_command, url_secrets
from llmbench.results.schema import RequestResult, ServerBoot

POLL_S = 0.01  # the polling interval of listening and ready: their resolution
GRACE_S = 10.0  # SIGTERM, then this long for the server to exit, then SIGKILL
_CONNECT_S = 1.0  # one connect try at most this long (a remote host that drops SYNs)
_GET_S = 5.0  # one GET /v1/models at most this long


def models_url(url: str) -> str:
    """The model list beside the endpoint's chat completions: ``http://h:p/v1`` -> ``http://h:p/v1/models``."""
    u = urlsplit(chat_url(url))
    return urlunsplit((u.scheme, u.netloc, u.path.removesuffix("/chat/completions") + "/models", "", ""))


def server_log(output: Path | None, folder: str | Path | None) -> Path:
    """Where the server's output goes: ``RUN.server.log`` beside the run's file; a run whose name is chosen
    later (``results/``) starts in a file of its own there and is renamed then (:meth:`BootedServer.move_log_beside`);
    a run that writes no file, a temporary file."""
    import tempfile

    if output is not None:
        return log_beside(output)
    fd, name = tempfile.mkstemp(prefix="llmbench-", suffix=".server.log", dir=folder)
    os.close(fd)
    return Path(name)


def log_beside(output: Path) -> Path:
    """``RUN.server.log`` for ``RUN.json``."""
    return output.with_suffix(".server.log")


class BootedServer:
    """``argv`` started as the server at ``url`` (its base URL, ``.../v1``), measured from its exec to ready, then
    to the first token of its first request (:meth:`note_first`, the endpoint backend's call), and stopped."""

    def __init__(self, argv: list[str], url: str, headers: dict[str, str], timeout_s: float,
                 *, poll_s: float = POLL_S) -> None:  # fmt: skip
        self.argv = argv
        self.program = os.path.basename(argv[0].rstrip("/")) or argv[0]
        u = urlsplit(url.strip())
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.models_url = models_url(url)
        self.headers = headers
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.log: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None  # once stopped (negative: the signal that ended it)
        self.exec_at: float | None = None
        self.listening_at: float | None = None
        self.ready_at: float | None = None
        self.first: tuple[int, int, float, float] | None = None  # (prompt_index, repeat, its start, ttft_ms)
        self.secrets = _hidden_words(argv)

    # -- starting --------------------------------------------------------------------------------------------

    async def boot(self, output: Path | None, folder: str | Path | None, stop: Stop,
                   status: Callable[[str], None] | None = None, *, append: bool = False) -> None:  # fmt: skip
        """Start the server, its output into a log beside ``output`` (the run's file; or in ``folder`` when its
        name comes later: :func:`server_log`; ``append``: after an earlier process's, a resumed run's), and wait
        until it is ready. UserError (the server stopped) when it can't start, exits first or is not ready within
        the timeout; RunInterrupted on a stop."""
        if await self._connect() is not None:
            raise UserError(f"--server-command: something listens on {self.host}:{self.port} already (the "
                            "--endpoint's port): the run would measure it, not the server it starts; stop it or "
                            "choose another port")  # fmt: skip
        self.log = log = server_log(output, folder)
        if status is not None:
            status(f"starting the server ({self.program}; its output: {log})")
        with open(log, "ab" if append else "wb") as out:  # the child holds its own copy of the descriptor
            try:
                self.exec_at = time.perf_counter()
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            except OSError as e:
                out.close()
                if not append:
                    log.unlink(missing_ok=True)  # nothing ran: no log to point at
                raise UserError(f"--server-command: cannot start {self.program}: {e.strerror or e}") from None
        self.pid = self.proc.pid
        try:
            await self._wait(stop)
        except BaseException:
            self.close()
            raise
        if status is not None:
            assert self.listening_at is not None and self.ready_at is not None
            status(f"the server is ready {self.ready_at - self.exec_at:.2f} s after its start (listening after "
                   f"{self.listening_at - self.exec_at:.2f} s)")  # fmt: skip

    async def _wait(self, stop: Stop) -> None:
        """Poll until listening, then until GET /v1/models answers 200."""
        assert self.proc is not None and self.exec_at is not None
        deadline = self.exec_at + self.timeout_s
        missing = f"nothing listened on {self.host}:{self.port}"
        async with httpx.AsyncClient(headers=self.headers) as client:
            while True:
                if stop.requested:
                    raise RunInterrupted([], None, stop.signal or "stop")
                code = self.proc.poll()
                if code is not None:
                    raise UserError(self._ended(code))
                left = deadline - time.perf_counter()
                if left <= 0:
                    self.close()
                    raise UserError(f"--server-command: {self.program} was not ready {self.timeout_s:g} s after its "
                                    f"start (--boot-timeout; {missing}); it was stopped; its log: "
                                    f"{self.log}{self._last_line()}")  # fmt: skip
                if self.listening_at is None:
                    self.listening_at = await self._connect(min(left, _CONNECT_S))
                if self.listening_at is not None:
                    missing = await self._models(client, min(left, _GET_S))
                    if not missing:
                        self.ready_at = time.perf_counter()
                        return
                await asyncio.sleep(self.poll_s)

    async def _connect(self, timeout: float = _CONNECT_S) -> float | None:
        """The instant a TCP connect to the host and port succeeded; None when it was refused or timed out."""
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout)
        except (OSError, asyncio.TimeoutError):
            return None
        at = time.perf_counter()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return at

    async def _models(self, client: httpx.AsyncClient, timeout: float) -> str:
        """'' when GET /v1/models answers 200, else what it did (for the timeout's line)."""
        path = urlsplit(self.models_url).path
        try:
            r = await client.get(self.models_url, timeout=timeout)
        except httpx.HTTPError as e:
            return f"GET {path} got no answer ({type(e).__name__})"
        return "" if r.status_code == 200 else f"GET {path} answered {r.status_code}"

    def _ended(self, code: int) -> str:
        assert self.exec_at is not None
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        return (f"--server-command: {self.program} {how} before it was ready ({time.perf_counter() - self.exec_at:.1f} "
                f"s after its start); its log: {self.log}{self._last_line()}")  # fmt: skip

    def _last_line(self) -> str:
        """' (its last line: ...)' from the log, secrets masked; '' when it is empty or unreadable."""
        if self.log is None:
            return ""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        return f" (its last line: {mask(last, self.secrets)[:200]})" if last else " (empty)"

    # -- measuring -------------------------------------------------------------------------------------------

    def note_first(self, prompt_index: int, repeat: int, start_ns: int, ttft_ms: float) -> None:
        """The first measured request: its start (``request_start``) and TTFT. Later calls change nothing."""
        if self.first is None:
            self.first = (prompt_index, repeat, start_ns / 1e9, ttft_ms)

    def record(self, requests: Sequence[RequestResult]) -> ServerBoot | None:
        """The boot's phases and the first request against the warm ones (the run's other requests); None when
        the server never became ready."""
        if self.exec_at is None or self.listening_at is None or self.ready_at is None:
            return None
        boot = ServerBoot(program=self.program, poll_s=self.poll_s, log=self.log.name if self.log else None,
                          exec_to_listening_s=round(self.listening_at - self.exec_at, 6),
                          exec_to_ready_s=round(self.ready_at - self.exec_at, 6))  # fmt: skip
        if self.first is None:
            return boot
        index, repeat, start, ttft = self.first
        gap = round(start - self.ready_at, 6)
        others = (r for r in requests if (r.prompt_index, r.repeat) != (index, repeat) and not r.ttft_only)
        warm = [r.ttft_ms for r in others if r.ttft_ms is not None and math.isfinite(r.ttft_ms)]
        p50 = round(float(statistics.median(warm)), 3) if warm else None
        boot.ready_to_first_request_s = gap
        boot.exec_to_first_token_s = round(boot.exec_to_ready_s + gap + ttft / 1000, 6)
        boot.first_prompt_index, boot.first_repeat = index, repeat
        boot.first_request_ttft_ms = ttft
        boot.warm_ttft_p50_ms, boot.warm_requests = p50, len(warm)
        boot.first_request_penalty_ms = round(ttft - p50, 3) if p50 is not None else None
        return boot

    # -- the end ---------------------------------------------------------------------------------------------

    def move_log_beside(self, output: Path) -> None:
        """The log renamed beside ``output``, the run's file, whose name is known now; the server writes on into
        it. Kept where it is when it can't be moved."""
        new = log_beside(output)
        if self.log is not None and self.log != new:
            with contextlib.suppress(OSError):
                os.replace(self.log, new)
                self.log = new

    def close(self) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after :data:`GRACE_S`, then SIGKILL to what the
        group left behind. Idempotent; safe when it never started or exited already."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # a worker of its own it did not take down with it
        self.exit_code = proc.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """``sig`` to the process group ``pgid`` (the server's session: its pid); nothing when none of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _hidden_words(argv: list[str]) -> list[str]:
    """The words (or values) of ``argv`` that :func:`redact_command` hides or rewrites: what a quoted log line
    must not show either."""
    shown = shlex.split(redact_command(argv))
    hidden: list[str] = []
    for word, seen in zip(argv, shown, strict=False):
        if word == seen:
            continue
        if seen.endswith("=" + REDACTED) and "=" in word:  # VAR=value, --api-key=value
            hidden.append(word.split("=", 1)[1])
        elif seen == REDACTED:  # the value after --token, -H
            hidden.append(word)
        else:  # a URL that lost its credentials or query
            hidden += url_secrets(word)
    return hidden
