"""What saving a long run costs: 5,000 requests x 256 tokens, naive full rewrites vs llmbench's RunWriter.

Naive: the whole JSON rewritten atomically after every request (O(n^2) bytes in all).
RunWriter: each request appended to a journal (O(1)), full rewrites when the run grew by 10% (O(n) in all).
Requests are simulated to take --request-s seconds (only to express the cost as a share of a run).

    python benchmarks/write_cost.py [--requests 5000] [--tokens 256] [--request-s 2.0] [--naive-sample 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--request-s", type=float, default=2.0)
    ap.add_argument("--naive-sample", type=int, default=500, help="time every k-th naive rewrite, extrapolate")
    args = ap.parse_args()

    from llmbench import load_run, save_run
    from llmbench.results.storage import RunWriter
    from tests.helpers import synthetic_run

    full = synthetic_run(n=args.requests, tokens=args.tokens)
    requests = full.requests
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "run.json"
        # naive: cost of a rewrite at size i, sampled every k requests, integrated
        naive = 0.0
        k = args.naive_sample
        for i in range(k, args.requests + 1, k):
            full.requests = requests[:i]
            t = time.perf_counter()
            save_run(full, out)
            naive += (time.perf_counter() - t) * k
        size_mb = out.stat().st_size / 1e6
        # RunWriter
        full.requests = []
        sim = {"t": 0.0}
        out.unlink()
        writer = RunWriter(out, full, clock=lambda: sim["t"] + time.perf_counter())
        t0 = time.perf_counter()
        for r in requests:
            sim["t"] += args.request_s
            full.requests.append(r)
            writer.add(full, r)
        t = time.perf_counter()
        writer.close(full)
        close_s = time.perf_counter() - t
        total = time.perf_counter() - t0
        assert len(load_run(out).requests) == args.requests
    run_s = args.requests * args.request_s
    print(
        f"{args.requests} requests x {args.tokens} tokens, final JSON {size_mb:.1f} MB, "
        f"simulated run {run_s / 3600:.2f} h ({args.request_s} s a request)"
    )
    print(f"naive rewrite after every request: {naive:8.1f} s  ({100 * naive / run_s:.2f}% of the run)")
    print(
        f"RunWriter (journal + geometric):   {total:8.1f} s  ({100 * total / run_s:.2f}% of the run): "
        f"{writer.snapshots} snapshots {writer.snapshot_seconds:.1f} s, journal {writer.journal_seconds:.1f} s, "
        f"close {close_s:.2f} s"
    )


if __name__ == "__main__":
    main()
