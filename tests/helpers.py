"""Shared test helpers: the one way tests drive the CLI, runs with known numbers, a reporter that records."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmbench.results.metrics import ids_sha256, request_result, summarize
from llmbench.results.schema import SCHEMA_VERSION, Environment, RequestResult, Run, RunConfig
from llmbench.results.storage import journal_path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli(*args, env: dict | None = None, cwd: str | Path | None = None, process: bool = False) -> Result:
    """Run ``llmbench ARGS``: in this process through the console entry point (``main``), or, with
    ``process``, as a fresh ``python -m llmbench`` (for what a process boundary changes: imports, signals)."""
    argv = [str(a) for a in args]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    if process:
        r = subprocess.run([sys.executable, "-m", "llmbench", *argv], capture_output=True, text=True, cwd=cwd,
                           env=full_env, timeout=600)  # fmt: skip
        return Result(r.returncode, r.stdout, r.stderr)
    from llmbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_env, old_cwd = sys.argv, dict(os.environ), os.getcwd()
    sys.argv = ["llmbench", *argv]
    os.environ.update(full_env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old_argv
        os.environ.clear()
        os.environ.update(old_env)
        os.chdir(old_cwd)
    return Result(code, out.getvalue(), err.getvalue())


def cli_process(*args, env: dict | None = None) -> subprocess.Popen:
    """``llmbench ARGS`` started in the background (for signals and kill -9)."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "llmbench", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env)  # fmt: skip


@dataclass
class Recorder:
    """A reporter that records what the loop told it; ``stop_after`` requests a stop after that many requests."""

    stop: object | None = None
    stop_after: int | None = None
    statuses: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    warmups: list[tuple[int, int]] = field(default_factory=list)
    requests: list[tuple[RequestResult, int, int]] = field(default_factory=list)

    def status(self, text: str) -> None:
        self.statuses.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def warmup(self, done: int, total: int) -> None:
        self.warmups.append((done, total))

    def request(self, result: RequestResult, done: int, total: int) -> None:
        self.requests.append((result, done, total))
        if self.stop_after is not None and len(self.requests) >= self.stop_after:
            self.stop.request("test")  # type: ignore[union-attr]


def synthetic_run(
    n: int = 10, ttft_ms: float = 100.0, tpot_ms: float = 20.0, tokens: int = 16, noise: float = 0.0, seed: int = 0
) -> Run:
    """A complete run whose requests have the given TTFT/TPOT (plus uniform relative noise)."""
    rng = random.Random(seed)
    ms = 1_000_000
    requests = []
    for i in range(n):
        ttft = ttft_ms * (1 + rng.uniform(-noise, noise))
        stamps = [int(ttft * ms)]
        for _ in range(tokens - 1):
            stamps.append(stamps[-1] + int(tpot_ms * (1 + rng.uniform(-noise, noise)) * ms))
        requests.append(
            request_result(
                prompt_index=i,
                repeat=0,
                start_ns=0,
                tokenized_ns=ms,
                stamps_ns=stamps,
                prompt_tokens=30,
                output_sha256=ids_sha256(list(range(tokens))),
                output_text="x" * tokens,
            )
        )
    config = RunConfig(
        model="synthetic",
        model_source="builtin",
        weights="random",
        device="cpu",
        dtype="bfloat16",
        threads=2,
        max_new_tokens=tokens,
        ignore_eos=True,
        warmup=0,
        repeats=1,
        prompt_file="p.txt",
        prompt_sha256="0" * 64,
        prompt_count=n,
    )
    env = Environment(python="3.11", platform="test", cpu_model="test cpu")
    return Run(
        schema_version=SCHEMA_VERSION,
        llmbench_version="0",
        run_id="r",
        created_at="2026-01-01T00:00:00Z",
        complete=True,
        config=config,
        environment=env,
        requests=requests,
        summary=summarize(requests),
    )


def requests_on_disk(out: Path) -> int:
    """Finished requests a run file and its journal hold right now (a run in progress writes both)."""
    n = 0
    if out.exists():
        try:
            n = len(json.loads(out.read_text(encoding="utf-8"))["requests"])
        except (json.JSONDecodeError, KeyError):
            return 0
    j = journal_path(out)
    return n + (sum(b'"request"' in line for line in j.read_bytes().splitlines()) if j.exists() else 0)


def wait_for_requests(out: Path, at_least: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until ``out`` holds ``at_least`` finished requests; fail if ``proc`` ends or time runs out first."""
    deadline = time.monotonic() + timeout
    while requests_on_disk(out) < at_least:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not progress"
        time.sleep(0.05)


def common_prefix(a: list, b: list) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
