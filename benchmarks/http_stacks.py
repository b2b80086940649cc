"""Which HTTP stack keeps up? Each candidate client streams from the stamping stub, stamping every network read
and nothing else on the hot path, at each concurrency (issue 59: the stack is chosen by measurement).

Candidates: httpx (``aiter_bytes``, llmbench's stack before) and aiohttp (``content.iter_any``), each on asyncio's
default event loop and on uvloop. For each: client CPU per event (µs), the stamps' delay behind the stub's sends
(p50, p99, ms: one machine's clock), the stub's own lateness p99.

    pip install uvloop   # optional: the uvloop rows are skipped without it
    python benchmarks/http_stacks.py [--concurrency 32,64,256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_keeps_up import start_stub, stub_stats

BODY = {"model": "stamp-stub", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 64}


def delays(start_unix_ns: int, reads: list[tuple[int, bytes]], start_ns: int) -> list[float]:
    """Each event's stamp (the read that completed it) minus the stub's send stamp, ms."""
    data = b"".join(d for _, d in reads)
    tail = data[data.rfind(b'"llmbench"') :]
    timing = json.loads(b"{" + tail[: tail.index(b"}") + 1] + b"}")["llmbench"]
    sends = [timing["arrived_unix_ms"] + t - start_unix_ns / 1e6 for t in timing["token_times_ms"]]
    stamps, seen = [], 0
    for t, d in reads:  # an event is whole when its blank line arrived
        for _ in range(d.count(b"\n\n")):
            stamps.append((t - start_ns) / 1e6)
            seen += 1
    return [c - s for c, s in zip(stamps, sends, strict=False)]


async def run_httpx(url: str, c: int, rounds: int) -> list[float]:
    import httpx

    out: list[float] = []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=c, max_keepalive_connections=c)) as client:

        async def one() -> None:
            for _ in range(rounds):
                start_ns, start_unix = time.perf_counter_ns(), time.time_ns()
                reads = []
                async with client.stream("POST", url, json=BODY) as r:
                    async for d in r.aiter_bytes():
                        reads.append((time.perf_counter_ns(), d))
                out.extend(delays(start_unix, reads, start_ns))

        await asyncio.gather(*(one() for _ in range(c)))
    return out


async def run_aiohttp(url: str, c: int, rounds: int) -> list[float]:
    import aiohttp

    out: list[float] = []
    conn = aiohttp.TCPConnector(limit=c)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one() -> None:
            for _ in range(rounds):
                start_ns, start_unix = time.perf_counter_ns(), time.time_ns()
                reads = []
                async with session.post(url, json=BODY) as r:
                    async for d in r.content.iter_any():
                        reads.append((time.perf_counter_ns(), d))
                out.extend(delays(start_unix, reads, start_ns))

        await asyncio.gather(*(one() for _ in range(c)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="32,64,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=8012)
    a = ap.parse_args()
    stub = start_stub(a.port, 20.0, 10.0, 64)
    url = f"http://127.0.0.1:{a.port}/v1/chat/completions"
    loops = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop

        loops["uvloop"] = uvloop.new_event_loop
    except ImportError:
        pass
    print("| stack | loop | C | CPU µs/event | delay p50 ms | delay p99 ms | stub lateness p99 ms |")
    print("|---|---|---|---|---|---|---|")
    try:
        for c in [int(x) for x in a.concurrency.split(",")]:
            for stack, fn in (("httpx", run_httpx), ("aiohttp", run_aiohttp)):
                for name, new_loop in loops.items():
                    stub_stats(a.port, reset=True)
                    loop = new_loop()
                    cpu0 = time.process_time()
                    d = loop.run_until_complete(fn(url, c, a.rounds))
                    cpu = time.process_time() - cpu0
                    loop.close()
                    late = stub_stats(a.port)["lateness_p99_ms"]
                    print(f"| {stack} | {name} | {c} | {1e6 * cpu / max(len(d), 1):.0f} | {np.percentile(d, 50):.2f} | "
                          f"{np.percentile(d, 99):.2f} | {late} |", flush=True)  # fmt: skip
    finally:
        stub.terminate()
        stub.wait(10)


if __name__ == "__main__":
    main()
