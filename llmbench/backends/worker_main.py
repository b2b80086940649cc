"""``llmbench worker``: a model in a process of its own, measuring one request at a time on command.

It is the in-process backend behind a pipe: ``llmbench ab`` starts one per side, each with its own Python
environment, package versions, model and options, and drives both from one run loop. The worker loads its
model as ``run`` does (offload check included) and then answers JSON lines on stdin with JSON lines on stdout.
Stamps are taken here, in the worker, so the pipe costs nothing per token. Protocol (version ``PROTOCOL``;
every message carries ``"v"``):

    worker -> {"v": 1, "event": "ready", "llmbench_version": ..., "pid": ..., "startup_s": ...,
               "features": [...]}    once loaded (features: FEATURES; absent from older workers)
              {"v": 1, "event": "error", "message": ...}                            a load or input error; exit 2
    parent -> {"v": 1, "op": "prepare", "prompts": [...], "prompt_file": ..., "prompt_sha256": ..., "options": {...},
              "output_tokens": [...] | null, "source": {...} | null}  (the last two: a dataset's, optional)
    worker -> {"v": 1, "event": "prepared", "run": {run record: config, environment, load, warnings}}
    parent -> {"v": 1, "op": "measure", "prompt_index": i, "repeat": r, "max_new_tokens": n | absent,
               "cpu": c | absent}     (n: this request's own output length; c: pin every thread to CPU c first)
    worker -> {"v": 1, "event": "result", "result": {...}, "warnings": [...]}  (what it saw so far: recompiles)
              | {"v": 1, "event": "stopped"}                 SIGINT stopped it (after the token in flight)
    parent -> {"v": 1, "op": "probe"}     worker -> {"v": 1, "event": "probe", "probe": {...}}
    parent -> {"v": 1, "op": "exit"}      (or end of stdin): the worker exits 0
    parent -> {"v": 1, "op": "fork", "socket": path, "heap_pad": n}  (feature "fork": ``ab --spawn fork``)
    worker -> {"v": 1, "event": "forked", "pid": ...}  its child connects to the Unix socket ``path`` and speaks
              this protocol there from its own "ready" (its model this worker's, ``n`` bytes of heap padding
              held); the worker goes on answering here, and the kernel reaps its children

    worker -> {"v": 1, "event": "failed", "error": ...}   a request the engine could not finish (the run goes on)

The worker writes nothing else on stdout (everything else goes to stderr). ``--engine`` other than transformers:
the engine's model is loaded (converted first when needed) and measured the same way; an engine that crashes
the worker (a signal) is reported by the parent with the signal's name.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from llmbench.core.errors import UserError
from llmbench.core.process import since_process_start

PROTOCOL = 1
# what a measure message may ask beyond protocol 1's first version (an older worker ignores unknown keys, so the
# parent checks this list before it relies on one): its own output length, a CPU to pin to
FEATURES = ("max_new_tokens", "cpu", "levers")  # levers: prepare's options may hold speculative/prefix_cache
# and "fork" where a forked child computes as this process does: a transformers model on the CPU, one thread (an
# OpenMP team of more threads does not survive a fork; a CUDA context neither)
FORK = "fork"


def serve_forever(spec: Any, flags: dict[str, Any], inp: IO[str], out: IO[str],
                  setup: dict[str, Any] | None = None) -> int:  # fmt: skip
    """Load ``spec`` and answer commands from ``inp`` on ``out`` until told to exit; the exit code. ``flags``: the
    run options this worker's own flags set over the parent's (cache, compile; speculative and prefix_cache
    when given: one side of ``ab`` can decode speculatively). ``setup``: the spec file's tables it was started
    with (:func:`command`), recorded in its run (``config.engine_settings.worker_spec``)."""
    from llmbench.core.process import freeze_now, frozen_gc, stop_on_signals
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread

    thread = generation_thread()
    with stop_on_signals() as stop, frozen_gc():
        try:
            if spec.is_transformers:
                loaded = thread.run(models.load_model, spec)
            else:
                from llmbench.engines.base import load

                loaded = thread.run(load, spec, lambda text: print(text, file=sys.stderr, flush=True))
        except UserError as e:
            _sender(out)(event="error", message=str(e))
            return 2
        freeze_now()
        forks = spec.is_transformers and loaded.device == "cpu" and loaded.threads == 1
        session = _Session(spec, flags, loaded, stop, forks)
        session.setup = setup
        return session.serve(inp, out, since_process_start())


def _sender(out: IO[str]) -> Any:
    def send(**msg: Any) -> None:
        out.write(json.dumps({"v": PROTOCOL, **msg}, default=str) + "\n")
        out.flush()

    return send


class _Session:
    """A loaded worker answering one parent: over stdin/stdout, or (a forked child) over a Unix socket."""

    def __init__(self, spec: Any, flags: dict[str, Any], loaded: Any, stop: Any, forks: bool) -> None:
        self.spec, self.flags, self.loaded, self.stop, self.forks = spec, flags, loaded, stop, forks
        self.backend: Any = None
        self.prompts: Any = None
        self.forked = False  # this process is a forked child
        self.setup: dict[str, Any] | None = None  # the spec file's tables it was started with, to record

    def serve(self, inp: IO[str], out: IO[str], startup_s: float | None) -> int:
        """Say ready, then answer ``inp`` on ``out`` until told to exit; the exit code."""
        from llmbench.core.version import __version__
        from llmbench.engines.hf.generation import generation_thread
        from llmbench.machine import probe as machine
        from llmbench.options import RunOptions
        from llmbench.workloads.prompts import PromptSet

        send, thread, stop = _sender(out), generation_thread(), self.stop
        send(event="ready", llmbench_version=__version__, pid=os.getpid(), startup_s=startup_s,
             features=list(FEATURES) + ([FORK] if self.forks else []), forked=self.forked)  # fmt: skip
        for line in inp:
            msg = json.loads(line)
            if msg.get("v") != PROTOCOL:
                send(event="error", message=f"the parent speaks protocol {msg.get('v')!r}; this worker {PROTOCOL}")
                return 2
            op = msg.get("op")
            if op == "exit":
                return 0
            try:
                if op == "prepare":
                    options = RunOptions(**{**msg["options"], **self.flags})
                    own = msg.get("output_tokens")  # a dataset's output lengths, one a prompt
                    self.prompts = PromptSet(msg["prompt_file"], msg["prompt_sha256"], tuple(msg["prompts"]),
                                             tuple(range(1, len(msg["prompts"]) + 1)),
                                             tuple(own) if own is not None else None, msg.get("source"))  # fmt: skip
                    self.backend = _backend(self.spec, options, self.loaded)
                    thread.run(self.backend.start_now, self.prompts)
                    run = self.backend.new_run(self.prompts)
                    if self.setup is not None:  # the file it was started with, kept in its record
                        run.config.engine_settings = {**(run.config.engine_settings or {}), "worker_spec": self.setup}
                    send(event="prepared", run=json.loads(run.model_dump_json()))
                elif op == "measure":
                    assert self.backend is not None and self.prompts is not None, "prepare first"
                    try:
                        request = _request(self.prompts, msg)
                        result = None if stop.requested else thread.run(self.backend.measure_now, request, stop)
                    except (RuntimeError, ValueError, OSError) as e:  # the engine failed this request
                        send(event="failed", error=f"{type(e).__name__}: {str(e).strip()[:300]}")
                        continue
                    if result is None:
                        send(event="stopped")
                    else:
                        send(event="result", result=json.loads(result.model_dump_json()),
                             warnings=self.backend.warnings())  # fmt: skip
                elif op == "probe":
                    assert self.backend is not None, "prepare first"
                    probe = thread.run(machine.probe, self.loaded.threads, self.loaded.device)
                    send(event="probe", probe=json.loads(probe.model_dump_json()))
                elif op == "fork" and self.forks and not self.forked:
                    send(event="forked", pid=self._fork(str(msg["socket"]), int(msg.get("heap_pad") or 0), out))
                else:
                    send(event="error", message=f"unknown op {op!r}")
            except UserError as e:
                send(event="error", message=str(e))
                return 2
        return 0

    def _fork(self, path: str, heap_pad: int, out: IO[str]) -> int:
        """Fork a child that connects to ``path`` and serves there (never returning here); the child's pid. The
        children are reaped by the kernel (SIGCHLD ignored here), so none is left a zombie."""
        import signal
        import time

        if not 0 <= heap_pad <= 1 << 24:
            raise UserError(f"fork: a heap padding of {heap_pad} bytes (expected 0 to 16 MiB)")
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        forked_at = time.perf_counter()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            code = self._child(path, heap_pad, out, forked_at)
        except BaseException as e:  # a child never returns into its parent's loop
            print(f"llmbench worker (forked): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)

    def _child(self, path: str, heap_pad: int, out: IO[str], forked_at: float) -> int:
        """The forked child: its own generation thread, the parent's pipes let go, ``heap_pad`` bytes held (where
        later allocations land moves, as a new process's environment size moves its stack), then the protocol
        over the socket, from "prepare" as a new worker (the model is the parent's: loaded once, shared)."""
        import signal
        import socket
        import time

        from llmbench.engines.hf import generation

        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocess.wait() in a probe needs its children's codes
        generation.forget_after_fork()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, out.fileno()):  # the parent's stdin and protocol: its EOF must not wait for this child
            os.dup2(null, fd)
        os.close(null)
        self.forked, self.forks = True, False
        self.backend = self.prompts = None  # the parent's backend runs on its generation thread, gone here
        pad = bytearray(heap_pad)  # noqa: F841  (held for the child's life)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        with sock.makefile("r", encoding="utf-8") as inp, sock.makefile("w", encoding="utf-8") as w:
            code = self.serve(inp, w, round(time.perf_counter() - forked_at, 4))
        sock.close()
        return code


def _request(prompts: Any, msg: dict[str, Any]) -> Any:
    """The request a ``measure`` message names: its prompt and repeat, and (optional) its own output length (ab's
    TTFT-only requests: 1) and the CPU to measure it on (ab --duet: every thread pinned there first, untimed)."""
    import dataclasses

    from llmbench.core.process import pin_to_cpu

    request = prompts.request(int(msg["prompt_index"]), int(msg["repeat"]))
    if (n := msg.get("max_new_tokens")) is not None:
        request = dataclasses.replace(request, max_new_tokens=int(n))
    if (cpu := msg.get("cpu")) is not None:
        pin_to_cpu(int(cpu))
    return request


def _backend(spec: Any, options: Any, loaded: Any) -> Any:
    """The in-process backend of ``spec``'s engine around the model already loaded."""
    if spec.is_transformers:
        from llmbench.backends.inprocess import InProcessBackend

        return InProcessBackend(spec, options, loaded=loaded)
    from llmbench.backends.engine import EngineBackend

    return EngineBackend(spec, options, loaded=loaded)


def command(spec: Any, folder: Path, executable: str | None = None) -> list[str]:
    """The ``llmbench worker`` command line that loads ``spec`` (this Python's llmbench by default): its setup
    goes as a spec file written into ``folder`` (``worker.toml``, the ``[model]`` table ``llmbench worker
    --config`` reads, checked as strictly as any config file), not as flags rebuilt one by one."""
    from llmbench.spec import ModelSection

    values = {name: getattr(spec, name) for name in ModelSection.model_fields}  # ModelOptions is the section
    path = folder / "worker.toml"
    write_spec(path, {"model": {k: v for k, v in values.items() if v is not None}})
    return [executable or sys.executable, "-m", "llmbench", "worker", "--config", str(path)]


def write_spec(path: Path, tables: dict[str, dict[str, Any]]) -> None:
    """A spec file (TOML) for a worker: written whole, then renamed (a worker never reads half of one)."""
    import tomli_w

    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text("# llmbench worker settings, written by the process that started it\n" + tomli_w.dumps(tables),
                   encoding="utf-8")  # fmt: skip
    os.replace(tmp, path)


def main(spec: Any, flags: dict[str, Any], setup: dict[str, Any] | None = None) -> int:
    """The ``llmbench worker`` command: the protocol on the real stdout, anything else printed on stderr."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1)
    sys.stdout = sys.stderr  # a library's print() must not break a protocol line
    try:
        return serve_forever(spec, flags, sys.stdin, protocol_out, setup)
    finally:
        protocol_out.close()
