"""A starved client: does a run say so? llmbench's endpoint client pinned to one CPU beside CPU burners (issue 59).

The stamping stub (benchmarks/stamp_server.py) runs pinned to the other CPU; the client (this process, one client
process: ``workers=1``) to CPU 0, with ``--burners`` busy loops pinned there too. For each burner count and
concurrency, the row says how late the stamps were against the stub's sends (the truth), what the run's self-check
recorded (its loop's lag p99, the share of the window its loop waited for a CPU, /proc/thread-self/schedstat), and
whether the run said THE CLIENT FELL BEHIND.

    python benchmarks/starved_client.py [--burners 0,1,3] [--concurrency 8,32] [--rounds 4]

Linux only (CPU affinity, schedstat); needs 2 CPUs or more.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_keeps_up import sched_pct, start_stub, truth_errors

BURN = "while True: pass"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", default="0,1,3", help="busy loops pinned beside the client")
    ap.add_argument("--concurrency", default="8,32")
    ap.add_argument("--rounds", type=int, default=4, help="requests per stream")
    ap.add_argument("--port", type=int, default=8013)
    a = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("starved_client.py needs 2 CPUs: the stub on one, the client and its burners on the other")
    client_cpu, stub_cpu = sorted(os.sched_getaffinity(0))[:2]

    import llmbench

    stub = start_stub(a.port, 20.0, 10.0, 64)
    os.sched_setaffinity(stub.pid, {stub_cpu})
    os.sched_setaffinity(0, {client_cpu})
    rows = []
    try:
        for burners in [int(x) for x in a.burners.split(",")]:
            for c in [int(x) for x in a.concurrency.split(",")]:
                hogs = [subprocess.Popen(["taskset", "-c", str(client_cpu), sys.executable, "-c", BURN])
                        for _ in range(burners)]  # fmt: skip
                try:
                    run = llmbench.measure([f"prompt {i}" for i in range(c)], endpoint=f"http://127.0.0.1:{a.port}/v1",
                                           model="stamp-stub", concurrency=c, repeats=a.rounds, warmup=0,
                                           max_new_tokens=64, workers=1)  # fmt: skip
                finally:
                    for h in hogs:
                        h.kill()
                        h.wait()
                cl = run.client
                row = {"burners": burners, "concurrency": c, **truth_errors(run),
                       "loop_lag_p99_ms": cl.loop_lag_p99_ms if cl else None, "sched_wait_pct": sched_pct(cl),
                       "sched_wait_per_run_ms": cl.sched_wait_per_run_ms if cl else None,
                       "client_cpu_pct": cl.cpu_pct_of_one_core if cl else None,
                       "said": "fell behind" if any("CLIENT FELL BEHIND" in w for w in run.warnings) else "kept up",
                       "blamed_a_proxy": any("buffered between server" in w for w in run.warnings)}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        stub.terminate()
        stub.wait(10)
    cols = ("burners", "concurrency", "delay_p50_ms", "delay_p99_ms", "ttft_err_p99_ms", "loop_lag_p99_ms",
            "sched_wait_pct", "sched_wait_per_run_ms", "client_cpu_pct", "said", "blamed_a_proxy")  # fmt: skip
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row.get(k)) for k in cols) + " |")


if __name__ == "__main__":
    main()
