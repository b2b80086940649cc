"""The stopwatch under load (issue 59): the client's stamps against a stub that says when it sent each event, the
run's self-check, a starved client that says so (never blaming a proxy), and a closed loop dealt out to client
processes. Ground truth is the stamping stub (benchmarks/stamp_server.py) on loopback."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import pytest

import llmbench
from llmbench.results.schema import ClientStats
from llmbench.results.storage import load_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from stamp_server import StampServer

ROOT = Path(__file__).resolve().parents[2]

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
    assert c.sched_wait_ms is not None and c.sched_runs and c.sched_runs > 0  # Linux: the loop's wait for a CPU


def test_reads_are_stamped_by_the_connection_as_they_arrive(stub, monkeypatch):
    """The stamps come from aiohttp's protocol (``data_received``), not from the reader's wake-up: here the loop is
    blocked 40 ms right after the first token's bytes were handed over, before the reader could wake for them; its
    stamp stays within milliseconds of the stub's send (a stamp taken by the reader would be 40 ms late)."""
    from llmbench.backends.http.client import _StampingHandler, parsed, request_body, stream_reads, stream_session
    from llmbench.options import RunOptions
    from llmbench.results.client import server_sends

    url, _ = stub
    received = _StampingHandler.data_received
    blocked: list[bool] = []

    def then_blocked(self: _StampingHandler, data: bytes) -> None:
        received(self, data)
        if self.arrivals and not blocked:  # the first body bytes: the first token's event
            blocked.append(True)
            time.sleep(0.040)

    monkeypatch.setattr(_StampingHandler, "data_received", then_blocked)

    async def one():
        session = stream_session(1, 10.0)
        try:
            body = request_body("stub", "hi", RunOptions(max_new_tokens=16))
            s, reads = await stream_reads(session, url.rstrip("/") + "/chat/completions", body, {})
        finally:
            await session.close()
        return parsed(s, reads)

    s = asyncio.run(one())
    assert blocked and s.timing is not None
    sent = server_sends(s.timing, s.start_unix_ns, len(s.stamps_ns))
    assert sent is not None and len(sent) == 16
    first_ms = (s.stamps_ns[0] - s.start_ns) / 1e6
    assert -0.5 <= first_ms - sent[0] < 20.0, (first_ms, sent[0])  # stamped on arrival, before the 40 ms block
    later = [(t - s.start_ns) / 1e6 - x for t, x in zip(s.stamps_ns[1:], sent[1:], strict=True)]
    assert min(later) >= -0.5  # and no event is stamped before it was sent


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


# The starved client runs in a process of its own at nice 10, pinned with the burners: under Linux's EEVDF
# scheduler (6.6+) a mostly-sleeping client of equal weight is woken within a slice of 3 ms, so equal-weight
# burners alone starved it on one kernel and not on another (CI's 6.18 read it on time); a lower weight waits
# behind their slices on any kernel. Every lazy import is made before the burners start, so only the
# measurement is starved, not Python's start.
_STARVED_CLIENT = """
import json, os, sys
import llmbench
url, cpu = sys.argv[1], int(sys.argv[2])
os.sched_setaffinity(0, {cpu})
llmbench.measure(["warm"], endpoint=url, model="stub", max_new_tokens=32, warmup=0)
os.nice(10)
print("ready", flush=True)
sys.stdin.readline()
run = llmbench.measure([f"prompt {i}" for i in range(8)], endpoint=url, model="stub", concurrency=8, repeats=3,
                       max_new_tokens=32, warmup=0, workers=1)
print(json.dumps({"client": run.client.model_dump(mode="json"), "warnings": run.warnings}), flush=True)
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and 2 CPUs: the stub on one, the client and its burners on the other",
)
def test_a_client_starved_by_cpu_burners_on_its_core_says_it_fell_behind():
    """The hidden case of issue 59: a client pinned to one CPU with busy loops beside it (the stub on another
    CPU, in a process of its own) reads late, and the run says so, and why, and blames no proxy."""
    import json
    import subprocess

    client_cpu, stub_cpu = sorted(os.sched_getaffinity(0))[:2]
    stub = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "stamp_server.py"), "--port", "0", "--tokens",
                             "32"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    procs: list[subprocess.Popen] = [stub]
    try:
        assert stub.stdout is not None
        url = stub.stdout.readline().split()[3]
        os.sched_setaffinity(stub.pid, {stub_cpu})
        client = subprocess.Popen([sys.executable, "-c", _STARVED_CLIENT, url, str(client_cpu)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(client)
        assert client.stdout is not None and client.stdin is not None
        assert client.stdout.readline().strip() == "ready"
        procs += [subprocess.Popen(["taskset", "-c", str(client_cpu), sys.executable, "-c", "while True: pass"])
                  for _ in range(4)]  # fmt: skip
        client.stdin.write("go\n")
        client.stdin.flush()
        out, _ = client.communicate(timeout=300)
        assert client.returncode == 0, out
    finally:
        for p in procs:
            p.kill()
            p.wait()
    said = json.loads(out.splitlines()[-1])
    c = ClientStats.model_validate(said["client"])
    assert c.fell_behind is True, c
    assert c.sched_wait_ms is not None and c.sched_wait_ms > 0
    warned = " ".join(said["warnings"])
    assert "THE CLIENT FELL BEHIND" in warned and "waited for a CPU" in warned, warned
    assert "buffered between server and client" not in warned, warned
