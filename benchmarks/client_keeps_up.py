"""Does the stopwatch keep up? llmbench's endpoint client against the stamping stub, concurrency swept (issue 59).

The stub (benchmarks/stamp_server.py, a process of its own on loopback) streams each request on a fixed schedule,
the first event ``--first-ms`` after the request arrived and then one every ``--gap-ms``, and says when it sent
each. For each concurrency C the client runs ``--rounds`` x C requests (``llmbench.measure``, C in flight) and the
table shows, against that truth:

- client delay per event: the client's arrival stamp - the stub's send stamp, one machine's clock (p50, p99);
- TTFT error: measured TTFT - the stub's first send after the request arrived (p50, p99), so the connection's
  own time counts as error too (a few hundred microseconds on loopback);
- ITL error: each measured gap between events - the stub's gap between the same two sends (p99 of |error|);
- the client's CPU per event and in % of one core (all its processes), its event loop's lag p99;
- the stub's own lateness p99 (send - plan): where it grows, the machine, not the client, is the limit;
- what the run itself said (its client line and warnings).

    python benchmarks/client_keeps_up.py [--concurrency 1,8,32,64,128,256] [--gap-ms 10] [--workers auto]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start_stub(port: int, first_ms: float, gap_ms: float, tokens: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "stamp_server.py"), "--port", str(port),
                             "--first-ms", str(first_ms), "--gap-ms", str(gap_ms), "--tokens", str(tokens)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.readline()  # "stamp stub on ..." once it listens
    return proc


def stub_stats(port: int, reset: bool = False) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats{'?reset' if reset else ''}", timeout=10) as r:
        return json.loads(r.read())


def truth_errors(run) -> dict:
    """Per-event client delay, TTFT and ITL errors against the stub's send stamps (the run's own record of them:
    requests[].server_send_ms, on each request's timeline)."""
    delay, ttft_err, itl_err = [], [], []
    for r in run.requests:
        sent = r.server_send_ms
        if not sent:
            continue
        delay += [c - s for c, s in zip(r.token_times_ms, sent, strict=True)]
        ttft_err.append(r.ttft_ms - sent[0])
        itl_err += [abs((b - a) - (sb - sa)) for a, b, sa, sb in zip(r.token_times_ms, r.token_times_ms[1:], sent,
                                                                    sent[1:], strict=False)]  # fmt: skip

    def q(v: list[float], p: float) -> float | None:
        return round(float(np.percentile(v, p)), 3) if v else None

    return {"delay_p50_ms": q(delay, 50), "delay_p99_ms": q(delay, 99), "ttft_err_p50_ms": q(ttft_err, 50),
            "ttft_err_p99_ms": q(ttft_err, 99), "itl_err_p99_ms": q(itl_err, 99), "events": len(delay)}  # fmt: skip


def sched_pct(cl) -> float | None:
    """The largest share of the window a client process's event loop waited for a CPU (%)."""
    parts = [p for p in ((cl.per_process or [cl]) if cl else []) if p.sched_wait_ms is not None and p.wall_s > 0]
    return round(max(100 * p.sched_wait_ms / 1000 / p.wall_s for p in parts), 2) if parts else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,8,32,64,128,256")
    ap.add_argument("--first-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="requests per stream")
    ap.add_argument("--workers", default="auto", help="client processes: auto (llmbench's default) or a number")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args()

    import llmbench

    stub = start_stub(a.port, a.first_ms, a.gap_ms, a.tokens)
    rows = []
    try:
        for c in [int(x) for x in a.concurrency.split(",")]:
            stub_stats(a.port, reset=True)
            kw = {} if a.workers == "auto" else {"workers": int(a.workers)}
            t0 = time.perf_counter()
            run = llmbench.measure([f"prompt {i}" for i in range(c)], endpoint=f"http://127.0.0.1:{a.port}/v1",
                                   model="stamp-stub", concurrency=c, repeats=a.rounds, warmup=0,
                                   max_new_tokens=a.tokens, **kw)  # fmt: skip
            wall = time.perf_counter() - t0
            stats = stub_stats(a.port)
            cl = run.client
            row = {"concurrency": c, "workers": run.config.endpoint.workers, "requests": len(run.requests),
                   "wall_s": round(wall, 1), **truth_errors(run),
                   "ttft_p50_ms": run.summary.ttft_ms.p50, "ttft_p99_ms": run.summary.ttft_ms.p99,
                   "client_cpu_us_per_event": round(1000 * cl.cpu_ms_per_event, 1) if cl and cl.cpu_ms_per_event
                   else None, "client_cpu_pct": cl.cpu_pct_of_one_core if cl else None,
                   "loop_lag_p99_ms": cl.loop_lag_p99_ms if cl else None,
                   "sched_wait_pct": sched_pct(cl), "sched_wait_per_run_ms": cl.sched_wait_per_run_ms if cl else None,
                   "stub_lateness_p99_ms": stats["lateness_p99_ms"],
                   "fell_behind": [w[:90] for w in run.warnings if "CLIENT" in w or "buffered bet" in w]}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        stub.terminate()
        stub.wait(10)
    if a.json:
        a.json.write_text(json.dumps({"machine": os.uname().nodename, "rows": rows}, indent=1))
    cols = (
        "concurrency",
        "workers",
        "delay_p50_ms",
        "delay_p99_ms",
        "ttft_err_p50_ms",
        "ttft_err_p99_ms",
        "itl_err_p99_ms",
        "client_cpu_us_per_event",
        "client_cpu_pct",
        "loop_lag_p99_ms",
        "sched_wait_pct",
        "stub_lateness_p99_ms",
    )
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row.get(k)) for k in cols) + " |")


if __name__ == "__main__":
    main()
