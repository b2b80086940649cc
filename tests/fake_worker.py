"""A torch-free ``llmbench worker`` with known delays: the ground truth that ab's logic is tested against.

It speaks the worker protocol (``llmbench.backends.worker_main``) exactly as the real worker does, but instead of a
model it sleeps: the first token after ``--ttft-ms``, each later one ``--tpot-ms`` after the last, times a seeded
jitter of at most ``--jitter`` (relative). It stamps what it slept, so a head started with ``--tpot-ms`` 10% above
the base's is 10% slower by construction, and what ab concludes can be checked against that. It starts in about
0.3 s, where a real worker imports torch and loads a model for 7-9 s.

    python tests/fake_worker.py --ttft-ms 4 --tpot-ms 2 [--threads 1] [--jitter 0.02] [--seed 0]
        [--exit-after N]    die (exit 9) while producing the Nth token of its life, warm-ups included
        [--refuse MESSAGE]  send the protocol's error event instead of ready, and exit 2
        [--load-s S]        sleep S seconds before ready, recorded as the model's load time
        [--features a,b]    announce these features (default: the real worker's)
        [--version V]       announce this llmbench version
        [--tag NAME]        how its lines in LLMBENCH_FAKE_LOG name it
        [--dtype D] [--quantize Q]          the setup ab's calibration appends (recorded as the run's dtype)
        [--setup-speed float32+int8-dynamic=0.3,bfloat16=1]  a setup's delays times this (ground truth for the
                            calibration's choice; a setup not named: 1)

Every request's stamps are written to ``LLMBENCH_FAKE_LOG`` (JSON lines) when that variable names a file: which
process measured what, on which CPU, in which order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import time
from typing import Any

from llmbench.backends.worker_main import FEATURES, PROTOCOL
from llmbench.core.version import __version__
from llmbench.machine import envinfo
from llmbench.options import RunOptions
from llmbench.results.metrics import request_result
from llmbench.results.schema import LoadInfo, Probe, RunConfig, new_run_record
from llmbench.workloads.prompts import PromptSet

_STARTED = time.perf_counter()


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_worker")
    p.add_argument("--ttft-ms", type=float, default=4.0)
    p.add_argument("--tpot-ms", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jitter", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exit-after", type=int, default=None)
    p.add_argument("--refuse", default=None)
    p.add_argument("--load-s", type=float, default=0.0)
    p.add_argument("--features", default=",".join(FEATURES))
    p.add_argument("--version", default=__version__)
    p.add_argument("--tag", default="")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--quantize", default="none")
    p.add_argument("--setup-speed", default="")
    return p.parse_args(argv)


class _Fake:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.rng = random.Random(a.seed * 1_000_003 + os.getpid())
        self.tokens = 0  # every token of this process's life, warm-ups included (--exit-after counts them)
        self.stopped = False
        self.prompts: PromptSet | None = None
        self.options: RunOptions | None = None
        self.log = os.environ.get("LLMBENCH_FAKE_LOG")
        speeds = dict(item.split("=") for item in a.setup_speed.split(",") if item)
        setup = a.dtype if a.quantize == "none" else f"{a.dtype}+{a.quantize}"
        self.speed = float(speeds.get(setup, 1.0))

    def _sleep_ms(self, ms: float) -> int:
        """Sleep about ``ms`` (times the jitter) and return the nanoseconds it was asked to sleep."""
        ms *= self.speed * (1 + self.rng.uniform(-self.a.jitter, self.a.jitter))
        end = time.perf_counter_ns() + int(ms * 1e6)
        while (left := end - time.perf_counter_ns()) > 0:
            time.sleep(min(left / 1e9, 0.001))
        return int(ms * 1e6)

    def _token(self) -> None:
        self.tokens += 1
        if self.a.exit_after is not None and self.tokens >= self.a.exit_after:
            print(f"fake worker: dying at token {self.tokens} as asked", file=sys.stderr, flush=True)
            os._exit(9)

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.options = RunOptions(**msg["options"])
        own = msg.get("output_tokens")
        n = len(msg["prompts"])
        self.prompts = PromptSet(msg["prompt_file"], msg["prompt_sha256"], tuple(msg["prompts"]),
                                 tuple(range(1, n + 1)), tuple(own) if own is not None else None,
                                 msg.get("source"))  # fmt: skip
        config = RunConfig(model="fake-worker", model_source="builtin", weights="random", device="cpu",
                           dtype=self.a.dtype, threads=self.a.threads, **self.options.config_fields(self.prompts),
                           engine_settings={"fake": {"ttft_ms": self.a.ttft_ms,
                                                     "tpot_ms": self.a.tpot_ms}})  # fmt: skip
        load = LoadInfo(seconds=self.a.load_s, parameters=1)
        return json.loads(new_run_record(config, envinfo.collect("cpu"), load=load).model_dump_json())

    def measure(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        assert self.prompts is not None and self.options is not None, "prepare first"
        index, repeat = int(msg["prompt_index"]), int(msg["repeat"])
        request = self.prompts.request(index, repeat)
        n = msg.get("max_new_tokens") or request.max_new_tokens or self.options.max_new_tokens
        start = time.perf_counter_ns()
        stamps, t = [], start
        for k in range(int(n)):
            if self.stopped:
                return None
            t += self._sleep_ms(self.a.ttft_ms if k == 0 else self.a.tpot_ms)
            self._token()
            stamps.append(t)
        text = "x" * len(stamps)
        result = request_result(prompt_index=index, repeat=repeat, start_ns=start, stamps_ns=stamps, prompt_tokens=10,
                                output_sha256=hashlib.sha256(text.encode()).hexdigest(), output_text=text)  # fmt: skip
        if self.log:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"tag": self.a.tag, "pid": os.getpid(), "prompt_index": index, "repeat": repeat,
                                    "tokens": len(stamps), "cpu": msg.get("cpu"),
                                    "ttft_ms": result.ttft_ms}) + "\n")  # fmt: skip
        return json.loads(result.model_dump_json())


def main(argv: list[str]) -> int:
    a = _args(argv)
    out = sys.stdout

    def send(**msg: Any) -> None:
        out.write(json.dumps({"v": PROTOCOL, **msg}) + "\n")
        out.flush()

    fake = _Fake(a)

    def on_signal(signum: int, frame: Any) -> None:
        fake.stopped = True  # as the real worker: stop after the token in flight, say "stopped"

    signal.signal(signal.SIGINT, on_signal)
    if a.refuse:
        send(event="error", message=a.refuse)
        return 2
    time.sleep(a.load_s)
    send(event="ready", llmbench_version=a.version, pid=os.getpid(), startup_s=round(time.perf_counter() - _STARTED, 3),
         features=[f for f in a.features.split(",") if f])  # fmt: skip
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("v") != PROTOCOL:
            send(event="error", message=f"the parent speaks protocol {msg.get('v')!r}; this worker {PROTOCOL}")
            return 2
        op = msg.get("op")
        if op == "exit":
            return 0
        if op == "prepare":
            send(event="prepared", run=fake.prepare(msg))
        elif op == "measure":
            result = None if fake.stopped else fake.measure(msg)
            if result is None:
                send(event="stopped")
            else:
                send(event="result", result=result, warnings=[])
        elif op == "probe":
            send(event="probe", probe=Probe(mem_read_gbps=20.0, matmul_gflops=100.0, threads=a.threads,
                                            seconds=0.0).model_dump())  # fmt: skip
        else:
            send(event="error", message=f"unknown op {op!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
