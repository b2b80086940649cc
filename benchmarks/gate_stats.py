"""Which gate statistic and request shape give the smallest honest interval per minute? Computed offline from the
runs a gate study kept (``benchmarks/gate_study.py``: DIR/run-NNN/base.json and head.json, the case in
DIR/gate_study.json), so every candidate sees the same requests:

  p50         the median of per-request TPOT (the job's gate today)
  mean        the mean of per-request TPOT
  trim20      the 20% trimmed mean of per-request TPOT (20% cut from each end)
  gaps        per pair, the median over token positions of head gap / base gap (gaps paired by position), then
              the median over pairs
  first16     p50 of TPOT over each request's first 16 tokens only (a shorter request, from the same stamps)
  half        p50 over the first half of the pairs only (fewer requests)

Each statistic's change head/base - 1 gets a 95% interval the way compare makes one: a paired percentile
bootstrap over pairs, or with ``ab --processes`` a Student t interval over the processes' own changes. Per
candidate: the A/A runs' mean half-width (the MDC), how many A/A runs an interval put beyond 0 (false
"significant"), beyond a 5% gate, and how often each slowed case was caught by a 5% gate.

    python benchmarks/gate_stats.py DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from llmbench.analysis.compare import CONFIDENCE
from llmbench.results.storage import load_run

GATE_PCT = 5.0


def _pairs(folder: Path) -> tuple[list, list, np.ndarray | None]:
    base, head = load_run(folder / "base.json"), load_run(folder / "head.json")
    hb = {(r.prompt_index, r.repeat): r for r in head.requests}
    bs, hs, procs = [], [], []
    for r in base.requests:
        h = hb.get((r.prompt_index, r.repeat))
        if h is not None and len(r.token_times_ms) > 2 and len(h.token_times_ms) > 2:
            bs.append(np.asarray(r.token_times_ms))
            hs.append(np.asarray(h.token_times_ms))
            procs.append(r.process if r.process is not None else -1)
    clusters = np.asarray(procs) if len(set(procs)) > 1 else None
    return bs, hs, clusters


def _tpot(times: np.ndarray, n: int | None = None) -> float:
    t = times[:n] if n else times
    return float((t[-1] - t[0]) / (len(t) - 1))


def _trim(x: np.ndarray, axis: int = -1) -> np.ndarray:
    s = np.sort(x, axis=axis)
    k = int(0.2 * s.shape[axis])
    return s[..., k : s.shape[axis] - k].mean(axis=axis)


STATS = {
    "p50": lambda x, axis=-1: np.median(x, axis=axis),
    "mean": lambda x, axis=-1: np.mean(x, axis=axis),
    "trim20": _trim,
}


def interval(base: np.ndarray, head: np.ndarray, f, clusters: np.ndarray | None) -> tuple[float, float, float]:
    """(change %, low, high) of f(head)/f(base) - 1, as compare makes it (see the module docstring)."""
    from scipy import stats as st

    point = 100 * (f(head) / f(base) - 1)
    if clusters is not None:
        per = np.array([100 * (f(head[clusters == c]) / f(base[clusters == c]) - 1) for c in np.unique(clusters)])
        half = float(st.t.ppf((1 + CONFIDENCE) / 2, per.size - 1)) * float(per.std(ddof=1) / np.sqrt(per.size))
        return point, point - half, point + half
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(base), (2000, len(base)))
    dist = 100 * (f(head[idx], axis=-1) / f(base[idx], axis=-1) - 1)
    lo, hi = np.quantile(dist, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return point, float(lo), float(hi)


def ratio_interval(ratios: np.ndarray, clusters: np.ndarray | None) -> tuple[float, float, float]:
    """(change %, low, high) of the median of per-pair ratios."""
    from scipy import stats as st

    point = 100 * (float(np.median(ratios)) - 1)
    if clusters is not None:
        per = np.array([100 * (np.median(ratios[clusters == c]) - 1) for c in np.unique(clusters)])
        half = float(st.t.ppf((1 + CONFIDENCE) / 2, per.size - 1)) * float(per.std(ddof=1) / np.sqrt(per.size))
        return point, point - half, point + half
    rng = np.random.default_rng(0)
    dist = 100 * (np.median(ratios[rng.integers(0, len(ratios), (2000, len(ratios)))], axis=-1) - 1)
    lo, hi = np.quantile(dist, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return point, float(lo), float(hi)


def candidates(folder: Path) -> dict[str, tuple[float, float, float]]:
    bs, hs, clusters = _pairs(folder)
    base = np.array([_tpot(t) for t in bs])
    head = np.array([_tpot(t) for t in hs])
    out = {name: interval(base, head, f, clusters) for name, f in STATS.items()}
    n = min(min(len(t) for t in bs), min(len(t) for t in hs))
    ratios = np.array([np.median(np.diff(h[:n]) / np.diff(b[:n])) for b, h in zip(bs, hs, strict=True)])
    out["gaps"] = ratio_interval(ratios, clusters)
    if n > 16:
        out["first16"] = interval(np.array([_tpot(t, 16) for t in bs]), np.array([_tpot(t, 16) for t in hs]),
                                  STATS["p50"], clusters)  # fmt: skip
    half = len(base) // 2
    out["half"] = interval(base[:half], head[:half], STATS["p50"], clusters[:half] if clusters is not None else None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    a = ap.parse_args()
    for folder in a.folders:
        study = json.loads((folder / "gate_study.json").read_text(encoding="utf-8"))
        results: dict[float, list[dict[str, tuple[float, float, float]]]] = {}
        minutes: list[float] = []
        for r in study["runs"]:
            run_dir = folder / f"run-{r['index']:03d}"
            if (run_dir / "head.json").exists():
                results.setdefault(r["pct"], []).append(candidates(run_dir))
                minutes.append(r["minutes"])
        aa = results.get(0.0, [])
        names = list(aa[0]) if aa else []
        print(f"\n{folder}: ab args {' '.join(study['ab_args']) or '(the job as it is)'}; {len(aa)} A/A runs, "
              f"{statistics.fmean(minutes):.1f} min per run\n")  # fmt: skip
        slowed = sorted(p for p in results if p > 0)
        head = " | ".join(f"+{p:g}% caught (5% gate)" for p in slowed)
        print(f"| statistic | A/A MDC (mean half-width) | A/A significant | A/A beyond 5% gate | {head} |")
        print("|---|---|---|---|" + "---|" * len(slowed))
        for name in names:
            mdc = statistics.fmean((hi - lo) / 2 for _, lo, hi in (x[name] for x in aa))
            sig = sum(lo > 0 or hi < 0 for _, lo, hi in (x[name] for x in aa))
            gate = sum(lo > 0 and c > GATE_PCT for c, lo, _ in (x[name] for x in aa))
            caught = " | ".join(
                f"{sum(lo > 0 and c > GATE_PCT for c, lo, _ in (x[name] for x in results[p]))}/{len(results[p])}"
                for p in slowed
            )
            print(f"| {name} | {mdc:.2f}% | {sig}/{len(aa)} | {gate}/{len(aa)} | {caught} |")


if __name__ == "__main__":
    main()
