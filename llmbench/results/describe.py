"""A sample's summary statistics (:class:`~llmbench.results.schema.Stats`): written once, for every figure."""

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
