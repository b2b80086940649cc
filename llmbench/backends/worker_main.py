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

    worker -> {"v": 1, "event": "failed", "error": ...}   a request the engine could not finish (the run goes on)

The worker writes nothing else on stdout (everything else goes to stderr). ``--engine`` other than transformers:
the engine's model is loaded (converted first when needed) and measured the same way; an engine that crashes
the worker (a signal) is reported by the parent with the signal's name.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from llmbench.core.errors import UserError
from llmbench.core.process import since_process_start

PROTOCOL = 1
# what a measure message may ask beyond protocol 1's first version (an older worker ignores unknown keys, so the
# parent checks this list before it relies on one): its own output length, a CPU to pin to
FEATURES = ("max_new_tokens", "cpu", "levers")  # levers: prepare's options may hold speculative/prefix_cache


def serve_forever(spec: Any, flags: dict[str, Any], inp: IO[str], out: IO[str]) -> int:
    """Load ``spec`` and answer commands from ``inp`` on ``out`` until told to exit; the exit code. ``flags``: the
    run options this worker's own flags set over the parent's (cache, compile; speculative and prefix_cache
    when given: one side of ``ab`` can decode speculatively)."""
    from llmbench.core.process import freeze_now, frozen_gc, stop_on_signals
    from llmbench.core.version import __version__
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread
    from llmbench.machine import probe as machine
    from llmbench.options import RunOptions
    from llmbench.workloads.prompts import PromptSet

    def send(**msg: Any) -> None:
        out.write(json.dumps({"v": PROTOCOL, **msg}, default=str) + "\n")
        out.flush()

    thread = generation_thread()
    with stop_on_signals() as stop, frozen_gc():
        try:
            if spec.is_transformers:
                loaded = thread.run(models.load_model, spec)
            else:
                from llmbench.engines.base import load

                loaded = thread.run(load, spec, lambda text: print(text, file=sys.stderr, flush=True))
        except UserError as e:
            send(event="error", message=str(e))
            return 2
        freeze_now()
        send(event="ready", llmbench_version=__version__, pid=os.getpid(), startup_s=since_process_start(),
             features=list(FEATURES))  # fmt: skip
        backend: Any = None
        prompts: PromptSet | None = None
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
                    options = RunOptions(**{**msg["options"], **flags})
                    own = msg.get("output_tokens")  # a dataset's output lengths, one a prompt
                    prompts = PromptSet(msg["prompt_file"], msg["prompt_sha256"], tuple(msg["prompts"]),
                                        tuple(range(1, len(msg["prompts"]) + 1)),
                                        tuple(own) if own is not None else None, msg.get("source"))  # fmt: skip
                    backend = _backend(spec, options, loaded)
                    thread.run(backend.start_now, prompts)
                    send(event="prepared", run=json.loads(backend.new_run(prompts).model_dump_json()))
                elif op == "measure":
                    assert backend is not None and prompts is not None, "prepare first"
                    try:
                        request = _request(prompts, msg)
                        result = None if stop.requested else thread.run(backend.measure_now, request, stop)
                    except (RuntimeError, ValueError, OSError) as e:  # the engine failed this request
                        send(event="failed", error=f"{type(e).__name__}: {str(e).strip()[:300]}")
                        continue
                    if result is None:
                        send(event="stopped")
                    else:
                        send(event="result", result=json.loads(result.model_dump_json()), warnings=backend.warnings())
                elif op == "probe":
                    assert backend is not None, "prepare first"
                    probe = thread.run(machine.probe, loaded.threads, loaded.device)
                    send(event="probe", probe=json.loads(probe.model_dump_json()))
                else:
                    send(event="error", message=f"unknown op {op!r}")
            except UserError as e:
                send(event="error", message=str(e))
                return 2
    return 0


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


def command(spec: Any, executable: str | None = None) -> list[str]:
    """The ``llmbench worker`` command line that loads ``spec`` (this Python's llmbench by default)."""
    argv = [executable or sys.executable, "-m", "llmbench", "worker", "--engine", spec.engine, "--model", spec.model,
            "--weights", spec.weights]  # fmt: skip
    if spec.precision:
        argv += ["--precision", spec.precision]
    if spec.threads is not None:
        argv += ["--threads", str(spec.threads)]
    if spec.is_transformers:
        argv += ["--device", spec.device, "--dtype", spec.dtype]
        if spec.quantize:
            argv += ["--quantize", spec.quantize]
        if spec.attn:
            argv += ["--attn", spec.attn]
    argv += [flag for flag, on in (("--allow-pickle", spec.allow_pickle), ("--trust-remote-code",
             spec.trust_remote_code)) if on]  # fmt: skip
    return argv


def main(spec: Any, flags: dict[str, Any]) -> int:
    """The ``llmbench worker`` command: the protocol on the real stdout, anything else printed on stderr."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1)
    sys.stdout = sys.stderr  # a library's print() must not break a protocol line
    try:
        return serve_forever(spec, flags, sys.stdin, protocol_out)
    finally:
        protocol_out.close()
