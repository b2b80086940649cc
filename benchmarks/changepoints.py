"""How well do the history's change points see steps and creep, and how often do they cry wolf?

Simulated series of 20 results (percent changes against an anchor, as `trend --anchor` plots them), Gaussian
noise of --sigma (this machine's A/A level: ab's TPOT p50 changes spread about 0.75%), each point carrying an
honest interval (standard error = sigma) as ab records do:
  aa      noise only                     -> any change point is a false alarm
  step    +1.5% or +3% from point 10 on  -> found when a change point lands within 2 points of 10
  creep   +1% per point from the start   -> flagged when an upward change point is found
Detectors: llmbench's (PELT, penalty from the series' noise and the points' intervals), the same with the
series' own noise alone, and a trailing-window z-score (Bencher's kind of threshold: each new point against the
mean and spread of the previous 10, |z| > 3).

    python benchmarks/changepoints.py [--series 100] [--sigma 0.75]
"""

from __future__ import annotations

import argparse

import numpy as np

from llmbench.analysis.changepoints import BETA, detect, simulate


def trailing_z(x: np.ndarray, window: int = 10, z: float = 3.0) -> list[int]:
    """Indices where a point is more than z spreads from the previous ``window`` points' mean."""
    out = []
    for i in range(window, x.size):
        w = x[i - window : i]
        sd = w.std(ddof=1)
        if sd > 0 and abs(x[i] - w.mean()) / sd > z:
            out.append(i)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=100)
    ap.add_argument("--sigma", type=float, default=0.75)
    ap.add_argument("--points", type=int, default=20)
    args = ap.parse_args()
    n, s = args.points, args.sigma
    detectors = {
        f"llmbench (PELT, beta {BETA:g}, noise from the series and the points' intervals)":
            lambda x: [c.index for c in detect(x, point_se=[s] * x.size)],
        "PELT, noise from the series alone": lambda x: [c.index for c in detect(x)],
        "trailing window of 10, |z| > 3": trailing_z,
    }  # fmt: skip
    print(f"{args.series} series of {n} points each, noise sigma {s}%\n")
    print("| detector | A/A series with a false alarm | +1.5% step found (within 2 points) | +3% step found | "
          "1%-per-point creep flagged |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name, fn in detectors.items():
        fa = sum(bool(fn(simulate("aa", n, s, seed=k))) for k in range(args.series))
        found = {}
        for size in (1.5, 3.0):
            found[size] = sum(any(abs(i - n // 2) <= 2 for i in fn(simulate("step", n, s, size, n // 2, seed=k)))
                              for k in range(args.series))  # fmt: skip
        creep = sum(bool(fn(simulate("creep", n, s, 1.0, 0, seed=k))) for k in range(args.series))
        print(f"| {name} | {fa} of {args.series} | {found[1.5]} | {found[3.0]} | {creep} |")


if __name__ == "__main__":
    main()
