"""How long `llmbench compare` takes, end to end, on two runs of 10,000 requests x 256 tokens.

Writes two synthetic runs (known TTFT/TPOT with 10% noise), then times the real console command
(`llmbench compare A B --fail-on-regression 10`) in a fresh process, three times; prints the best and median.

    python benchmarks/compare_speed.py [--requests 10000] [--tokens 256]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()

    from llmbench import save_run
    from tests.helpers import synthetic_run

    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d) / "a.json", Path(d) / "b.json"
        save_run(synthetic_run(n=args.requests, tokens=args.tokens, noise=0.1, seed=1), a)
        save_run(synthetic_run(n=args.requests, tokens=args.tokens, noise=0.1, seed=2, tpot_ms=21.0), b)
        print(f"two runs of {args.requests} requests x {args.tokens} tokens, {a.stat().st_size / 1e6:.1f} MB each")
        times = []
        for _ in range(3):
            t = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-m", "llmbench", "compare", str(a), str(b), "--fail-on-regression", "10"],
                capture_output=True,
                text=True,
            )
            times.append(time.perf_counter() - t)
            assert r.returncode in (0, 1), r.stderr
        print(f"llmbench compare end to end: best {min(times):.2f} s, median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
