"""The steady-state window of a load test's rate: which requests saw the server neither filling up nor draining.

An open-loop rate starts against an idle server (its batch, its queue and its caches fill over the first seconds)
and ends with arrivals stopped while the requests in flight drain with ever less company. Requests of those two
ramps belong to no rate: a p99 or an SLO attainment over them mixes three servers. This module finds the window
from the run's own stamps; :mod:`llmbench.drivers.load` reports every figure on it beside the whole run's.

Two cuts, each from a definite cause, and the window is what both keep (requests in send order):

1. **The arrival edges** (concurrency). A request shares the server with those sent within one life of it. One
   sent less than a median life ``L`` (the finished requests' median send-to-end time) after the first send
   started with fewer companions than the plateau offers; one sent less than ``L`` before the last send ran into
   the drain. Both are cut: the window's sends lie in ``[first send + L, last send - L]``. Each request's
   in-flight count averaged over its own life (:func:`life_concurrency`) is reported inside and outside, so the
   cut can be checked: on a plateau it is flat, at the edges it falls.
2. **The server's own transient** (latency): MSER-5 (White 1997, "An effective truncation heuristic for bias
   reduction in simulation output"; Franklin and White 2008) on ``ttft_ms`` and ``e2e_ms`` inside the edges,
   forward for the ramp-up's end and on the reversed series for the ramp-down's start, alternated until neither
   moves (a ramp at one end would bias the other's cut). MSER-5: batch means ``b_1 .. b_m`` of 5; cutting the
   first ``d`` leaves ``MSER(d) = sum_{j > d} (b_j - mean(b_{d+1..m}))^2 / (m - d)^2``, the squared standard
   error of the remaining mean, minimised over ``d <= m / 2`` (White's bound).

   Improved here: MSER-5 always finds some minimum, and on a stationary series of 100 requests it cuts 20% of
   them on average by chance (:mod:`tests.unit.test_steady` measures it). A cut is kept only when the cut batches'
   mean differs from the kept batches' mean at ``p < CUT_ALPHA`` by Student t with the *kept* batches' spread
   (the plateau's noise; the ramp's own spread would hide the ramp), which leaves a stationary series uncut in
   more than 9 runs of 10 and cuts a 15% ramp within a few percent of its true end.

Fewer than :data:`MIN_REQUESTS` finished requests, or cuts that leave under :data:`MIN_SHARE` of them: the window
is the whole run and says why (AIPerf falls back the same way).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BATCH = 5  # MSER-5's batch
MIN_REQUESTS = 20  # below this, no window: 4 batches is the least MSER-5 compares
MIN_SHARE = 0.10  # a window of fewer of the requests than this is no plateau: the whole run instead
CUT_ALPHA = 0.01  # a cut batch mean must differ from the plateau's at this two-sided level
MAX_ROUNDS = 6  # forward and backward cuts alternated until neither moves (two or three rounds in practice)
LATENCY_SIGNALS = ("ttft_ms", "e2e_ms")


@dataclass(frozen=True)
class Window:
    """The steady-state window of one rate, by send time (seconds on the run's clock) and by request.

    ``first``/``last``: indices, in send order, of the first and last finished request inside; ``start_s``/
    ``end_s``: their send times; ``share``: the finished requests inside / all finished; ``time_share``: the
    window's span / the sends' span; ``life_s``: the median life the edges are cut by; ``method``: ``edges+mser5``,
    ``edges`` (too few requests inside the edges for MSER-5) or ``whole run: <why>``; ``cuts``: requests cut at
    the start and at the end, per cause (``edges``, each latency signal's MSER-5); ``concurrency``: the mean
    in-flight count over a request's life, inside and outside."""

    first: int
    last: int
    start_s: float
    end_s: float
    share: float
    time_share: float
    life_s: float | None
    method: str
    cuts: dict[str, list[int]]
    concurrency: dict[str, float | None]

    @property
    def whole(self) -> bool:
        return self.method.startswith("whole run")

    def record(self) -> dict[str, Any]:
        """The window as load.json writes it (times rounded to 0.1 ms)."""
        d = asdict(self)
        for key in ("start_s", "end_s", "life_s"):
            d[key] = None if d[key] is None else round(d[key], 4)
        d["share"], d["time_share"] = round(self.share, 4), round(self.time_share, 4)
        return d


def mser_truncation(values: Any, batch: int = BATCH) -> int:
    """MSER-``batch``'s truncation point of ``values`` (time-ordered, finite): how many leading values to drop
    (a multiple of ``batch``; 0 when the series is too short to judge: under 4 batches). No significance test:
    :func:`settled_cut` adds it."""
    b = _batches(values, batch)
    m = b.size
    if m < 4:
        return 0
    left = np.arange(m, 0, -1, dtype=float)  # batches left after cutting d = 0 .. m - 1
    tail = np.cumsum(b[::-1])[::-1]
    tail_sq = np.cumsum((b * b)[::-1])[::-1]
    sse = np.maximum(tail_sq - tail * tail / left, 0.0)  # sum of squared deviations from the remaining mean
    return int(np.argmin(sse[: m // 2 + 1] / left[: m // 2 + 1] ** 2)) * batch


def settled_cut(values: Any, batch: int = BATCH, alpha: float = CUT_ALPHA) -> int:
    """MSER-``batch``'s cut of ``values``, kept only when the cut batches' mean differs from the kept ones' at
    two-sided level ``alpha`` (Student t with the kept batches' sd: the plateau's noise); else 0."""
    from scipy import stats

    d = mser_truncation(values, batch)
    if d == 0:
        return 0
    b, k = _batches(values, batch), d // batch
    kept = b[k:]
    sd = float(kept.std(ddof=1))
    gap = abs(float(b[:k].mean() - kept.mean()))
    if sd == 0:
        return d if gap > 0 else 0
    t = gap / (sd * np.sqrt(1 / k + 1 / kept.size))
    return d if 2 * stats.t.sf(t, kept.size - 1) < alpha else 0


def _batches(values: Any, batch: int) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    m = x.size // batch
    return x[: m * batch].reshape(m, batch).mean(axis=1)


def both_cuts(values: Any) -> list[int]:
    """[cut at the start, cut at the end] of ``values`` by :func:`settled_cut`, each found on what the other
    leaves, alternated until neither moves."""
    v = np.asarray(values, dtype=float)
    n, front, back = v.size, 0, 0
    for _ in range(MAX_ROUNDS):
        f = settled_cut(v[: n - back])
        b = settled_cut(v[f:][::-1])
        if (f, b) == (front, back):
            break
        front, back = f, b
    return [front, back]


def life_concurrency(send_s: Any, end_s: Any) -> np.ndarray:
    """Each request's time-averaged count of requests in flight (itself included) over its own life, from every
    request's send and end (the same clock). A request of zero length gets the count at its send."""
    send, end = np.asarray(send_s, dtype=float), np.asarray(end_s, dtype=float)
    times = np.concatenate([send, end])
    steps = np.concatenate([np.ones(send.size), -np.ones(end.size)])
    order = np.lexsort((-steps, times))  # at a tie a start counts before an end: a request is in flight at its send
    t, level = times[order], np.cumsum(steps[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # A(t) at each event, piecewise linear
    life = end - send
    # in flight at a send: sent by then (itself included), not ended before it
    at_send = np.searchsorted(np.sort(send), send, side="right") - np.searchsorted(np.sort(end), send, side="left")
    mean = (np.interp(end, t, area) - np.interp(send, t, area)) / np.where(life > 0, life, 1.0)
    return np.where(life > 0, mean, at_send)


def steady_window(send_s: Any, end_s: Any, series: dict[str, Any]) -> Window:
    """The steady-state window of the finished requests whose send and end times (seconds, one clock) are
    ``send_s``, ``end_s``; ``series``: their latencies (``ttft_ms``, ``e2e_ms``), aligned with them (a series with
    a missing or non-finite value is not used). The requests need not be in send order; ``first``/``last`` index
    them in send order."""
    send, end = np.asarray(send_s, dtype=float), np.asarray(end_s, dtype=float)
    n = send.size
    if n == 0:
        return Window(0, -1, 0.0, 0.0, 0.0, 0.0, None, "whole run: no finished request", {}, {})
    order = np.argsort(send, kind="stable")
    send, end = send[order], end[order]
    span = float(send[-1] - send[0])
    conc = life_concurrency(send, end)

    def window(first: int, last: int, method: str, cuts: dict[str, list[int]], life: float | None) -> Window:
        inside = np.zeros(n, dtype=bool)
        inside[first : last + 1] = True
        return Window(first, last, float(send[first]), float(send[last]), (last - first + 1) / n,
                      (float(send[last] - send[first]) / span) if span > 0 else 1.0, life, method, cuts,
                      {"inside": _mean(conc[inside]), "outside": _mean(conc[~inside])})  # fmt: skip

    if n < MIN_REQUESTS:
        return window(0, n - 1, f"whole run: {n} finished requests, fewer than {MIN_REQUESTS}", {}, None)
    life = float(np.median(end - send))
    lo = int(np.searchsorted(send, send[0] + life, side="left"))
    hi = int(np.searchsorted(send, send[-1] - life, side="right")) - 1
    cuts = {"edges": [lo, n - 1 - hi]}
    method = "edges"  # too few requests inside the edges for MSER-5: the edges alone
    if hi - lo + 1 >= MIN_REQUESTS:
        method = "edges+mser5"
        for name in LATENCY_SIGNALS:
            v = np.asarray(series.get(name, []), dtype=float)
            if v.size == n and np.isfinite(v).all():
                cuts[name] = both_cuts(v[order][lo : hi + 1])
        first = lo + max(c[0] for name, c in cuts.items() if name != "edges") if len(cuts) > 1 else lo
        last = hi - max(c[1] for name, c in cuts.items() if name != "edges") if len(cuts) > 1 else hi
    else:
        first, last = lo, hi
    if last - first + 1 < max(MIN_SHARE * n, 1):
        why = f"the cuts leave {max(last - first + 1, 0)} of {n} requests, under {MIN_SHARE:.0%}"
        return window(0, n - 1, f"whole run: {why}", cuts, life)
    return window(first, last, method, cuts, life)


def _mean(values: np.ndarray) -> float | None:
    return round(float(values.mean()), 3) if values.size else None
