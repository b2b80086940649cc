"""When a load test's rate is past saturation: the rule that stops it early, watched as its requests finish.

Past saturation every further second of an open loop only grows a queue (or a pile of refusals): the figures
of the rate are settled, and the rest of its duration is waste. GuideLLM stops such a rate when the requests in
flight and the TTFT both rise, by a slope test with a margin of error (``docs/guides/over_saturation_stopping.md``:
at least 30 s, a window of up to 120 s). llmbench's rule, for the two ways a server can be past saturation:

- **A server that queues** (it accepts everything and serves it late): in the window, the last ``window_s`` seconds
  less the ramp-up (the median life of the first ``ramp_points`` (5) finished requests, :mod:`.steady`'s edge: a
  life measured later grows with the very queue the rule looks for), fit a least-squares line to the requests in
  flight (sampled at each finished request: the loop's own count) against time, and one to each finished request's
  TTFT against its send time. The rate is *queueing* when both slopes' one-sided lower ``confidence`` bounds
  (Student t on the slope's standard error) are above 0 **and** both fitted lines end at least ``growth`` (1.5) times
  where they start in the window: a queue that grows without bound, not a significant drift of a few percent (a
  server warming its caches).
- **A server that refuses** (HTTP 429 past a queue of its own): in the window, the share of finished and failed
  requests that were refused has its one-sided lower Wilson bound above ``1 - min_attainment``: even if every
  other request met every SLO, the rate could not hold.

Either must hold at every check for ``hold_s`` on end (5 s, or half of ``min_s`` if less), after ``min_s`` of the
rate (10 s by default: llmbench's rates last 30 s unless told; GuideLLM waits 30 s of longer runs) and with at least
``min_points`` (20) outcomes and in-flight samples and ``ttft_points`` (10) finished TTFTs in the window (past
saturation a queue holds the requests whose TTFT would show it: on llama.cpp's server at 8/s, asking 20 of them
stopped the rate 19 s after its schedule had ended, benchmarks/README.md): one check in thousands is no finding (a
check runs at most every 0.5 s, so the waits and the growth guard keep repeated testing from stopping a stationary
server). The state of the last check (slopes, bounds, counts) goes into the rate's record, with the reason.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CHECK_EVERY_S = 0.5  # a check costs about 1 ms per thousand points in its window


@dataclass(frozen=True)
class SaturationRule:
    """The stop's settings (the spec's ``[load]`` section declares them: ``stop_min_s``, ``stop_window_s``)."""

    min_s: float = 10.0
    window_s: float = 120.0
    hold_s: float | None = None  # None: min(5 s, min_s / 2)
    growth: float = 1.5
    min_points: int = 20  # outcomes and in-flight samples a fit needs
    ttft_points: int = 10  # finished TTFTs the TTFT fit needs: past saturation they come slowly (the queue holds them)
    ramp_points: int = 5  # the ramp-up: the median life of this many first finished requests
    confidence: float = 0.95
    min_attainment: float = 0.9


@dataclass
class SaturationWatch:
    """Fed each outcome of a rate as it happens (:meth:`add`); says when the rule holds. Times are seconds on the
    run loop's clock (its start at 0)."""

    rule: SaturationRule
    # the window's points (older ones are dropped as the window moves: a soak test's million requests cost a
    # window's worth of memory, and a check a window's worth of time)
    in_flight: deque[tuple[float, float]] = field(default_factory=deque)  # (time, requests in flight)
    ttft: deque[tuple[float, float]] = field(default_factory=deque)  # (send time, TTFT ms), in the order they end
    outcomes: deque[tuple[float, float]] = field(default_factory=deque)  # (time, 1 if refused else 0)
    first_lives: list[float] = field(default_factory=list)  # lives (s) of the first ramp_points finished requests
    ramp_s: float | None = None  # their median: the ramp-up an idle server takes, left out of every window
    since: float | None = None  # when the rule began to hold without a break
    last_check: float = -1.0
    state: dict[str, Any] = field(default_factory=dict)

    def add(self, item: Any, in_flight: int, now_s: float) -> str | None:
        """Record one outcome (a finished request or a failure) at ``now_s`` with ``in_flight`` others still in
        flight; the reason to stop when the rule has held for ``hold_s``, else None."""
        self.outcomes.append((now_s, 1.0 if getattr(item, "status", None) == 429 else 0.0))
        self.in_flight.append((now_s, float(in_flight)))
        send_lateness = getattr(item, "send_lateness_ms", None)
        scheduled = getattr(item, "scheduled_s", None)
        if getattr(item, "ttft_ms", None) is not None and scheduled is not None and send_lateness is not None:
            send = scheduled + send_lateness / 1000
            self.ttft.append((send, item.ttft_ms))
            if len(self.first_lives) < self.rule.ramp_points:
                self.first_lives.append(max(now_s - send, 0.0))
                if len(self.first_lives) == self.rule.ramp_points:  # the ramp: one life of the first requests
                    self.ramp_s = float(np.median(self.first_lives))
        if now_s - self.last_check < CHECK_EVERY_S:
            return None
        self.last_check = now_s
        reason = self.check(now_s)
        if reason is None:
            self.since = None
            return None
        self.since = now_s if self.since is None else self.since
        hold = self.rule.hold_s if self.rule.hold_s is not None else min(5.0, self.rule.min_s / 2)
        return reason if now_s - self.since >= hold else None

    def check(self, now_s: float) -> str | None:
        """The rule at ``now_s`` (no waiting for ``hold_s``): ``queueing: ...``, ``refusing: ...`` or None."""
        from llmbench.analysis.tails import share_bounds

        r = self.rule
        if now_s < r.min_s:
            return None
        lo = max(now_s - r.window_s, self.ramp_s or 0.0)
        for points in (self.outcomes, self.in_flight, self.ttft):
            while points and points[0][0] < now_s - r.window_s:
                points.popleft()
        state: dict[str, Any] = {"at_s": round(now_s, 3), "window_s": [round(lo, 3), round(now_s, 3)]}
        self.state = state
        outcomes = _since(self.outcomes, lo)
        if outcomes.shape[0] >= r.min_points:
            n, refused = int(outcomes.shape[0]), int(outcomes[:, 1].sum())
            low = share_bounds(refused, n, r.confidence)[0]  # type: ignore[index]
            state["refused"] = {"n": n, "refused": refused, "lower_bound": round(low, 4)}
            if low > 1 - r.min_attainment:
                return (f"refusing: {refused} of the last {n} requests refused (429), at least {low:.0%} at "
                        f"{r.confidence:.0%} confidence: under {r.min_attainment:.0%} can hold")  # fmt: skip
        conc = _trend(_since(self.in_flight, lo), lo, now_s, r.confidence)
        ttft = _trend(_since(self.ttft, lo), lo, now_s, r.confidence)
        state["in_flight"], state["ttft_ms"] = conc, ttft
        if conc is None or ttft is None or conc["n"] < r.min_points or ttft["n"] < r.ttft_points:
            return None
        if all(t["slope_low"] > 0 and t["end"] >= r.growth * max(t["start"], 1e-9) for t in (conc, ttft)):
            # the slopes, not the fitted ends: a line through a queue's first TTFTs can start below 0
            return (f"queueing: over {now_s - lo:.0f} s the requests in flight grew {conc['slope']:.2g} a second (to "
                    f"{conc['end']:.1f}) and TTFT {ttft['slope']:,.0f} ms a second (to {ttft['end']:,.0f} ms), both "
                    f"above 0 at {r.confidence:.0%} confidence")  # fmt: skip
        return None


def _since(points: deque[tuple[float, float]], lo: float) -> np.ndarray:
    """The (time, value) points at ``lo`` or later, as an n x 2 array."""
    a = np.array(points, dtype=float).reshape(-1, 2)
    return a[a[:, 0] >= lo]


def _trend(points: np.ndarray, lo: float, hi: float, confidence: float) -> dict[str, Any] | None:
    """A least-squares line through ``points`` (time, value rows): its slope, the slope's one-sided lower bound,
    and the line's values at ``lo`` and ``hi``; None under 3 points or without spread in time."""
    from scipy import stats

    if points.shape[0] < 3:
        return None
    x, y = points[:, 0], points[:, 1]
    if np.ptp(x) == 0:
        return None
    fit = stats.linregress(x, y)
    low = fit.slope - stats.t.ppf(confidence, x.size - 2) * fit.stderr
    return {"n": int(x.size), "slope": round(float(fit.slope), 4), "slope_low": round(float(low), 4),
            "start": round(float(fit.intercept + fit.slope * lo), 3),
            "end": round(float(fit.intercept + fit.slope * hi), 3)}  # fmt: skip
