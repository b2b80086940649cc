"""The over-saturation rule (llmbench.analysis.saturation) fed synthetic outcomes whose truth is known: a server
well under capacity (it must never stop, checked thousands of times), one whose queue grows, one that refuses, and
one that drifts a little (significant, but no queue)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from llmbench.analysis.saturation import SaturationRule, SaturationWatch


def _feed(watch: SaturationWatch, sends, lives, ttfts, refused=None) -> tuple[str | None, float | None]:
    """Outcomes in the order they end, each with the count still in flight then; the reason and the time it
    stopped, or (None, None)."""
    refused = np.zeros(len(sends), dtype=bool) if refused is None else refused
    ends = sends + lives
    order = np.argsort(ends)
    sorted_sends, sorted_ends = np.sort(sends), ends[order]
    for i in order:
        now = ends[i]
        in_flight = int(np.searchsorted(sorted_sends, now, "right") - np.searchsorted(sorted_ends, now, "right"))
        item = SimpleNamespace(status=429 if refused[i] else None, ttft_ms=None if refused[i] else ttfts[i],
                               scheduled_s=sends[i], send_lateness_ms=0.0)  # fmt: skip
        if (why := watch.add(item, in_flight, now)) is not None:
            return why, float(now)
    return None, None


def test_a_server_under_capacity_is_never_stopped_however_often_it_is_checked():
    rng = np.random.default_rng(0)
    for seed in range(3):
        sends = np.cumsum(rng.exponential(0.1, 3000))  # 10/s for 300 s: ~600 checks of the rule each
        lives = rng.lognormal(np.log(0.5), 0.3, sends.size)
        why, _ = _feed(SaturationWatch(SaturationRule()), sends, lives, lives * 300)
        assert why is None, (seed, why)


def test_a_growing_queue_is_stopped_soon_after_the_rule_may_look():
    """20 requests a second against a server that serves 10: the queue and TTFT grow by the second."""
    sends = np.arange(0, 60, 0.05)
    start = np.maximum.accumulate(sends + 0.0)  # one at a time, 0.1 s each: request i starts at max(send, prev end)
    for i in range(1, sends.size):
        start[i] = max(sends[i], start[i - 1] + 0.1)
    lives = start + 0.1 - sends
    why, at = _feed(SaturationWatch(SaturationRule(min_s=10.0)), sends, lives, (start - sends) * 1000 + 50)
    assert why is not None and why.startswith("queueing:") and 10.0 <= at <= 20.0, (why, at)


def test_a_server_refusing_more_than_the_slos_allow_is_stopped_and_one_refusing_a_few_is_not():
    rng = np.random.default_rng(1)
    sends = np.cumsum(rng.exponential(0.05, 2000))
    lives = np.full(sends.size, 0.2)
    many = rng.random(sends.size) < 0.3  # 30% refused: at most 70% can meet an SLO, under 90%
    why, at = _feed(SaturationWatch(SaturationRule(min_s=10.0)), sends, lives, lives * 100, many)
    assert why is not None and why.startswith("refusing:") and at < 20.0
    few = rng.random(sends.size) < 0.03  # 3%: the rate may still hold
    assert _feed(SaturationWatch(SaturationRule(min_s=10.0)), sends, lives, lives * 100, few)[0] is None


def test_a_significant_drift_without_a_queue_is_not_a_saturation():
    """TTFT creeping up 10% over the run (a cache filling) with many requests: a significant slope, but neither
    series grows by half, so the guard keeps the rate going."""
    rng = np.random.default_rng(2)
    sends = np.cumsum(rng.exponential(0.02, 6000))
    drift = 1 + 0.1 * sends / sends[-1]
    lives = 0.3 * drift * rng.lognormal(0, 0.05, sends.size)
    watch = SaturationWatch(SaturationRule(min_s=10.0))
    assert _feed(watch, sends, lives, lives * 300)[0] is None
    assert watch.state["ttft_ms"]["slope_low"] > 0  # the drift was seen, and judged no queue
