"""What a load test may claim of a high percentile and of a share, at the number of requests it measured.

A p99 of 50 requests is the largest or second largest of them: it says little of the 99th percentile of the
server's latency. MLPerf Inference's server scenario claims a p99 only with the sample size that bounds it
("early stopping"); llmbench prints each high percentile with the same bound:

- **Percentile bound** (distribution-free, one-sided): for ``n`` independent requests, the order statistic
  ``X_(k)`` is an upper ``confidence`` bound on the true ``q`` quantile when ``P(Binomial(n, q) <= k - 1) >=
  confidence`` (fewer than ``k`` of the ``n`` fall below the quantile only that rarely). ``k`` is the smallest such
  rank; when it exceeds ``n`` there is no bound: a p99 needs ``n >= ln(1 - 0.95) / ln(0.99)``, 299 requests
  (:func:`requests_to_bound`), a p90 29, a p50 5.
- **Share bounds** (SLO attainment, a share of requests): Wilson's score interval, each side one-sided at
  ``confidence`` (the two-sided ``2 confidence - 1`` interval; scipy's ``binomtest``), which holds its level near
  0 and 1 where the normal interval does not.

Requests of one rate are not quite independent (a slow second slows its neighbours), so both bounds are a floor on
the uncertainty, not its whole: the steady-state window (:mod:`.steady`) is where they apply best.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmbench.results.describe import share_bounds as share_bounds  # re-exported: load's attainment, the stop's

CONFIDENCE = 0.95


def requests_to_bound(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest requests whose largest bounds the ``q`` quantile (0 < q < 1) at ``confidence``: the least n with
    ``1 - q^n >= confidence``."""
    _check(q, confidence)
    return max(1, math.ceil(math.log(1 - confidence) / math.log(q) - 1e-12))


def bound_rank(n: int, q: float, confidence: float = CONFIDENCE) -> int | None:
    """The 1-based rank ``k`` of the order statistic that bounds the ``q`` quantile from above at ``confidence``
    among ``n`` values; None when ``n`` values can't bound it."""
    from scipy import stats

    _check(q, confidence)
    if n < 1:
        return None
    k = int(stats.binom.ppf(confidence, n, q)) + 1  # the least k with P(Bin(n, q) <= k - 1) >= confidence
    while k > 1 and stats.binom.cdf(k - 2, n, q) >= confidence:  # ppf's float rounding, either way
        k -= 1
    while k <= n and stats.binom.cdf(k - 1, n, q) < confidence:
        k += 1
    return k if k <= n else None


def quantile_upper_bound(values: Any, q: float, confidence: float = CONFIDENCE) -> float | None:
    """A distribution-free upper ``confidence`` bound on the ``q`` quantile of what ``values`` sample; None when
    there are too few of them (:func:`requests_to_bound`)."""
    a = np.sort(np.asarray(values, dtype=float))
    k = bound_rank(a.size, q, confidence)
    return None if k is None else float(a[k - 1])


def _check(q: float, confidence: float) -> None:
    if not (0 < q < 1 and 0.5 <= confidence < 1):
        raise ValueError(f"a quantile in (0, 1) and a confidence in [0.5, 1), not {q}, {confidence}")
