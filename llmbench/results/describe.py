"""A sample's summary statistics (:class:`~llmbench.results.schema.Stats`) and a share's Wilson bounds: written
once, for every figure."""

from __future__ import annotations

from collections.abc import Iterable

from llmbench.results.schema import Stats


def describe(values: Iterable[float]) -> Stats | None:
    """n, mean, p50/p90/p99 (linear interpolation), min, max and sample std (ddof=1); None when empty."""
    import numpy as np  # here: show and compare of a run whose summary is written need none (~45 ms to import)

    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        return None
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Stats(
        n=int(a.size),
        mean=float(a.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        min=float(a.min()),
        max=float(a.max()),
        std=float(a.std(ddof=1)) if a.size > 1 else 0.0,
    )


def share_bounds(k: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """(lower, upper) bounds on a share of ``k`` in ``n``, each one-sided at ``confidence`` (Wilson's score
    interval, scipy's ``binomtest``: it holds its level near 0 and 1 where the normal interval does not); the two
    together are the two-sided ``2 confidence - 1`` interval. None for ``n == 0``."""
    from scipy import stats

    if n <= 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"a share of {k} in {n}")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=2 * confidence - 1, method="wilson")
    return float(ci.low), float(ci.high)
