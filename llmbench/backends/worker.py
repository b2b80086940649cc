"""A model in another process (``llmbench worker``), driven over its stdin/stdout: the in-process backend at a
distance. Each worker has its own Python environment, package versions, model and options, which is what lets
``llmbench ab`` measure base and head side by side. No torch here: the parent stays light."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from llmbench.backends import Request
from llmbench.backends.worker_main import PROTOCOL
from llmbench.core.errors import BackendUnavailable, RequestFailed, UserError
from llmbench.core.process import Stop
from llmbench.core.redact import redact_command, scrub
from llmbench.options import RunOptions
from llmbench.results.schema import Probe, RequestResult, Run
from llmbench.workloads.prompts import PromptSet

# What a signal that killed a worker usually means, for the one line the user reads.
_SIGNAL_HINTS = {
    "SIGILL": "illegal instruction: the engine was built for instructions this CPU lacks (a -march=native build "
    "on another CPU; README, 'Engines', says how to build llama-cpp-python for every CPU of a kind)",
    "SIGSEGV": "segmentation fault in native code",
    "SIGBUS": "bus error in native code (a memory-mapped file changed or vanished?)",
    "SIGABRT": "the engine aborted (an assertion or an uncaught C++ exception)",
    "SIGKILL": "killed (out of memory? see dmesg)",
    "SIGFPE": "arithmetic fault in native code",
}


def exit_reason(code: int | None) -> str:
    """'the worker exited (code N)', or the signal that killed it and what that usually means."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = _SIGNAL_HINTS.get(name)
        return f"the worker crashed with {name}" + (f" ({hint})" if hint else "")
    return f"the worker exited (code {code})"


class WorkerBackend:
    """Starts ``command`` (an ``llmbench worker ...`` command line, maybe through ``env`` or another venv's
    ``llmbench``) and measures through it. Errors name the side, the command (redacted: ``env HF_TOKEN=...``
    and the like) and the worker's last stderr line."""

    cancel_on_stop = False  # the worker stops after the token in flight (it gets the SIGINT), then says so

    def __init__(
        self, command: list[str], options: RunOptions, *, label: str = "", name: str | None = None,
        on_stderr: Any = None, spec_dir: Path | None = None,
    ) -> None:  # fmt: skip
        options.check()
        if not command:
            raise UserError(f"{label}an empty worker command")
        self.command = command
        self.name = name  # how errors name the worker (default: its command line)
        self.on_stderr = on_stderr  # each line the worker writes on stderr (its progress while loading)
        self.options = options
        self.label = label
        self.proc: asyncio.subprocess.Process | None = None
        self.pid: int | None = None
        self._reader: asyncio.StreamReader | None = None  # the protocol: the process's stdout, or a socket
        self._writer: asyncio.StreamWriter | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._stderr_task: asyncio.Task | None = None
        self._record: Run | None = None
        self._warnings: list[str] = []
        self._remove_stop: Any = None
        self.env: dict[str, str] | None = None  # the worker's environment (None: this process's)
        self.startup_s: float | None = None  # the worker's own count, process start to ready
        self.spawn_s: float | None = None  # this side's count, spawn to ready (what a pool waits for)
        self.load_s: float | None = None  # its model's load (load.seconds): ab's load_s row, a sample a process
        self.features: tuple[str, ...] = ()  # what its measure messages may ask (worker_main.FEATURES)
        self.version: str | None = None
        self.spec_dir = spec_dir  # the folder of the spec file the worker was started with: removed at close

    # -- the pipe ---------------------------------------------------------------------------------------------

    def _where(self, last_line: bool = True) -> str:
        last = next((line for line in reversed(self.stderr_tail) if line.strip()), "") if last_line else ""
        who = self.name or f"worker: {redact_command(self.command)}"
        return f"({who}" + (f"; its last line: {scrub(last.strip())[:200]})" if last else ")")

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode("utf-8", "replace")
            self.stderr_tail.append(text)
            if self.on_stderr is not None and text.strip() and self._record is None:  # while it loads
                self.on_stderr(text.strip()[:200])

    async def _gone(self) -> str:
        """Once the protocol ended: how the process ended (waited for)."""
        assert self.proc is not None
        code = await self.proc.wait()
        if self._stderr_task is not None:
            await self._stderr_task  # the last lines, for the message
        return exit_reason(code)

    async def _receive(self) -> dict[str, Any]:
        assert self._reader is not None
        line = await self._reader.readline()
        if not line:
            raise BackendUnavailable(f"{await self._gone()} {self._where()}")
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            raise BackendUnavailable(f"the worker wrote a line that is not the protocol: {line[:80]!r} "
                                     f"{self._where()}") from None  # fmt: skip
        if msg.get("v") != PROTOCOL:
            raise BackendUnavailable(f"the worker speaks protocol {msg.get('v')!r}, this llmbench {PROTOCOL} "
                                     f"(upgrade one of them) {self._where()}")  # fmt: skip
        if msg.get("event") == "error":  # the worker's own one line says what is wrong
            raise BackendUnavailable(f"{msg.get('message')} {self._where(last_line=False)}")
        return msg

    async def _ask(self, **msg: Any) -> dict[str, Any]:
        assert self._writer is not None
        try:
            self._writer.write((json.dumps({"v": PROTOCOL, **msg}) + "\n").encode())
            await self._writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the worker is gone: _receive says how
        return await self._receive()

    # -- the backend ----------------------------------------------------------------------------------------

    def early_config(self, prompts: PromptSet) -> dict[str, Any]:
        o = self.options
        return {"max_new_tokens": o.max_new_tokens, "ignore_eos": o.ignore_eos, "repeats": o.repeats,
                "prompt_sha256": prompts.sha256, "system_prompt": o.system_prompt}  # fmt: skip

    async def _spawn(self) -> None:
        """Start the worker process; its stdout and stdin carry the protocol."""
        try:
            # a session of its own: a terminal's Ctrl-C reaches the parent only, which forwards it (see stop)
            self.proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, env=self.env,
            )  # fmt: skip
        except OSError as e:
            raise UserError(
                f"{self.label}cannot start the worker {redact_command(self.command)}: {e.strerror or e}"
            ) from None
        self.pid, self._reader, self._writer = self.proc.pid, self.proc.stdout, self.proc.stdin
        self._stderr_task = asyncio.ensure_future(self._read_stderr())

    async def start(self, prompts: PromptSet) -> None:
        """Start the worker, wait until its model is loaded, hand it the prompts and the run options."""
        spawned = time.perf_counter()
        try:
            await self._spawn()
            ready = await self._receive()
            self.spawn_s = round(time.perf_counter() - spawned, 3)
            self.startup_s = ready.get("startup_s")
            self.features, self.version = tuple(ready.get("features") or ()), ready.get("llmbench_version")
            o = self.options
            options = {k: getattr(o, k) for k in ("max_new_tokens", "ignore_eos", "warmup", "repeats", "sample",
                                                  "seed", "temperature", "top_p", "system_prompt", "chat_template",
                                                  "truncate")}  # fmt: skip
            if o.lever is not None:  # sent only when set: an older worker would refuse the keys
                if "levers" not in self.features:
                    raise BackendUnavailable(f"the worker {redact_command(self.command)} predates --speculative and "
                                             "--prefix-cache (llmbench 0.3.0)")  # fmt: skip
                options.update(speculative=o.speculative, prefix_cache=o.prefix_cache)
            msg = await self._ask(op="prepare", prompts=list(prompts.prompts), prompt_file=prompts.path,
                                  prompt_sha256=prompts.sha256, options=options,
                                  output_tokens=list(prompts.output_tokens) if prompts.output_tokens else None,
                                  source=prompts.source)  # fmt: skip
        except BackendUnavailable as e:
            await self.close()
            raise UserError(f"{self.label}{e}") from None
        self._record = Run.model_validate(msg["run"])
        if self._record.load is not None:
            self._record.load.startup_s = self.startup_s
            self.load_s = self._record.load.seconds

    def new_run(self, prompts: PromptSet) -> Run:
        assert self._record is not None, "start() first"
        return self._record.model_copy(deep=True)

    async def activate(self) -> None:
        pass  # the worker's process holds its own threads and kernel

    def _forward_stop(self, stop: Stop) -> None:
        """Once per run: a stop asked of the parent reaches the worker as SIGINT (it stops after the token)."""
        if self._remove_stop is None:

            def forward() -> None:
                if self.pid is not None and self.alive():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGINT)

            self._remove_stop = stop.on_request(forward)

    async def measure(self, request: Request, stop: Stop, started_s: float) -> RequestResult | None:
        self._forward_stop(stop)
        extra: dict[str, int] = {} if request.cpu is None else {"cpu": request.cpu}
        if request.ttft_only:
            extra["max_new_tokens"] = 1
        elif request.max_new_tokens is not None and "max_new_tokens" in self.features:
            extra["max_new_tokens"] = request.max_new_tokens  # this request's own length (ab's calibration, pilot)
        msg = await self._ask(op="measure", prompt_index=request.prompt_index, repeat=request.repeat, **extra)
        event = msg.get("event")
        if event == "stopped":
            return None
        if event == "failed":
            raise RequestFailed(str(msg.get("error")))
        self._warnings = list(msg.get("warnings") or [])
        result = RequestResult.model_validate(msg["result"])
        result.started_s = round(started_s, 6)  # the parent's clock orders both sides' requests
        result.pinned_cpu = request.cpu
        return result

    def probe_key(self) -> Hashable:
        return ("worker", id(self))  # each worker probes on its own threads, in its own process

    async def probe(self) -> Probe | None:
        msg = await self._ask(op="probe")
        return Probe.model_validate(msg["probe"])

    def finish(self, run: Run) -> list[str]:
        return list(self._warnings)  # as of the worker's last result

    def alive(self) -> bool:
        """The worker's process runs (a pool asks before it forks from it or closes it)."""
        return self.proc is not None and self.proc.returncode is None

    async def close(self) -> None:
        """Tell the worker to exit; kill it if it does not within 10 s; remove its spec file's folder."""
        if self._remove_stop is not None:
            self._remove_stop()
        try:
            await self._close_worker()
        finally:
            if self.spec_dir is not None:
                shutil.rmtree(self.spec_dir, ignore_errors=True)

    async def _close_worker(self) -> None:
        if not self.alive():
            return
        if self._writer is not None:
            try:
                self._writer.write((json.dumps({"v": PROTOCOL, "op": "exit"}) + "\n").encode())
                await self._writer.drain()
                self._writer.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # gone already
        try:
            await asyncio.wait_for(self._exited(), 10)
        except asyncio.TimeoutError:
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
            await self._exited()
        if self._stderr_task is not None:
            await self._stderr_task

    async def _exited(self) -> None:
        assert self.proc is not None
        await self.proc.wait()


class ForkedWorker(WorkerBackend):
    """A worker forked by another one, ``server`` (``ab --spawn fork``): its model is the server's, loaded once,
    and it speaks the protocol over a Unix socket in a private folder. It starts in ~0.1 s where a new process
    imports and loads for seconds; what differs between such processes is a heap padding (``heap_pad`` bytes),
    not the hash seed or where the weights lie (the server's). Its stderr is the server's."""

    CONNECT_S = 60.0  # a fork's child connects in milliseconds; a server that never forks is not waited on forever

    def __init__(
        self, server: WorkerBackend, options: RunOptions, *, heap_pad: int, label: str = "", name: str | None = None
    ) -> None:  # fmt: skip
        super().__init__(server.command, options, label=label, name=name)
        self.server, self.heap_pad = server, heap_pad
        self._created: float | None = None  # the child's start time, as the kernel has it
        self.stderr_tail = server.stderr_tail  # the child writes where its server does

    async def _spawn(self) -> None:
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="llmbench-fork-")  # 0700: no other user can connect
        connected: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        connected = asyncio.get_running_loop().create_future()

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if connected.done():
                writer.close()  # only the one child this fork made
            else:
                connected.set_result((reader, writer))

        path = os.path.join(folder, "worker.sock")
        listener = await asyncio.start_unix_server(accept, path)
        try:
            msg = await self.server._ask(op="fork", socket=path, heap_pad=self.heap_pad)
            if msg.get("event") != "forked":
                raise BackendUnavailable(f"the server answered {msg.get('event')!r} to fork {self._where()}")
            self.pid = int(msg["pid"])
            import psutil

            with contextlib.suppress(psutil.Error):  # who this pid is: a later process given the same pid is not
                self._created = psutil.Process(self.pid).create_time()
            self._reader, self._writer = await asyncio.wait_for(connected, self.CONNECT_S)
        except asyncio.TimeoutError:
            raise BackendUnavailable(f"the forked worker did not connect within {self.CONNECT_S:g} s "
                                     f"{self._where()}") from None  # fmt: skip
        finally:
            listener.close()
            shutil.rmtree(folder, ignore_errors=True)

    async def start(self, prompts: PromptSet) -> None:
        await super().start(prompts)
        self.load_s = None  # the server's load, not this process's: no sample of a cold start

    def alive(self) -> bool:
        """The child runs: its pid exists, started when the child did (not a later process given the pid: never
        signalled), and is no zombie (the server reaps it; one that died too is reaped by init)."""
        import psutil

        if self.pid is None or self._created is None:
            return False
        try:
            proc = psutil.Process(self.pid)
            return proc.create_time() == self._created and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    async def _exited(self) -> None:
        while self.alive():  # the server ignores SIGCHLD: the kernel reaps the child at once
            await asyncio.sleep(0.01)

    async def _gone(self) -> str:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._exited(), 5)
        return f"the forked worker (pid {self.pid}) closed its connection"
