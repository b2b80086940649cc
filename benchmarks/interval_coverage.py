"""Does each 95% interval llmbench prints hold 95%? Coverage by simulation, n = 2 .. 40, per kind of interval.

    python benchmarks/interval_coverage.py [--reps 1000] [--kinds median,mean,...] [--ns 2,3,...] [--out FILE]

``--ns 20000,100000``: at large n, where a quantile's change is sectioned instead of bootstrapped
(:data:`llmbench.analysis.variance.SECTIONED_FROM`).

For each kind (:data:`llmbench.analysis.coverage.KINDS`) and n, the lowest coverage over six scenarios (normal,
skewed and heavy-tailed noise; no change and +3%), ``--reps`` data sets each; "-" where llmbench prints no
interval at that n (:data:`llmbench.analysis.variance.MIN_N`). A row whose shown cells are all 0.93 or more earns
its name; benchmarks/README.md, "Interval coverage", holds the table this printed.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from llmbench.analysis import coverage

NS = list(range(2, 41))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--kinds", default=",".join(coverage.KINDS))
    ap.add_argument("--ns", default=None, help="the n to simulate, comma-separated (default: 2 to 40)")
    ap.add_argument("--out", default=None, help="also write {kind: {n: worst coverage}} as JSON")
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",")] if args.ns else NS
    width = max(4, *(len(str(n)) for n in ns))
    table: dict[str, dict[int, float]] = {}
    t0 = time.perf_counter()
    print(f"worst coverage over {len(coverage.SCENARIOS)} scenarios, {args.reps} data sets each ('-': not shown)")
    print("kind".ljust(14) + " ".join(f"{n:>{width}}" for n in ns))
    for kind in args.kinds.split(","):
        k = coverage.KINDS[kind]
        shown_from = k.need(kind)
        table[kind] = {}
        cells = []
        for n in ns:
            c = coverage.worst(kind, n, args.reps)
            table[kind][n] = c
            cells.append(" -  " if n < shown_from or math.isnan(c) else f"{c:.2f}")
        print(kind.ljust(14) + " ".join(f"{c:>{width}}" for c in cells), flush=True)
    print(f"{time.perf_counter() - t0:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
