"""How honest is compare's interval on the shape of the wait? A simulation with the real interval function.

compare's shape rows (llmbench/analysis/shape.py) are a mean difference NEW - BASE over pairs with a Student t
interval. Stall figures are far from normal: most answers have none, a few have long ones. Per cell, 4,000 simulated
comparisons of n pairs, each side drawn from one of:

    stalls 30%   a request stalls with probability 0.3, for Exponential(300 ms) (reader_stall_ms-like)
    stalls 10%   the same with probability 0.1
    counts       Poisson(0.5) stalls a request (reader_stalls-like)
    QoE          1 - Exponential(0.05), clipped to [0, 1] (andes_qoe / fluidity-like)

A/A: both sides drawn alike (the true difference is 0): how often the 95% interval holds 0 (a gate's false alarm is
the interval excluding 0 on the bad side). One-sided: BASE never stalls, NEW is drawn as above: coverage of the true
mean, and how often the interval's lower bound lies above the truth (the only error that can fail a gate wrongly).

    python benchmarks/shape_interval.py [--reps 4000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmbench.analysis.shape import paired_interval  # the interval compare prints

NS = (6, 7, 8, 10, 12, 16, 20, 30, 60)
MEANS = {"stalls 30%": 0.3 * 300, "stalls 10%": 0.1 * 300, "counts": 0.5}


def draw(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind.startswith("stalls"):
        p = 0.3 if kind == "stalls 30%" else 0.1
        return (rng.random(n) < p) * rng.exponential(300, n)
    if kind == "counts":
        return rng.poisson(0.5, n).astype(float)
    return np.clip(1 - rng.exponential(0.05, n), 0, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4000)
    args = ap.parse_args()
    rng = np.random.default_rng(46)
    print("A/A: share of intervals holding 0")
    print("| draw | " + " | ".join(f"n={n}" for n in NS) + " |")
    print("|---" * (len(NS) + 1) + "|")
    for kind in ("stalls 30%", "stalls 10%", "counts", "QoE"):
        cells = []
        for n in NS:
            held = 0
            for _ in range(args.reps):
                low, high = paired_interval(draw(kind, n, rng) - draw(kind, n, rng))
                held += (low <= 0 <= high) or math.isnan(low)
            cells.append(f"{held / args.reps:.3f}")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("\nOne-sided (BASE never stalls): coverage / share with the lower bound above the truth")
    print("| draw | " + " | ".join(f"n={n}" for n in NS) + " |")
    print("|---" * (len(NS) + 1) + "|")
    for kind, truth in MEANS.items():
        cells = []
        for n in NS:
            held = above = 0
            for _ in range(args.reps):
                low, high = paired_interval(draw(kind, n, rng))
                held += low <= truth <= high
                above += low > truth
            cells.append(f"{held / args.reps:.2f} / {above / args.reps:.3f}")
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
