"""The stopwatch under load (issue 59): the client's stamps against a stub that says when it sent each event, the
run's self-check, a starved client that says so (never blaming a proxy), and a closed loop dealt out to client
processes. Ground truth is the stamping stub (benchmarks/stamp_server.py) on loopback."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

import llmbench
from llmbench.results.storage import load_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from stamp_server import StampServer

GAP_MS = 10.0


@pytest.fixture
def stub():
    """The stamping stub on 127.0.0.1 in a thread of its own: (base URL, the stub)."""
    server = StampServer(first_ms=15.0, gap_ms=GAP_MS, tokens=16)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port: list[int] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        port.append(loop.run_until_complete(server.serve(0)))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{port[0]}/v1", server
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_every_stamp_sits_after_the_servers_send_and_the_run_checks_itself(cli, stub, prompt_file, tmp_path):
    url, server = stub
    out = tmp_path / "r.json"
    r = cli("run", prompt_file, "--endpoint", url, "--concurrency", "3", "--repeats", "2", "--max-new-tokens", "16",
            "--warmup", "0", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert len(run.requests) == 6 and server.requests == 6
    for q in run.requests:
        assert q.server_send_ms is not None and len(q.server_send_ms) == q.chunks == 16
        # no event is read before it was sent (one machine's clock; the conversion costs microseconds)
        assert all(c >= s - 0.5 for c, s in zip(q.token_times_ms, q.server_send_ms, strict=True)), q
        # the stub's schedule: its sends are GAP_MS apart, late at most by its own lateness
        gaps = [b - a for a, b in zip(q.server_send_ms, q.server_send_ms[1:], strict=False)]
        assert min(gaps) > 0
    c = run.client
    assert c is not None and c.lag_events == 6 * 16 and c.lag_p50_ms is not None and c.lag_p50_ms >= -0.5
    assert c.loop_lag_p99_ms is not None and c.fell_behind is not None and c.processes == 1
    assert "stamps behind the server's sends" in r.stderr or "client:" in r.stdout + r.stderr


def test_a_starved_client_says_it_fell_behind_and_blames_no_proxy(stub):
    url, _ = stub

    async def starved() -> llmbench.Run:
        stop = asyncio.Event()

        async def hog() -> None:  # the client's own loop blocked 30 ms in every 40: it reads every stream late
            while not stop.is_set():
                t = time.perf_counter()
                while time.perf_counter() - t < 0.030:
                    pass
                await asyncio.sleep(0.010)

        task = asyncio.create_task(hog())
        try:
            return await llmbench.ameasure([f"prompt {i}" for i in range(4)], endpoint=url, model="stub",
                                           concurrency=4, max_new_tokens=16, warmup=0)  # fmt: skip
        finally:
            stop.set()
            await task

    run = asyncio.run(starved())
    assert run.client is not None and run.client.fell_behind is True, run.client
    assert run.client.loop_lag_p99_ms is not None and run.client.loop_lag_p99_ms > 5.0
    said = " ".join(run.warnings)
    assert "THE CLIENT FELL BEHIND" in said and "event loop woke" in said, said
    assert "proxy with buffering on" not in said, said  # its own late reads bunch events: not a relay's buffering


def test_a_closed_loop_is_dealt_out_to_client_processes(cli, stub, prompt_file, tmp_path):
    url, server = stub
    out = tmp_path / "r.json"
    r = cli("run", prompt_file, "--endpoint", url, "--concurrency", "4", "--workers", "2", "--repeats", "2",
            "--max-new-tokens", "16", "--warmup", "0", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert run.config.endpoint is not None and run.config.endpoint.workers == 2
    assert sorted((q.prompt_index, q.repeat) for q in run.requests) == [(i, k) for i in range(3) for k in range(2)]
    assert server.requests == 6 and run.client is not None and run.client.processes == 2
    assert run.client.per_process is not None and len(run.client.per_process) == 2
    assert sum(p.lag_events or 0 for p in run.client.per_process) == run.client.lag_events == 6 * 16


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "2", "--turns", "2"), "--workers 2: --turns runs each conversation in one process"),
        (("--workers", "8", "--concurrency", "4"), "--workers 8 with --concurrency 4: each client process needs"),
    ],
)
def test_workers_a_run_cant_deal_out_are_refused_in_one_line(cli, stub, prompt_file, tmp_path, args, message):
    url, server = stub
    r = cli("run", prompt_file, "--endpoint", url, *args, "-o", tmp_path / "r.json", "-q")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert server.requests == 0 and not (tmp_path / "r.json").exists()
