"""How fast can llmbench's open-loop client send on time? The load generator's own ceiling.

A server that answers instantly (a Starlette app in its own process: 4 content events and a usage chunk per
request, no model) takes the open loop at rising rates; for each rate and worker count this reports the send
lateness (actual send - due time: p50, p99, max), the achieved rate and the client's CPU. The ceiling is the
highest rate at which lateness p99 stays under a few ms. Above it the client, not the server, sets the
latency, which is when `--workers N` helps (until the server's process or the cores run out).

    python benchmarks/load_ceiling.py [--rates 50,100,200,400,800] [--seconds 3] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time

import httpx

import llmbench

SERVER = r"""
import json, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

def chunk(text):
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"

USAGE = "data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4,
                                                        "total_tokens": 9}}) + "\n\n"

async def chat(request):
    await request.body()
    async def events():
        for w in ("a", " b", " c", " d"):
            yield chunk(w)
        yield USAGE
        yield "data: [DONE]\n\n"
    return StreamingResponse(events(), media_type="text/event-stream")

async def models(request):
    return JSONResponse({"data": [{"id": "instant"}]})

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(f"{url}/v1/models", timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("the instant server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="50,100,200,400,800")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args()
    proc, url = start_server()
    rows = []
    try:
        for rate in [float(r) for r in args.rates.split(",")]:
            for workers in [int(w) for w in args.workers.split(",")]:
                endpoint = llmbench.EndpointOptions(endpoint=url, open_loop=llmbench.OpenLoop(
                    rate=rate, arrival="poisson", duration_s=args.seconds, workers=workers))  # fmt: skip
                run = asyncio.run(llmbench.ameasure(["x"], endpoint=endpoint, max_new_tokens=4, warmup=2, seed=1))
                s = run.summary
                late = s.send_lateness_ms
                row = {"rate": rate, "workers": workers, "sent": len(run.requests) + len(run.failed_requests),
                       "achieved": s.achieved_rate_rps, "late_p50_ms": round(late.p50, 2),
                       "late_p99_ms": round(late.p99, 2), "late_max_ms": round(late.max, 2),
                       "client_cpu_pct": run.client.cpu_pct_of_one_core if run.client else None,
                       "failed": len(run.failed_requests)}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        proc.kill()
    print("\n| offered/s | workers | achieved/s | lateness p50 ms | p99 ms | max ms | client CPU % of a core |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['rate']:g} | {r['workers']} | {r['achieved']} | {r['late_p50_ms']} | {r['late_p99_ms']} | "
            f"{r['late_max_ms']} | {r['client_cpu_pct']} |"
        )


if __name__ == "__main__":
    main()
