"""Change points in a series of results: where the level moved, by how much (with an interval), between which
commits.

Method: ruptures' PELT (exact optimal partitioning with pruning) on a piecewise-constant (L2) model, every point
a candidate (``jump=1``), at least ``MIN_SIZE`` points a segment, and a penalty derived from the series' own
noise: ``beta * sigma^2 * log(n)``, sigma estimated from first differences (1.4826 x their median absolute
deviation / sqrt 2), which a step or a steady ramp barely moves. ``BETA`` was chosen on simulated series at this
machine's A/A noise (benchmarks/changepoints.py, benchmarks/README.md): few false alarms per 100 A/A series,
steps of +1.5% and +3% found within two points, a 1%-per-point creep flagged. A ramp comes out as one or more
steps along it, which is what a reader needs: "it got slower from here on", not a shrug that it is all noise
(asv's detector, which models point-to-point correlated noise, absorbs a ramp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

BETA = 3.5  # see benchmarks/README.md, "Change points"
MIN_SIZE = 2


@dataclass
class Change:
    """A level change: the first point of the new level (``index``), the levels before and after, the size with
    a 95% interval (Welch's, over the two segments), and where it happened (labels of the last point before and
    the first after: commits)."""

    index: int
    before: float
    after: float
    size: float
    ci_low: float
    ci_high: float
    between: tuple[str | None, str | None] = (None, None)

    @property
    def upward(self) -> bool:
        return self.size > 0

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "before": self.before,
            "after": self.after,
            "size": self.size,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "between": list(self.between),
        }


def noise_sigma(x: np.ndarray) -> float:
    """The point-to-point noise: 1.4826 x MAD of the first differences / sqrt(2) (robust to steps and ramps)."""
    if x.size < 3:
        return float(np.std(x)) if x.size > 1 else 0.0
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d))))
    return 1.4826 * mad / np.sqrt(2)


def detect(
    values: list[float] | np.ndarray,
    labels: list[str | None] | None = None,
    *,
    beta: float = BETA,
    sigma: float | None = None,
    point_se: list[float | None] | None = None,
    min_size: int = MIN_SIZE,
) -> list[Change]:
    """The change points of ``values`` (in order), with sizes and intervals; ``labels`` (commits) name where.

    The noise is ``sigma`` when given, else the larger of the series' own (:func:`noise_sigma`) and the points'
    standard errors (``point_se``, from each result's interval): with 20 points the first alone is a rough
    estimate, and a low one would call noise a change."""
    import ruptures as rpt

    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2 * min_size:
        return []
    s = noise_sigma(x) if sigma is None else sigma
    known = [v for v in (point_se or []) if v is not None and v == v and v > 0]
    if sigma is None and known:
        s = max(s, float(np.median(known)))
    if s <= 0:
        s = float(np.std(x)) or 1e-9
    pen = beta * s * s * np.log(n)
    ends = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)
    starts = [0, *ends[:-1]]
    changes = []
    for k in range(1, len(starts)):
        a, b = x[starts[k - 1] : starts[k]], x[starts[k] : ends[k]]
        size = float(b.mean() - a.mean())
        # Welch's interval; a segment of one point borrows the series' noise for its variance
        va = a.var(ddof=1) if a.size > 1 else s * s
        vb = b.var(ddof=1) if b.size > 1 else s * s
        se = float(np.sqrt(va / a.size + vb / b.size))
        half = _t975(a.size + b.size - 2) * se
        at = starts[k]
        between = (labels[at - 1], labels[at]) if labels is not None else (None, None)
        changes.append(Change(at, float(a.mean()), float(b.mean()), size, size - half, size + half, between))
    return changes


def _t975(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, max(df, 1)))


# -------------------------------------------------------------------------------------------------- simulation


def simulate(
    kind: str, n: int = 20, sigma: float = 0.75, size: float = 0.0, at: int | None = None, seed: int = 0
) -> np.ndarray:
    """A series of n points (percent changes): ``aa`` noise only; ``step`` a +size step at ``at``; ``creep``
    +size per point from ``at`` on. Gaussian noise of ``sigma``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sigma, n)
    start = n // 2 if at is None else at
    if kind == "step":
        x[start:] += size
    elif kind == "creep":
        x[start:] += size * np.arange(1, n - start + 1)
    elif kind != "aa":
        raise ValueError(kind)
    return x
